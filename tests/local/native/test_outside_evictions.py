"""The warm-pass guard of the native and runner tests tells a cache emptied from outside (a
drop_caches by another process on this shared kernel) from a warm pass that really read the
device: on the real /proc/vmstat, around a real drop."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support import nativelib as nl

pytestmark = pytest.mark.root


def snap(d: Path, side: str) -> None:
    (d / f"pass1-{side}").mkdir(parents=True)
    (d / f"pass1-{side}" / "proc_vmstat").write_text(Path("/proc/vmstat").read_text())


def test_a_drop_during_the_pass_is_counted_and_names_the_skip(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("needs root to write /proc/sys/vm/drop_caches")
    if "drop_pagecache" not in Path("/proc/vmstat").read_text():
        pytest.skip("this kernel's /proc/vmstat has no drop_pagecache counter")
    quiet, dropped = tmp_path / "quiet", tmp_path / "dropped"
    snap(quiet, "start")
    snap(quiet, "end")
    snap(dropped, "start")
    Path("/proc/sys/vm/drop_caches").write_text("1")
    snap(dropped, "end")
    assert nl.cache_drops(dropped, 1) >= 1
    # a warm pass over the slack is judged (no skip) unless something outside emptied the cache
    if nl.cache_drops(quiet, 1) == 0 and nl.reclaimed_pages(quiet, 1) == 0:
        nl.skip_if_evicted_from_outside(quiet, 1, 1 << 20, 256 << 10)    # returns: a failure
    with pytest.raises(pytest.skip.Exception, match="dropped its page cache"):
        nl.skip_if_evicted_from_outside(dropped, 1, 1 << 20, 256 << 10)
    nl.skip_if_evicted_from_outside(dropped, 1, 100, 256 << 10)         # under the slack: judged
