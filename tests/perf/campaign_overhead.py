#!/usr/bin/env python3
"""Benchmark (not a timed test): the campaign controller's overhead per run on the netns lab.

The question (issue): how much of a run's wall time is the controller's own work outside the
replay (probe, deploy check, snapshots, collect, ingest)? Goal: at most 2% of the run.

Standalone, as root: `.venv/bin/python tests/perf/campaign_overhead.py [--runs 5]
[--tokens 1500] [--threads 4] [--json]`. It brings up its own 2-host netns lab
(bench.lab.netns, bridge prefix `bov`, subnet 10.200.93) in a temporary state directory, writes
its own matrix (one `none`/`classic` cell, placement each, --runs repetitions per host; the
workload is the `tiny` synth preset re-sized to --layers x --experts x --expert-bytes, at most
256 MiB, with --tokens tokens, so one replay pass takes a few seconds on a 2-core box), runs it
with the real bench.execute.campaign.executor.Executor (a temporary SQLite database and data dir) and always
tears the lab down and removes the temporary directory (failure or not; --keep keeps the
directory, minus the lab, for inspection).

What is measured, per run, from the public record only (the campaign journal and the run's
bundle; nothing of the executor's internals):

- run wall: from the run's first journal `state` transition out of `planned` to its verdict
  (validated / rejected), journal timestamps (the controller's wall clock);
- replay: the sum of the agent's timed passes (`pass_wall_ns` of its summary in the bundle's
  agent.jsonl: warm-up + measured);
- overhead = run wall - replay; fraction = overhead / run wall; the run wall at which this
  overhead would be 2% = overhead / 0.02;
- per journaled step (medians): boot_verified->deployed (preflight probe, host lock, deploy
  check, plan and pool check), deployed->running (bookkeeping: the executor journals both states
  back to back, the start itself follows `running`), running->collected (starting the runner,
  its host-side steps: lock, clean, sync + drop caches, capacity, snapshots; the agent; then
  wait + collect), collected->verdict (ingest and retention). running->collected is broken
  down further with the runner's own status history in the bundle (status.json, phases with
  the host's clock, which is this machine's clock in the netns lab).
- ingest stores per-iteration rows, so its cost grows with the run while the rest of the
  overhead is fixed per run: the script also prints the fixed part, ingest as a fraction of the
  replay, and the run wall at which overhead is 2% under that scaling, fixed / (0.02 -
  ingest/replay) (never, when ingest alone is 2% of the replay or more).
- planned->boot_verified is shown apart: the executor probes a host's boot once, when its
  worker starts, so for a run this step is only the gap since the host's previous verdict (for
  the host's first run: since the executor started, which includes generating the synthetic
  trace and plan and that probe). It is not inside the run wall.

Each host's first run also builds the agent on the host and writes the pool: it is shown on
its own line and left out of the steady-state medians (when a host has more than one run).
The two hosts run in parallel on the same machine (as in any lab campaign), so one host's
replay competes with the other's overhead for the CPUs; the load averages before and after are
printed, since the box may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))

from bench.cli.schedule import build_plan  # noqa: E402
from bench.execute.campaign.executor import Executor
from bench.execute.campaign.record import Settings, create  # noqa: E402
from bench.lab.netns import Lab, missing_capabilities  # noqa: E402
from bench.store.campaigns import campaign_row, journal_rows, run_rows  # noqa: E402
from bench.store.db import open_store  # noqa: E402

GOAL = 0.02
MAX_POOL = 256 << 20
NAMES = ["lab-netns-1", "lab-netns-2"]
VERDICTS = ("validated", "rejected")
# the journaled steps inside a run's wall, in order
STEPS = ("boot_verified->deployed", "deployed->running", "running->collected",
         "collected->verdict")
STEP_NOTE = {
    "planned->boot_verified": "gap since the host's previous verdict (not in the run wall)",
    "boot_verified->deployed": "preflight, host lock, deploy check, plan + pool check",
    "deployed->running": "bookkeeping (journaled back to back)",
    "running->collected": "start, host-side runner (incl. replay), wait, collect",
    "collected->verdict": "ingest + retention",
}


def code_version() -> dict:
    """The commit and the files the measured path runs, hashed as they were when this script
    started (other work edits the tree: figures are only comparable at equal hashes)."""
    import hashlib
    import subprocess
    root = HERE.parents[2]
    head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True).stdout.strip() or None
    files = {}
    paths = ["bench/execute/campaign/executor.py", "bench/execute/campaign/worker.py",
             "bench/execute/hostrun.py", "bench/hosts/deploy.py", "bench/store/ingest.py",
             "agents/runner.py"] + sorted(str(p.relative_to(root)) for p in
                                          (root / "agents" / "hostrunner").glob("*.py"))
    for f in paths:
        try:
            files[f] = hashlib.sha256((root / f).read_bytes()).hexdigest()[:12]
        except OSError:
            files[f] = None
    dirty = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD", "--", *files],
                           capture_output=True).returncode != 0
    return {"head": head, "modified_vs_head": dirty, "sha256_12": files}


def matrix_toml(a) -> str:
    return f"""# written by tests/perf/campaign_overhead.py
name = "campaign-overhead"
description = "controller overhead per run: one none cell x {a.runs} reps on each lab host"
repetitions = {a.runs}

[workload]
trace = "tiny"
layers = {a.layers}
experts = {a.experts}
expert_bytes = {a.expert_bytes}
tokens = {a.tokens}
batch = 1
passes = {a.passes}

[order]
randomize = false
interleave_reps = true

[hosts]
tags = "any"
placement = "each"

[estimate]
run_seconds = 10
reboot_seconds = 30

[cells]
capacities = ["2pool"]
mechanisms = ["none"]
reclaims = ["classic"]
"""


def ts(s: str) -> float:
    d = datetime.fromisoformat(s)
    if d.tzinfo is None:
        d = d.replace(tzinfo=timezone.utc)
    return d.timestamp()


def agent_summary(bundle: Path) -> dict | None:
    try:
        lines = (bundle / "agent.jsonl").read_text().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if o.get("summary"):
            return o
    return None


def host_side(bundle: Path, running_t: float, collected_t: float, replay_s: float) -> dict:
    """running->collected split with the runner's status history (host clock = this clock)."""
    try:
        hist = json.loads((bundle / "status.json").read_text())["history"]
    except (OSError, ValueError, KeyError):
        return {}
    out: dict[str, float] = {}
    ph = {}
    for h in hist:
        ph.setdefault(h["phase"], h)
    if "accepted" in ph:
        out["start: ssh + runner accepted"] = ts(ph["accepted"]["t"]) - running_t
    for a, b in zip(hist, hist[1:]):
        key = f"runner {a['phase']}->{b['phase']}"
        out[key] = out.get(key, 0.0) + (b["mono_ns"] - a["mono_ns"]) / 1e9
    agent0 = ph.get("warmup") or ph.get("measuring")
    if agent0 and "collecting" in ph:
        out["agent outside its timed passes"] = (
            (ph["collecting"]["mono_ns"] - agent0["mono_ns"]) / 1e9 - replay_s)
    end = ph.get("done") or ph.get("failed")
    if end:
        out["runner end -> collected (wait sees it, collect)"] = collected_t - ts(end["t"])
    return out


def analyse(store, cid: str, data_dir: Path, t_start: float) -> dict:
    rows = {r.ref: r.as_dict() for r in run_rows(store, cid)}
    trans: dict[int, list] = {}
    for j in journal_rows(store, cid, kinds=("state",)):
        d = j.data or {}
        if j.run_ref in rows and "to" in d:
            trans.setdefault(j.run_ref, []).append((ts(j.t), d.get("from"), d["to"],
                                                       j.message))
    runs, bad = [], []
    for ref, r in rows.items():
        tr = trans.get(ref, [])
        if not tr or tr[-1][2] not in VERDICTS or any(x[2] in ("failed", "pending")
                                                       for x in tr):
            bad.append({"run_id": r["run_id"], "host": r["host"], "state": r["state"],
                        "journal": [x[3] for x in tr]})
            continue
        first = next(x for x in tr if x[1] == "planned")
        b = data_dir / "bundles" / r["host"] / r["run_id"]
        s = agent_summary(b)
        if s is None:
            bad.append({"run_id": r["run_id"], "host": r["host"], "state": r["state"],
                        "journal": [x[3] for x in tr] + [f"no agent summary in {b}"]})
            continue
        replay = sum(s["pass_wall_ns"]) / 1e9
        steps = {}
        for a, c in zip(tr, tr[1:]):
            key = f"{a[2]}->{'verdict' if c[2] in VERDICTS else c[2]}"
            steps[key] = steps.get(key, 0.0) + c[0] - a[0]
        t_of = {x[2]: x[0] for x in tr}
        wall = tr[-1][0] - first[0]
        runs.append({"run_id": r["run_id"], "host": r["host"], "cell": r["cell"],
                     "verdict": tr[-1][2], "start": first[0], "end": tr[-1][0],
                     "wall_s": wall, "replay_s": replay,
                     "passes_s": [x / 1e9 for x in s["pass_wall_ns"]],
                     "iterations": s.get("iterations"),
                     "overhead_s": wall - replay, "fraction": (wall - replay) / wall,
                     "steps": steps,
                     "host_side": host_side(b, t_of.get("running", first[0]),
                                            t_of.get("collected", tr[-1][0]), replay)})
    by_host: dict[str, list] = {}
    for r in sorted(runs, key=lambda r: (r["host"], r["start"])):
        by_host.setdefault(r["host"], []).append(r)
    for host, rs in by_host.items():
        prev = t_start
        for i, r in enumerate(rs):
            r["first_on_host"] = i == 0
            r["gap_s"] = r["start"] - prev      # planned->boot_verified
            prev = r["end"]
    return {"runs": [r for rs in by_host.values() for r in rs], "bad": bad,
            "by_host": by_host}


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(rs: list[dict], tokens: int) -> dict:
    wall, rep, ovh = (med([r[k] for r in rs]) for k in ("wall_s", "replay_s", "overhead_s"))
    frac = med([r["fraction"] for r in rs])
    need = ovh / GOAL
    # replay scales with tokens at a fixed geometry: the tokens that make overhead 2%
    need_tokens = int(tokens * (need - ovh) / rep) if rep else None
    steps = {k: med([r["steps"].get(k) for r in rs]) for k in STEPS}
    steps["planned->boot_verified"] = med([r["gap_s"] for r in rs])
    # ingest stores per-iteration rows: the part of the overhead that grows with the run
    ingest_kiter = med([1000 * r["steps"]["collected->verdict"] / r["iterations"] for r in rs
                        if r.get("iterations") and "collected->verdict" in r["steps"]])
    keys = []
    for r in rs:
        keys += [k for k in r["host_side"] if k not in keys]
    hs = {k: med([r["host_side"].get(k) for r in rs]) for k in keys}
    return {"runs": len(rs), "wall_s": wall, "replay_s": rep, "overhead_s": ovh,
            "fraction": frac, "wall_for_goal_s": need, "tokens_for_goal": need_tokens,
            "meets_goal": frac is not None and frac <= GOAL, "steps": steps, "host_side": hs,
            "iterations": med([r.get("iterations") for r in rs]),
            "ingest_s_per_1000_iterations": ingest_kiter, **scaling(rs)}


def scaling(rs: list[dict]) -> dict:
    """The overhead split into a fixed part (everything but ingest) and ingest, which stores
    per-iteration rows and so grows with the run: at a fixed geometry and load, the run wall
    at which overhead is 2% is fixed / (0.02 - ingest/replay), never when ingest alone reaches
    2% of the replay."""
    fixed = med([r["overhead_s"] - r["steps"].get("collected->verdict", 0.0) for r in rs])
    ing = med([r["steps"]["collected->verdict"] / r["replay_s"] for r in rs
               if "collected->verdict" in r["steps"] and r["replay_s"] > 0])
    need = (fixed / (GOAL - ing)) if fixed is not None and ing is not None and ing < GOAL \
        else None
    return {"fixed_overhead_s": fixed, "ingest_fraction_of_replay": ing,
            "wall_for_goal_scaling_s": need}


def fmt(x, w=9, p=3):
    return f"{'-':>{w}}" if x is None else f"{x:>{w}.{p}f}"


def report(res: dict, a, load0, load1, elapsed: float, code: dict) -> dict:
    by_host = res["by_host"]
    groups = {}
    for h, rs in sorted(by_host.items()):
        groups[h] = [r for r in rs if not r["first_on_host"]] or rs
    groups["all"] = [r for g in list(groups.values()) for r in g]
    firsts = [r for rs in by_host.values() for r in rs if r["first_on_host"]]
    sums = {g: summarise(rs, a.tokens) for g, rs in groups.items() if rs}
    first_sum = summarise(firsts, a.tokens) if firsts else None
    out = {"config": {"runs_per_host": a.runs, "tokens": a.tokens, "threads": a.threads,
                      "passes": a.passes, "layers": a.layers, "experts": a.experts,
                      "expert_bytes": a.expert_bytes,
                      "pool_bytes": a.layers * a.experts * a.expert_bytes},
           "loadavg_before": list(load0), "loadavg_after": list(load1),
           "campaign_s": elapsed, "code": code, "goal_fraction": GOAL, "steady": sums,
           "first_runs": first_sum,
           "failed_runs": res["bad"],
           "runs": [{k: v for k, v in r.items() if k not in ("start", "end")}
                    for r in res["runs"]]}
    if a.json:
        print(json.dumps(out, indent=1))
        return out
    c = out["config"]
    print(f"\nnetns lab, 2 hosts in parallel; pool {c['layers']}x{c['experts']} x "
          f"{c['expert_bytes']} B = {c['pool_bytes'] / 2**20:.0f} MiB per host; {a.tokens} "
          f"tokens, {a.passes} passes, {a.threads} threads; {a.runs} runs per host; "
          f"kernel {os.uname().release}, {os.cpu_count()} CPUs")
    print(f"load average before {' '.join(f'{x:.2f}' for x in load0)}, after "
          f"{' '.join(f'{x:.2f}' for x in load1)}; campaign {elapsed:.1f} s")
    dirty = " + uncommitted changes" if code["modified_vs_head"] else ""
    print(f"code: HEAD {code['head']}{dirty}"
          f"; executor.py {code['sha256_12']['bench/execute/campaign/executor.py']}, runner.py "
          f"{code['sha256_12']['agents/runner.py']}, ingest.py "
          f"{code['sha256_12']['bench/store/ingest.py']}")
    if res["bad"]:
        print(f"\n{len(res['bad'])} run(s) without a clean verdict (left out):")
        for b in res["bad"]:
            print(f"  {b['host']} {b['run_id']} state {b['state']}")
            for m in b["journal"]:
                print(f"      {m}")
    print("\nper run (medians; each host's first run, which builds the agent and writes the "
          "pool, left out)")
    hdr = (f"{'group':<14}{'runs':>5}{'wall s':>9}{'replay s':>10}{'ovh s':>9}{'ovh %':>8}"
           f"{'2% at s':>10}{'~tokens':>9}  goal")
    print(hdr)
    rows = list(sums.items()) + ([("first runs", first_sum)] if first_sum else [])
    for g, s in rows:
        print(f"{g:<14}{s['runs']:>5}{fmt(s['wall_s'])}{fmt(s['replay_s'], 10)}"
              f"{fmt(s['overhead_s'])}{fmt(100 * s['fraction'], 8, 2)}"
              f"{fmt(s['wall_for_goal_s'], 10, 1)}{s['tokens_for_goal'] or 0:>9}  "
              f"{'meets 2%' if s['meets_goal'] else 'MISSES 2%'}")
    cols = [g for g in sums]
    print("\njournaled steps, median seconds")
    print(f"{'step':<26}" + "".join(f"{g:>13}" for g in cols) + "   what")
    for k in ("planned->boot_verified",) + STEPS:
        print(f"{k:<26}" + "".join(fmt(sums[g]["steps"].get(k), 13) for g in cols)
              + f"   {STEP_NOTE[k]}")
    print(f"{'ingest per 1000 iterations':<26}"
          + "".join(fmt(sums[g]["ingest_s_per_1000_iterations"], 13) for g in cols)
          + f"   (plan: {sums['all']['iterations']:.0f} iterations per pass; this part "
            "grows with the run)")
    print("\noverhead = fixed part + ingest (which grows with the iterations)")
    print(f"{'group':<14}{'fixed s':>9}{'ingest/replay %':>17}{'2% at s, ingest scaling':>25}")
    for g, s in sums.items():
        need = s["wall_for_goal_scaling_s"]
        ing = s["ingest_fraction_of_replay"]
        need_txt = f"{need:.1f}" if need is not None else "never (ingest >= 2%)"
        print(f"{g:<14}{fmt(s['fixed_overhead_s'])}"
              f"{fmt(None if ing is None else 100 * ing, 17, 2)}{need_txt:>25}")
    keys = []
    for g in cols:
        keys += [k for k in sums[g]["host_side"] if k not in keys]
    if keys:
        print("\nrunning->collected in detail (runner status history), median seconds")
        for k in keys:
            print(f"{k:<52}" + "".join(fmt(sums[g]["host_side"].get(k), 10) for g in cols))
        print(f"{'replay (agent timed passes)':<52}"
              + "".join(fmt(sums[g]["replay_s"], 10) for g in cols))
    print("\nall runs: host run_id wall replay overhead (s) [first = agent build + pool]")
    for r in res["runs"]:
        print(f"  {r['host']} {r['run_id']:<40} {r['wall_s']:7.2f} {r['replay_s']:7.2f} "
              f"{r['overhead_s']:6.2f} {r['verdict']}{'  first' if r['first_on_host'] else ''}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5, help="repetitions per host (default 5)")
    ap.add_argument("--tokens", type=int, default=1500,
                    help="synthetic trace length: longer runs (default 1500: ~1500 iterations, "
                         "a few seconds per pass on a 2-core box)")
    ap.add_argument("--threads", type=int, default=4, help="agent threads (default 4)")
    ap.add_argument("--passes", type=int, default=2, help="replay passes per run (default 2)")
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--expert-bytes", type=int, default=128 << 10)
    ap.add_argument("--prefix", default="bov", help="lab bridge prefix (default bov)")
    ap.add_argument("--subnet", default="10.200.93", help="lab subnet (default 10.200.93)")
    ap.add_argument("--keep", action="store_true",
                    help="keep the temporary directory (database, bundles) for inspection")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the executor's log")
    ap.add_argument("--json", action="store_true", help="JSON on stdout instead of tables")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (network namespaces, sshd, drop_caches)", file=sys.stderr)
        return 2
    missing = missing_capabilities()
    if missing:
        print("netns lab unavailable: missing " + ", ".join(missing), file=sys.stderr)
        return 2
    if a.runs < 1 or a.tokens < 2:
        print("--runs >= 1 and --tokens >= 2", file=sys.stderr)
        return 2
    pool = a.layers * a.experts * a.expert_bytes
    if pool > MAX_POOL:
        print(f"pool {pool} B > {MAX_POOL} B: keep it small (it is written twice, once per "
              "lab host)", file=sys.stderr)
        return 2
    code = code_version()
    tmp = Path(tempfile.mkdtemp(prefix="bench-perf-ovh-"))
    lab = Lab(tmp / "lab")
    store = None
    t0 = time.time()

    def log(m):
        if a.verbose:
            print(f"{time.time() - t0:8.2f} {m}", file=sys.stderr, flush=True)
    try:
        load0 = os.getloadavg()
        log(f"load average {load0}; lab up in {tmp / 'lab'}")
        lab.up(2, prefix=a.prefix, subnet=a.subnet)
        matrix = tmp / "campaign-overhead.toml"
        matrix.write_text(matrix_toml(a))
        data_dir = tmp / "data"
        db = f"sqlite:///{tmp / 'bench.db'}"
        cid = "ovh-" + time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        plan, exp, m = build_plan(str(matrix), NAMES, lab.hosts_dir, 1, cid)
        if exp.as_dict()["skipped"]:
            print(f"matrix skipped cells: {exp.as_dict()['skipped']}", file=sys.stderr)
            return 1
        settings = Settings(threads=a.threads, passes=a.passes, retries=0, data_dir=data_dir,
                            db_url=db, hosts_dir=lab.hosts_dir)
        store = open_store(db)
        create(store, plan, exp, m, NAMES, settings, str(matrix))
        log(f"campaign {cid}: {len(plan.runs)} runs")
        t_start = time.time()
        result = Executor(store, cid, settings, on_event=lambda e: log(e.line())).run()
        elapsed = time.time() - t_start
        load1 = os.getloadavg()
        state = campaign_row(store, cid).state
        res = analyse(store, cid, data_dir, t_start)
        if not res["runs"]:
            print(f"campaign {cid} ended {state} ({result.state}) without a clean run:",
                  file=sys.stderr)
            for b in res["bad"]:
                print(f"  {b['host']} {b['run_id']} {b['state']}: " + " | ".join(b["journal"]),
                      file=sys.stderr)
            for j in journal_rows(store, cid, kinds=("warning", "quarantine")):
                print(f"  journal {j.kind}: {j.message}", file=sys.stderr)
            return 1
        out = report(res, a, load0, load1, elapsed, code)
        return 0 if state == "done" and not res["bad"] and out["steady"]["all"]["runs"] else 1
    finally:
        if store is not None:
            store.close()
        try:
            lab.down()
        finally:
            if a.keep:
                print(f"kept {tmp}", file=sys.stderr)
            else:
                shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
