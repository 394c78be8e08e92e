"""Does a lab scale keep the paper's regime? (issue: a ratio to host memory is not enough)

A scale maps each of the paper's capacities C to a lab capacity C'. What the paper's findings
rest on is each capacity's share of the working set, which the constant-free demand model
(bench.sim.demand) measures as the nominal miss fraction: misses of the measured pass over its
reads, LRU over one global pool. For every mapped capacity this compares the fraction of the
matrix's own workload at C with the scaled workload's at C'; a point is in regime when they
differ by at most TOLERANCE (absolute). TOLERANCE is below half the smallest gap between two
neighbouring paper points of the shipped matrices (0.172 at 448G, 0.223 at 339G: a gap of
0.050), so no lab point is in regime for two paper points at once (tests/unit/test_regime.py
computes the gap). Relative lab capacities (`0.1mem`) resolve with the scale's `memory` (the
host memory it is sized for) or the pool; without it such a point is reported as not checked.
Only capacities a mechanism enforces count (the ample `none` cells read everything from cache
in both).

The locked fraction is part of the regime (§5: the balloon+MGLRU excess at 64G, 81% of the host
locked, is not there at 93G, 74%): what a balloon or a pinned arena locks, as a share of the
host's memory, at C on the paper's 480 GB machines and at C' on the lab host. A balloon locks
MemAvailable - C (bench.matrix.balloon_host: the paper's host kept 27.2 GB for itself, the
figure at which its 64G balloon locks the measured 81%, and the 93G one models to 0.749 against
the measured 0.74), a pinned arena C, a hybrid's arena C/2. On the lab side a balloon's host is
the mem= its scale boots it with (`balloon_overhead`), else the scale's `memory` with the
host's own use left out (the scale names none). Without the scale's `memory` or a boot the
lab's share is not checked. Plans come from
bench.plan.prepared.workload_plan (cached in the data directory: the first check of a K3-scale
workload takes a few seconds)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.matrix.balloon_host import (MIN_BALLOON_BYTES, PAPER_MEMORY, locked_share,
                                       paper_locked_share)
from bench.matrix.load import Matrix, workload_pool_bytes
from bench.matrix.matrix_schema import parse_capacity
from bench.plan.planfile import read_plan
from bench.plan.prepared import workload_plan
from bench.sim.demand import demand
from bench.units import format_size

TOLERANCE = 0.02
# a locked share is in regime within this: below half the smallest gap between two of the
# paper's balloon points (0.81 at 64G vs 0.749 at 93G: 0.030), as TOLERANCE is for misses
LOCKED_TOLERANCE = 0.03
# what an arena locks, as a share of the host's memory (a balloon's: bench.matrix.balloon_host)
LOCKS = {"pinned": lambda c, mem: c / mem, "hybrid": lambda c, mem: c / 2 / mem}


def _status(difference: float | None, tolerance: float = TOLERANCE) -> str:
    return "not checked" if difference is None else "ok" if abs(difference) <= tolerance \
        else "out of regime"


@dataclass(frozen=True)
class LockedShare:
    kind: str                       # balloon | pinned | hybrid
    paper: float                    # share of the paper's host memory locked at C
    lab: float | None               # at C' of the lab host; None: no memory to size it
    boot: int | None = None         # the mem= a balloon's lab host boots with, if any

    @property
    def difference(self) -> float | None:
        return None if self.lab is None else self.lab - self.paper

    @property
    def status(self) -> str:
        return _status(self.difference, LOCKED_TOLERANCE)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "paper_locked_fraction": self.paper,
                "lab_locked_fraction": self.lab, "lab_boot_mem_bytes": self.boot,
                "difference": self.difference,
                "status": self.status}


@dataclass(frozen=True)
class RegimePoint:
    paper: str                      # the paper's capacity text
    lab: str                        # the scale's capacity text
    lab_bytes: int | None           # None: relative with nothing to resolve it
    paper_miss: float | None
    lab_miss: float | None
    locked: tuple[LockedShare, ...] = ()

    @property
    def difference(self) -> float | None:
        if self.paper_miss is None or self.lab_miss is None:
            return None
        return self.lab_miss - self.paper_miss

    @property
    def miss_status(self) -> str:
        return _status(self.difference)

    @property
    def status(self) -> str:
        """`ok` only when the miss fraction and every share it can check are in regime; an
        out-of-regime point names what is out (miss, locked)."""
        out = [w for w, s in [("miss", self.miss_status)] + [
            ("locked", x.status) for x in self.locked] if s == "out of regime"]
        if out:
            return "out of regime: " + ", ".join(dict.fromkeys(out))
        return self.miss_status

    def as_dict(self) -> dict:
        return {"paper": self.paper, "lab": self.lab, "lab_bytes": self.lab_bytes,
                "paper_miss_fraction": self.paper_miss, "lab_miss_fraction": self.lab_miss,
                "difference": self.difference, "miss_status": self.miss_status,
                "locked": [x.as_dict() for x in self.locked], "status": self.status}


def _resolve(text: str, memory: int | None, pool: int | None) -> int | None:
    _t, kind, value = parse_capacity(text)
    if kind == "abs":
        return int(value)
    base = memory if kind == "mem" else pool
    return None if base is None else int(value * base)


def _miss_fractions(workload: dict, capacities: list[int], data_dir: Path) -> list[float]:
    if not capacities:
        return []
    _info, path = workload_plan(workload, data_dir)
    return [1.0 - r["hit_rate"] for r in demand(read_plan(path), capacities)]


def _locked(scaled: Matrix, kinds: list[str], paper: int, lab_text: str, lab: int | None
            ) -> tuple[LockedShare, ...]:
    boot = dict(scaled.balloon_boots).get(lab_text)
    out = []
    for k in kinds:
        if k == "balloon":
            memory = boot or scaled.scale_memory
            lab_share = None if lab is None or memory is None else locked_share(
                lab, memory, scaled.balloon_overhead or 0)
            out.append(LockedShare(k, paper_locked_share(paper), lab_share, boot))
        else:
            out.append(LockedShare(k, LOCKS[k](paper, PAPER_MEMORY), None if lab is None or
                                   scaled.scale_memory is None else
                                   LOCKS[k](lab, scaled.scale_memory)))
    return tuple(out)


def _locking_kinds(scaled: Matrix, lab: str) -> list[str]:
    """The kinds of cell at a lab capacity that lock memory (a balloon, a pinned or hybrid
    arena), in the matrix's order."""
    kinds = [p.mechanism if p.mechanism == "balloon" else p.mode
             for p in scaled.points if p.capacity.text == lab]
    return list(dict.fromkeys(k for k in kinds if k in LOCKS or k == "balloon"))


def regime(scaled: Matrix, data_dir: Path) -> list[RegimePoint]:
    """One point per capacity the scale maps that a mechanism enforces; [] for an unscaled
    matrix or one whose workload is a fixed set (its regime is the set, not a miss curve)."""
    if not scaled.scale or not scaled.capacity_map or scaled.workload.get("fixed_set_bytes"):
        return []
    enforced = {p.capacity.text for p in scaled.points if p.mechanism != "none"}
    pairs = [(paper, lab) for paper, lab in scaled.capacity_map if lab in enforced]
    pool = workload_pool_bytes(scaled.workload)
    labs = [_resolve(lab, scaled.scale_memory, pool) for _p, lab in pairs]
    paper_bytes = [int(parse_capacity(p)[2]) for p, _l in pairs]
    paper_miss = _miss_fractions(dict(scaled.full_workload), paper_bytes, data_dir)
    checked = [b for b in labs if b is not None]
    lab_miss = iter(_miss_fractions(dict(scaled.workload), checked, data_dir))
    return [RegimePoint(paper, lab, b, pm, next(lab_miss) if b is not None else None,
                        _locked(scaled, _locking_kinds(scaled, lab), pb, lab, b))
            for (paper, lab), b, pb, pm in zip(pairs, labs, paper_bytes, paper_miss)]


def regime_lines(points: list[RegimePoint]) -> list[str]:
    """The table `bench matrix show --scale` prints under the cells."""
    if not points:
        return []
    out = [f"  regime       paper C vs lab C, in regime within {TOLERANCE:.2f}: the demand model's "
           "nominal miss fraction; under it the share of the host's memory a balloon or arena "
           f"locks (within {LOCKED_TOLERANCE:.2f})"]
    for p in points:
        lab = p.lab + (f" = {p.lab_bytes / 1e6:.0f}M" if p.lab_bytes and p.lab != format_size(
            p.lab_bytes) else "")
        pm = "-" if p.paper_miss is None else f"{p.paper_miss:.3f}"
        lm = "-" if p.lab_miss is None else f"{p.lab_miss:.3f}"
        out.append(f"    {p.paper:>6} {pm:>6}  ->  {lab:<18} {lm:>6}  {p.status}")
        for x in p.locked:
            lx = "-" if x.lab is None else f"{x.lab:.3f}"
            why = "" if x.boot is None else f" (boots mem={format_size(x.boot)})"
            if x.lab is None:
                why = " (the scale names no memory)"
            elif x.boot is not None and x.lab > x.paper + LOCKED_TOLERANCE:
                why = (f" (boots mem={format_size(x.boot)}: a lab balloon locks at least "
                       f"{format_size(MIN_BALLOON_BYTES)})")
            out.append(f"      {x.kind + ' locks':<14}{x.paper:.3f}  ->  {'':<18} {lx:>6}  "
                       f"{x.status}{why}")
    return out


def no_scale_reason(m: Matrix) -> str | None:
    """Why a shipped matrix can have no lab scale, or None when it could have one: an engine
    matrix runs a configured engine whose model a lab host cannot hold; one whose capacities
    are all fractions of the host (or the pool) already runs on any host, and has no paper
    capacity whose regime a scale would keep."""
    if m.engine is not None and not m.scales:
        return ("it runs a configured inference engine, not the agent: a lab scale needs an "
                "engine and a model small enough for a lab host (the shipped end-to-end "
                "matrix's built-in engine is one)")
    if m.points and all(p.capacity.kind != "abs" for p in m.points):
        return ("its capacities are fractions of the host's memory: it runs as it is on any "
                "host, lab ones included, and has no paper capacity whose regime a scale keeps")
    return None


def engine_lines(scaled: Matrix) -> list[str]:
    """An engine matrix's regime (§9, Table 3): ample capacity at every scale, no mechanism,
    so the regime is the model fitting in the host's memory on both sides; the pairs compare
    admission, not a capacity."""
    if not scaled.scale or scaled.engine is None:
        return []
    arms = [x for x in scaled.engine.as_dict().get("capacities", [])]
    return ["  regime       ample capacity at every scale (no mechanism): the model fits in "
            "the host's memory, as the paper's did in machine B's 480 GB; the pairs compare "
            "page-cache admission against none"
            + (f"; the arms {', '.join(arms)} are the engine's capacities as written (its "
               "model does not change with the scale)" if arms else "")]


def fixed_set_lines(scaled: Matrix) -> list[str]:
    """A fixed-set matrix's regime (§9): no mechanism enforces C, the set is read at ample
    capacity, so the regime is the set fitting in C (all hits after the warm-up in the page
    cache) on both sides: the paper's set against its C, the lab's against its C' (a fraction
    of the host's memory: the least host memory that holds it)."""
    lab_set, paper_set = (w.get("fixed_set_bytes") for w in (scaled.workload,
                                                            scaled.full_workload))
    if not scaled.scale or not lab_set or not paper_set:
        return []
    out = []
    for paper, lab in scaled.capacity_map:
        _t, kind, value = parse_capacity(lab)
        fits = paper_set < parse_capacity(paper)[2]
        where = (f"fits in {lab}" if kind == "abs" and lab_set < value else
                 f"fits in {lab} on hosts above {lab_set / value / 1e6:.0f} MB"
                 if kind == "mem" else f"does not fit in {lab}")
        out.append(f"  regime       a fixed set at ample capacity (no miss curve): the paper's "
                   f"{paper_set / 1e9:.1f} GB {'fits' if fits else 'does not fit'} in "
                   f"{paper}; the lab's {lab_set / 1e6:.0f} MB {where}")
    return out
