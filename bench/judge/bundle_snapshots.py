"""The raw /proc and cgroup copies of a bundle's snapshots, checked as far as bench reads them
(bench.judge.counters, the MGLRU mask, VmLck): each file the counters come from parses as the
kernel writes it, every value bench keeps is a counter the store can hold (0..2^63-1, the
kernel's counters are unsigned) and every key fits the store's column. A file bench does not
read (cmdline, boot_id, `.err` notes) is raw text, bounded by the caps only. Pure."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator

from bench.errors import FormatError
from bench.hosts.procfs import (parse_cgroup_value, parse_diskstats, parse_flat_keyed,
                                parse_lru_gen, parse_meminfo, parse_psi, parse_status,
                                status_bytes)
from bench.judge.bundle_files import BundleError
from bench.judge.counters import CGROUP_KEYED, CGROUP_SINGLE

INT63 = (1 << 63) - 1
MAX_KEY = 96                # counter_deltas.key is 128 characters: "{file}.{key}" must fit
_STATUS = re.compile(r"^(proc_self_status|balloon_status|proc_[0-9]+_status)$")
Values = Iterator[tuple[str, float | None]]


def _diskstats(text: str) -> Values:
    for name, d in parse_diskstats(text).items():
        for field in ("major", "minor", "reads", "sectors_read", "ms_reading", "writes",
                      "sectors_written"):
            yield f"{name}.{field}", getattr(d, field)


def _psi(text: str) -> Values:
    for kind, vals in parse_psi(text).items():
        for k, v in vals.items():
            yield f"{kind}.{k}", v


def _status(text: str) -> Values:
    yield "VmLck", status_bytes(parse_status(text), "VmLck")


def _single(text: str) -> Values:
    yield "value", parse_cgroup_value(text)


def _lru_gen(text: str) -> Values:
    yield "mask", parse_lru_gen(text)


def reader(name: str) -> tuple[str, Callable[[str], Values]] | None:
    """(what the file is, its values) for a snapshot file bench reads, else None."""
    if name.endswith(".err"):
        return None
    if name == "proc_diskstats":
        return "/proc/diskstats", _diskstats
    if name in ("proc_meminfo", "proc_vmstat"):
        parse = parse_meminfo if name == "proc_meminfo" else parse_flat_keyed
        return f"/proc/{name[5:]}", lambda text: iter(parse(text).items())
    if name.startswith("proc_pressure_"):
        return "/proc/pressure", _psi
    if _STATUS.fullmatch(name):
        return "/proc/PID/status", _status
    if name == "sys_kernel_mm_lru_gen_enabled":
        return "lru_gen/enabled", _lru_gen
    for cg in CGROUP_KEYED:
        if name == cg or name.endswith("_" + cg):
            return cg, lambda text: iter(parse_flat_keyed(text).items())
    for cg in CGROUP_SINGLE:
        if name == cg or name.endswith("_" + cg):
            return cg, _single
    return None


def check_snapshot(where: str, rel: str, text: str) -> None:
    """BundleError naming the file (and key) when a snapshot file bench reads is not what
    the kernel writes."""
    found = reader(rel.rsplit("/", 1)[-1])
    if found is None:
        return
    what, values = found
    try:
        items = list(values(text))
    except (FormatError, ValueError, IndexError) as exc:
        msg = exc.message if isinstance(exc, FormatError) else str(exc)
        raise BundleError(where, rel, f"not {what} text ({msg[:120]})") from None
    for key, v in items:
        if len(key) > MAX_KEY:
            raise BundleError(where, rel, f"key '{key[:40]}...': longer than {MAX_KEY}")
        if v is not None and (not math.isfinite(v) or v < 0 or v > INT63):
            raise BundleError(where, rel, f"key '{key}': {v!r:.40} is not a counter "
                              "(0..2^63-1)")
