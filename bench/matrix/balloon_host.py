"""A lab host sized like the paper's for its balloons: the locked share is part of the regime.

A balloon locks MemAvailable - C, so the share of the host it locks depends on the host's
memory. The paper's 480 GB hosts locked 81% at C = 64G and 74% at 93G (§5, Fig. 3 middle), and
§5's finding (MGLRU amplifies balloon pressure at 81% locked, not at 74%) rests on that share;
a 1536 MiB lab guest locks 0.83-0.84 at the lab's 64G point but also about 0.75 at its 448G
point, where the paper's host locked 1%. A lab scale that names a `balloon_overhead` therefore
boots each balloon cell's host with the mem= at which its balloon locks the paper's share:

    share(C, M) = (M - u(M) - C) / M       what MemAvailable - C is of MemTotal M
    u(M) = min(OVERHEAD_FRACTION x M, overhead)     what the host keeps for itself

The lab's u was measured on the vm lab's guests as MemTotal less MemAvailable when the runner
sized the balloon (reclaim --scale lab, one run per point and guest): 92-94 MB at mem=347M (two
guests), 88 MB at MemTotal 433.5 MB, 128-168 MB at MemTotal 1107-1144 MB, 155 MB at 1532 MB (the
full guest): about a quarter of a small memory, a constant of a large one, hence
OVERHEAD_FRACTION 0.26 and the vm lab's overhead 160M. The paper's is what its host kept
outside its balloon and C: 480 GB x (1 - 0.81) - 64 GB = 27.2 GB, from the 81% measured at 64G
(the 93G point then models to 0.749 against the measured 0.74). mem= is set to the MemTotal
wanted: the boot's MemTotal lies up to 6% below it, which moves the measured share by about
0.02 (tests/vm/test_campaign_vm.py prints and checks the measured locked fraction of every
balloon run: 0.784-0.819 at 64G's mem=1422M, 0.718-0.760 at 93G's 1179M). A balloon smaller
than MIN_BALLOON_BYTES is sized as MIN_BALLOON_BYTES: the host's own use varies from boot to
boot (MemTotal less MemAvailable at mem=376M: 89.7 MB on one guest, 109.3 MB on the other, in
the same campaign, 8 MB of it anonymous memory), and a balloon the variation takes below zero
cannot start. The paper's 448G balloon locked 1% of its host, 4.8 GB; 1% of a 376 MB guest is
3.8 MB, inside that variation (the former floor, 3.5% or 13 MB, left the 265M balloon of one
guest 2.2 MB short: MemAvailable 262.8 MB). The lab's 448G point therefore locks about 10%
(`bench matrix show --scale lab` says its locked share is out of regime), still a near-empty
balloon beside the 74-81% that §5's finding compares. Without
a `balloon_overhead` a scale's balloons run at the host's full memory and the regime check
compares their share with the scale's `memory`, the host's own use left out."""

from __future__ import annotations

import math

from bench.matrix.matrix_schema import parse_capacity

PAPER_MEMORY = 480 * 10**9          # machines A and B, 480 GB GH200s (inventory memory.total)
PAPER_LOCKED_64G = 0.81             # §5: the balloon at C = 64G locked 81% of the host
PAPER_BALLOON_OVERHEAD = round(PAPER_MEMORY * (1 - PAPER_LOCKED_64G)) - 64 * 10**9
OVERHEAD_FRACTION = 0.26            # a small host keeps this share of itself (measured above)
MIN_BALLOON_BYTES = 40 * 10**6      # the least a lab balloon locks: twice the spread above


def locked_share(capacity: int | float, memory: int | float, overhead: int | float = 0
                 ) -> float:
    """The share of `memory` a balloon locks that leaves `capacity` available on a host that
    keeps u = min(OVERHEAD_FRACTION x memory, overhead) for itself (at least 0: a host with no
    room for a balloon locks none)."""
    u = min(OVERHEAD_FRACTION * memory, overhead)
    return max(0.0, (memory - u - capacity) / memory)


def paper_locked_share(capacity: int) -> float:
    """What the paper's balloon at `capacity` locked of its 480 GB host (the model above)."""
    return locked_share(capacity, PAPER_MEMORY, PAPER_BALLOON_OVERHEAD)


def balloon_host_memory(paper_capacity: int, lab_capacity: int, lab_overhead: int) -> int:
    """The mem= (bytes, rounded up to a whole decimal MB) at which a lab balloon at
    `lab_capacity` locks the share the paper's did at `paper_capacity`, or MIN_BALLOON_BYTES
    where that share is less."""
    share = paper_locked_share(paper_capacity)
    room = 1 - OVERHEAD_FRACTION - share
    small = lab_capacity / room if room > 0 else math.inf      # u = a share of the host
    exact = small if OVERHEAD_FRACTION * small <= lab_overhead else \
        (lab_capacity + lab_overhead) / (1 - share)             # u = the overhead
    if exact - min(OVERHEAD_FRACTION * exact, lab_overhead) - lab_capacity < MIN_BALLOON_BYTES:
        floor = lab_capacity + MIN_BALLOON_BYTES                 # what the host must hold
        small = floor / (1 - OVERHEAD_FRACTION)
        exact = small if OVERHEAD_FRACTION * small <= lab_overhead else floor + lab_overhead
    return math.ceil(exact / 10**6) * 10**6


def lab_locked_share(paper_capacity: int, lab_capacity: int, lab_overhead: int) -> float:
    """The share of its host a lab balloon is sized to lock (what the paper's locked, or the
    floor's share)."""
    mem = balloon_host_memory(paper_capacity, lab_capacity, lab_overhead)
    return locked_share(lab_capacity, mem, lab_overhead)


def balloon_boots(capacity_map: tuple[tuple[str, str], ...], balloon_capacities: set[str],
                  overhead: int) -> tuple[tuple[str, int], ...]:
    """The mem= of each balloon capacity of a scaled matrix, (lab capacity text, bytes) in the
    map's order; a ValueError names a balloon capacity that no absolute paper capacity maps to
    an absolute lab one (its host cannot be sized)."""
    out = {}
    for paper, lab in capacity_map:
        _t, kind, value = parse_capacity(lab)
        if lab in balloon_capacities and kind == "abs":
            out[lab] = balloon_host_memory(int(parse_capacity(paper)[2]), int(value), overhead)
    missing = sorted(balloon_capacities - set(out))
    if missing:
        raise ValueError(f"balloon capacity {missing[0]} has no absolute paper capacity mapped "
                         "to it as an absolute lab capacity: balloon_overhead cannot size its "
                         "host")
    return tuple(out.items())
