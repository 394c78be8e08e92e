"""Output paths a command writes: checked before any work is done, so a mistyped directory is
one line naming it (exit 2) instead of a traceback after minutes of work. bench never creates
a missing parent directory of an output file (no command here says it does): the fix is to
create it, as the message says. Failures while writing (a full disk) are
bench.plan.planfile.write_error's, naming the file."""

from __future__ import annotations

import os
from pathlib import Path

from bench.errors import InputError


def output_file(path: Path, option: str) -> Path:
    """`path` if a file can be written there: its directory exists and is writable, and the
    path is not itself a directory; InputError naming the option and path otherwise."""
    parent = path.parent
    where = f"{option} {path}"
    if not parent.exists():
        raise InputError(f"{where}: directory {parent} does not exist",
                         hint=f"create it first (mkdir -p {parent}) or write elsewhere")
    if not parent.is_dir():
        raise InputError(f"{where}: {parent} is not a directory")
    if path.is_dir():
        raise InputError(f"{where}: is a directory", hint="give a file name")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{where}: directory {parent} is not writable")
    return path
