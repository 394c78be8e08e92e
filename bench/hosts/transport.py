"""One way to run commands on a host: run (argv, never a shell string), spawn (a long-running
command whose stdin stays open), put, get, close, timeouts.

`LocalTransport` runs on this machine with subprocess; `bench.hosts.ssh.SSHTransport` (the only
module that imports fabric/paramiko) runs over SSH. Both implement the whole `Transport`
protocol, so no caller needs to know which one it holds (`local` says whether commands run on
the controller's own machine, which safety checks need). Both raise the typed errors of
bench.errors (CommandFailed with stderr, CommandTimeout, Unreachable, AuthError, HostKeyError)
and return `Result`s. `get` copies at most a limit (GET_MAX unless the caller gives one);
the SSH side also bounds a command's output. Commands are argv lists; the SSH side quotes
every element with shlex, so no user string is ever pasted into a shell.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from bench.errors import CommandFailed, CommandTimeout, HostError, InputError

# bytes one `get` copies before it refuses the file: a bundle's archive within the judge's
# caps (bench.judge.bundle_files: 1 GiB of files, 100000 of them, each at most 1 KiB of tar
# header and padding) with room to spare; bench.execute.collect passes the bound its caps give
GET_MAX = 2 << 30


@dataclass(frozen=True)
class Result:
    host: str
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.rc == 0


def quote_argv(argv: Sequence[str]) -> str:
    """The one place an argv becomes a shell command line: every element shlex-quoted."""
    if not argv:
        raise InputError("empty command")
    for a in argv:
        if not isinstance(a, str):
            raise InputError(f"command arguments must be strings, got {a!r}")
        if "\0" in a:
            raise InputError("command arguments must not contain NUL bytes")
    return " ".join(shlex.quote(a) for a in argv)


def write_line(transport: "Transport", path: str, value: str, *, check: bool = True,
               timeout: float = 30.0) -> Result:
    """Write `value` and a newline to `path` on the host in one write(2): a sysfs store (THP
    modes, lru_gen) or a small stamp file. Not through stdin: invoke feeds a stdin stream to
    the channel one byte at a time, so `tee` could hand the kernel "m" and then "advise" (or a
    lone newline), each of which a sysfs store refuses (CI saw THP defrag stay `never` with
    tee's rc 1). Value and path travel as arguments, never pasted into the script."""
    return transport.run(["sh", "-c", 'printf "%s\\n" "$1" > "$2"', "bench-write", value, path],
                         timeout=timeout, check=check)


class Process(Protocol):
    """A long-running command (the host lock's holder): read its stdout lines, close its stdin
    to let it finish."""

    def readline(self, timeout: float = 30.0) -> str: ...

    def read_rest(self) -> str: ...

    def exit_status(self, timeout: float = 10.0) -> int | None: ...

    def close(self) -> None: ...


@runtime_checkable
class Transport(Protocol):
    host: str
    local: bool     # commands run on the controller's own machine

    def run(self, argv: Sequence[str], *, timeout: float | None = 60.0, check: bool = True,
            stdin: str | None = None, env: Mapping[str, str] | None = None) -> Result: ...

    def put(self, local: Path, remote: str) -> None: ...

    def get(self, remote: str, local: Path, *, limit: int | None = None) -> None: ...

    def spawn(self, argv: Sequence[str]) -> Process: ...

    def close(self) -> None: ...


class LocalProcess:
    """A long-running local command; its stdin stays open until close()."""

    def __init__(self, argv: Sequence[str]):
        self._p = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)

    def readline(self, timeout: float = 30.0) -> str:
        # the holder answers at once (or exits): a blocking read is bounded by its own exit
        assert self._p.stdout is not None
        return self._p.stdout.readline()

    def read_rest(self) -> str:
        assert self._p.stdout is not None and self._p.stderr is not None
        return self._p.stdout.read() + self._p.stderr.read()

    def exit_status(self, timeout: float = 10.0) -> int | None:
        try:
            return self._p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self) -> None:
        if self._p.stdin:
            self._p.stdin.close()
        try:
            self._p.wait(5)
        except subprocess.TimeoutExpired:
            self._p.kill()
            self._p.wait()


class LocalTransport:
    """This machine, through subprocess (no shell)."""

    local = True

    def __init__(self, host: str = "local"):
        self.host = host

    def run(self, argv: Sequence[str], *, timeout: float | None = 60.0, check: bool = True,
            stdin: str | None = None, env: Mapping[str, str] | None = None) -> Result:
        quote_argv(argv)  # same validation as the SSH side
        full_env = None if env is None else {**os.environ, **env}
        t0 = time.monotonic()
        try:
            p = subprocess.run(list(argv), input=stdin, capture_output=True, text=True,
                               timeout=timeout, env=full_env)
        except subprocess.TimeoutExpired:
            raise CommandTimeout(self.host, f"`{' '.join(argv)}` ran past {timeout}s") from None
        except FileNotFoundError:
            raise CommandFailed(self.host, list(argv), 127, f"{argv[0]}: not found") from None
        res = Result(self.host, tuple(argv), p.returncode, p.stdout, p.stderr,
                     time.monotonic() - t0)
        if check and p.returncode != 0:
            raise CommandFailed(self.host, list(argv), p.returncode, p.stderr)
        return res

    def put(self, local: Path, remote: str) -> None:
        Path(remote).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(local, remote)

    def get(self, remote: str, local: Path, *, limit: int | None = None) -> None:
        """Copy remote to local, at most `limit` bytes (default GET_MAX), as the SSH side."""
        limit = GET_MAX if limit is None else limit
        local.parent.mkdir(parents=True, exist_ok=True)
        seen = 0
        with open(remote, "rb") as src, open(local, "wb") as dst:
            while chunk := src.read(1 << 20):
                seen += len(chunk)
                if seen > limit:
                    break
                dst.write(chunk)
        if seen > limit:
            local.unlink(missing_ok=True)
            raise HostError(self.host, f"get {remote}: the file holds more than {limit} bytes: "
                            "refused (bench copies at most that much of it)")

    def spawn(self, argv: Sequence[str]) -> LocalProcess:
        quote_argv(argv)
        return LocalProcess(argv)

    def close(self) -> None:
        pass
