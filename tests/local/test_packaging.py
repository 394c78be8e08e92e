"""An installed bench (a wheel, not a checkout) carries what deploy, the demo and the store
need: the agent's sources, the host-side agents, the migrations, the shipped matrices and the
example inventory `bench hosts init` writes."""

import json
import os
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
                   "bench/data/matrices/reclaim.toml", "bench/lab/guest/rcS",
                   "bench/data/hosts/local.toml.in", "bench/data/hosts/gh200.toml.example",
                   "bench/data/facts/gh200.json", "bench/engine/gguf_model.py",
                   "bench/cli/engine.py"):
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


@pytest.mark.slow
def test_a_wheel_finds_its_inventory_outside_the_checkout(tmp_path):
    """Unpacked from a wheel and run from an empty directory (no checkout, no BENCH_HOSTS):
    `hosts list` says there are no hosts (exit 0), `hosts init` writes the wheel's templates
    into $XDG_CONFIG_HOME/bench/hosts, `hosts list` then lists the local host and the smoke
    matrix plans its runs on it."""
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                        "-q", "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    site, empty = tmp_path / "site", tmp_path / "empty"
    zipfile.ZipFile(next(tmp_path.glob("bench-*.whl"))).extractall(site)
    empty.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_")}
    env.update(HOME=str(tmp_path / "home"), XDG_CONFIG_HOME=str(tmp_path / "config"))
    # the unpacked wheel first on the path: it wins over the editable install of this checkout
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import bench; "
            "assert bench.__file__.startswith(sys.argv[1]), bench.__file__; "
            "from bench.cli import main; sys.exit(main(sys.argv[2:]))")

    def bench(*args):
        return subprocess.run([sys.executable, "-c", code, str(site), *args], cwd=empty,
                              env=env, capture_output=True, text=True, timeout=120)
    r = bench("hosts", "list")
    assert r.returncode == 0 and "no hosts: " in r.stderr and "bench hosts init" in r.stderr
    assert "site-packages" not in r.stderr and str(site) not in r.stderr
    r = bench("hosts", "init")
    inv = tmp_path / "config" / "bench" / "hosts"
    assert r.returncode == 0, r.stderr
    assert sorted(os.listdir(inv)) == ["gh200.toml.example", "local.toml"]
    r = bench("hosts", "list", "--json")
    assert r.returncode == 0, r.stderr
    assert [h["name"] for h in json.loads(r.stdout)] == ["local"]
    assert "Traceback" not in r.stderr
    # the first campaign plan: smoke's relative capacities resolve from the MemTotal init wrote
    r = bench("schedule", "--matrix", "smoke", "--hosts", "local", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["runs"] == 5 and plan["skipped"] == []
