"""A host whose disk is full when a run starts: the runner creates the run atomically (spec and
status staged, then renamed into place), so the failed start leaves nothing behind, says the
disk is full with the path, and the same run id starts and completes once there is room. The
work dir is a real 16 MiB tmpfs that the test fills to the last page (before the fix the bundle
directory stayed behind without spec.json or status.json: `status` said "no such run" and the
run id was stuck for good). Needs root (mount)."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.runner import make_spec, runner, start, wait


@pytest.fixture
def small_work_dir(tmp_path):
    mnt = tmp_path / "wd"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"needs a machine where root may mount a tmpfs ({r.stderr.strip()})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def fill(path: Path) -> Path:
    """Write zeros into `path` until the file system says ENOSPC; returns the filler."""
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    chunk = b"\0" * (64 << 10)
    try:
        while True:
            try:
                os.write(fd, chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                if len(chunk) == 1:
                    break
                chunk = chunk[:len(chunk) // 2]
    finally:
        os.close(fd)
    return filler


@pytest.mark.root
def test_a_full_disk_at_start_leaves_nothing_and_the_run_id_starts_later(
        agent, loopfs, pool, plans, small_work_dir):
    wd = small_work_dir
    # an earlier run made the runner's folders; then the disk filled up
    (wd / "runs").mkdir()
    filler = fill(wd)
    spec = make_spec("full-1", "1g-none-classic", pool=pool, plan=plans["short"], agent=agent)
    rc, res = start(spec, wd)
    assert rc == 1 and res["ok"] is False and res["disk_full"] is True, res
    assert res["errno"] == "ENOSPC" and "No space left on device" in res["reason"], res
    assert str(wd) in res["reason"] and "\n" not in res["reason"], res
    assert "df -h" in res["hint"]
    # nothing of the run stays: no bundle, no staged copy, no run lock file
    assert not (wd / "runs" / "full-1").exists()
    assert list((wd / "starting").iterdir()) == [] if (wd / "starting").exists() else True
    assert not (wd / "locks" / "full-1.lock").exists()
    rc, st = runner("status", "full-1", "--work-dir", wd)
    assert rc == 1 and st["reason"] == "no such run"
    # room again: the same run id starts and completes
    filler.unlink()
    rc, res = start(spec, wd)
    assert rc == 0 and res["ok"] and res["state"] == "started", res
    st = wait("full-1", wd)
    assert st["phase"] == "done" and st["ok"], st
    stored = json.loads((wd / "runs" / "full-1" / "spec.json").read_text())
    assert stored == spec
    assert list((wd / "starting").iterdir()) == []
