"""A hostile host's bundle archive is bounded while it is read (issue 23): every member (file,
directory, link) counts against the bundle's cap and the archive is refused at the cap as it
streams, with the controller's memory bounded and nothing left under bundles/; an archive
larger than the caps allow is refused before it is copied. `bench hosts collect` runs for a
local-transport host (the real runner, the real pack command, real tar); a hostile host's
own `tar` is a script on its PATH that sends a prepared archive."""

from __future__ import annotations

import gzip
import io
import os
import shutil
import tarfile
import time
from pathlib import Path

import pytest

from bench.errors import HostError
from bench.execute.collect import EXT_HEADER_MAX, collect
from bench.hosts.inventory import load_inventory
from bench.hosts.transport import LocalTransport
from tests.support.bundlegen import make_bundle
from tests.support.hostile_inputs import run_capped
from tests.support.paths import REPO

HOST = "fixture-a"


def _host(d: Path) -> tuple[Path, Path]:
    """A local host with the runner installed and a finished run r5; (work_dir, hosts_dir)."""
    work = d / "host"
    (work / "runs").mkdir(parents=True)
    shutil.copytree(REPO / "agents", work / "agents",
                    ignore=shutil.ignore_patterns("__pycache__"))
    make_bundle(work / "runs", "r5", "64m-cgroup-mglru")
    hosts = d / "hosts"
    hosts.mkdir()
    (hosts / f"{HOST}.toml").write_text(
        f'name = "{HOST}"\ntransport = "local"\n[reboot]\nallowed = false\nmethod = "none"\n'
        f'[paths]\nwork_dir = "{work}"\n')
    return work, hosts


def _hostile_tar(d: Path, archive: Path) -> Path:
    """A directory holding a `tar` that writes `archive` wherever it is asked to (-czf DEST)."""
    fake = d / "fakebin"
    fake.mkdir()
    (fake / "tar").write_text(f'#!/bin/sh\ncp "{archive}" "$2"\n')
    (fake / "tar").chmod(0o755)
    return fake


def _archive(d: Path, run: Path, extra) -> Path:
    """A gzipped tar of the valid bundle `run` followed by what `extra(gz)` writes (raw tar
    blocks), ended as tar ends."""
    out = d / "hostile.tar.gz"
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1) as gz:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
            tar.add(run, arcname=run.name)
        gz.write(_without_end(buf.getvalue()))
        extra(gz)
        gz.write(b"\0" * 1024)
    return out


def _without_end(tar_bytes: bytes) -> bytes:
    """A tar stream without its two zero blocks (and record padding): more members follow."""
    end = len(tar_bytes)
    while end >= 512 and tar_bytes[end - 512:end] == b"\0" * 512:
        end -= 512
    return tar_bytes[:end]


def _collect(d: Path, hosts: Path, env: dict[str, str] | None = None):
    old = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        return run_capped(["hosts", "collect", HOST, "r5", "--hosts-dir", str(hosts)], d,
                          d / "report", timeout=300)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _left(d: Path) -> list[Path]:
    return list((d / "data" / "bundles" / HOST).rglob("*"))


def test_directories_count_against_the_cap_and_nothing_is_left(tmp_path):
    """A valid bundle and 1000 directories (the issue's 300,000 at a cap of 400 members):
    before, collected with every directory left on the controller; now refused at the cap."""
    work, hosts = _host(tmp_path)
    for i in range(1000):
        (work / "runs" / "r5" / f"d{i}").mkdir()
    t0 = time.monotonic()
    ran = _collect(tmp_path, hosts, {"BENCH_BUNDLE_MAX_FILES": "400"})
    took = time.monotonic() - t0
    assert ran.rc == 1, ran.stderr
    line = ran.stderr.strip().splitlines()[0]
    assert line.startswith(f"error: {HOST}: collect {work}/collect/r5.tar.gz: bundle archive "
                           "refused: more than 400 members (files, directories and links count "
                           "alike; BENCH_BUNDLE_MAX_FILES)"), ran.stderr
    assert "Traceback" not in ran.stderr
    assert _left(tmp_path) == []
    assert not (work / "collect" / "r5.tar.gz").exists()
    print(f"refused in {took:.1f} s, peak RSS {ran.peak_rss_mib} MiB")


def test_a_link_member_is_refused(tmp_path):
    work, hosts = _host(tmp_path)
    (work / "runs" / "r5" / "passwd").symlink_to("/etc/passwd")
    ran = _collect(tmp_path, hosts)
    assert ran.rc == 1
    assert "bundle archive refused: member 'r5/passwd' is not a regular file or directory" \
        in ran.stderr, ran.stderr
    assert _left(tmp_path) == []


def test_a_million_member_archive_is_refused_at_the_cap_with_memory_bounded(tmp_path):
    """Empty files past the default cap of 100000 members: before, tar.getmembers() held every
    member (1M: 521 MiB) before the refusal; now the members stream and the peak RSS stays
    near that of collecting a valid bundle."""
    base = tmp_path / "valid"
    base.mkdir()
    _, base_hosts = _host(base)
    good = _collect(base, base_hosts)
    assert good.rc == 0, good.stderr

    bad = tmp_path / "hostile"
    bad.mkdir()
    work, hosts = _host(bad)
    members = 150_000
    info = tarfile.TarInfo("r5/x")

    def empties(gz):
        for i in range(members):
            info.name = f"r5/e{i}"
            gz.write(info.tobuf(tarfile.GNU_FORMAT))
    archive = _archive(bad, work / "runs" / "r5", empties)
    path = f"{_hostile_tar(bad, archive)}:{os.environ['PATH']}"
    ran = _collect(bad, hosts, {"PATH": path})
    print(f"{members} members ({archive.stat().st_size} bytes gzipped): peak RSS "
          f"{ran.peak_rss_mib} MiB; a valid bundle: {good.peak_rss_mib} MiB")
    assert ran.rc == 1, ran.stderr
    assert "bundle archive refused: more than 100000 members" in ran.stderr, ran.stderr
    assert ran.peak_rss_mib < good.peak_rss_mib + 24, (ran.peak_rss_mib, good.peak_rss_mib)
    assert _left(bad) == []


def _in_process(tmp_path, monkeypatch, extra) -> HostError:
    work, hosts = _host(tmp_path)
    archive = _archive(tmp_path, work / "runs" / "r5", extra)
    monkeypatch.setenv("PATH", f"{_hostile_tar(tmp_path, archive)}:{os.environ['PATH']}")
    host = load_inventory(hosts)[HOST]
    with pytest.raises(HostError) as exc:
        collect(LocalTransport(HOST), host, "r5", tmp_path / "data")
    assert _left(tmp_path) == []
    return exc.value


def test_an_extended_header_past_its_bound_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """A pax header that says it is 64 MiB long (tarfile would read it whole first)."""
    def pax(gz):
        info = tarfile.TarInfo("r5/long")
        info.pax_headers = {"comment": "x" * (64 << 20)}
        gz.write(_without_end(info.tobuf(tarfile.PAX_FORMAT)))
    err = _in_process(tmp_path, monkeypatch, pax)
    assert f"bundle archive refused: an extended header of {(64 << 20) + 18} bytes (at most " \
           f"{EXT_HEADER_MAX})" in err.message


def test_a_sparse_member_is_refused(tmp_path, monkeypatch):
    """A pax 1.0 sparse member, whose map tarfile reads whole from the data."""
    def sparse(gz):
        info = tarfile.TarInfo("r5/GNUSparseFile.0/s")
        info.size = 512
        info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0",
                            "GNU.sparse.name": "r5/s", "GNU.sparse.realsize": str(1 << 40)}
        gz.write(info.tobuf(tarfile.PAX_FORMAT) + b"99999999999\n".ljust(512, b"\0"))
    err = _in_process(tmp_path, monkeypatch, sparse)
    assert "bundle archive refused: member 'r5/GNUSparseFile.0/s' is sparse" in err.message


def test_an_archive_larger_than_the_caps_allow_is_refused_before_the_copy(tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("BENCH_BUNDLE_MAX_BYTES", "4096")
    monkeypatch.setenv("BENCH_BUNDLE_MAX_FILES", "200")

    def big(gz):
        info = tarfile.TarInfo("r5/noise")
        info.size = 3 << 20
        gz.write(info.tobuf(tarfile.GNU_FORMAT) + os.urandom(3 << 20))
    err = _in_process(tmp_path, monkeypatch, big)
    limit = 4096 + 40 + 200 * 1024 + (1 << 20)
    assert f"more than the {limit} a bundle within the caps takes: refused" in err.message
    assert not (tmp_path / "host" / "collect" / "r5.tar.gz").exists()


def test_local_get_copies_at_most_its_limit(tmp_path):
    src = tmp_path / "src"
    src.write_bytes(b"x" * 5000)
    t = LocalTransport("h")
    t.get(str(src), tmp_path / "ok", limit=5000)
    assert (tmp_path / "ok").read_bytes() == src.read_bytes()
    with pytest.raises(HostError) as exc:
        t.get(str(src), tmp_path / "over", limit=4999)
    assert exc.value.message == f"h: get {src}: the file holds more than 4999 bytes: refused " \
                                "(bench copies at most that much of it)"
    assert not (tmp_path / "over").exists()
