"""The runner's systemd path where systemd is not PID 1 (this machine, and every host of the
x86 labs): detection says so and picks cgroupfs, and if the scope path is asked for anyway the
real systemd-run refuses and the runner fails with systemd-run's own words, leaving no keeper
running and the unit recorded for a later cleanup. The path itself runs on the twin's systemd
guests (tests/twin/test_systemd_capacity_twin.py)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from bench.agents.hostrunner import capacity, systemd
from bench.agents.hostrunner.cleanup import Active
from bench.agents.hostrunner.errors import RunFailed
from bench.agents.hostrunner.probes import cgroup_backend


def _no_systemd():
    if systemd.detect()["systemd"]:
        pytest.skip("systemd is PID 1 here: this test is about hosts without it")


def test_this_host_takes_the_cgroupfs_path():
    _no_systemd()
    backend, _ = cgroup_backend()
    path, why = systemd.choose_wall(bool(systemd.detect()["systemd"]), backend)
    assert path == systemd.PATH_CGROUPFS and "not PID 1" in why


def test_scope_without_systemd_fails_with_systemd_runs_words(tmp_path):
    _no_systemd()
    if not shutil.which("systemd-run"):
        pytest.skip("systemd-run not installed (package systemd)")
    (tmp_path / "active").mkdir()
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    active = Active(str(tmp_path), "r-nosd")
    cap = {"mechanism": "cgroup", "capacity_bytes": 64 << 20}
    with pytest.raises(RunFailed) as e:
        capacity.create_scope(cap, "r-nosd", 0, active, str(bundle), "/sys/fs/cgroup")
    msg = str(e.value)
    assert msg.startswith("systemd-run could not make bench-wall-r-nosd.scope (exit 1)"), msg
    log = (bundle / "wall.log").read_text()
    assert log.strip().splitlines()[-1] in msg
    assert cap["wall_argv"][:2] == ["systemd-run", "--scope"]
    assert f"MemoryMax={64 << 20}" in cap["wall_argv"]
    # the keeper never ran and was reaped; the unit is recorded for a later cleanup
    assert not os.path.exists(f"/proc/{cap['keeper_pid']}")
    rec = json.loads((tmp_path / "active" / "r-nosd.json").read_text())
    assert rec["units"] == ["bench-wall-r-nosd.scope"] and rec["cgroups"] == []


def test_runner_unit_that_cannot_start_leaves_the_run_failed(tmp_path, capsys):
    """`start` on the unit path, where systemd-run cannot reach systemd: the run ends failed
    with systemd-run's words (status.json and a manifest), start.lock and the run lock free."""
    _no_systemd()
    if not shutil.which("systemd-run"):
        pytest.skip("systemd-run not installed (package systemd)")
    from bench.agents.hostrunner import commands
    from bench.agents.hostrunner.bundle import accepted_status, bundle_dir
    from bench.agents.hostrunner.locks import lock_path, start_lock, try_lock
    wd, rid = str(tmp_path), "r-unit"
    for d in ("runs", "locks", "active"):
        (tmp_path / d).mkdir()
    bundle = bundle_dir(wd, rid)
    os.mkdir(bundle, 0o700)
    (tmp_path / "runs" / rid / "spec.json").write_text("{}")
    (tmp_path / "runs" / rid / "status.json").write_text(json.dumps(accepted_status(rid)))
    start_fd = start_lock(wd)
    run_fd = try_lock(lock_path(wd, rid))
    assert run_fd is not None
    rc = commands.start_unit(wd, bundle, rid, run_fd, start_fd)
    res = json.loads(capsys.readouterr().out)
    assert rc == commands.EXIT_FAILED and res["ok"] is False
    assert res["reason"].startswith("cannot start bench-run-r-unit.service: exit 1"), res
    st = json.loads((tmp_path / "runs" / rid / "status.json").read_text())
    assert st["phase"] == "failed" and st["reason"] == res["reason"]
    assert (tmp_path / "runs" / rid / "manifest.json").exists()
    fd = try_lock(lock_path(wd, rid))                 # nobody holds the run any more
    assert fd is not None
    os.close(fd)
    os.close(start_lock(wd))
