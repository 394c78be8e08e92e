"""Helpers of the runner tests (a module of its own name, not conftest, so tests import it)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support import paths

REPO = paths.REPO
RUNNER = REPO / "agents" / "runner.py"
# the interpreter that runs the runner, as a host's python3 would: this one unless
# BENCH_RUNNER_PYTHON names another (e.g. a Python 3.8, the oldest hosts may have)
PYTHON = os.environ.get("BENCH_RUNNER_PYTHON") or sys.executable
# pool: 8 layers x 64 experts x 512 KiB = 256 MiB, on a 400 MiB ext4 loop device
LAYERS, EXPERTS, EXPERT_BYTES = 8, 64, 512 << 10
POOL_BYTES = LAYERS * EXPERTS * EXPERT_BYTES
LOOP_BYTES = 400 << 20
SECTOR = 512


def make_plan_file(path: Path, tokens: int) -> Path:
    from bench.plan.planfile import plan_from_trace, write_plan
    from bench.trace.parse import parse_lines
    from bench.trace.synth import generate, preset
    lines = generate(preset("tiny", k=4, experts_per_layer=EXPERTS, layers=LAYERS,
                            expert_bytes=EXPERT_BYTES, tokens=tokens, spec_accept=0.0,
                            fallback=0.0))
    write_plan(path, plan_from_trace(parse_lines(list(lines))))
    return path


def make_spec(run_id, cell, *, pool, plan, agent, **over) -> dict:
    from bench.matrix.cells import parse_cell
    from bench.version import controller_version
    c = parse_cell(cell)
    spec = {
        "format": 1, "run_id": run_id, "campaign": "test", "position": 0, "repetition": 0,
        "host": "local", "cell": cell, "capacity_bytes": c.capacity_bytes,
        "mechanism": c.mechanism, "reclaim": c.reclaim, "mode": c.mode,
        "prefetch": c.hints or "none", "delivery": c.delivery,
        "workload": {"trace": "synth-tiny", "trace_sha256": None, "batch": 1},
        "plan": str(plan), "plan_sha256": hashlib.sha256(Path(plan).read_bytes()).hexdigest(),
        "hints": None, "hints_sha256": None, "hints_provenance": None,
        "pool": str(pool), "pool_bytes": POOL_BYTES,
        "agent": {"path": str(agent), "source_sha256": None, "threads": 2, "passes": 2,
                  "arena_bytes": 0, "nocache": None, "freq": None},
        "cgroup_headroom_bytes": 0,
        "expect_boot": {"boot_id": None, "mem": None, "lru_gen": None},
        "mglru_runtime_toggle": False, "timeline_interval_ms": 50,
        "controller_version": controller_version(), "created": "2026-01-01T00:00:00Z",
    }
    spec.update(over)
    return spec


def runner(*args, timeout=120, env=None) -> tuple[int, dict]:
    r = subprocess.run([PYTHON, str(RUNNER), *map(str, args)], capture_output=True,
                       text=True, timeout=timeout, env=env)
    assert r.stdout.strip(), f"runner printed nothing; stderr: {r.stderr}"
    return r.returncode, json.loads(r.stdout.strip().splitlines()[-1])


def write_spec(spec: dict, work_dir: Path) -> Path:
    """Specs live outside the work dir (as the controller's upload would)."""
    fd, name = tempfile.mkstemp(prefix=f"{work_dir.name}-spec-", suffix=".json", dir="/tmp")
    os.write(fd, json.dumps(spec).encode())
    os.close(fd)
    return Path(name)


def start(spec: dict, work_dir: Path, env=None) -> tuple[int, dict]:
    """`runner.py start`; env: the runner's environment (default: this process's)."""
    p = write_spec(spec, work_dir)
    try:
        return runner("start", "--spec", p, "--work-dir", work_dir, env=env)
    finally:
        p.unlink()


def wait(run_id, work_dir, timeout=90) -> dict:
    rc, st = runner("wait", run_id, "--work-dir", work_dir, "--timeout", timeout,
                    timeout=timeout + 30)
    assert rc in (0, 1), st
    return st


def wait_phase(bundle: Path, phases, timeout=60.0) -> dict:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            st = json.loads((bundle / "status.json").read_text())
            if st["phase"] in phases or st["phase"] in ("done", "failed"):
                return st
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    raise AssertionError(f"phase {phases} not reached in {timeout} s")


def assert_private(bundle: Path) -> None:
    """A run bundle is private to the runner's user: directories 0700, files 0600."""
    modes = {str(p.relative_to(bundle)): p.lstat().st_mode & 0o7777
             for p in [bundle, *bundle.rglob("*")]}
    bad = {rel: oct(m) for rel, m in modes.items()
           if m != (0o700 if (bundle / rel).is_dir() else 0o600)}
    assert bad == {}, bad


def verify_manifest(bundle: Path) -> dict:
    m = json.loads((bundle / "manifest.json").read_text())
    assert m["complete"] is True
    on_disk = {str(p.relative_to(bundle)) for p in bundle.rglob("*") if p.is_file()}
    assert on_disk - {"manifest.json"} == set(m["files"]), "manifest and bundle differ"
    for rel, meta in m["files"].items():
        data = (bundle / rel).read_bytes()
        assert len(data) == meta["bytes"], rel
        assert hashlib.sha256(data).hexdigest() == meta["sha256"], rel
    return m


def contract(bundle: Path):
    """The bundle as the controller loads it: every part validated against the bundle
    contract (bench.judge.bundle_schema), under the default caps; returns the Bundle."""
    from bench.judge.bundle import load, read_dir
    b = load(read_dir(bundle), str(bundle))
    assert b.run_id == bundle.name
    return b


def sectors(text: str, dev: str) -> int:
    for line in text.splitlines():
        f = line.split()
        if len(f) > 5 and f[2] == dev:
            return int(f[5])
    raise KeyError(dev)


def measured_device_bytes(bundle: Path, dev: str, passes=2) -> int:
    s = bundle / "snapshots"
    a = (s / f"pass{passes - 1}-start" / "proc_diskstats").read_text()
    b = (s / f"pass{passes - 1}-end" / "proc_diskstats").read_text()
    return (sectors(b, dev) - sectors(a, dev)) * SECTOR


def timeline(bundle: Path) -> list[dict]:
    lines = (bundle / "timeline.csv").read_text().splitlines()
    head = lines[0].split(",")
    return [dict(zip(head, line.split(","))) for line in lines[1:]]


def read_json(path: Path):
    return json.loads(path.read_text())
