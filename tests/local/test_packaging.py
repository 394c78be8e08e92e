"""An installed bench (a wheel, not a checkout) carries what deploy, the demo and the store
need: the agent's sources, the host-side agents, the migrations and the shipped matrices."""

import subprocess
import sys
import zipfile

import pytest

from tests.support.paths import REPO as ROOT


@pytest.mark.slow
def test_wheel_carries_sources_agents_migrations_and_matrices(tmp_path):
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                        "-q", "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    names = set(zipfile.ZipFile(next(tmp_path.glob("bench-*.whl"))).namelist())
    for needed in ("bench/native/Makefile", "bench/native/replay.c", "bench/native/plan.h",
                   "bench/agents/runner.py", "bench/agents/lru_gen_boot.sh",
                   "bench/migrations/env.py", "bench/migrations/versions/0001_initial_schema.py",
                   "bench/data/matrices/reclaim.toml", "bench/lab/guest/rcS"):
        assert needed in names, needed
    native = {n.split("/")[-1] for n in names if n.startswith("bench/native/")}
    assert native >= {p.name for p in (ROOT / "native").glob("*.[ch]")}
