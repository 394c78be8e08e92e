"""boot_matches on bundles the real runner wrote on the GH200 twins (aarch64, 16 KiB pages):
two memboot runs of the twin-scale reclaim campaign whose boots the reboot gate had proven
(mem=355M: MemTotal 252,215,296; mem=455M: 351,764,480). Version 2 of the rule judged MemTotal
against [0.8 x, 1 x] of mem= and rejected both; version 3 uses the gate's own range for the
host's architecture, so the two checks of one fact cannot disagree."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.hosts.bootplan import memtotal_range
from bench.judge.bundle import load, read_dir
from bench.judge.retention import boot_matches

TWIN = Path(__file__).resolve().parents[1] / "fixtures" / "bundles" / "twin"
RUNS = ["reclaim-twin-twin-b-011", "reclaim-twin-twin-a-006"]


@pytest.mark.parametrize("rid", RUNS)
def test_a_proven_aarch64_memboot_passes_boot_matches(rid):
    b = load(read_dir(TWIN / rid), where=rid)
    assert b.spec["mechanism"] == "memboot" and b.host["arch"] == "aarch64"
    ok, why = boot_matches(b, {})
    assert ok, why
    cap = int(b.spec["expect_boot"]["mem"])
    total = b.host["mem_total_bytes"]
    assert total < 0.8 * cap                                  # what version 2 refused
    lo, hi = memtotal_range(cap, "aarch64")
    assert lo <= total <= hi


@pytest.mark.parametrize("total, arch, says", [
    (None, "aarch64", "outside"),                   # no MemTotal: not proven
    (456_000_000, "aarch64", "outside"),            # above mem=: the cap did not take
    (100_000_000, "aarch64", "outside"),            # far below: not the boot asked for
    (352_000_000, "sparc", "no MemTotal model"),    # an architecture bench has no model for
])
def test_a_memboot_outside_the_gate_range_is_rejected(total, arch, says):
    b = load(read_dir(TWIN / RUNS[1]), where=RUNS[1])
    b.host["mem_total_bytes"], b.host["arch"] = total, arch
    ok, why = boot_matches(b, {})
    assert not ok and says in why, why
