"""Files and /proc: atomic writes, JSON, sha256, and the /proc readers the runner needs.

Files the runner creates are 0600 (PRIVATE_FILE) whatever the umask: a run bundle holds
copies of what the host may restrict (the kernel log where dmesg_restrict is set, command
lines, process tables), so it stays private to the runner's user (bundle.py)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from datetime import datetime, timezone
from typing import Any

PRIVATE_FILE, PRIVATE_DIR = 0o600, 0o700


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


def read_or_none(path: str) -> str | None:
    try:
        return read_text(path)
    except OSError:
        return None


def open_private(path: str, mode: str = "w") -> Any:
    """open() for writing; a file it creates is 0600 (an existing one keeps its mode: /proc,
    /sys and cgroup files are written through here too)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_APPEND if "a" in mode
                                                      else os.O_TRUNC)
    return os.fdopen(os.open(path, flags, PRIVATE_FILE), mode)


def write_file(path: str, text: str) -> None:
    with open_private(path) as f:
        f.write(text)


def write_atomic(path: str, text: str) -> None:
    """Temp file in the same directory, fsync, rename: readers see the old or the new text."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open_private(tmp) as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json(path: str, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=1, sort_keys=False) + "\n")


def _write_synced(path: str, text: str) -> None:
    """Write and fsync; an error names the file (a failed write or flush does not)."""
    try:
        with open_private(path) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        if e.filename:
            raise
        raise OSError(e.errno, e.strerror, path) from e


def create_dir_atomic(final: str, staging: str, files: dict[str, str]) -> None:
    """Create the directory `final` (0700) holding `files` (name -> text) at once: written into
    a fresh directory under `staging` (same file system), each file fsynced, then renamed into
    place. On any error (a full disk: ENOSPC) the staged directory is removed and the error
    raised: `final` exists complete or not at all."""
    os.makedirs(staging, PRIVATE_DIR, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=os.path.basename(final) + ".", dir=staging)   # 0700
    try:
        for name, text in files.items():
            _write_synced(os.path.join(tmp, name), text)
        os.rename(tmp, final)
    except BaseException:   # any failure (a full disk, a signal): remove the staged copy
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fd = os.open(os.path.dirname(final), os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)        # the rename itself reaches the disk
    except OSError:
        pass                # the directory is in place; a failed flush changes nothing here
    finally:
        os.close(fd)


def clear_staging(staging: str) -> None:
    """Remove what a start killed mid-way left under `staging` (the caller holds the start
    lock: no start is staging now)."""
    if os.path.isdir(staging):
        for name in os.listdir(staging):
            shutil.rmtree(os.path.join(staging, name), ignore_errors=True)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def strip_deleted(exe: str) -> str:
    """/proc/PID/exe of a replaced file ends in ' (deleted)' (str.removesuffix is 3.9+)."""
    suffix = " (deleted)"
    return exe[:-len(suffix)] if exe.endswith(suffix) else exe


def _kb_value(text: str) -> int:
    parts = text.split()
    return int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)


def meminfo() -> dict[str, int]:
    out = {}
    for line in read_text("/proc/meminfo").splitlines():
        key, _, rest = line.partition(":")
        if rest.split():
            out[key.strip()] = _kb_value(rest)
    return out


def parse_status(text: str) -> dict[str, str]:
    """/proc/PID/status text -> {field: value}."""
    return {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in text.splitlines())}


def proc_status(pid: int) -> dict[str, str] | None:
    text = read_or_none(f"/proc/{pid}/status")
    return None if text is None else parse_status(text)


def status_bytes(st: dict[str, str] | None, key: str) -> int | None:
    if not st or key not in st:
        return None
    return _kb_value(st[key])


def proc_starttime(pid: int) -> int | None:
    text = read_or_none(f"/proc/{pid}/stat")
    if text is None:
        return None
    return int(text[text.rindex(")") + 2:].split()[19])


def snap_name(path: str) -> str:
    """The agent's naming: '/' -> '_', the leading '_' dropped (/proc/diskstats ->
    proc_diskstats)."""
    name = path.replace("/", "_")
    return name[1:] if name.startswith("_") else name


def exit_fields(rc: int) -> tuple[int | None, int | None]:
    """A Popen returncode as (exit_code, signal): one of them is None."""
    return (rc, None) if rc >= 0 else (None, -rc)


def last_line(path: str) -> str:
    lines = (read_or_none(path) or "").strip().splitlines()
    return lines[-1] if lines else "(no output)"
