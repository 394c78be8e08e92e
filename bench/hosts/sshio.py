"""What the SSH transport (bench.hosts.ssh) reads from a host, each read bounded, and why a
connection failed, in bench's words. No paramiko here (bench.hosts.ssh alone imports it): the
transport hands in its channel, its SFTP client and the exceptions it caught."""

from __future__ import annotations

import errno
import select
import socket
import time
from pathlib import Path

LINE_MAX = 64 << 10          # bytes of one line a spawned command prints (longer: cut there)
UP = "is the host up, and sshd running on it?"

# bytes of one command's stdout (and of its stderr) read before the command is refused: twice
# the largest JSON document a bundle may hold (bench.judge.bundle_files.JSON_BYTES, 16 MiB),
# so any document a command prints whole fits; what bench runs prints far less (a collected
# archive sent inline is at most bench.execute.collect.INLINE_MAX, 256 KiB, in base64)
RUN_OUTPUT_MAX = 32 << 20
_CHUNK = 64 << 10


class TimedOut(Exception):
    pass


class TooMuch(Exception):
    """The command printed more than its bound on the stream named."""


def exchange(chan, command: str, stdin: str | None, timeout: float | None,
             limit: int) -> tuple[int, str, str]:
    """Run `command` on the fresh (paramiko) channel: feed it `stdin` (then end its input: a command
    never waits on an input nobody sends), read its stdout and stderr as they come, each at
    most `limit` bytes, until its end or `timeout` seconds. (rc, stdout, stderr); rc -1 when
    the channel closed without an exit status (the connection dropped)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = (stdin or "").encode()
    out, err = bytearray(), bytearray()
    chan.exec_command(command)
    if not pending:
        chan.shutdown_write()
    while True:
        busy = False
        if pending and chan.send_ready():
            try:
                pending = pending[chan.send(pending[:_CHUNK]):]
            except OSError:         # it ended without reading all its input
                pending = b""
            busy = True
            if not pending and not chan.closed:
                chan.shutdown_write()
        if chan.recv_ready():
            out += chan.recv(_CHUNK)
            busy = True
        if chan.recv_stderr_ready():
            err += chan.recv_stderr(_CHUNK)
            busy = True
        if len(out) > limit or len(err) > limit:
            raise TooMuch("stdout" if len(out) > limit else "stderr")
        if busy:
            continue
        # what the command printed arrives before its end of file (one ordered stream)
        if (chan.eof_received and chan.exit_status_ready()) or chan.closed:
            break
        if deadline is not None and time.monotonic() > deadline:
            raise TimedOut
        if chan.eof_received:
            time.sleep(0.002)       # the exit status follows the end of file at once
        else:
            select.select([chan], [], [], 0.05)
    rc = chan.recv_exit_status() if chan.exit_status_ready() else -1
    return rc, out.decode(errors="replace"), err.decode(errors="replace")


def copy_bounded(sftp, remote: str, local: Path, limit: int) -> int:
    """Copy remote to local, stopping once more than `limit` bytes came: the bytes copied
    (limit + 1 or more: refused)."""
    with sftp.open(remote, "rb") as f:
        size = f.stat().st_size or 0
        if size > limit:
            return size
        f.prefetch(size)
        seen = 0
        with open(local, "wb") as dst:
            while chunk := f.read(_CHUNK):
                seen += len(chunk)
                if seen > limit:
                    break
                dst.write(chunk)
    return seen


def connect_cause(exc: BaseException, connect_timeout: float,
                  address: str) -> tuple[str, str] | None:
    """(cause, fix) of a failed connection whose cause the socket layer knows; None for any
    other exception."""
    errors = getattr(exc, "errors", None)
    if isinstance(exc, OSError) and isinstance(errors, dict) and errors:
        # paramiko's "[Errno None] Unable to connect to port 22 on ADDR": a cause per address
        causes = {connect_cause(e, connect_timeout, address) or (str(e), UP)
                  for e in errors.values()}
        if len(causes) == 1:
            return causes.pop()
        return "; ".join(sorted(c for c, _ in causes)), UP
    if isinstance(exc, socket.gaierror):
        return (f"the name does not resolve ({exc.strerror})",
                "check the address (inventory `address`, or HostName in ssh_config) and DNS")
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return (f"no answer within {connect_timeout:g} s (timed out)",
                "is the host up? a firewall may drop the connection; for a slow host raise "
                "ssh.connect_timeout in the inventory")
    code = exc.errno if isinstance(exc, OSError) else None
    if isinstance(exc, ConnectionRefusedError) or code == errno.ECONNREFUSED:
        return ("connection refused (nothing listens on that port)",
                "start sshd on the host, or fix the port (inventory `port`, or Port in "
                "ssh_config)")
    if code in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        what = "no route to the host" if code == errno.EHOSTUNREACH else "network unreachable"
        return (what, "is the host up and on a network this machine reaches? check the "
                f"address and `ip route get {address}`")
    return None
