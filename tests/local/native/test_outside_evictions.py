"""The warm-pass guard of the native and runner tests tells a cache emptied from outside (a
drop_caches by another process on this shared kernel, reclaim the hypervisor's balloon or
DAMON drives) from a warm pass that really read the device: on the real /proc/vmstat, around
a real drop and a real reclaim."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import nativelib as nl

pytestmark = pytest.mark.root

MiB = 1 << 20


def snap(d: Path, side: str, p: int = 1) -> None:
    (d / f"pass{p}-{side}").mkdir(parents=True)
    (d / f"pass{p}-{side}" / "proc_vmstat").write_text(Path("/proc/vmstat").read_text())


def test_a_drop_during_the_pass_is_counted_and_names_the_skip(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to write /proc/sys/vm/drop_caches")
    if "drop_pagecache" not in Path("/proc/vmstat").read_text():
        pytest.skip("this kernel's /proc/vmstat has no drop_pagecache counter")
    quiet, dropped = tmp_path / "quiet", tmp_path / "dropped"
    for d in (quiet, dropped):
        snap(d, "start", 0)
        snap(d, "end", 0)
    snap(quiet, "start")
    snap(quiet, "end")
    snap(dropped, "start")
    Path("/proc/sys/vm/drop_caches").write_text("1")
    snap(dropped, "end")
    assert nl.cache_drops(dropped, 1) >= 1
    # a warm pass over the slack is judged (no skip) unless something outside emptied the cache
    if nl.cache_drops(quiet, 1) == 0 and nl.reclaimed_pages(quiet, 1, since=0) == 0 \
            and nl.refaulted_pages(quiet, 1) == 0:
        nl.skip_if_evicted_from_outside(quiet, 1, 1 << 20, 256 << 10)    # returns: a failure
    with pytest.raises(pytest.skip.Exception, match="dropped 1 time"):
        nl.skip_if_evicted_from_outside(dropped, 1, 1 << 20, 256 << 10)
    nl.skip_if_evicted_from_outside(dropped, 1, 100, 256 << 10)         # under the slack: judged


def _memory_cgroup_v1() -> Path | None:
    for fstype, mnt, opts in nl._cgroup_mounts():
        if fstype == "cgroup" and "memory" in opts and Path(mnt, "memory.limit_in_bytes").exists():
            return Path(mnt)
    return None


def test_reclaim_before_the_warm_pass_is_seen_as_refaults(tmp_path):
    """A file read in a 16 MiB memory cgroup, 48 MiB of it, is reclaimed as it is read (the
    cold pass); reading it again (the warm pass) refaults its reclaimed pages: the guard names
    both the reclaim since the cold pass and the refaults, though the warm pass itself may
    reclaim nothing more that it did not refault."""
    if os.geteuid() != 0:
        pytest.skip("needs root for a memory cgroup")
    root = _memory_cgroup_v1()
    if root is None:
        pytest.skip("no cgroup v1 memory controller (memory.limit_in_bytes) on this machine")
    data = tmp_path / "data"
    data.write_bytes(os.urandom(48 * MiB))
    os.sync()
    cg = root / f"bench-refault-{os.getpid()}"
    cg.mkdir()
    d = tmp_path / "snap"

    def read_in_cgroup() -> None:    # a child moved into the cgroup reads the file whole
        nl.subprocess.run(["sh", "-c", 'echo $$ > "$1/cgroup.procs" && exec cat "$2" >/dev/null',
                           "sh", str(cg), str(data)], check=True)
    try:
        (cg / "memory.limit_in_bytes").write_text(str(16 * MiB))
        nl.drop_caches()
        for p in (0, 1):             # the cold pass, then the warm pass
            snap(d, "start", p)
            read_in_cgroup()
            snap(d, "end", p)
    finally:
        cg.rmdir()                   # v1 moves the remaining charges to the parent
    assert nl.reclaimed_pages(d, 1, since=0) >= (48 - 16) * MiB // nl.os.sysconf("SC_PAGE_SIZE")
    assert nl.refaulted_pages(d, 1) > 0
    with pytest.raises(pytest.skip.Exception, match=r"reclaimed \d+ pages during the replay"):
        nl.skip_if_evicted_from_outside(d, 1, 48 * MiB, 256 << 10)
