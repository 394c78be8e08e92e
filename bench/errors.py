"""Typed errors. Library code raises these; only the CLI turns them into a message and an exit code."""

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
