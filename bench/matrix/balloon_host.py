"""A lab host sized like the paper's for its balloons: the locked share is part of the regime.

A balloon locks MemAvailable - C, so the share of the host it locks depends on the host's
memory. The paper's 480 GB hosts locked 81% at C = 64G and 74% at 93G (§5, Fig. 3 middle), and
§5's finding (MGLRU amplifies balloon pressure at 81% locked, not at 74%) rests on that share;
a 1536 MiB lab guest locks about 86% at the lab's 64G point but also 76% at its 448G point,
where the paper's host locked 1%. A lab scale that names a `balloon_overhead` therefore boots
each balloon cell's host with the mem= at which its balloon locks the paper's share:

    share(C, M, overhead) = (M - overhead - C) / M        what MemAvailable - C is of M
    mem' = (C' + overhead') x PAPER_MEMORY / (C + PAPER_BALLOON_OVERHEAD)

so share(C', mem', overhead') = share(C, PAPER_MEMORY, PAPER_BALLOON_OVERHEAD) by
construction; the runs' measured locked fraction (Mlocked / MemTotal at loop entry) is what
shows whether the lab's overhead was right (tests/vm/test_campaign_vm.py prints and checks
it). PAPER_BALLOON_OVERHEAD is what the paper's host kept outside its balloon and C: 480 GB x
(1 - 0.81) - 64 GB = 27.2 GB, from the 81% measured at 64G; the 93G point then models to 0.749
against the measured 0.74. A lab's overhead is measured the same way: the boot's mem= less
MemAvailable when the runner sizes the balloon (the kernel, the guest's processes, the runner
and the agent). Without a `balloon_overhead` a scale's balloons run at the host's full memory
and the regime check compares their share with the scale's `memory` and no overhead."""

from __future__ import annotations

import math

from bench.matrix.matrix_schema import parse_capacity

PAPER_MEMORY = 480 * 10**9          # machines A and B, 480 GB GH200s (inventory memory.total)
PAPER_LOCKED_64G = 0.81             # §5: the balloon at C = 64G locked 81% of the host
PAPER_BALLOON_OVERHEAD = round(PAPER_MEMORY * (1 - PAPER_LOCKED_64G)) - 64 * 10**9


def locked_share(capacity: int | float, memory: int | float, overhead: int | float = 0
                 ) -> float:
    """The share of `memory` a balloon locks that leaves `capacity` available on a host that
    keeps `overhead` for itself (at least 0: a host with no room for a balloon locks none)."""
    return max(0.0, (memory - overhead - capacity) / memory)


def paper_locked_share(capacity: int) -> float:
    """What the paper's balloon at `capacity` locked of its 480 GB host (the model above)."""
    return locked_share(capacity, PAPER_MEMORY, PAPER_BALLOON_OVERHEAD)


def balloon_host_memory(paper_capacity: int, lab_capacity: int, lab_overhead: int) -> int:
    """The mem= (bytes, rounded up to a whole decimal MB) at which a lab balloon at
    `lab_capacity` locks the share the paper's did at `paper_capacity`."""
    exact = (lab_capacity + lab_overhead) * PAPER_MEMORY / (paper_capacity
                                                            + PAPER_BALLOON_OVERHEAD)
    return math.ceil(exact / 10**6) * 10**6


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
