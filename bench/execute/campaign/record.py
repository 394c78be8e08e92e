"""A campaign's record: the settings it runs with and what the journal keeps of its schedule
(journal kind "plan", for historical reasons: the name of the record is the campaign record),
enough to resume without the matrix file (per run: host, cell, boot, estimate, the candidates
for a hand-over). `create` writes the campaign, its record and its planned runs; `resume_action`
(pure) decides what a resuming executor does with a run in each state."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.errors import FormatError, InputError, SafetyError
from bench.execute.hostrun import SpecRefused
from bench.matrix.expand import Expansion
from bench.matrix.load import Matrix
from bench.matrix.schedule import Schedule
from bench.plan.planinfo import PlanInfo
from bench.store.campaigns import (add_run, campaign_row, create_campaign, journal, journal_rows,
                                   run_rows)
from bench.store.db import Store, StoreError
from bench.store.states import NOT_STARTED, STATES, TERMINAL


@dataclass
class Settings:
    threads: int = 8
    passes: int = 2
    retries: int = 2
    data_dir: Path | None = None
    db_url: str | None = None
    hosts_dir: Path | None = None
    reconnect_timeout_s: float | None = None
    chunk_s: float = 10.0           # how often the live view hears from a running host
    run_timeout_s: float = 6 * 3600.0
    lock_stale_s: float = 60.0
    heartbeat_s: float = 5.0
    host_lock_wait_s: float = 120.0
    retry_pause_s: float = 2.0
    cgroup_headroom_bytes: int | None = None   # None: the matrix's protocol.cgroup_headroom
    balloon_max_bytes: int | None = None       # None: the matrix's protocol.balloon_max
    ingest: bool = True             # False: runs stop `collected` (`bench run --no-ingest`)

    def as_dict(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()
                if k not in ("db_url", "ingest")}     # choices of one invocation, not kept

    @classmethod
    def from_record(cls, rec: dict, **over: object) -> "Settings":
        """The settings a campaign was created with, then `over` where not None."""
        s = cls()
        for k, v in (rec.get("settings") or {}).items():
            if hasattr(s, k) and k != "db_url":
                setattr(s, k, Path(v) if k in ("data_dir", "hosts_dir") and v else v)
        for k, v in over.items():
            if v is not None:
                setattr(s, k, v)
        return s


def boot_key(b: dict | None) -> tuple:
    """(mem bytes, lru_gen) of a boot config as the record keeps it."""
    b = b or {}
    return (b.get("mem_bytes"), b.get("lru_gen"))


# what the record keeps of each host's planning facts (bench.execute.campaign.preflight)
PLANNING_FACTS = ("kernel", "arch", "boot_id", "mem", "mem_total_bytes", "mem_available_bytes",
                  "mglru", "cgroup", "python3")


def planning_facts(preflight) -> dict:
    """host -> the facts the plan was made with (PLANNING_FACTS) and where they came from."""
    if preflight is None:
        return {}
    out = {}
    for host, f in preflight.facts.items():
        out[host] = {k: f.get(k) for k in PLANNING_FACTS if k in f}
        out[host]["source"] = preflight.sources.get(host)
    return out


def campaign_record(schedule: Schedule, expansion: Expansion, matrix: Matrix,
                    host_names: list[str], settings: Settings, matrix_ref: str,
                    preflight=None) -> dict:
    """What the journal keeps of a scheduled campaign (module doc): also the cells skipped at
    planning time with their reasons, and the facts the plan was made with."""
    cands = {}
    for request in expansion.requests:
        for c in request.candidates:
            cands[(request.point, request.rep, c.host)] = request
    runs = {}
    for r in schedule.runs:
        req = cands.get((r.point, r.rep, r.host))
        cl = [{"host": c.host, "cell": c.cell, "boot": c.boot.as_dict()}
              for c in (req.candidates if req else ())]
        runs[r.run_id] = {"host": r.host, "cell": r.cell, "point": r.point, "rep": r.rep,
                          "position": r.position, "boot": r.boot.as_dict(),
                          "reboot_before": r.reboot_before, "estimate_s": r.estimate_s,
                          "estimate_n": r.estimate_n, "candidates": cl,
                          "placement": "one" if len(cl) > 1 else "each"}
        if r.pair:      # engine runs: their place in a balanced pair
            runs[r.run_id]["pair"] = r.pair
    return {"campaign": schedule.campaign, "seed": schedule.seed, "matrix": matrix.name,
            "matrix_ref": matrix_ref, "scale": matrix.scale,
            "protocol": dict(matrix.protocol or {}),
            "workload": dict(matrix.workload), "hosts": host_names,
            "estimates": {"run_seconds": schedule.run_seconds,
                          "reboot_seconds": schedule.reboot_seconds,
                          # per host: one reboot's estimate (n: reboots measured behind it)
                          "reboots_by_host": {h.host: {"seconds": h.reboot.seconds,
                                                       "n": h.reboot.n}
                                              for h in schedule.hosts}},
            # what the report sets the campaign's duration and reboots against
            "estimate": {"estimate_s": schedule.estimate_s, "reboots": schedule.reboots,
                         "reboot_lower_bound": sum(h.lower_bound for h in schedule.hosts)},
            "settings": settings.as_dict(), "runs": runs,
            "skipped": [asdict(x) for x in expansion.skipped],
            "skipped_runs": expansion.skipped_runs,
            "facts": planning_facts(preflight),
            "order": [r.run_id for r in schedule.runs]} | (
                {"engine": matrix.engine.as_dict()} if matrix.engine else {})


def create(store: Store, schedule: Schedule, expansion: Expansion, matrix: Matrix,
           host_names: list[str], settings: Settings, matrix_ref: str,
           preflight=None) -> str:
    """Create the campaign in the store: campaign row, its record in the journal, planned
    runs. A controller killed half-way through is finished here, not doubled. A schedule
    without runs is refused (InputError): nothing would run."""
    if not schedule.runs:
        raise InputError(f"campaign {schedule.campaign}: the plan has no run",
                         hint="every cell was skipped: `bench schedule --dry-run` says why")
    rec = campaign_record(schedule, expansion, matrix, host_names, settings, matrix_ref,
                          preflight)
    cid = schedule.campaign
    if campaign_row(store, cid) is not None:
        if journal_rows(store, cid, kinds=("plan",)):
            raise StoreError(f"campaign {cid} exists",
                             hint=f"`bench resume {cid}`, or pick another --campaign")
    else:
        create_campaign(store, cid, matrix=matrix.name, workload=dict(matrix.workload),
                        seed=schedule.seed)
    journal(store, "plan", f"plan: {len(rec['runs'])} runs on {', '.join(host_names)}, "
            f"{schedule.reboots} reboots, estimate {schedule.estimate_s:.0f}s",
            campaign_id=cid, data=rec)
    ensure_runs(store, cid, rec)
    return cid


def plans_record(plan: PlanInfo, path: Path, hint_plans: Mapping[str, PlanInfo]) -> dict:
    """The plans `bench run` made (its trace, its --hints), kept in its campaign's record so
    that the executor and `bench resume` ship exactly those."""
    return {"plan": asdict(plan), "path": str(Path(path).absolute()),
            "hints": {label: asdict(p) for label, p in hint_plans.items()}}


def recorded_plans(d: dict) -> tuple[PlanInfo, Path, dict[str, PlanInfo]]:
    return (PlanInfo(**d["plan"]), Path(d["path"]),
            {label: PlanInfo(**p) for label, p in (d.get("hints") or {}).items()})


def ensure_runs(store: Store, campaign_id: str, rec: dict) -> None:
    """Add the record's runs that are not in the store yet (a controller killed mid-create)."""
    have = {r.run_id for r in run_rows(store, campaign_id)}
    for rid in rec["order"]:
        if rid not in have:
            r = rec["runs"][rid]
            add_run(store, campaign_id, rid, host=r["host"], cell=r["cell"],
                    position=r["position"], repetition=r["rep"])


def load_record(store: Store, campaign_id: str) -> dict:
    """The campaign's record; a campaign `bench run` added runs to (bench.execute.campaign.
    onerun) has one record per call: its runs are all of theirs, its plans the newest's."""
    rows = journal_rows(store, campaign_id, kinds=("plan",))
    if not rows:
        raise StoreError(f"campaign {campaign_id} has no plan in its journal",
                         hint="it was not created by `bench schedule` or `bench run`")
    rec = dict(rows[-1].data or {})
    if len(rows) > 1:
        recs = [r.data or {} for r in rows]
        rec["runs"] = {k: v for r in recs for k, v in (r.get("runs") or {}).items()}
        rec["order"] = [rid for r in recs for rid in r.get("order") or ()]
        rec["hosts"] = sorted({h for r in recs for h in r.get("hosts") or ()})
    return rec


# the attempts of a run whose failure is final (a deterministic input error): more than any
# number of retries, so that neither this executor nor a `bench resume` tries it again
FINAL = 1 << 30


def deterministic(exc: BaseException) -> bool:
    """Whether a run's failure is its own input refused, so that a retry would meet the same
    refusal: an InputError or SafetyError (its cell refused on its host by the preflight, a
    spec bench will not build, a reboot refused below the floor) or the host runner refusing
    the spec (exit 2). Not a FormatError: a file that came back malformed from a host (a
    bundle) may come back whole, so it keeps its retries like every infrastructure error."""
    if isinstance(exc, SpecRefused):
        return True
    return isinstance(exc, (InputError, SafetyError)) and not isinstance(exc, FormatError)


def attempts_of(store: Store, campaign_id: str) -> dict[str, int]:
    """Failures per run (journal entries into `failed`), by run_id; FINAL for a run whose
    failure was deterministic (`deterministic` in the entry's data)."""
    by_ref = {r.ref: r.run_id for r in run_rows(store, campaign_id)}
    out: dict[str, int] = {}
    for j in journal_rows(store, campaign_id, kinds=("state",)):
        if j.get("to") == "failed" and j.run_ref in by_ref:
            rid = by_ref[j.run_ref]
            out[rid] = FINAL if j.get("deterministic") else out.get(rid, 0) + 1
    return out


def outcome(finished: Sequence[str], refused: int = 0, skipped_runs: int = 0,
            left: int = 0) -> dict[str, int]:
    """A campaign's counts for its final line, from the states of its finished runs (those
    no executor will take up again): validated, rejected, failed (of which `refused` on a
    deterministic input error, never retried); the runs skipped at planning (the cells a
    host cannot run took them out of the matrix) and the runs left (`bench resume`)."""
    return {"validated": sum(1 for s in finished if s == "validated"),
            "rejected": sum(1 for s in finished if s == "rejected"),
            "failed": sum(1 for s in finished if s == "failed"),
            "refused": refused, "skipped": skipped_runs, "left": left}


def outcome_line(c: Mapping[str, int]) -> str:
    """`8 validated, 2 rejected, 2 failed (1 not retried: input refused), 4 skipped at
    planning[, 1 left]`."""
    failed = f"{c['failed']} failed" + (f" ({c['refused']} not retried: input refused)"
                                        if c.get("refused") else "")
    return (f"{c['validated']} validated, {c['rejected']} rejected, {failed}, "
            f"{c['skipped']} skipped at planning" + (f", {c['left']} left" if c.get("left")
                                                     else ""))


def resume_action(state: str, has_spec: bool, attempts: int = 0, retries: int = 2) -> str:
    """What a (resuming) executor does with a run in `state`: 'skip' (finished), 'give-up'
    (failed with no attempt left), 'ingest' (bundle collected: ingest and judge), 'reattach'
    (started on its host: status/wait by run id, start from the stored spec if unknown there),
    'redo' (not started: from the top, idempotent steps)."""
    if state not in STATES:
        raise InputError(f"unknown run state {state!r}")
    if state in TERMINAL:
        return "skip"
    if state == "failed" and attempts > retries:
        return "give-up"
    if state in ("collected", "ingested"):
        return "ingest"
    if state == "running" or has_spec:      # the runner may hold it: never from the top
        return "reattach"
    assert state in NOT_STARTED + ("pending", "failed"), state
    return "redo"
