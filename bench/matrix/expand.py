"""Expansion: a matrix on a set of inventory hosts -> run requests for
bench.matrix.schedule, plus the cells skipped on some host, each with its reason (never
silently dropped). Pure.

Capacities resolve per host here: absolute ones to their exact bytes, relative ones rounded
down to a whole decimal MB so that cell names stay short and exact (`214M`). Skipped, with the
reason: a capacity above the host's memory, a relative capacity the host cannot resolve, a
memboot or boot-time MGLRU cell on a host that may not reboot, a memboot whose mem= falls below
the host's floor or above its memory, a cell that resolves to the same name as an earlier one
on that host.

Boot config of a cell (what only a reboot changes): `memboot` boots with mem = C +
memboot_overhead (the kernel's own reservations, firmware and the non-file working set; the
paper's 93G point was a mem= boot with 102G visible), in exact bytes: a reboot writes them on
the kernel command line as digits (bench.hosts.bootplan); every other mechanism keeps the
default (no mem=). MGLRU is a runtime toggle unless `mglru_at_boot = true`,
in which case the boot carries bench.lru_gen=on|off. Placement `each`: every eligible host
(tags match) runs every cell (cross-machine reproduction); `one`: all repetitions of a cell run
on one eligible host, chosen by the scheduler to balance load.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from bench.matrix.load import Matrix, Point
from bench.units import format_size

# boot configs and run requests (shared with bench.matrix.schedule) ---------------------------

@dataclass(frozen=True, order=True)
class BootConfig:
    """What only a reboot changes. mem=None: no mem= (the whole DRAM); lru_gen=None: MGLRU is
    left to the running kernel (toggled at run time), else 'on'/'off' via bench.lru_gen=."""
    mem: int | None = None
    lru_gen: str | None = None

    @property
    def is_default(self) -> bool:
        return self.mem is None and self.lru_gen is None

    @property
    def label(self) -> str:
        parts = ([f"mem={format_size(self.mem)}"] if self.mem is not None else []) + (
            [f"bench.lru_gen={self.lru_gen}"] if self.lru_gen is not None else [])
        return " ".join(parts) or "default"

    def as_dict(self) -> dict:
        return {"mem": None if self.mem is None else format_size(self.mem),
                "mem_bytes": self.mem, "lru_gen": self.lru_gen, "label": self.label}


@dataclass(frozen=True)
class Candidate:
    """One way to run a request: on this host, as this (resolved) cell, under this boot."""
    host: str
    cell: str
    boot: BootConfig


@dataclass(frozen=True)
class RunRequest:
    """One run to schedule. Requests with the same `unit` (the repetitions of one cell) must land
    on the same host; `candidates` are the hosts it may use (one for placement `each`)."""
    unit: str
    point: str      # the matrix point as written (capacity as in the file)
    rep: int
    candidates: tuple[Candidate, ...]
    index: int = 0  # position of the point in the matrix (the order when not randomized)
    pair: tuple[str, str] | None = None   # engine cells: (prompt, policy); rep = pair index


@dataclass(frozen=True)
class Skip:
    point: str
    host: str | None
    reason: str
    cell: str | None = None



# expansion ----------------------------------------------------------------------------------------

def _matches(tags: tuple | None, host_tags: dict) -> bool:
    return tags is None or all(host_tags.get(k) in vals for k, vals in tags)


def _tags_text(tags: tuple | None) -> str:
    if tags is None:
        return "any"
    return ", ".join(f"{k} in {'|'.join(v)}" for k, v in tags)


@dataclass
class Expansion:
    matrix: str
    requests: list[RunRequest] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"matrix": self.matrix, "runs": len(self.requests),
                "skipped": [asdict(s) for s in self.skipped], "warnings": list(self.warnings)}


def _pair(p: Point) -> tuple[str, str] | None:
    """(prompt, policy) of an engine point (its cell is an engine cell, which has both); None
    for a replay point."""
    if p.engine is None:
        return None
    cell = p.cell(0)
    return None if cell.prompt is None or cell.policy is None else (cell.prompt, cell.policy)


def resolve(m: Matrix, p: Point, host) -> tuple[Candidate | None, str]:
    """The cell and boot config of point p on an inventory host, or (None, why it is skipped)."""
    if p.engine is not None:            # ample capacity, no mechanism, the host's boot
        return Candidate(host.name, p.engine, BootConfig()), ""
    cap, why = p.capacity.resolve(m.pool_bytes, host.mem_total)
    if cap is None:
        return None, why
    if host.mem_total is not None and cap > host.mem_total:
        return None, (f"capacity {format_size(cap)} is above the host's memory "
                      f"{format_size(host.mem_total)}")
    cell = p.cell(cap)
    mem = None
    if p.mechanism == "memboot":
        mem = cap + m.memboot_overhead
        if not host.reboot.allowed:
            return None, "memboot needs a mem= boot and the host's reboot.allowed is false"
        if host.mem_floor is not None and mem < host.mem_floor:
            return None, (f"mem={format_size(mem)} (C + memboot_overhead "
                          f"{format_size(m.memboot_overhead)}) is below the host's floor "
                          f"{format_size(host.mem_floor)}")
        if host.mem_total is not None and mem > host.mem_total:
            return None, (f"mem={format_size(mem)} is above the host's memory "
                          f"{format_size(host.mem_total)}")
    lru = None
    if m.mglru_at_boot:
        if not host.reboot.allowed:
            return None, "mglru_at_boot needs a reboot and the host's reboot.allowed is false"
        lru = "on" if p.reclaim == "mglru" else "off"
    return Candidate(host.name, cell.name, BootConfig(mem, lru)), ""


def expand(m: Matrix, hosts: Sequence) -> Expansion:
    """Run requests for these inventory hosts (bench.hosts.inventory.Host or anything with name,
    tags, mem_total, mem_floor and reboot.allowed), the skipped cells with reasons, and
    warnings."""
    out = Expansion(m.name)
    used: dict[str, dict[str, str]] = {h.name: {} for h in hosts}   # host -> cell -> point
    matched_any = set()
    for idx, p in enumerate(m.points):
        tags = p.tags if p.tags is not None else m.tags
        placement = p.placement or m.placement
        reps = p.repetitions or m.repetitions
        eligible = [h for h in hosts if _matches(tags, h.tags)]
        if not eligible:
            out.skipped.append(Skip(p.key, None, f"no selected host matches tags "
                                                 f"({_tags_text(tags)})"))
            continue
        cands = []
        for h in eligible:
            matched_any.add(h.name)
            cand, why = resolve(m, p, h)
            if cand is not None and cand.cell in used[h.name]:
                why = (f"resolves to {cand.cell}, the same cell as "
                       f"{used[h.name][cand.cell]} on this host")
                cand = None
            if cand is None:
                out.skipped.append(Skip(p.key, h.name, why))
                continue
            used[h.name][cand.cell] = p.key
            cands.append(cand)
        # both cells of an engine prompt share a unit: a pair stays on one host
        unit = p.key if p.engine is None else p.engine.rsplit("-", 1)[0]
        pair = _pair(p)
        if placement == "each":
            for cand in cands:
                for r in range(reps):
                    out.requests.append(RunRequest(f"{unit}@{cand.host}", p.key, r, (cand,), idx,
                                                   pair))
        elif cands:
            for r in range(reps):
                out.requests.append(RunRequest(unit, p.key, r, tuple(cands), idx, pair))
    for h in hosts:
        if h.name not in matched_any:
            out.warnings.append(f"host {h.name} matches no cell's tags "
                                f"({_tags_text(m.tags)}); it gets no run")
    wanted: dict[str, set[str]] = {}
    for p in m.points:
        tags = p.tags if p.tags is not None else m.tags
        for k, vals in tags or ():
            wanted.setdefault(k, set()).update(vals)
    for k, vals in sorted(wanted.items()):
        for v in sorted(vals):
            if not any(h.tags.get(k) == v for h in hosts):
                out.warnings.append(f"no selected host has tag {k} = {v!r}; the cells meant for "
                                    "it do not run")
    return out
