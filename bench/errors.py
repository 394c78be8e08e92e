"""Typed errors. Library code raises these; only the CLI turns them into a message and an exit
code."""

from __future__ import annotations


class BenchError(Exception):
    """Base of every error bench reports to a user. `hint` says how to fix it."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class InputError(BenchError):
    """Bad user input: a file, an option or a value that cannot be used."""

    exit_code = 2


class TraceError(InputError):
    """A malformed trace record; the message names file and line."""

    def __init__(self, path: str, line: int | None, message: str, hint: str | None = None):
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}", hint)
        self.path = path
        self.line = line


class FormatError(InputError):
    """A binary or JSON file (plan, pool manifest) that does not follow docs/formats.md."""


class PoolError(BenchError):
    """A pool directory that cannot be created, resumed or used."""


class HostError(BenchError):
    """Something went wrong on or on the way to a host; carries the host's name."""

    def __init__(self, host: str, message: str, hint: str | None = None):
        super().__init__(f"{host}: {message}", hint)
        self.host = host


class Unreachable(HostError):
    """No connection (refused, no route, DNS, banner timeout)."""


class AuthError(HostError):
    """The host refused our credentials."""


class HostKeyError(HostError):
    """The host's key is unknown or does not match known_hosts."""


class UnknownHostKey(HostKeyError):
    """No key is pinned for the host in its known_hosts file (`bench hosts trust HOST`)."""


class ChangedHostKey(HostKeyError):
    """known_hosts pins other keys for the host (of any type) than the one it offers: a
    possible man-in-the-middle. `old` holds the pinned keys as 'type SHA256:...', `new` the
    offered one."""

    def __init__(self, host: str, message: str, hint: str | None = None, *,
                 old: tuple[str, ...] = (), new: str = ""):
        super().__init__(host, message, hint)
        self.old = old
        self.new = new


class RevokedHostKey(HostKeyError):
    """The host offers a key that known_hosts marks @revoked: never accepted."""


class CommandTimeout(HostError):
    """A remote or local command ran past its timeout."""


class CommandFailed(HostError):
    """A command exited non-zero; carries argv, exit code and stderr."""

    def __init__(self, host: str, argv: list[str], rc: int, stderr: str, hint: str | None = None):
        tail = stderr.strip().splitlines()[-5:] if stderr else []
        detail = (": " + " | ".join(tail)) if tail else ""
        super().__init__(host, f"`{' '.join(argv)}` exited {rc}{detail}", hint)
        self.argv = argv
        self.rc = rc
        self.stderr = stderr


class InventoryError(InputError):
    """A hosts/*.toml file that does not validate; names file, key and allowed values."""


class SafetyError(BenchError):
    """A refused destructive step (reboot of a non-rebootable host, mem= below the floor...)."""


def error_data(exc: BaseException, output: int | None = None) -> dict:
    """An exception as data, for per-host results that carry errors instead of raising them:
    type, message, hint; with `output`, also the last `output` characters of a failed
    command's stderr (0: all of it)."""
    if isinstance(exc, BenchError):
        d = {"type": type(exc).__name__, "message": exc.message, "hint": exc.hint}
    else:
        d = {"type": type(exc).__name__, "message": str(exc), "hint": None}
    if output is not None and isinstance(exc, CommandFailed):
        d["output"] = (exc.stderr or "")[-output:] if output else exc.stderr
    return d
