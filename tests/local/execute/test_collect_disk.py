"""A full controller disk while collecting is a disk error naming the local path, never "host
unreachable": a real tmpfs of a few KiB holds the data directory (mounted and removed by the
test), the bundle is real and comes through the local transport; the SSH transport's wording
of the same local failure is recognised too (its own error translation, on the real errno)."""

from __future__ import annotations

import errno
import subprocess
from pathlib import Path

import pytest

from bench.errors import Unreachable
from bench.execute.collect import ControllerDiskError, _local_disk, collect
from bench.hosts.inventory import Host
from bench.hosts.ssh import SSHTransport
from bench.hosts.transport import LocalTransport
from tests.support.bundlegen import make_bundle


@pytest.fixture
def tiny_fs(tmp_path):
    """A 32 KiB tmpfs: room for the data directory's folders, not for a bundle."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32k,mode=0700", "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"needs a machine where root may mount a tmpfs ({r.stderr.strip()})")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


@pytest.fixture
def host(tmp_path) -> Host:
    work = tmp_path / "host"
    (work / "runs").mkdir(parents=True)
    return Host(name="fixture-a", address="localhost", transport="local", work_dir=str(work))


@pytest.mark.root
def test_a_full_controller_disk_is_a_disk_error_naming_the_path(tiny_fs, host):
    make_bundle(Path(host.work_dir) / "runs", "r5", "64m-cgroup-mglru")
    data = tiny_fs / "data"
    with pytest.raises(ControllerDiskError) as exc:
        collect(LocalTransport(), host, "r5", data)
    msg = exc.value.message
    assert msg.startswith("controller disk: ") and "No space left on device" in msg, msg
    assert str(data / "bundles" / "fixture-a") in msg and "\n" not in msg
    assert "unreachable" not in msg.lower()
    assert exc.value.exit_code == 1 and "df -h" in (exc.value.hint or "")
    # nothing half-written stays: no bundle, no temp directory, the host's archive removed
    assert list((data / "bundles" / "fixture-a").iterdir()) == []
    assert not (Path(host.work_dir) / "collect" / "r5.tar.gz").exists()


def test_the_same_bundle_collects_once_there_is_room(tmp_path, host):
    make_bundle(Path(host.work_dir) / "runs", "r5", "64m-cgroup-mglru")
    assert collect(LocalTransport(), host, "r5", tmp_path / "data")["status"] == "collected"


def test_the_ssh_transports_wording_of_a_local_disk_error_is_seen_through(tmp_path):
    """SSHTransport.get words every failed copy as the connection's (Unreachable); the local
    ENOSPC under it makes it a disk error. A real network error stays Unreachable."""
    t = SSHTransport(Host(name="h", address="192.0.2.1", transport="ssh"))
    local = tmp_path / "bundle.tar.gz"
    for cause, want in ((OSError(errno.ENOSPC, "No space left on device", str(local)),
                         ControllerDiskError),
                        (OSError(errno.ECONNRESET, "Connection reset by peer"), Unreachable)):
        with pytest.raises(want) as exc, _local_disk(local, only_disk=True):
            try:
                raise cause
            except OSError as err:
                raise t._io_error("get", "/work/collect/r5.tar.gz", err) from None
        if want is ControllerDiskError:
            assert exc.value.message.startswith(f"controller disk: {local}: No space left")
