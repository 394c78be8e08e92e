"""Expansion: a matrix on a set of inventory hosts -> run requests for
bench.matrix.schedule, plus the cells skipped on some host, each with its reason (never
silently dropped). Pure: the hosts' probed facts (bench.hosts.facts, as `bench hosts probe
--json` shows them) come in as data, BenchExec-style; the probing is the caller's
(bench.execute.campaign.preflight).

Capacities resolve per host here: absolute ones to their exact bytes, relative ones rounded
down to a whole decimal MB so that cell names stay short and exact (`214M`). `0.5mem` is a
fraction of the inventory's memory.total, else of the probed MemTotal (only while the host runs
a boot without mem=: under mem= MemTotal is not the host's memory). Skipped, with the reason:

- from the inventory: a memboot or boot-time MGLRU cell on a host that may not reboot, a
  memboot whose mem= falls below the host's floor;
- from the inventory or the facts: a capacity above the host's memory (the probed MemTotal of
  a boot without mem=, else memory.total: the bound `bench run` checks too), a memboot whose
  mem= is above the installed memory (memory.total, else that MemTotal), a relative capacity
  the host cannot resolve;
- from the facts only (a fact that is absent, because the probe could not read it, skips
  nothing: the run's own preflight checks it again): a cgroup cell on a host without a memory
  cgroup (neither cgroup2 with the memory controller nor a v1 memory hierarchy), an MGLRU cell
  on a kernel without /sys/kernel/mm/lru_gen, a balloon that would lock more than the
  protocol's balloon_max (it locks MemAvailable - C; MemAvailable only grows when the runner
  drops caches, so the probed value gives the least it would lock), every cell of a host
  without python3 (the runner needs it);
- a cell that resolves to the same name as an earlier one on that host.

Boot config of a cell (what only a reboot changes): `memboot` boots with mem = C +
memboot_overhead (the kernel's own reservations, firmware and the non-file working set; the
paper's 93G point was a mem= boot with 102G visible), in exact bytes: a reboot writes them on
the kernel command line as digits (bench.hosts.bootplan); a balloon at a scale with a
`balloon_overhead` boots the mem= at which it locks the paper's share of the host
(bench.matrix.balloon_host); every other cell keeps the default (no mem=). MGLRU is a
runtime toggle unless `mglru_at_boot = true`, in which case the boot carries
bench.lru_gen=on|off. Placement `each`: every eligible host (tags match) runs every cell
(cross-machine reproduction); `one`: all repetitions of a cell run on one eligible host, chosen
by the scheduler to balance load.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from bench.errors import InputError
from bench.matrix.cells import parse_cell
from bench.matrix.engine_cells import LOCAL_ONLY_SKIP, pair_unit
from bench.matrix.limits import MAX_RUNS
from bench.matrix.load import Matrix, MatrixError, Point
from bench.units import format_size, parse_kernel_size

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
    skipped_runs: int = 0       # runs the skips take out of the matrix (a cell placed `one`
    #                             that another host runs takes none out)

    def as_dict(self) -> dict:
        return {"matrix": self.matrix, "runs": len(self.requests),
                "skipped": [asdict(s) for s in self.skipped], "skipped_runs": self.skipped_runs,
                "warnings": list(self.warnings)}

    def skip_reasons(self) -> list[str]:
        """The skips grouped by host and reason: `on h: reason (points a, b)`, in first-seen
        order (what an empty plan's error says)."""
        groups: dict[tuple[str | None, str], list[str]] = {}
        for s in self.skipped:
            pts = groups.setdefault((s.host, s.reason), [])
            if s.point not in pts:
                pts.append(s.point)
        return [f"{', '.join(pts)} on {host or '(no host)'}: {reason}"
                for (host, reason), pts in groups.items()]


def _pair(p: Point) -> tuple[str, str] | None:
    """(prompt, policy) of an engine point (its cell is an engine cell, which has both); None
    for a replay point."""
    if p.engine is None:
        return None
    cell = p.cell(0)
    return None if cell.prompt is None or cell.policy is None else (cell.prompt, cell.policy)


Facts = Mapping[str, Any]      # one host's probed facts (bench.hosts.facts.HostResult.facts)


def booted_mem(facts: Facts | None) -> int | None:
    """The mem= (bytes, as the kernel's memparse reads it) of the boot the facts were probed
    under; None for a boot without mem=, an unreadable mem= or no facts."""
    text = (facts or {}).get("mem")
    if not text:
        return None
    try:
        b = parse_kernel_size(str(text), "mem=")
    except InputError:
        return None
    return b if b > 0 else None


def booted_lru_gen(facts: Facts | None) -> str | None:
    """bench.lru_gen=on|off of the probed boot's command line, else None."""
    cmdline = (facts or {}).get("cmdline")
    for tok in str(cmdline or "").split():
        key, _, value = tok.partition("=")
        if key == "bench.lru_gen" and value in ("on", "off"):
            return value
    return None


def probed_memory(facts: Facts | None) -> int | None:
    """The probed MemTotal when it is the host's memory: the host runs a boot without mem=."""
    if not facts or facts.get("mem"):
        return None
    v = facts.get("mem_total_bytes")
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def memory_text(n: int) -> str:
    """A memory size as bench writes it, or (a probed MemTotal that no unit divides) in GB
    with its bytes: `480G`, `25.28 GB (25276510208 bytes)`."""
    text = format_size(n)
    return text if not text.isdigit() else f"{n / 1e9:.2f} GB ({n} bytes)"


def memory_bound(host, facts: Facts | None) -> int | None:
    """What a capacity may not exceed: the probed MemTotal of a boot without mem=, else the
    inventory's memory.total (bench.matrix.runspec.host_memory reads it the same way)."""
    return probed_memory(facts) or host.mem_total


def _relative_memory(host, facts: Facts | None) -> tuple[int | None, str]:
    """(bytes that `mem` capacities are fractions of, or None and why)."""
    if host.mem_total is not None:
        return host.mem_total, ""
    mem = probed_memory(facts)
    if mem is not None:
        return mem, ""
    if facts and facts.get("mem"):
        return None, (f"its inventory file has no memory.total and the host runs a "
                      f"mem={facts['mem']} boot now, so its MemTotal is not its memory")
    if facts is None:
        return None, "needs the host's memory.total in its inventory file (or a probe of it)"
    return None, "neither its inventory file (memory.total) nor the probe gives its memory"


def host_problem(facts: Facts | None) -> str | None:
    """Why a host can run no cell at all (from its facts), or None."""
    if facts and "python3" in facts and facts["python3"] is None:
        return ("python3 with its standard library is missing on the host (the runner needs "
                "json, hashlib, fcntl, subprocess)")
    return None


def _fact_skip(m: Matrix, p: Point, cap: int, facts: Facts | None) -> str | None:
    """Why the probed host cannot run point p at capacity cap (module doc), or None."""
    if not facts:
        return None
    if p.reclaim == "mglru" and "mglru" in facts and facts["mglru"] is None:
        kernel = facts.get("kernel")
        return ("asks for MGLRU but the kernel" + (f" {kernel}" if kernel else "")
                + " has no /sys/kernel/mm/lru_gen (CONFIG_LRU_GEN)")
    backend = (facts.get("cgroup") or {}).get("backend") if isinstance(
        facts.get("cgroup"), Mapping) else None
    if p.mechanism == "cgroup" and backend == "none":
        return ("needs a memory cgroup but the host has none mounted (neither cgroup2 with the "
                "memory controller nor a v1 memory hierarchy)")
    if p.mechanism == "balloon":
        return balloon_lock_problem(cap, facts.get("mem_available_bytes"),
                                    (m.protocol or {}).get("balloon_max"),
                                    "protocol.balloon_max")
    return None


def balloon_lock_problem(cap: int, avail: Any, cap_max: int | None, what: str) -> str | None:
    """Why a balloon at C = cap may not run under a lock cap (`what` names it), from the
    probed MemAvailable: it locks MemAvailable - C, at least this much (the runner drops caches
    first, which only raises MemAvailable). None when it fits or either number is unknown."""
    if cap_max is None or not isinstance(avail, int) or isinstance(avail, bool):
        return None
    if avail - cap <= cap_max:
        return None
    return (f"the balloon would lock at least {(avail - cap) / 1e9:.2f} GB (MemAvailable "
            f"{avail / 1e9:.2f} GB - C), above {what} {format_size(cap_max)}")


def resolve(m: Matrix, p: Point, host, facts: Facts | None = None) -> tuple[Candidate | None,
                                                                             str]:
    """The cell and boot config of point p on an inventory host (with its probed facts, if
    any), or (None, why it is skipped)."""
    cand, why, _cell = _resolve(m, p, host, facts)
    return cand, why


def _boot_mem(m: Matrix, p: Point, cap: int, host, facts: Facts | None
              ) -> tuple[int | None, str]:
    """The mem= a cell boots with (None: the host's full memory) and why the host cannot boot
    it ("" when it can): a memboot's C + memboot_overhead, a balloon's at a scale that sizes
    its host (bench.matrix.balloon_host)."""
    boots = dict(m.balloon_boots)
    if p.mechanism == "memboot":
        mem, what = cap + m.memboot_overhead, (f"C + memboot_overhead "
                                               f"{format_size(m.memboot_overhead)}")
    elif p.mechanism == "balloon" and p.capacity.text in boots:
        mem, what = boots[p.capacity.text], "the host the balloon locks the paper's share of"
    else:
        return None, ""
    installed = host.mem_total or probed_memory(facts)
    if not host.reboot.allowed:
        return None, f"{p.mechanism} needs a mem= boot and the host's reboot.allowed is false"
    if host.mem_floor is not None and mem < host.mem_floor:
        return None, (f"mem={format_size(mem)} ({what}) is below the host's floor "
                      f"{format_size(host.mem_floor)}")
    if installed is not None and mem > installed:
        return None, (f"mem={format_size(mem)} ({what}) is above the host's memory "
                      f"{memory_text(installed)}")
    return mem, ""


def _resolve(m: Matrix, p: Point, host, facts: Facts | None
             ) -> tuple[Candidate | None, str, str | None]:
    """resolve(), and the cell's name where the capacity resolved (for the skip's record)."""
    problem = host_problem(facts)
    if problem is not None:
        return None, problem, None
    if p.engine is not None:            # ample capacity, no mechanism, the host's boot
        if m.engine is not None and m.engine.local_only and host.transport != "local":
            return None, LOCAL_ONLY_SKIP, None
        return Candidate(host.name, p.engine, BootConfig()), "", None
    mem_rel, why_rel = _relative_memory(host, facts)
    cap, why = p.capacity.resolve(m.pool_bytes, mem_rel)
    if cap is None:
        return None, (f"{p.capacity.text} {why_rel}" if p.capacity.kind == "mem" and why_rel
                      else why), None
    cell = p.cell(cap)
    bound = host.mem_total if p.mechanism == "memboot" else memory_bound(host, facts)
    if bound is not None and cap > bound:
        return None, (f"capacity {format_size(cap)} is above the host's memory "
                      f"{memory_text(bound)}"), cell.name
    mem, why = _boot_mem(m, p, cap, host, facts)
    if why:
        return None, why, cell.name
    lru = None
    if m.mglru_at_boot:
        if not host.reboot.allowed:
            return None, ("mglru_at_boot needs a reboot and the host's reboot.allowed is "
                          "false"), cell.name
        lru = "on" if p.reclaim == "mglru" else "off"
    skip = _fact_skip(m, p, cap, facts)
    if skip is not None:
        return None, skip, cell.name
    return Candidate(host.name, cell.name, BootConfig(mem, lru)), "", cell.name


def expand(m: Matrix, hosts: Sequence, facts: Mapping[str, Facts] | None = None) -> Expansion:
    """Run requests for these inventory hosts (bench.hosts.inventory.Host or anything with name,
    tags, mem_total, mem_floor and reboot.allowed), the skipped cells with reasons, and
    warnings. `facts`: host name -> its probed facts (module doc); a host without an entry is
    planned from its inventory alone. The runs are counted before any is made: more than
    bench.matrix.limits.MAX_RUNS is a MatrixError."""
    out = Expansion(m.name)
    cells: list[tuple[int, Point, list[Candidate], int]] = []    # (index, point, cands, runs)
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
            out.skipped_runs += reps
            continue
        cands = []
        for h in eligible:
            matched_any.add(h.name)
            cand, why, name = _resolve(m, p, h, (facts or {}).get(h.name))
            if cand is not None and cand.cell in used[h.name]:
                why = (f"resolves to {cand.cell}, the same cell as "
                       f"{used[h.name][cand.cell]} on this host")
                cand = None
            if cand is None:
                out.skipped.append(Skip(p.key, h.name, why, name))
                continue
            used[h.name][cand.cell] = p.key
            cands.append(cand)
        out.skipped_runs += reps * (len(eligible) - len(cands)) if placement == "each" else (
            0 if cands else reps)
        cells.append((idx, p, cands, reps * len(cands) if placement == "each" else (
            reps if cands else 0)))
    _check_runs(m, hosts, sum(n for *_, n in cells))
    for idx, p, cands, _n in cells:
        _add_requests(out, m, idx, p, cands)
    _tag_warnings(out, m, hosts, matched_any)
    return out


def _check_runs(m: Matrix, hosts: Sequence, runs: int) -> None:
    if runs > MAX_RUNS:
        raise MatrixError(
            f"matrix {m.name} on {len(hosts)} hosts makes {runs} runs, more than the "
            f"{MAX_RUNS} a campaign may hold (placement each: every host runs every cell)",
            hint="plan fewer hosts at once (--hosts), or lower repetitions in the matrix")


def _add_requests(out: Expansion, m: Matrix, idx: int, p: Point, cands: list[Candidate]) -> None:
    """The run requests of point p (the idx-th of the matrix) on its candidate hosts."""
    placement = p.placement or m.placement
    reps = p.repetitions or m.repetitions
    # both cells of an engine prompt and arm share a unit: a pair stays on one host
    unit = p.key if p.engine is None else pair_unit(parse_cell(p.engine))
    pair = _pair(p)
    if placement == "each":
        for cand in cands:
            for r in range(reps):
                out.requests.append(RunRequest(f"{unit}@{cand.host}", p.key, r, (cand,), idx,
                                               pair))
    elif cands:
        for r in range(reps):
            out.requests.append(RunRequest(unit, p.key, r, tuple(cands), idx, pair))


def _tag_warnings(out: Expansion, m: Matrix, hosts: Sequence, matched_any: set) -> None:
    """Warnings of an expansion: hosts no cell's tags match, tag values no host has."""
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
