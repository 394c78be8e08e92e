"""Several pools per host on the netns lab: two `bench run`s of two trace shapes on one host
(real sshd, the real runner and agent) leave two pools side by side, each in its keyed
directory, each run's spec naming its own; `bench hosts pools` lists both and removes one,
refusing while another controller holds the host or a live run reads the pool. Needs root."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from pathlib import Path

import pytest

from bench.cli import main
from bench.hosts.lock import HostLock
from bench.hosts.ssh import transport_for
from bench.trace.synth import generate, preset

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_pools")]
NAME = "lab-netns-1"
CELL = "1G-none-classic"
SHAPES = {"a": 1 << 20, "b": 3 << 18}    # tiny preset: 4 layers x 32 experts of 1 MiB, 768 KiB


def key(expert_bytes: int) -> str:
    return f"4x32x{expert_bytes}-s0"


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("pools-lab")
    out = {}
    for name, size in SHAPES.items():
        t = d / f"{name}.jsonl"
        t.write_text("\n".join(generate(preset("tiny", tokens=120, expert_bytes=size,
                                                spec_accept=0.0, fallback=0.0))) + "\n")
        out[name] = t
    return d, out


def cli(capsys, *args) -> tuple[int, str, str]:
    rc = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return rc, out, err


def test_two_shapes_coexist_listed_and_one_removed(lab, lab_inventory, traces, capsys):
    d, tr = traces
    hosts = ("--hosts-dir", lab.hosts_dir)
    root = Path(lab.host(NAME).dir) / "pool"
    for name, size in SHAPES.items():
        rc, out, err = cli(capsys, "run", CELL, "--host", NAME, "--trace", tr[name],
                           "--threads", 2, "--run-id", f"shape-{name}", "--db",
                           f"sqlite:///{d / 'bench.db'}", "--data-dir", d / "data", *hosts,
                           "--json")
        assert rc == 0, out + err
        (res,) = json.loads(out)
        assert res["ok"] and res["pool"]["ok"] and res["pool"]["key"] == key(size), res
        spec = json.loads((Path(res["bundle"]) / "spec.json").read_text())
        assert spec["pool"] == str(root / key(size)) == res["pool"]["dir"]
    # both pools on the host's disk, each complete in its keyed directory; nothing at the root
    assert sorted(p.name for p in root.iterdir()) == sorted(key(s) for s in SHAPES.values())
    for size in SHAPES.values():
        man = json.loads((root / key(size) / "pool.json").read_text())
        assert man["complete"] is True and man["expert_bytes"] == size
        assert (root / key(size) / "L003" / "E0031.bin").stat().st_size == size

    rc, out, err = cli(capsys, "hosts", "pools", NAME, *hosts, "--json")
    assert rc == 0, err
    listed = {p["key"]: p for p in json.loads(out)["pools"]}
    assert set(listed) == {key(s) for s in SHAPES.values()}
    for size in SHAPES.values():
        p = listed[key(size)]
        assert (p["state"], p["layers"], p["experts_per_layer"], p["expert_bytes"], p["seed"]) \
            == ("complete", 4, 32, size, 0)
        assert p["bytes"] == 4 * 32 * size and p["disk_bytes"] >= p["bytes"]
        assert p["files"] == 4 * 32 + 2 and p["in_use"] == [] and p["sums"] is True
    rc, out, _ = cli(capsys, "hosts", "pools", NAME, *hosts)
    assert rc == 0 and key(SHAPES["a"]) in out and key(SHAPES["b"]) in out

    # another controller holds the host: refused, nothing removed
    h = lab_inventory[NAME]
    t = transport_for(h)
    try:
        with HostLock(t, h, purpose="test: another controller"):
            rc, _, err = cli(capsys, "hosts", "pools", NAME, "--rm", key(SHAPES["a"]), *hosts)
            assert rc == 1 and "locked by another controller" in err, err
    finally:
        t.close()
    assert (root / key(SHAPES["a"]) / "pool.json").exists()

    # a live run reads it (its run lock held, its spec naming the pool): refused, named
    work = Path(lab.host(NAME).dir) / "work"
    (work / "runs" / "live-x").mkdir(parents=True)
    (work / "runs" / "live-x" / "spec.json").write_text(
        json.dumps({"run_id": "live-x", "pool": str(root / key(SHAPES["a"]))}))
    fd = os.open(work / "locks" / "live-x.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        rc, out, err = cli(capsys, "hosts", "pools", NAME, *hosts, "--json")
        listed = {p["key"]: p for p in json.loads(out)["pools"]}
        assert listed[key(SHAPES["a"])]["in_use"] == ["live-x"]
        rc, _, err = cli(capsys, "hosts", "pools", NAME, "--rm", key(SHAPES["a"]), *hosts)
        assert rc == 1 and "in use by run live-x" in err, err
    finally:
        os.close(fd)
        os.unlink(work / "locks" / "live-x.lock")
        shutil.rmtree(work / "runs" / "live-x")
    assert (root / key(SHAPES["a"]) / "pool.json").exists()

    # the run ended: removed; the other pool untouched
    before = sorted(p.name for p in (root / key(SHAPES["b"])).rglob("*"))
    rc, out, err = cli(capsys, "hosts", "pools", NAME, "--rm", key(SHAPES["a"]), *hosts,
                       "--json")
    assert rc == 0, err
    assert json.loads(out)["removed"] is True
    assert sorted(p.name for p in root.iterdir()) == [key(SHAPES["b"])]
    assert sorted(p.name for p in (root / key(SHAPES["b"])).rglob("*")) == before
    rc, out, _ = cli(capsys, "hosts", "pools", NAME, *hosts, "--json")
    assert [p["key"] for p in json.loads(out)["pools"]] == [key(SHAPES["b"])]
    # a key that is no pool there, and a string that is no key
    rc, _, err = cli(capsys, "hosts", "pools", NAME, "--rm", key(SHAPES["a"]), *hosts)
    assert rc == 1 and "no pool" in err
    rc, _, err = cli(capsys, "hosts", "pools", NAME, "--rm", "../etc", *hosts)
    assert rc == 2 and "is not a pool key" in err
