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
from tests.support.local_host import local_hosts_dir, local_settings, none_matrix


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


CAMPAIGN = none_matrix("disk-full", '"2pool"')


def _fill(path: Path) -> Path:
    """Zeros into path/filler until the file system says ENOSPC."""
    filler = path / "filler"
    with open(filler, "wb", buffering=0) as f:
        chunk = b"\0" * (64 << 10)
        while True:
            try:
                f.write(chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e
                if len(chunk) == 1:
                    return filler
                chunk = chunk[:len(chunk) // 2]


@pytest.mark.root
@pytest.mark.native
def test_a_campaign_whose_data_disk_fills_stops_naming_it_and_resumes(tmp_path):
    """The campaign's data dir on a real 16 MiB tmpfs, filled while the first run executes: its
    collect fails on the controller's disk. The campaign says so with the path, spends no
    attempt and blames no host (no quarantine, no "unreachable"), and stops with the run left
    running; once there is room, resume collects it without running it again."""
    import shutil as _sh

    from bench.cli.schedule import build_plan
    from bench.execute.campaign.executor import Event, Executor
    from bench.execute.campaign.record import create
    from bench.store.campaigns import journal_rows, run_rows
    from bench.store.db import open_store
    for tool in ("make", "cc", "python3"):
        if _sh.which(tool) is None:
            pytest.skip(f"{tool} not installed (the agent is built on deploy)")
    data = tmp_path / "data"
    data.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0700", "tmpfs", str(data)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"needs a machine where root may mount a tmpfs ({r.stderr.strip()})")
    hosts = local_hosts_dir(tmp_path)
    (tmp_path / "matrix.toml").write_text(CAMPAIGN)
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    plan, exp, m = build_plan(str(tmp_path / "matrix.toml"), ["local"], hosts, 5, "df")
    s = local_settings(tmp_path, hosts, db, retries=2, data_dir=data)
    store = open_store(db)
    fillers: list[Path] = []

    def fill_once(ev: Event) -> None:
        if ev.kind == "state" and ev.message.endswith("-> running (starting the runner)") \
                and not fillers:
            fillers.append(_fill(data))
    try:
        create(store, plan, exp, m, ["local"], s, str(tmp_path / "matrix.toml"))
        res = Executor(store, "df", s, on_event=fill_once).run()
        rows = {x.run_id: x for x in run_rows(store, "df")}
        js = journal_rows(store, "df")
        msgs = [j.message for j in js]
        assert res.state == "stopped" and not res.quarantined, (res.state, msgs[-8:])
        disk = [x for x in msgs if "controller disk: " in x]
        assert disk and "No space left on device" in disk[0], msgs[-8:]
        assert str(data / "bundles" / "local") in disk[0], disk
        assert not any("unreachable" in x.lower() or "quarantin" in x.lower() for x in msgs)
        assert not any(x.state == "failed" for x in rows.values()), rows
        started = [x for x in rows.values() if x.state == "running"]
        assert len(started) == 1 and started[0].spec, rows
        # room again: resume collects the run that ran, runs the other, nothing twice
        fillers[0].unlink()
        res = Executor(store, "df", s).run()
        assert res.state == "done", [j.message for j in journal_rows(store, "df")][-8:]
        rows = {x.run_id: x for x in run_rows(store, "df")}
        assert {x.state for x in rows.values()} == {"validated"}
        ran = [j for j in journal_rows(store, "df", kinds=("state",))
               if (j.data or {}).get("to") == "running"]
        assert sorted(j.run_ref for j in ran) == sorted(x.ref for x in rows.values())
    finally:
        store.close()
        subprocess.run(["umount", str(data)], check=True)
