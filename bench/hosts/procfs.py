"""Pure parsers of /proc, /sys and cgroup files, as captured in snapshots or read by probes.

Each takes the file's text and returns plain data; tests feed them captured real files
(tests/fixtures/procfs/). Units are converted to bytes where the kernel gives KiB.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from bench.errors import FormatError

SECTOR_BYTES = 512


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo -> {field: bytes} (fields given in kB are converted; HugePages_* counts)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, _, rest = line.partition(":")
        parts = rest.split()
        if not parts:
            raise FormatError(f"meminfo line without a value: {line!r}")
        value = int(parts[0])
        out[key.strip()] = value * 1024 if len(parts) > 1 and parts[1] == "kB" else value
    return out


@dataclass(frozen=True)
class DiskStat:
    major: int
    minor: int
    name: str
    reads: int
    reads_merged: int
    sectors_read: int
    ms_reading: int
    writes: int
    writes_merged: int
    sectors_written: int
    ms_writing: int
    in_flight: int
    io_ms: int
    weighted_io_ms: int

    @property
    def bytes_read(self) -> int:
        return self.sectors_read * SECTOR_BYTES

    @property
    def devno(self) -> str:
        return f"{self.major}:{self.minor}"


def parse_diskstats(text: str) -> dict[str, DiskStat]:
    """/proc/diskstats -> {device name: DiskStat}; discard/flush fields are ignored."""
    out = {}
    for line in text.splitlines():
        f = line.split()
        if not f:
            continue
        if len(f) < 14:
            raise FormatError(f"diskstats line with {len(f)} fields: {line!r}")
        nums = [int(x) for x in f[3:14]]
        out[f[2]] = DiskStat(int(f[0]), int(f[1]), f[2], *nums)
    return out


def parse_psi(text: str) -> dict[str, dict[str, float]]:
    """/proc/pressure/* -> {"some": {"avg10", "avg60", "avg300", "total"}, "full": {...}};
    total is cumulative microseconds."""
    out: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        kind = parts[0]
        vals = {}
        for kv in parts[1:]:
            k, _, v = kv.partition("=")
            vals[k] = int(v) if k == "total" else float(v)
        out[kind] = vals
    return out


def parse_flat_keyed(text: str) -> dict[str, int]:
    """'key value' lines -> {key: int}: /proc/vmstat (pages or events; pgpgin/pgpgout are KiB)
    and cgroup flat-keyed files (memory.stat, memory.events, memory.oom_control)."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            out[parts[0]] = int(parts[1])
    return out


parse_vmstat = parse_flat_keyed


def parse_cgroup_value(text: str) -> int | None:
    """A single-value cgroup file (memory.current, memory.max, limit_in_bytes): 'max' -> None."""
    value = text.strip()
    if value == "max":
        return None
    try:
        return int(value)
    except ValueError:
        raise FormatError(f"cgroup value {value!r} is not a number or 'max'") from None


def parse_lru_gen(text: str) -> int:
    """/sys/kernel/mm/lru_gen/enabled ('0x0007') -> mask; the main switch is bit 0x0001."""
    value = text.strip()
    if not re.fullmatch(r"0x[0-9a-fA-F]+", value):
        raise FormatError(f"lru_gen/enabled {value!r} is not a hex mask")
    return int(value, 16)


def mglru_on(mask: int | None) -> bool | None:
    return None if mask is None else bool(mask & 0x1)


def parse_cmdline(text: str) -> list[str]:
    """/proc/cmdline -> arguments (quoted values kept whole)."""
    return shlex.split(text.strip())


def cmdline_param(args: list[str], name: str) -> str | None:
    """The last value of name=VALUE on the command line (the kernel uses the last one)."""
    found = None
    for a in args:
        key, eq, value = a.partition("=")
        if key == name and eq:
            found = value
    return found


def parse_status(text: str) -> dict[str, str]:
    """/proc/PID/status -> {field: raw value}."""
    out = {}
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if sep:
            out[key.strip()] = rest.strip()
    return out


def status_bytes(status: dict[str, str], field: str) -> int | None:
    """A kB field of /proc/PID/status (VmLck, VmRSS...) in bytes; None when absent."""
    raw = status.get(field)
    if raw is None:
        return None
    parts = raw.split()
    return int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
