"""Collect binds a bundle to the run id and host it collects for: a host that rewrites its
bundle's spec (and status and manifest, consistently) to claim another run or host is refused
in one line, and nothing is put in place under <data_dir>/bundles/<host>/. Real tar, real
files, the local transport."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.execute.collect import bundle_path, collect
from bench.hosts.inventory import Host
from bench.hosts.transport import LocalTransport
from bench.judge.bundle import BundleError
from tests.support.bundlegen import make_bundle


def _claim(run_id: str | None = None, host: str | None = None):
    def edit(parts):
        for part in ("spec.json", "status.json"):
            if run_id:
                parts[part]["run_id"] = run_id
        if host:
            parts["spec.json"]["host"] = host
    return edit


@pytest.fixture
def host(tmp_path) -> Host:
    work = tmp_path / "host"
    (work / "runs").mkdir(parents=True)
    return Host(name="fixture-a", address="localhost", transport="local", work_dir=str(work))


def test_a_bundle_of_this_run_is_collected(tmp_path, host):
    make_bundle(Path(host.work_dir) / "runs", "r5", "64m-cgroup-mglru")
    res = collect(LocalTransport(), host, "r5", tmp_path / "data")
    assert res["status"] == "collected"
    assert Path(res["bundle"]) == bundle_path(tmp_path / "data", "fixture-a", "r5")
    assert collect(LocalTransport(), host, "r5", tmp_path / "data")["status"] == "present"


@pytest.mark.parametrize("claim, says", [
    (_claim(run_id="r7"), "spec.json: run_id 'r7' is not the run collected ('r5')"),
    (_claim(host="fixture-b"), "spec.json: host 'fixture-b' is not the host collected "
                               "('fixture-a')"),
])
def test_a_bundle_claiming_another_run_or_host_is_refused(tmp_path, host, claim, says):
    make_bundle(Path(host.work_dir) / "runs", "r5", "64m-cgroup-mglru", edit=claim)
    data = tmp_path / "data"
    with pytest.raises(BundleError) as exc:
        collect(LocalTransport(), host, "r5", data)
    assert says in exc.value.message and "\n" not in exc.value.message
    assert exc.value.message.startswith(f"fixture-a:{host.work_dir}/runs/r5: ")
    assert list((data / "bundles" / "fixture-a").iterdir()) == []     # nothing in place
    assert not (Path(host.work_dir) / "collect" / "r5.tar.gz").exists()


def test_a_collected_bundle_that_no_longer_binds_is_collected_again(tmp_path, host):
    make_bundle(Path(host.work_dir) / "runs", "r5", "64m-cgroup-mglru")
    data = tmp_path / "data"
    dest = bundle_path(data, "fixture-a", "r5")
    make_bundle(dest.parent, "r5", "64m-cgroup-mglru", edit=_claim(host="fixture-b"))
    assert collect(LocalTransport(), host, "r5", data)["status"] == "collected"
    assert '"host": "fixture-a"' in (dest / "spec.json").read_text()


@pytest.mark.parametrize("inline_max", [0, 1 << 20])
def test_one_command_collects_inline_or_leaves_a_large_archive_for_a_copy(tmp_path, host,
                                                                          inline_max):
    """An archive within inline_max comes back on the pack command's stdout (one command);
    a larger one by a copy of the file; either way the bundle is the host's, byte for byte,
    and the host's archive is removed."""
    src = make_bundle(Path(host.work_dir) / "runs", "r5", "64m-cgroup-mglru")

    class Counting(LocalTransport):
        def __init__(self):
            super().__init__()
            self.calls: list[str] = []

        def run(self, argv, **kw):
            self.calls.append(argv[0])
            return super().run(argv, **kw)

        def get(self, remote, local, **kw):
            self.calls.append("get")
            return super().get(remote, local, **kw)

    t = Counting()
    res = collect(t, host, "r5", tmp_path / "data", inline_max=inline_max)
    assert res["status"] == "collected"
    assert t.calls == (["sh"] if inline_max else ["sh", "get", "rm"])
    dest = Path(res["bundle"])
    for f in src.rglob("*"):
        if f.is_file():
            assert (dest / f.relative_to(src)).read_bytes() == f.read_bytes(), f
    assert not (Path(host.work_dir) / "collect" / "r5.tar.gz").exists()
