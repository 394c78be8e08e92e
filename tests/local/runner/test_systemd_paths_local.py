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
