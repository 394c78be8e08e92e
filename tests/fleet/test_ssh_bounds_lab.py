"""Every read of the SSH transport has a byte bound (issue 23): a command's stdout and stderr
(SSHTransport.output_max, default RUN_OUTPUT_MAX) and a copied file (get's limit, default
GET_MAX) past their bound are refused in one line naming the host and the bound, quickly,
with nothing left behind and the connection still usable; and a host bench cannot reach is
named in bench's words (`cannot connect to HOST (ADDRESS:PORT): CAUSE`). Real sshd (netns
lab)."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest

from bench.cli import main
from bench.errors import Unreachable, HostError
from bench.hosts.ssh import SSHTransport
from bench.hosts.sshio import RUN_OUTPUT_MAX
from bench.judge.bundle_files import JSON_BYTES

NAME = "lab-netns-1"


@pytest.fixture
def ssh(lab_inventory):
    t = SSHTransport(lab_inventory[NAME])
    yield t
    t.close()


def test_the_output_bound_holds_any_json_document_a_bundle_may_hold():
    assert RUN_OUTPUT_MAX >= JSON_BYTES


@pytest.mark.parametrize("argv, stream", [(["cat", "/dev/zero"], "stdout"),
                                          (["sh", "-c", "cat /dev/zero >&2"], "stderr")])
def test_endless_output_is_refused_at_the_bound(ssh, argv, stream):
    t0 = time.monotonic()
    with pytest.raises(HostError) as exc:
        ssh.run(argv, timeout=120)
    took = time.monotonic() - t0
    msg = exc.value.message
    assert msg.startswith(f"{NAME}: `{' '.join(argv)}` sent more than {RUN_OUTPUT_MAX} bytes "
                          f"on its {stream}: refused"), msg
    assert "\n" not in msg and took < 30, took
    assert ssh.run(["echo", "still here"]).stdout == "still here\n"


def test_the_bound_is_exact_and_a_parameter(lab_inventory):
    t = SSHTransport(lab_inventory[NAME], output_max=1000)
    try:
        assert len(t.run(["head", "-c", "1000", "/dev/zero"]).stdout) == 1000
        with pytest.raises(HostError, match="sent more than 1000 bytes on its stdout"):
            t.run(["head", "-c", "1001", "/dev/zero"])
        # stdin still arrives whole, and a command that reads no input still ends
        r = t.run(["sh", "-c", "wc -c; exit 3"], stdin="x" * 200_000, check=False)
        assert (r.rc, r.stdout.strip()) == (3, "200000")
        assert t.run(["true"], stdin="y" * 3_000_000).rc == 0
    finally:
        t.close()


def test_get_copies_at_most_its_limit(ssh, tmp_path):
    remote = "/tmp/bench-bounds-file"
    ssh.run(["sh", "-c", f"head -c 3000000 /dev/urandom > {remote}"])
    try:
        ssh.get(remote, tmp_path / "whole", limit=3_000_000)
        assert (tmp_path / "whole").stat().st_size == 3_000_000
        for src in (remote, "/dev/zero"):       # too large; endless (its size says 0)
            with pytest.raises(HostError) as exc:
                ssh.get(src, tmp_path / "over", limit=1 << 20)
            assert exc.value.message == (f"{NAME}: get {src}: the file holds more than "
                                         f"{1 << 20} bytes: refused (bench copies at most "
                                         "that much of it)")
            assert not (tmp_path / "over").exists()
    finally:
        ssh.run(["rm", "-f", remote])


def test_no_route_is_named(lab_inventory):
    subnet = os.environ.get("BENCH_FLEET_SUBNET", "10.200.77")
    host = dataclasses.replace(lab_inventory[NAME], address=f"{subnet}.250")
    with pytest.raises(Unreachable) as exc:
        SSHTransport(host).run(["true"])
    assert exc.value.message == (f"cannot connect to {NAME} ({subnet}.250:22): no route to "
                                 "the host")
    assert "ip route get" in (exc.value.hint or "")


def test_a_stopped_sshd_is_named_through_the_cli(lab_host_up, capsys, tmp_path):
    lab = lab_host_up
    lab.kill_sshd(NAME)
    addr = lab.host(NAME).address
    rc = main(["hosts", "collect", NAME, "r1", "--hosts-dir", str(lab.hosts_dir),
               "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 1
    assert err[0] == (f"error: cannot connect to {NAME} ({addr}:22): connection refused "
                      "(nothing listens on that port)")
    assert err[1].startswith("fix: start sshd on the host") and len(err) == 2
