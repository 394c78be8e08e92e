"""`bench demo`: the main job on this machine, end to end, in a few minutes.

Two parts. The trace pipeline (`run_demo`, also alone as `bench demo --trace-only`) runs every
pure stage of the data flow: synthesize four domains, parse them with the canonical parser,
check them, measure locality (Table 1), simulate the policies under fair windows (Fig. 1,
per-layer and global, same-domain and off-domain static tables), run the demand model over the
capacity sweep (Table 2's miss column, capacities scaled to the model's pool), and write the
replay plan, hint plans and a frequency table the agent reads.

The measured part (`prepare_campaign`, then the executor; needs root) runs a small campaign on
the local host through the real executor: a synthetic trace of 8 layers x 32 experts x 1 MiB (a
256 MiB pool, made under --out), cgroup walls at 1/4 and 1/2 of the pool (they bite: the pool
does not fit), `none`, and balloons. A balloon locks MemAvailable - C, so a balloon at a small
C would lock nearly the whole machine: balloon cells run only where that lock is at most
`max_lock` (default 2G = 2 x 10^9 bytes) and are skipped with the reason otherwise. One balloon
cell is sized to run: C = MemAvailable - max_lock/2 rounded to a whole GB (balloon_grain), so
that its name stays the same from one demo to the next while MemAvailable drifts, and the
capacity an earlier demo used is kept while its lock still lies in [max_lock/8, 7 max_lock/8]
(`23G-balloon-classic`); a new one locks within [max_lock/4, 3 max_lock/4].

That window is also why the runner does not refuse it: the runner locks MemAvailable - C as it
reads it at run time and refuses more than balloon_max (= max_lock); the demo reads
MemAvailable the same way (after drop_caches) and runs the balloon first, seconds later, so
MemAvailable would have to rise by max_lock/8 in those seconds (0.25 GB; 0.5 GB for a new
capacity). Before, the lock was planned at max_lock/2 and the balloon ran third, up to a minute
after the read; on this 2-core, 23 GiB machine MemAvailable rose by 0.14-0.24 GB in 20 s with
nothing else of ours running; it rises by a whole balloon when another demo (or a test) ends
its balloon meanwhile: two demos with different --out dirs do not share the runner's host lock
(it lives in the work dir), so a demo that plans while another's balloon holds 1 GB sees that
GB come back and its runner refuses the lock (the "balloon ... above the spec's
balloon_max_bytes" rejection; tests/fleet/test_demo.py provokes it by reading MemAvailable
1.5 GB low). So the measured part now holds a machine-wide lock (DEMO_LOCK, flock) from the
MemAvailable read to the end of its campaign, and a second demo waits for it. A run that is
rejected or fails anyway makes the demo say so and exit 1 (`balloon_notes` explains a fast
balloon cell: its C leaves room for the whole pool).

Capacities relative to the pool resolve to whole decimal MB (1/4 of the 256 MiB pool is `67M`):
every cell name is canonical (bench.units). Cells the host cannot run are listed as skipped
with the reason: memboot (the local host never reboots), MGLRU where the kernel has no
/sys/kernel/mm/lru_gen, cgroup cells without a memory cgroup.

Why its own matrix, written to <out>/matrix.toml, rather than the shipped `smoke`: smoke's
capacities are fractions of the host's memory (3-6 GiB here) on the 8 MiB `tiny` pool, so no
cgroup wall bites and its balloons would lock 18-21 GiB of a shared machine; the balloon that
runs needs a capacity computed from this machine's MemAvailable, which no matrix can express.
The file is a plain matrix: `bench schedule --matrix <out>/matrix.toml --hosts local
--hosts-dir <out>/hosts` runs it again. Its [protocol] sets the cgroup headroom to 16 MiB (the
agent's own anonymous memory is a few MiB; the default 6 GiB would hide a 67 MB wall) and
balloon_max to max_lock, which the runner enforces at run time (MemAvailable moves).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import tomli_w

from bench.execute.campaign.record import Settings, create
from bench.hosts.facts import probe
from bench.hosts.inventory import Host, load_inventory, render_host_toml, select
from bench.hosts.procfs import parse_meminfo
from bench.hosts.ssh import transport_for as ssh_transport_for
from bench.matrix.cells import parse_cell
from bench.matrix.estimate import Estimates
from bench.matrix.expand import Expansion, Skip, expand
from bench.matrix.load import load_matrix
from bench.matrix.schedule import HostState, schedule
from bench.plan.planfile import (frequency_table, oracle_hints, plan_from_trace,
                                 previous_token_hints, write_plan)
from bench.sim.demand import demand
from bench.sim.recall import recall_report
from bench.sim.simulate import simulate
from bench.store import queries
from bench.store.campaigns import (campaign_row, demo_capacities, journal_rows, run_rows,
                                   set_flags)
from bench.store.db import open_store
from bench.store.durations import measured_durations
from bench.trace.locality import locality
from bench.trace.parse import parse_trace, suspicious_first_passes
from bench.trace.synth import generate, preset
from bench.units import MB, format_size, parse_size

DOMAINS = ("prose", "code", "math", "chat")
# The paper's capacity sweep (Table 2) on the 1.45 TB K3 pool, as fractions of the pool so
# every model preset is swept over the same relative capacities.
PAPER_POOL_BYTES = 1.45e12
PAPER_CAPACITIES = ("448G", "256G", "128G", "64G")


def sweep_capacities(pool_bytes: int) -> list[int]:
    """The paper's capacities (decimal GB) scaled to this pool, rounded down to whole MB."""
    return [max(MB, int(parse_size(c) / PAPER_POOL_BYTES * pool_bytes) // MB * MB)
            for c in PAPER_CAPACITIES]

def scaled_demand(plan, pool_bytes: int) -> list[dict]:
    """The demand model over the paper's capacities scaled to this pool (sweep_capacities):
    one row per capacity, in the sweep's order, each saying which of the paper's capacities it
    stands for and the two pools it was scaled between (the table says they are scaled)."""
    return [r | {"scaled_from": paper, "scaled_pool_bytes": pool_bytes,
                 "paper_pool_bytes": PAPER_POOL_BYTES}
            for r, paper in zip(demand(plan, sweep_capacities(pool_bytes)), PAPER_CAPACITIES,
                                strict=True)]


Step = Callable[[str], None]


def run_demo(out: Path, model: str = "k3", budgets: tuple[int, ...] = (8, 16, 32),
             seed: int = 0, step: Step = lambda _msg: None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for d, name in enumerate(DOMAINS):
        step(f"synthesizing the {name} trace ({model})")
        p = out / f"{model}-{name}.jsonl"
        tmp = p.with_name(p.name + ".tmp")
        with tmp.open("w") as fh:
            for line in generate(preset(model, domain=d, seed=seed)):
                fh.write(line + "\n")
        tmp.replace(p)
        paths.append(p)
    step("parsing with the canonical parser")
    traces = [parse_trace(p) for p in paths]
    step("measuring locality")
    stats = locality(traces)
    rows = []
    for t in traces:
        step(f"simulating policies on {Path(t.source).name} (per-layer, fair windows)")
        rows += simulate(t, regime="per-layer", budgets=budgets)
    step("simulating the global pool on the prose trace")
    rows += simulate(traces[0], regime="global", budgets=budgets)
    step("off-domain static tables (trained on prose)")
    off = []
    for t in traces[1:]:
        off += simulate(t, policies=("static", "lru"), regime="per-layer", budgets=budgets,
                        train=traces[0])
    step("demand model over the capacity sweep")
    plan = plan_from_trace(traces[0], meta={"source": traces[0].source})
    pool_bytes = plan.layers * plan.experts_per_layer * plan.expert_bytes
    demand_rows = scaled_demand(plan, pool_bytes)
    step("writing the replay plan, hint plans and frequency table")
    write_plan(out / "plan.bin", plan)
    oracle = oracle_hints(plan)
    write_plan(out / "plan.oracle-hints.bin", oracle)
    write_plan(out / "plan.previous-token-hints.bin", previous_token_hints(plan))
    freq = frequency_table(plan)
    (out / "plan.freq").write_text("# layer expert count\n" + "".join(
        f"{layer} {e} {n}\n" for (layer, e), n in sorted(freq.items())))
    return {
        "directory": str(out),
        "parse": [t.summary() for t in traces],
        "suspicious_first_pass": suspicious_first_passes(traces),
        "locality": stats,
        "sim": rows,
        "sim_off_domain": off,
        "demand": demand_rows,
        "recall": recall_report(plan, oracle),
        "plan": {"iterations": len(plan.iterations), "passes": plan.passes, "reads": plan.reads,
                 "logical_bytes": plan.logical_bytes, "distinct_experts": len(freq)},
    }


# the measured part: a campaign on the local host ------------------------------------------------

MIB = 1 << 20
DEMO_TRACE = {"layers": 8, "experts_per_layer": 32, "expert_bytes": MIB, "tokens": 150}
DEMO_POOL = (DEMO_TRACE["layers"] * DEMO_TRACE["experts_per_layer"]
             * DEMO_TRACE["expert_bytes"])                               # 256 MiB
CGROUP_HEADROOM = 16 * MIB
HOST = "local"

MATRIX_HEADER = """\
# Written by `bench demo` for this machine (MemAvailable {avail} at {when}).
# A balloon at C = {balloon}, first so that it runs seconds after MemAvailable was read (it
# locks MemAvailable - C, about {lock} now, within --max-lock {max_lock}); cgroup walls at 1/4
# and 1/2 of the {pool} pool, `none`, balloons at those capacities (each locks MemAvailable - C:
# skipped above --max-lock), and a memboot and an MGLRU cell that this host may not be able to
# run (then listed as skipped with the reason). Sizes: 1M = 10^6 bytes, 1Mi = 2^20.
"""

# the demo's other cells, in run order after the balloon: (capacity, mechanism, reclaim)
EXTRA_CELLS = (("0.25pool", "cgroup", "classic"), ("0.5pool", "cgroup", "classic"),
               ("1pool", "none", "classic"), ("0.25pool", "balloon", "classic"),
               ("0.5pool", "balloon", "classic"), ("0.25pool", "cgroup", "mglru"),
               ("0.25pool", "memboot", "classic"))


DEMO_LOCK = Path("/run/lock/bench-demo.lock")


@contextmanager
def machine_lock(path: Path = DEMO_LOCK, wait: Callable[[str], None] = lambda _m: None
                 ) -> Iterator[None]:
    """Hold the machine-wide demo lock (flock, released when the process dies): one demo
    measures at a time, so no other demo's balloon comes and goes between this demo's
    MemAvailable read and its balloon. `wait` hears once who holds it while we wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
            wait(f"another bench demo (pid {holder or '?'}) is measuring on this machine; "
                 "waiting for it to finish")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def root_needs() -> str | None:
    """None as root, else what the measured part needs (one sentence with the fix)."""
    if os.geteuid() == 0:
        return None
    return ("the measured part needs root: it creates memory cgroups, mlocks balloon memory, "
            "drops the page cache and reads block-device counters; run it as root "
            "(sudo .venv/bin/bench demo)")


def tool_needs() -> str | None:
    missing = [t for t in ("make",) if shutil.which(t) is None]
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        missing.append("a C compiler")
    if missing:
        return (f"the agent is built on the host and needs {' and '.join(missing)}: "
                "apt-get install build-essential")
    return None


def mem_available() -> int:
    with open("/proc/meminfo") as fh:
        return parse_meminfo(fh.read())["MemAvailable"]


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as fh:
        fh.write("3\n")


def _mem_total() -> int:
    with open("/proc/meminfo") as fh:
        return parse_meminfo(fh.read())["MemTotal"]


def write_trace(out: Path, seed: int = 0) -> Path:
    """The demo's synthetic trace (deterministic; rewritten only when absent)."""
    p = out / "demo-trace.jsonl"
    if not p.exists():
        params = preset("tiny", seed=seed, **DEMO_TRACE)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text("\n".join(generate(params)) + "\n")
        tmp.replace(p)
    return p


def write_hosts(out: Path) -> Path:
    """An inventory with the local host whose pool and work dir live under out."""
    d = out / "hosts"
    d.mkdir(parents=True, exist_ok=True)
    h = Host(name=HOST, address="localhost", transport="local",
             tags={"machine": "controller"}, mem_total=_mem_total(),
             pool_dir=str((out / "pool").resolve()), work_dir=str((out / "work").resolve()))
    (d / f"{HOST}.toml").write_text("# Written by `bench demo`: this machine, pool and work "
                                    "dir under the demo directory. Never rebooted.\n"
                                    + render_host_toml(h))
    return d


def balloon_grain(max_lock: int) -> int:
    """The step the demo's balloon capacity is rounded to: the largest of 1G, 100M, 10M, 1M
    that is at most half of max_lock (a whole GB with the default --max-lock 2G)."""
    return next((g for g in (1000 * MB, 100 * MB, 10 * MB) if g <= max_lock // 2), MB)


def balloon_window(max_lock: int, keep: bool = False) -> tuple[int, int]:
    """The lock (MemAvailable - C) a demo balloon may start with: [max_lock/4, 3 max_lock/4]
    for a new capacity, so that MemAvailable may move by max_lock/4 either way before the run
    (up: the runner refuses a lock above max_lock; down: nothing left to lock) with the
    rounding inside; [max_lock/8, 7 max_lock/8] to keep an earlier demo's capacity."""
    if keep:
        return max(1, max_lock // 8), max(1, max_lock * 7 // 8)
    return max(1, max_lock // 4), max(1, max_lock * 3 // 4)


def balloon_capacity(avail: int, max_lock: int, previous: Iterable[int] = ()) -> int:
    """C of the demo's balloon cell. A capacity an earlier demo used (`previous`, newest
    first) is kept while its lock still lies in the wider keep window, so that the cell's name,
    and the results, add up from one demo to the next; otherwise MemAvailable - max_lock/2
    rounded to the nearest balloon_grain, moved by whole MB into the window where rounding
    left it (small MemAvailable), at least 1 MB."""
    klo, khi = balloon_window(max_lock, keep=True)
    for c in previous:
        if c > 0 and klo <= avail - c <= khi:
            return c
    lo, hi = balloon_window(max_lock)
    grain = balloon_grain(max_lock)
    c = (avail - max_lock // 2 + grain // 2) // grain * grain
    c = min(c, (avail - lo) // MB * MB)             # lock at least lo
    c = max(c, -(-(avail - hi) // MB) * MB)         # lock at most hi
    return max(MB, c)


def matrix_text(trace: Path, avail: int, max_lock: int, balloon: int) -> str:
    """The demo's matrix: the explaining header, then the matrix as tomli_w writes it (the
    trace's path escaped whatever it holds)."""
    header = MATRIX_HEADER.format(
        avail=format_size(avail // MB * MB), when=time.strftime("%Y-%m-%d %H:%M:%S"),
        pool=format_size(DEMO_POOL), max_lock=format_size(max_lock),
        lock=format_size(max(MB, (avail - balloon) // MB * MB)), balloon=format_size(balloon))
    matrix = {
        "name": "demo",
        "description": "bench demo: cgroup walls, balloon and none on a 256 MiB pool, local host",
        "reference": "bench demo", "repetitions": 1,
        "workload": {"trace": str(trace.resolve()), "batch": 1, "pool": format_size(DEMO_POOL),
                     "passes": 2},
        "order": {"randomize": False, "interleave_reps": True},
        "hosts": {"tags": "any", "placement": "each"},
        # a demo run took 3-5 s on a 2-core machine (deploy, drop caches, two passes, collect);
        # later demos on this host plan from their measured runs instead
        "estimate": {"run_seconds": 5, "reboot_seconds": 120},
        "protocol": {"cgroup_headroom": format_size(CGROUP_HEADROOM),
                     "balloon_max": format_size(max_lock)},
        "cells": {"capacities": [format_size(balloon)], "mechanisms": ["balloon"],
                  "reclaims": ["classic"],
                  "extra": [{"capacity": c, "mechanism": m, "reclaim": r}
                            for c, m, r in EXTRA_CELLS]}}
    return header + "\n" + tomli_w.dumps(matrix)


def host_skip(cand, facts: dict, avail: int, max_lock: int) -> str | None:
    """Why this host cannot (or, for the lock cap, may not) run this resolved cell; None: runs."""
    cell = parse_cell(cand.cell)
    if cell.reclaim == "mglru" and facts.get("mglru") is None:
        return (f"kernel {facts.get('kernel') or ''} has no MGLRU (/sys/kernel/mm/lru_gen "
                "absent)").replace("  ", " ")
    if cell.mechanism == "cgroup" and (facts.get("cgroup") or {}).get("backend") == "none":
        return "no memory cgroup mounted (neither cgroup2 nor a v1 memory hierarchy)"
    if cell.mechanism == "balloon":
        lock = avail - cell.capacity_bytes
        if lock <= 0:
            return (f"MemAvailable {format_size(avail // MB * MB)} is already at or below C: "
                    "a balloon has nothing to lock")
        if lock > max_lock:
            need = -(-lock // 10 ** 9)
            return (f"the balloon would lock {lock / 1e9:.1f} GB (MemAvailable - C), above "
                    f"--max-lock {format_size(max_lock)}; pass --max-lock {need}G to run it")
    return None


@dataclass
class DemoCampaign:
    campaign: str
    out: Path
    hosts_dir: Path
    data_dir: Path
    matrix_path: Path
    trace: Path
    db_url: str | None
    max_lock: int
    mem_available: int
    runs: list[dict] = field(default_factory=list)      # {run_id, cell}
    skipped: list[dict] = field(default_factory=list)   # {point, cell, reason}
    facts: dict = field(default_factory=dict)
    # the plan's estimate: seconds, reboots, and what it rests on (Schedule.as_dict's)
    estimate: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {"campaign": self.campaign, "directory": str(self.out),
                "hosts_dir": str(self.hosts_dir), "data_dir": str(self.data_dir),
                "matrix": str(self.matrix_path), "trace": str(self.trace),
                "max_lock_bytes": self.max_lock, "mem_available_bytes": self.mem_available,
                "runs": self.runs, "skipped": self.skipped, "estimate": self.estimate}


def _host_plan(m, host: Host, facts: dict, avail: int, max_lock: int) -> tuple[Expansion, list]:
    """The matrix expanded for the local host, minus what host_skip refuses; with every
    skipped cell as {point, cell, reason}."""
    exp = expand(m, [host])
    keep = []
    for req in exp.requests:
        why = host_skip(req.candidates[0], facts, avail, max_lock)
        if why is None:
            keep.append(req)
        else:
            exp.skipped.append(Skip(req.point, HOST, why, req.candidates[0].cell))
    exp.requests = keep
    skipped = []
    for s in exp.skipped:
        cell = s.cell
        if cell is None:
            p = next(p for p in m.points if p.key == s.point)
            b, _ = p.capacity.resolve(m.pool_bytes, host.mem_total)
            cell = p.cell(b).name if b else None
        skipped.append({"point": s.point, "cell": cell, "reason": s.reason})
    return exp, skipped


def prepare_campaign(out: Path, *, db_url: str | None = None, data_dir: Path | None = None,
                     max_lock: int = 2 * 10 ** 9, seed: int = 0, threads: int = 2,
                     step: Step = lambda _msg: None) -> tuple[DemoCampaign, Settings]:
    """Trace, inventory, matrix, host facts, the plan with this host's skips, and the campaign
    created in the store. Returns (DemoCampaign, campaign Settings)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    step(f"writing the demo trace ({DEMO_TRACE['layers']} layers x "
         f"{DEMO_TRACE['experts_per_layer']} experts x 1 MiB, a {DEMO_POOL // MIB} MiB pool)")
    trace = write_trace(out, seed)
    hosts_dir = write_hosts(out)
    host = select(load_inventory(hosts_dir), [HOST])[0]
    step("probing the local host")
    t = ssh_transport_for(host)
    try:
        pr = probe(t, host)
    finally:
        t.close()
    if pr.error:
        raise pr.exception or RuntimeError(pr.error["message"])
    facts = pr.facts
    store = open_store(db_url)
    try:
        previous = demo_capacities(store)
        # earlier demos' runs of these cells on this host: the plan's estimate is theirs
        runs, reboots = measured_durations(store, [HOST])
    finally:
        store.close()
    # every run starts from dropped caches (the runner drops them before applying C), and
    # dropping them raises MemAvailable by the reclaimable cache it only partly counted: read it
    # the same way, so that the balloon cell (the campaign's first run, seconds from now) locks
    # what was planned, within balloon_window
    drop_caches()
    avail = mem_available()
    mpath = out / "matrix.toml"
    mpath.write_text(matrix_text(trace, avail, max_lock,
                                 balloon_capacity(avail, max_lock, previous)))
    m = load_matrix(mpath)
    exp, skipped = _host_plan(m, host, facts, avail, max_lock)
    cid = f"demo-s{seed}-" + time.strftime("%Y%m%dT%H%M%S", time.gmtime())
    plan = schedule(exp.requests, [HostState.from_host(host)], seed, campaign=cid,
                    randomize=m.randomize, interleave=m.interleave, run_seconds=m.run_seconds,
                    reboot_seconds=m.reboot_seconds,
                    measured=Estimates(m.run_seconds, m.reboot_seconds, runs, reboots))
    ddir = Path(data_dir) if data_dir else out / "data"
    settings = Settings(threads=threads, retries=1, data_dir=ddir, db_url=db_url,
                        hosts_dir=hosts_dir, passes=int(m.workload.get("passes") or 2),
                        chunk_s=2.0, retry_pause_s=1.0)
    store = open_store(db_url)
    try:
        create(store, plan, exp, m, [HOST], settings, str(mpath))
        set_flags(store, cid, demo=True)
    finally:
        store.close()
    demo = DemoCampaign(cid, out, hosts_dir, ddir, mpath, trace, db_url, max_lock, avail,
                        runs=[{"run_id": r.run_id, "cell": r.cell} for r in plan.runs],
                        skipped=skipped, facts=facts,
                        estimate={**plan.as_dict()["estimates"], "seconds": plan.estimate_s,
                                  "reboot_count": plan.reboots})
    return demo, settings


def demo_results(demo: DemoCampaign) -> dict:
    """The campaign's runs with their states and measured figures, and the reclaim-shaped
    matrix (`bench results --matrix reclaim --campaign ID`)."""
    store = open_store(demo.db_url)
    try:
        camp = campaign_row(store, demo.campaign)
        rows = run_rows(store, demo.campaign)
        measured = {r["run_id"]: r for r in queries.load_runs(store, campaign=demo.campaign)}
        table = queries.matrix(store, "reclaim", campaign=demo.campaign)
        why = queries.verdicts(store, [r.run_id for r in rows])
        last = {j.run_ref: j.message for j in journal_rows(store, demo.campaign,
                                                           kinds=("state",))}
    finally:
        store.close()
    runs = []
    for r in rows:
        m = measured.get(r.run_id) or {}
        runs.append({"run_id": r.run_id, "cell": r.cell, "state": r.state,
                     "retained": m.get("retained"),
                     "iteration_median_s": m.get("iteration_median_s"),
                     "device_bytes": m.get("device_bytes"),
                     "device_bytes_per_iteration": m.get("device_bytes_per_iteration"),
                     "locked_fraction": m.get("locked_fraction"),
                     "failed_rules": [f"{v['rule']}: {v['reason']}"
                                      for v in why.get(r.run_id, []) if not v["passed"]],
                     "reason": None if r.state == "validated" else last.get(r.ref)})
    return {"campaign": demo.campaign, "state": camp.state if camp else None, "runs": runs,
            "table": table, "skipped": demo.skipped, **{k: v for k, v in demo.as_dict().items()
                                                        if k not in ("runs", "skipped")}}


def not_validated(res: dict) -> list[dict]:
    """The demo's runs that did not end validated (rejected, failed, or left unfinished)."""
    return [r for r in res["runs"] if r["state"] != "validated"]


def balloon_notes(res: dict) -> list[str]:
    """Why a balloon cell that ran is as fast as `none`: its C leaves room for the whole pool."""
    notes = []
    for r in res["runs"]:
        cell = parse_cell(r["cell"])
        if cell.mechanism != "balloon" or r["state"] != "validated":
            continue
        if cell.capacity_bytes >= DEMO_POOL:
            notes.append(
                f"{r['cell']} is about as fast as `none`: the balloon leaves C = "
                f"{format_size(cell.capacity_bytes)} of memory and the demo's pool is "
                f"{format_size(DEMO_POOL)}, so the whole pool stays in the page cache and "
                "hardly anything is read from the device. A balloon bites only when C is "
                "below the pool, and here such a balloon would lock nearly all of "
                "MemAvailable (those cells are skipped above --max-lock); the cgroup walls "
                "show the same capacities biting.")
    return notes
