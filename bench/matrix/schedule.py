"""Ordering runs across hosts: a pure function, fed with data (BenchExec style).

`schedule(requests, hosts, seed, ...)` takes the run requests of `bench.matrix.expand.expand`, the
hosts (`HostState`: name, tags, current boot, rebootable) and a seed, and returns a `Schedule`: per
host an ordered list of runs with stable run ids `<campaign>-<host>-<nnn>` (position 1-based), their
repetition and boot config, the host's reboot count and an estimated duration.

Algorithm:
1. Assignment. Requests of one `unit` (the repetitions of one cell) stay together. A unit with one
   candidate host goes there (placement `each`: one unit per host). Units with several candidates
   (placement `one`) are taken longest first (seeded shuffle breaks ties) and given to the
   candidate with the least estimated load so far, where a boot config new to that host adds one
   reboot's time: load is balanced and reboots are only added when that pays.
2. Boot groups. On each host the runs are grouped by boot config; every group runs contiguously,
   so the host boots into each distinct config exactly once. The group matching the host's current
   boot (default: no mem=, MGLRU as the kernel has it) goes first and costs no reboot; the other
   groups follow in seeded random order (or in order of first appearance when not randomized).
   Reboots = distinct configs - (1 if one matches the current boot). This is the lower bound:
   every distinct config other than the current one must be booted into at least once, and the
   grouping boots into each exactly once. Restoring the default boot after the campaign is the
   executor's business and is not counted.
3. Within a group, with interleaving, repetition 0 of every cell runs before repetition 1 of any
   (each repetition block in a fresh seeded permutation: "three randomized runs" are three sweeps
   in random order); without it, a cell's repetitions run back to back, cells in random order.
   Each host gets its own random stream (seeded by seed and host name), so cells that run on A and
   B run in different orders there: order effects are counterbalanced across hosts.
4. Engine pairs (bench.matrix.engine_cells): requests carrying `pair` = (prompt, policy) with the
   same unit and repetition are one pair; its two runs stay adjacent (interleaving and shuffling
   move the pair as a block) in the balanced order of
   `bench.matrix.engine_cells.pair_orders(seed, prompt)`: pair 0 admit-first, pair 1 nocache-first,
   later pairs a seeded shuffle. Each run records its pair (prompt, index, order, position in
   the pair, seed).
Same seed, same plan; the seed is recorded in the plan.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from bench.errors import InputError, SafetyError
from bench.matrix.estimate import Estimate, Estimates, sources
from bench.matrix.engine_cells import order_label, pair_orders, pair_position
from bench.matrix.expand import (BootConfig, Candidate, RunRequest, booted_lru_gen,
                                  booted_mem)


@dataclass(frozen=True)
class HostState:
    name: str
    tags: tuple = ()                  # ((tag, value), ...), informational
    current: BootConfig = BootConfig()
    rebootable: bool = True
    default_mglru: str | None = None  # "on"/"off" when known: the MGLRU state of the default boot

    @classmethod
    def from_host(cls, host, current: BootConfig | None = None,
                  default_mglru: str | None = None) -> "HostState":
        return cls(host.name, tuple(sorted(host.tags.items())), current or BootConfig(),
                   bool(host.reboot.allowed), default_mglru)

    @classmethod
    def from_facts(cls, host, facts: Mapping | None) -> "HostState":
        """The host as probed (bench.hosts.facts; None: as from_host): its current boot is the
        mem= and bench.lru_gen= of its /proc/cmdline, as the executor's worker reads it (an
        MGLRU state the kernel has without bench.lru_gen= does not count as a boot's: the
        worker reboots for a bench.lru_gen boot whatever the kernel's state)."""
        if not facts:
            return cls.from_host(host)
        return cls.from_host(host, BootConfig(booted_mem(facts), booted_lru_gen(facts)))

    def is_current(self, boot: BootConfig) -> bool:
        """Whether runs under `boot` need no reboot from the current boot (an explicit
        bench.lru_gen equal to the kernel's default MGLRU state counts as the same)."""
        if boot.mem != self.current.mem:
            return False
        if boot.lru_gen is None:          # MGLRU toggled at run time: any boot state will do
            return True
        return boot.lru_gen == (self.current.lru_gen or self.default_mglru)


@dataclass(frozen=True)
class ScheduledRun:
    run_id: str
    host: str
    position: int          # 1-based on its host
    rep: int
    cell: str
    point: str
    boot: BootConfig
    reboot_before: bool    # the host boots into `boot` right before this run
    estimate_s: float
    pair: dict | None = None   # engine pairs: prompt, index, order, position, seed
    estimate_n: int = 0        # earlier runs measured behind estimate_s; 0: modelled

    def as_dict(self) -> dict:
        return {"run_id": self.run_id, "host": self.host, "position": self.position,
                "rep": self.rep, "cell": self.cell, "point": self.point,
                "boot": self.boot.as_dict(), "reboot_before": self.reboot_before,
                "estimate_s": self.estimate_s,
                "estimate_source": Estimate(self.estimate_s, self.estimate_n).source
                } | ({"pair": self.pair} if self.pair else {})


@dataclass
class HostSchedule:
    host: str
    current: BootConfig
    runs: list[ScheduledRun] = field(default_factory=list)
    boots: list[BootConfig] = field(default_factory=list)   # group order
    reboots: int = 0
    lower_bound: int = 0
    estimate_s: float = 0.0
    reboot: Estimate = Estimate(0.0)    # one reboot of this host (counted `reboots` times)

    def run_sources(self) -> str:
        return sources([Estimate(r.estimate_s, r.estimate_n) for r in self.runs])

    def as_dict(self) -> dict:
        return {"host": self.host, "current_boot": self.current.as_dict(),
                "runs": [r.as_dict() for r in self.runs],
                "boot_groups": [b.as_dict() for b in self.boots], "reboots": self.reboots,
                "reboot_lower_bound": self.lower_bound, "estimate_s": self.estimate_s,
                "run_estimates": self.run_sources(),
                "reboot_estimate_s": self.reboot.seconds if self.reboots else 0.0,
                "reboot_estimate": self.reboot.source if self.reboots else "no reboot"}


@dataclass
class Schedule:
    campaign: str
    seed: int
    hosts: list[HostSchedule]
    randomize: bool
    interleave: bool
    run_seconds: float
    reboot_seconds: float

    @property
    def runs(self) -> list[ScheduledRun]:
        return [r for h in self.hosts for r in h.runs]

    @property
    def reboots(self) -> int:
        return sum(h.reboots for h in self.hosts)

    @property
    def estimate_s(self) -> float:
        """Hosts run in parallel: the campaign takes as long as its longest host."""
        return max((h.estimate_s for h in self.hosts), default=0.0)

    def as_dict(self) -> dict:
        return {"campaign": self.campaign, "seed": self.seed, "randomize": self.randomize,
                "interleave_reps": self.interleave,
                "estimates": {"run_seconds": self.run_seconds,
                              "reboot_seconds": self.reboot_seconds,
                              "runs": sources([Estimate(r.estimate_s, r.estimate_n)
                                               for r in self.runs]),
                              "reboots": sources([h.reboot for h in self.hosts
                                                  for _ in range(h.reboots)])},
                "runs": len(self.runs), "reboots": self.reboots, "estimate_s": self.estimate_s,
                "hosts": [h.as_dict() for h in self.hosts]}


def reboot_lower_bound(boots: Sequence[BootConfig], host: HostState) -> int:
    distinct = set(boots)
    return len(distinct) - (1 if any(host.is_current(b) for b in distinct) else 0)


def _rng(seed: int, *salt: str) -> random.Random:
    return random.Random(":".join((str(seed),) + salt))


def schedule(requests: Sequence[RunRequest], hosts: Sequence[HostState], seed: int, *,
             campaign: str = "campaign", randomize: bool = True, interleave: bool = True,
             run_seconds: float = 900.0, reboot_seconds: float = 600.0,
             cell_seconds: Mapping[str, float] | None = None,
             measured: Estimates | None = None) -> Schedule:
    """Order the requests on the hosts (see the module docstring). Pure and deterministic.
    A run's estimate is `cell_seconds`' for its cell when given, else what `measured` has for
    its host and cell (bench.matrix.estimate: earlier runs' median wall time, else
    run_seconds); a reboot's is `measured`'s for the host, else reboot_seconds. Reboots are
    only counted where the plan boots a host into a boot config it is not in."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise InputError(f"seed must be an integer, got {seed!r}")
    by_name = {h.name: h for h in hosts}
    if len(by_name) != len(hosts):
        raise InputError("a host is listed twice")
    times = dict(cell_seconds or {})
    # the model's figures are run_seconds and reboot_seconds whatever `measured` was built with
    known = Estimates(float(run_seconds), float(reboot_seconds),
                      measured.runs if measured else {}, measured.reboots if measured else {})

    def estimate(c: Candidate) -> Estimate:
        if c.cell in times:
            return Estimate(float(times[c.cell]))
        return known.run(c.host, c.cell)

    def est(c: Candidate) -> float:
        return estimate(c).seconds

    def reboot_of(host: str) -> float:
        return known.reboot(host).seconds

    units = _units(requests, by_name)
    assigned = _assign(units, by_name, seed, est, reboot_of)
    plans = [_order_host(h, assigned[h.name], seed, campaign, randomize, interleave, estimate,
                         known.reboot(h.name)) for h in hosts]
    return Schedule(campaign, seed, plans, randomize, interleave, float(run_seconds),
                    float(reboot_seconds))


def _units(requests: Sequence[RunRequest], by_name: dict[str, HostState]
           ) -> dict[str, list[RunRequest]]:
    """The requests grouped by unit (a cell's repetitions), each unit checked: candidates,
    the same candidate hosts for every repetition, no repetition twice, known hosts."""
    units: dict[str, list[RunRequest]] = {}
    for r in requests:
        units.setdefault(r.unit, []).append(r)
    for u, rs in units.items():
        cands = {c.host for c in rs[0].candidates}
        if not cands:
            raise InputError(f"run {u} rep {rs[0].rep} has no candidate host")
        if any({c.host for c in r.candidates} != cands for r in rs):
            raise InputError(f"the repetitions of {u} have different candidate hosts")
        reps = [(r.rep, r.pair) for r in rs]
        if len(set(reps)) != len(reps):
            raise InputError(f"{u}: repetition listed twice")
        unknown = cands - set(by_name)
        if unknown:
            raise InputError(f"{u}: candidate host(s) {', '.join(sorted(unknown))} are not among "
                             f"the scheduled hosts ({', '.join(by_name)})")
    return units


def _assign(units: dict[str, list[RunRequest]], by_name: dict[str, HostState], seed: int,
            est: Callable[[Candidate], float], reboot_of: Callable[[str], float]
            ) -> dict[str, list[tuple[RunRequest, Candidate]]]:
    """1. Assignment: units with one candidate host go there; the others, heaviest first
    (ties in a seeded order), to the candidate where the estimated load (with the reboot a new
    boot config costs) stays smallest."""
    assigned: dict[str, list[tuple[RunRequest, Candidate]]] = {h: [] for h in by_name}
    load = {h: 0.0 for h in by_name}
    boots_on: dict[str, set[BootConfig]] = {h: set() for h in by_name}

    def place(host: str, rs: list[RunRequest]) -> None:
        for r in rs:
            c = next(c for c in r.candidates if c.host == host)
            assigned[host].append((r, c))
            load[host] += est(c)
            if c.boot not in boots_on[host]:
                boots_on[host].add(c.boot)
                if not by_name[host].is_current(c.boot):
                    load[host] += reboot_of(host)

    flexible = []
    for u in sorted(units):
        rs = units[u]
        if len(rs[0].candidates) == 1:
            place(rs[0].candidates[0].host, rs)
        else:
            flexible.append(u)
    rng = _rng(seed, "assign")
    rng.shuffle(flexible)
    flexible.sort(key=lambda u: -sum(est(units[u][0].candidates[0]) for _ in units[u]))
    for u in flexible:
        rs = units[u]

        def cost(c: Candidate, n: int = len(rs)) -> tuple:
            extra = 0.0
            if c.boot not in boots_on[c.host] and not by_name[c.host].is_current(c.boot):
                extra = reboot_of(c.host)
            return (load[c.host] + extra + est(c) * n, c.host)
        place(min(rs[0].candidates, key=cost).host, rs)
    return assigned


def _order_host(h: HostState, items: list[tuple[RunRequest, Candidate]], seed: int,
                campaign: str, randomize: bool, interleave: bool,
                estimate: Callable[[Candidate], Estimate], reboot_est: Estimate
                ) -> HostSchedule:
    """2. + 3. One host's order: boot groups (the current boot first, free), runs ordered
    within each group."""
    hp = HostSchedule(h.name, h.current, reboot=reboot_est)
    hrng = _rng(seed, "order", h.name)
    first_seen: dict[BootConfig, int] = {}
    for _r, c in sorted(items, key=lambda rc: (rc[0].index, rc[0].rep, rc[0].unit)):
        first_seen.setdefault(c.boot, len(first_seen))
    groups = sorted(first_seen, key=first_seen.__getitem__)
    if randomize:
        hrng.shuffle(groups)
    cur = [b for b in groups if h.is_current(b)]
    groups = cur[:1] + [b for b in groups if b not in cur[:1]]
    needs = [b for b in groups if not h.is_current(b)]
    if needs and not h.rebootable:
        raise SafetyError(f"{h.name}: runs need boot {needs[0].label} but the host may not "
                          "be rebooted", "expansion should have skipped these cells")
    by_boot: dict[BootConfig, list[tuple[RunRequest, Candidate]]] = {b: [] for b in groups}
    for r, c in items:                  # one pass (not one per group), the items' order kept
        by_boot[c.boot].append((r, c))
    pos = 0
    for gi, b in enumerate(groups):
        ordered = _order_group(by_boot[b], hrng, seed, randomize, interleave)
        reboot = not (gi == 0 and h.is_current(b))
        if reboot:
            hp.reboots += 1
            hp.estimate_s += hp.reboot.seconds
        for i, (r, c) in enumerate(ordered):
            pos += 1
            e = estimate(c)
            hp.estimate_s += e.seconds
            hp.runs.append(ScheduledRun(f"{campaign}-{h.name}-{pos:03d}", h.name, pos, r.rep,
                                        c.cell, r.point, b, reboot and i == 0, e.seconds,
                                        _pair_info(r, seed), e.n))
        hp.boots.append(b)
    hp.lower_bound = reboot_lower_bound(hp.boots, h)
    return hp


def _order_group(rcs: list[tuple[RunRequest, Candidate]], hrng: random.Random, seed: int,
                 randomize: bool, interleave: bool) -> list[tuple[RunRequest, Candidate]]:
    """The runs of one boot group: repetitions interleaved (each round shuffled) or cell by
    cell (cells shuffled); an engine pair always stays one block. Near-linear: the runs are
    bucketed by repetition (or cell) in one pass, each bucket in the sorted order."""
    rs = sorted(rcs, key=lambda rc: (rc[0].index, rc[0].unit, rc[0].rep))
    ordered: list[tuple[RunRequest, Candidate]] = []
    if interleave:
        rounds: dict[int, list[tuple[RunRequest, Candidate]]] = {}
        for rc in rs:
            rounds.setdefault(rc[0].rep, []).append(rc)
        for rep in sorted(rounds):
            block = _paired(rounds[rep], seed)
            if randomize:
                hrng.shuffle(block)
            ordered += [rc for pair in block for rc in pair]
        return ordered
    of_unit: dict[str, list[tuple[RunRequest, Candidate]]] = {}
    for rc in rs:
        of_unit.setdefault(rc[0].unit, []).append(rc)
    # a unit's index is that of its last point in `rs` (both cells of an engine pair share it)
    cells = [u for u, _ in sorted({r.unit: r.index for r, _ in rs}.items(), key=lambda kv: kv[1])]
    if randomize:
        hrng.shuffle(cells)
    for u in cells:
        ordered += [rc for pair in _paired(sorted(of_unit[u], key=lambda rc: rc[0].rep), seed)
                    for rc in pair]
    return ordered


def _first(rep: int, prompt: str, seed: int) -> str:
    """The policy that runs first in pair `rep` of an engine prompt."""
    return _firsts(1 << rep.bit_length(), seed, prompt)[rep]


@functools.lru_cache(maxsize=256)
def _firsts(n: int, seed: int, prompt: str) -> tuple[str, ...]:
    """The first policy of pairs 0 .. n-1 (pair_orders is one seeded sequence: its first n
    pairs are the same whatever the number asked for). `n` a power of two, so that a prompt's
    pairs take log2(pairs) calls, not one per pair."""
    return tuple(first for first, _ in pair_orders(n, seed, prompt))


def _paired(rcs: list, seed: int) -> list[list]:
    """Blocks of (request, candidate): one run, or the two runs of an engine pair (same unit
    and repetition) in their balanced order. Blocks keep the order of their first run."""
    blocks: list[list] = []
    at: dict[tuple, int] = {}
    for rc in rcs:
        r = rc[0]
        if r.pair is None:
            blocks.append([rc])
        elif (r.unit, r.rep) in at:
            blocks[at[(r.unit, r.rep)]].append(rc)
        else:
            at[(r.unit, r.rep)] = len(blocks)
            blocks.append([rc])
    for i in at.values():
        r = blocks[i][0][0]                 # a request of an engine pair (r.pair is set)
        first = _first(r.rep, r.pair[0], seed)
        # the pair's two runs in their balanced order, then the replay run (the agent over the
        # engine's trace: no side of the pair, after it so it sees the same warm host)
        blocks[i].sort(key=lambda rc: (rc[0].pair[1] == "replay", rc[0].pair[1] != first))
    return blocks


def _pair_info(r: RunRequest, seed: int) -> dict | None:
    if r.pair is None:
        return None
    first = _first(r.rep, r.pair[0], seed)
    return {"prompt": r.pair[0], "index": r.rep, "order": order_label(first),
            "position": pair_position(r.pair[1], first), "seed": seed}
