"""Does a lab scale keep the paper's regime? (issue: a ratio to host memory is not enough)

A scale maps each of the paper's capacities C to a lab capacity C'. What the paper's findings
rest on is each capacity's share of the working set, which the constant-free demand model
(bench.sim.demand) measures as the nominal miss fraction: misses of the measured pass over its
reads, LRU over one global pool. For every mapped capacity this compares the fraction of the
matrix's own workload at C with the scaled workload's at C'; a point is in regime when they
differ by at most TOLERANCE (absolute). Relative lab capacities (`0.1mem`) resolve with the
scale's `memory` (the host memory it is sized for) or the pool; without it such a point is
reported as not checked. Only capacities a mechanism enforces count (the ample `none` cells
read everything from cache in both). Plans come from bench.plan.prepared.workload_plan (cached
in the data directory: the first check of a K3-scale workload takes a few seconds)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.matrix.load import Matrix, workload_pool_bytes
from bench.matrix.matrix_schema import parse_capacity
from bench.plan.planfile import read_plan
from bench.plan.prepared import workload_plan
from bench.sim.demand import demand
from bench.units import format_size

TOLERANCE = 0.10


@dataclass(frozen=True)
class RegimePoint:
    paper: str                      # the paper's capacity text
    lab: str                        # the scale's capacity text
    lab_bytes: int | None           # None: relative with nothing to resolve it
    paper_miss: float | None
    lab_miss: float | None

    @property
    def difference(self) -> float | None:
        if self.paper_miss is None or self.lab_miss is None:
            return None
        return self.lab_miss - self.paper_miss

    @property
    def status(self) -> str:
        d = self.difference
        return "not checked" if d is None else "ok" if abs(d) <= TOLERANCE else "out of regime"

    def as_dict(self) -> dict:
        return {"paper": self.paper, "lab": self.lab, "lab_bytes": self.lab_bytes,
                "paper_miss_fraction": self.paper_miss, "lab_miss_fraction": self.lab_miss,
                "difference": self.difference, "status": self.status}


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
    return [RegimePoint(paper, lab, b, pm, next(lab_miss) if b is not None else None)
            for (paper, lab), b, pm in zip(pairs, labs, paper_miss)]


def regime_lines(points: list[RegimePoint]) -> list[str]:
    """The table `bench matrix show --scale` prints under the cells."""
    if not points:
        return []
    out = [f"  regime       demand model's nominal miss fraction, paper C vs lab C "
           f"(in regime within {TOLERANCE:.2f}):"]
    for p in points:
        lab = p.lab + (f" = {p.lab_bytes / 1e6:.0f}M" if p.lab_bytes and p.lab != format_size(
            p.lab_bytes) else "")
        pm = "-" if p.paper_miss is None else f"{p.paper_miss:.2f}"
        lm = "-" if p.lab_miss is None else f"{p.lab_miss:.2f}"
        out.append(f"    {p.paper:>6} {pm:>5}  ->  {lab:<18} {lm:>5}  {p.status}")
    return out
