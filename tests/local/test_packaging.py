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


@pytest.mark.slow
def test_a_wheel_and_this_checkout_carry_one_controller_version(tmp_path):
    """bench.version hashes the installed package's sources, agents/ and migrations/ named as
    a wheel lays them out: unpacked from a wheel of this checkout it gives this checkout's
    version."""
    from bench.version import controller_version
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                        "-q", "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    site = tmp_path / "site"
    zipfile.ZipFile(next(tmp_path.glob("bench-*.whl"))).extractall(site)
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import bench.version as v; "
            "print(v.controller_version(), v.__file__)")
    # -S: no site-packages, so the editable install of this checkout cannot answer instead
    out = subprocess.run([sys.executable, "-S", "-c", code, str(site)], capture_output=True,
                         text=True, check=True, cwd=tmp_path).stdout.split()
    assert out[1].startswith(str(site)) and out[0] == controller_version()
