"""A campaign's progress, folded from what the store holds: the campaign row, its run rows and
its journal, with the time (`now`) passed in. Pure: the live view, `bench watch` and tests
call it with rows from the database (bench.execute.campaign.watch) or with rows of their own.

Per host: its phase (from the current run's state, refined by the runner's live phase), the
current run and cell, pass and iteration, elapsed time, ETA and runs done; overall: counts per
state, the last verdicts, quarantines and warnings. Run and reboot durations are measured from
the journal (a run from its last entering boot_verified to its verdict, as
bench.store.durations measures earlier campaigns' runs; reboots as journaled), per host and
cell, falling back to the plan's estimate of each run (itself measured from earlier campaigns
where the database had them, else modelled; bench.matrix.estimate) until one is measured. A
host's ETA counts only the reboots its plan still has before it (the runs planned with
reboot_before), never a reboot of a host the plan does not reboot; each figure says whether
it was measured or modelled."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime

from bench.matrix.estimate import Estimate, sources
from bench.store.rows import CampaignRow, JournalRow, RunRow
from bench.store.states import TERMINAL

_PHASES = {"booting": "rebooting", "boot_verified": "deploying", "deployed": "starting",
           "running": "running", "collected": "ingesting"}
LIVE_PHASES = ("warmup", "measuring", "collecting")


@dataclass
class HostProgress:
    host: str
    phase: str
    run_id: str | None = None
    pass_no: int | None = None
    passes: int | None = None
    iteration: int | None = None
    iterations: int | None = None
    cell: str | None = None
    state: str | None = None
    elapsed_s: float | None = None
    eta_s: float = 0.0
    done: int = 0
    total: int = 0
    quarantined: str | None = None

    def as_dict(self) -> dict:
        d = asdict(self)
        d["pass"] = d.pop("pass_no")
        return {k: d[k] for k in ("host", "phase", "run_id", "pass", "passes", "iteration",
                                  "iterations", "cell", "state", "elapsed_s", "eta_s", "done",
                                  "total", "quarantined")}


@dataclass
class Progress:
    campaign: str
    matrix: str | None
    seed: int | None
    state: str
    controller: dict | None
    total: int
    finished: int
    failed: int
    counts: dict[str, int]
    hosts: list[HostProgress]
    eta_s: float
    run_seconds: float
    reboot_seconds: float
    run_source: str = "modelled"        # what the ETA's run times rest on
    reboot_source: str = "modelled"
    reboots_left: int = 0               # over all hosts: the plan's reboots not yet done
    verdicts: list[dict] = field(default_factory=list)
    warnings: list[dict] = field(default_factory=list)
    quarantined: dict[str, str | None] = field(default_factory=dict)
    last_journal_id: int = 0

    def as_dict(self) -> dict:
        d = asdict(self)
        d["hosts"] = [h.as_dict() for h in self.hosts]
        return d


@dataclass
class _Seen:
    """What the journal says, run by run."""
    first: dict[str, float] = field(default_factory=dict)     # run -> left planned/pending
    start: dict[str, float] = field(default_factory=dict)     # run -> entered boot_verified
    durations: dict[tuple[str, str], list[float]] = field(default_factory=dict)  # (host, cell)
    reboots: list[float] = field(default_factory=list)
    verdicts: list[dict] = field(default_factory=list)
    warnings: list[dict] = field(default_factory=list)
    quarantined: dict[str, str | None] = field(default_factory=dict)
    live: dict[str, dict] = field(default_factory=dict)


def _ts(s: str) -> float:
    return datetime.fromisoformat(s).timestamp()


def _read_journal(journal: list[JournalRow], by_ref: dict[int, RunRow]) -> _Seen:
    seen = _Seen()
    for j in journal:
        t = _ts(j.t)
        run = by_ref.get(j.run_ref) if j.run_ref is not None else None
        if j.kind == "state" and run is not None:
            if j.get("from") in ("planned", "pending", "failed") and run.run_id not in seen.first:
                seen.first[run.run_id] = t
            if j.get("to") == "boot_verified":
                seen.start[run.run_id] = t
            if j.get("to") in TERMINAL:
                if run.run_id in seen.start:
                    seen.durations.setdefault((run.host, run.cell), []).append(
                        t - seen.start.pop(run.run_id))
                seen.verdicts.append({"t": j.t, "run_id": run.run_id, "verdict": j.get("to"),
                                      "message": j.message.split(": ", 1)[-1]})
        elif j.kind == "reboot" and j.get("seconds"):
            seen.reboots.append(float(j.get("seconds")))
        elif j.kind == "quarantine":
            seen.quarantined[j.get("host")] = j.get("reason")
        elif j.kind == "warning":
            seen.warnings.append({"t": j.t, "message": j.message})
        elif j.kind == "handover":
            seen.quarantined.setdefault(j.get("from"), "quarantined")
        elif j.kind == "live" and run is not None:
            seen.live[run.run_id] = j.data or {}
    return seen


def _reboots_left(planned: list[RunRow], recs: dict) -> int:
    """The reboots the plan still has before these planned runs: those marked reboot_before
    (a campaign planned before that mark: one per boot config past the first)."""
    marks = [(recs.get(r.run_id) or {}).get("reboot_before") for r in planned]
    if planned and all(m is not None for m in marks):
        return sum(1 for m in marks if m)
    boots = {json.dumps((recs.get(r.run_id) or {}).get("boot"), sort_keys=True) for r in planned}
    return max(0, len(boots) - 1)


def _run_estimate(r: RunRow, recs: dict, seen: _Seen, fallback: Estimate) -> Estimate:
    """How long run r takes: this campaign's runs of its cell on its host, else the plan's
    estimate when that was measured, else this campaign's runs of any cell, else the plan's
    (modelled) estimate, else the matrix's figure."""
    mine = seen.durations.get((r.host, r.cell))
    if mine:
        return Estimate(sorted(mine)[len(mine) // 2], len(mine))
    planned = recs.get(r.run_id) or {}
    n = int(planned.get("estimate_n") or 0)
    if n and planned.get("estimate_s") is not None:
        return Estimate(float(planned["estimate_s"]), n)
    if fallback.n or planned.get("estimate_s") is None:
        return fallback
    return Estimate(float(planned["estimate_s"]))


def _host(h: str, mine: list[RunRow], recs: dict, seen: _Seen, run_est, reboot: Estimate,
          now: float) -> tuple[HostProgress, list[Estimate], int]:
    """One host's line, from its own runs (`mine`), with the run estimates and the count of
    reboots its ETA rests on."""
    active = [r for r in mine if r.state not in TERMINAL + ("planned", "failed", "pending")]
    cur = active[0] if active else None
    left = [r for r in mine if r.state not in TERMINAL + ("failed",)]
    reboots = _reboots_left([r for r in left if r.state == "planned"], recs)
    elapsed = now - seen.first[cur.run_id] if cur and cur.run_id in seen.first else None
    ests = [run_est(r) for r in left]
    cur_s = run_est(cur).seconds if cur else 0.0
    eta = sum(e.seconds for e in ests) - min(elapsed or 0, cur_s) + reboots * reboot.seconds
    if h in seen.quarantined:
        phase = "quarantined"
    elif cur is not None:
        phase = _PHASES.get(cur.state, cur.state)
    else:
        phase = "done" if not left else "waiting"
    lv = seen.live.get(cur.run_id, {}) if cur and cur.state == "running" else {}
    if lv.get("phase") in LIVE_PHASES:
        phase = lv["phase"]
    return HostProgress(h, phase, run_id=cur.run_id if cur else None, pass_no=lv.get("pass"),
                        passes=lv.get("passes"), iteration=lv.get("iteration"),
                        iterations=lv.get("iterations"), cell=cur.cell if cur else None,
                        state=cur.state if cur else None, elapsed_s=elapsed,
                        eta_s=max(0.0, eta) if left else 0.0,
                        done=sum(1 for r in mine if r.state in TERMINAL), total=len(mine),
                        quarantined=seen.quarantined.get(h)), ests, reboots


def fold(campaign: CampaignRow, runs: list[RunRow], journal: list[JournalRow],
         controller: dict | None, now: float) -> Progress:
    """The progress snapshot (module doc) of one campaign at time `now` (epoch seconds)."""
    rec = next((j.data for j in journal if j.kind == "plan"), None) or {}
    est = rec.get("estimates") or {}
    recs = rec.get("runs") or {}
    seen = _read_journal(journal, {r.ref: r for r in runs})
    measured = sorted(x for xs in seen.durations.values() for x in xs)
    fallback = (Estimate(measured[len(measured) // 2], len(measured)) if measured
                else Estimate(float(est.get("run_seconds") or 900)))
    planned_reboot = (est.get("reboots_by_host") or {})
    names = rec.get("hosts") or sorted({r.host for r in runs})
    by_host: dict[str, list[RunRow]] = {}
    for r in runs:          # once, not once per host: a tick stays linear in the runs
        by_host.setdefault(r.host, []).append(r)

    def reboot_of(h: str) -> Estimate:
        if seen.reboots:
            return Estimate(sum(seen.reboots) / len(seen.reboots), len(seen.reboots))
        p = planned_reboot.get(h) or {}
        if p.get("seconds") is not None:
            return Estimate(float(p["seconds"]), int(p.get("n") or 0))
        return Estimate(float(est.get("reboot_seconds") or 600))

    def run_est(r: RunRow) -> Estimate:
        return _run_estimate(r, recs, seen, fallback)
    hosts, ests, reboot_ests = [], [], []
    for h in names:
        hp, es, nb = _host(h, by_host.get(h, []), recs, seen, run_est, reboot_of(h), now)
        hosts.append(hp)
        ests += es
        reboot_ests += [reboot_of(h)] * nb
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.state] = counts.get(r.state, 0) + 1
    run_s = (sorted(e.seconds for e in ests)[len(ests) // 2] if ests else fallback.seconds)
    return Progress(campaign=campaign.id, matrix=campaign.matrix, seed=campaign.seed,
                    state=campaign.state, controller=controller, total=len(runs),
                    finished=sum(counts.get(s, 0) for s in TERMINAL),
                    failed=counts.get("failed", 0), counts=counts, hosts=hosts,
                    eta_s=max((h.eta_s for h in hosts), default=0.0), run_seconds=run_s,
                    reboot_seconds=(reboot_ests[0].seconds if reboot_ests
                                    else reboot_of(names[0]).seconds if names else 0.0),
                    run_source=sources(ests) if ests else fallback.source,
                    reboot_source=sources(reboot_ests), reboots_left=len(reboot_ests),
                    verdicts=seen.verdicts[-6:],
                    warnings=seen.warnings[-5:], quarantined=seen.quarantined,
                    last_journal_id=journal[-1].id if journal else 0)
