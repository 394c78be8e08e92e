"""A host bench cannot reach is named in bench's own words (issue 23): `cannot connect to HOST
(ADDRESS:PORT): CAUSE` and a fix line, never paramiko's "[Errno None] Unable to connect to
port 22". `bench hosts collect` over the real SSH transport (paramiko, real sockets) to a
port nothing listens on, a name that does not resolve, and a listener whose queue is full
(its SYNs go unanswered: a timeout). No route to a host: tests/fleet/test_ssh_bounds_lab.py."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from bench.cli import main


def _inventory(tmp_path: Path, address: str, port: int) -> Path:
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    (hosts / "far.toml").write_text(
        f'name = "far"\ntransport = "ssh"\naddress = "{address}"\nport = {port}\nuser = "root"\n'
        '[reboot]\nallowed = false\nmethod = "none"\n'
        f'[ssh]\nconnect_timeout = 2\nknown_hosts = "{tmp_path / "known_hosts"}"\n'
        f'config = "none"\n')
    return hosts


def _collect(tmp_path, capsys, address: str, port: int) -> tuple[str, str]:
    hosts = _inventory(tmp_path, address, port)
    rc = main(["hosts", "collect", "far", "r1", "--hosts-dir", str(hosts),
               "--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "Traceback" not in err and "Errno" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[1].startswith("fix: "), err
    return lines[0], lines[1]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_refused(tmp_path, capsys):
    port = _closed_port()
    line, fix = _collect(tmp_path, capsys, "127.0.0.1", port)
    assert line == f"error: cannot connect to far (127.0.0.1:{port}): connection refused " \
                   "(nothing listens on that port)"
    assert "start sshd on the host" in fix


def test_name_that_does_not_resolve(tmp_path, capsys):
    line, fix = _collect(tmp_path, capsys, "no-such-host.invalid", 22)
    assert line.startswith("error: cannot connect to far (no-such-host.invalid:22): the name "
                           "does not resolve (")
    assert "check the address" in fix


def test_timeout(tmp_path, capsys):
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(0)
        port = srv.getsockname()[1]
        queued = []
        for _ in range(4):          # fill the accept queue: later SYNs are dropped
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
            queued.append(c)
        probe = socket.socket()
        probe.settimeout(0.5)
        try:
            with pytest.raises(TimeoutError):       # the precondition: SYNs go unanswered
                probe.connect(("127.0.0.1", port))
        finally:
            probe.close()
        try:
            line, fix = _collect(tmp_path, capsys, "127.0.0.1", port)
        finally:
            for c in queued:
                c.close()
    assert line == f"error: cannot connect to far (127.0.0.1:{port}): no answer within 2 s " \
                   "(timed out)"
    assert "ssh.connect_timeout" in fix
