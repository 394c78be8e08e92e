"""A campaign's progress, folded from what the store holds: the campaign row, its run rows and
its journal, with the time (`now`) passed in. Pure: the live view, `bench watch` and tests
call it with rows from the database (bench.execute.campaign.watch) or with rows of their own.

Per host: its phase (from the current run's state, refined by the runner's live phase), the
current run and cell, pass and iteration, elapsed time, ETA and runs done; overall: counts per
state, the last verdicts, quarantines and warnings. Run and reboot durations are measured from
the journal (a run from leaving planned/pending/failed to its verdict; reboots as journaled),
falling back to the campaign's estimates until one is measured."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime

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
    durations: list[float] = field(default_factory=list)
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
            if j.get("to") in TERMINAL:
                if run.run_id in seen.first:
                    seen.durations.append(t - seen.first[run.run_id])
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


def _host(h: str, mine: list[RunRow], rec: dict, seen: _Seen, run_s: float, reboot_s: float,
          now: float) -> HostProgress:
    """One host's line, from its own runs (`mine`)."""
    active = [r for r in mine if r.state not in TERMINAL + ("planned", "failed", "pending")]
    cur = active[0] if active else None
    left = [r for r in mine if r.state not in TERMINAL + ("failed",)]
    boots = {json.dumps((rec.get("runs", {}).get(r.run_id) or {}).get("boot"), sort_keys=True)
             for r in left if r.state == "planned"}
    elapsed = now - seen.first[cur.run_id] if cur and cur.run_id in seen.first else None
    eta = len(left) * run_s - min(elapsed or 0, run_s) + max(0, len(boots) - 1) * reboot_s
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
                        quarantined=seen.quarantined.get(h))


def fold(campaign: CampaignRow, runs: list[RunRow], journal: list[JournalRow],
         controller: dict | None, now: float) -> Progress:
    """The progress snapshot (module doc) of one campaign at time `now` (epoch seconds)."""
    rec = next((j.data for j in journal if j.kind == "plan"), None) or {}
    est = rec.get("estimates") or {}
    seen = _read_journal(journal, {r.ref: r for r in runs})
    run_s = (sorted(seen.durations)[len(seen.durations) // 2] if seen.durations
             else float(est.get("run_seconds") or 900))
    reboot_s = (sum(seen.reboots) / len(seen.reboots) if seen.reboots
                else float(est.get("reboot_seconds") or 600))
    names = rec.get("hosts") or sorted({r.host for r in runs})
    by_host: dict[str, list[RunRow]] = {}
    for r in runs:          # once, not once per host: a tick stays linear in the runs
        by_host.setdefault(r.host, []).append(r)
    hosts = [_host(h, by_host.get(h, []), rec, seen, run_s, reboot_s, now) for h in names]
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.state] = counts.get(r.state, 0) + 1
    return Progress(campaign=campaign.id, matrix=campaign.matrix, seed=campaign.seed,
                    state=campaign.state, controller=controller, total=len(runs),
                    finished=sum(counts.get(s, 0) for s in TERMINAL),
                    failed=counts.get("failed", 0), counts=counts, hosts=hosts,
                    eta_s=max((h.eta_s for h in hosts), default=0.0), run_seconds=run_s,
                    reboot_seconds=reboot_s, verdicts=seen.verdicts[-6:],
                    warnings=seen.warnings[-5:], quarantined=seen.quarantined,
                    last_journal_id=journal[-1].id if journal else 0)
