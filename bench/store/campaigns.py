"""Campaigns in the store: the campaign row, its planned runs, run state changes, hand-overs,
live progress rows and the journal, read back as typed rows (bench.store.rows).

Every run state change goes through `transition`, which reads the old state, checks the move
against the state machine (bench.store.states) and writes the state with a journal entry
(kind "state", data {"from", "to", ...}), all in one transaction. The controller lock lives
in bench.store.controller_lock."""

from __future__ import annotations

from datetime import datetime, timezone

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from bench.matrix.cells import parse_cell
from bench.store.db import Store, StoreError, get_or_create, referenced
from bench.store.models import Campaign, Cell, Host, JournalEntry, Run
from bench.store.rows import CampaignRow, JournalRow, RunRow
from bench.store.states import (CAMPAIGN_FINISHED, INITIAL, check_state,
                                check_transition)
from bench.store.workloads import workload_id


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _iso(t: datetime | None) -> str | None:
    if t is None:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.isoformat()


def host_row(s: Session, name: str) -> Host:
    """The hosts row of `name`, created if missing (race-free: bench.store.db.get_or_create)."""
    return get_or_create(s, Host, name=name)


def cell_row(s: Session, name: str) -> Cell:
    """The cells row of a cell name, created (with its parsed axes) if missing (race-free)."""
    c = parse_cell(name)
    return get_or_create(s, Cell, dict(capacity_bytes=c.capacity_bytes, mechanism=c.mechanism,
                                       reclaim=c.reclaim, mode=c.mode, hints=c.hints,
                                       delivery=c.delivery), name=c.name)


def _run(s: Session, run_id: str) -> Run:
    run = s.scalar(select(Run).where(Run.run_id == run_id))
    if run is None:
        raise StoreError(f"no run {run_id}")
    return run


# writing ----------------------------------------------------------------------------------------

def create_campaign(store: Store, campaign_id: str, *, matrix: str | None = None,
                    workload: dict | None = None, seed: int | None = None,
                    note: str | None = None) -> str:
    with store.session() as s, s.begin():
        if s.get(Campaign, campaign_id) is not None:
            raise StoreError(f"campaign {campaign_id} exists", hint="resume it or pick a new id")
        s.add(Campaign(id=campaign_id, matrix=matrix, workload=workload, seed=seed,
                       state="planned", note=note))
        s.flush()
        s.add(JournalEntry(campaign_id=campaign_id, kind="campaign",
                           message=f"created campaign {campaign_id} ({matrix or 'ad hoc'})",
                           data={"seed": seed}))
    return campaign_id


def add_run(store: Store, campaign_id: str, run_id: str, *, host: str, cell: str,
            position: int, repetition: int = 0, state: str = "planned") -> int:
    check_state(state)
    if state not in INITIAL:
        raise StoreError(f"run {run_id}: a run starts {' or '.join(INITIAL)}, not {state}")
    with store.session() as s, s.begin():
        if s.get(Campaign, campaign_id) is None:
            raise StoreError(f"no campaign {campaign_id}")
        run = Run(run_id=run_id, campaign_id=campaign_id, host_id=host_row(s, host).id,
                  cell_id=cell_row(s, cell).id, position=position, repetition=repetition,
                  state=state)
        s.add(run)
        s.flush()
        s.add(JournalEntry(campaign_id=campaign_id, run_ref=run.id, kind="run",
                           message=f"{run_id}: {state} ({cell} on {host}, #{position})"))
        return run.id


def transition(store: Store, run_id: str, state: str, message: str = "",
               data: dict | None = None, *, spec: dict | None = None,
               clear_spec: bool = False) -> str:
    """The one way a run's state changes: checked against the state machine, written with
    its journal entry (and optionally the spec) in one transaction. Returns the old state;
    raises IllegalTransition (nothing written) for a move the machine does not allow."""
    with store.session() as s, s.begin():
        run = _run(s, run_id)
        old = run.state
        check_transition(run_id, old, state)
        run.state = state
        if spec is not None:
            run.spec, run.workload_id = spec, workload_id(s, spec)
        if clear_spec:
            run.spec, run.workload_id = None, None
        d = {"from": old, "to": state, **(data or {})}
        s.add(JournalEntry(campaign_id=run.campaign_id, run_ref=run.id, kind="state",
                           message=f"{run_id}: {old} -> {state}" + (f": {message}" if message
                                                                    else ""), data=d))
        return old


def reassign(store: Store, run_id: str, host: str, cell: str, reason: str) -> None:
    """Hand a not-yet-started run to another host (placement `one`), as that host's cell: it
    becomes `planned` there (a checked transition) and loses any spec."""
    with store.session() as s, s.begin():
        run = _run(s, run_id)
        check_transition(run_id, run.state, "planned")
        old_host = referenced(s, Host, run.host_id).name
        run.host_id, run.cell_id = host_row(s, host).id, cell_row(s, cell).id
        run.state, run.spec, run.workload_id = "planned", None, None
        s.add(JournalEntry(campaign_id=run.campaign_id, run_ref=run.id, kind="handover",
                           message=f"{run_id}: {old_host} -> {host} as {cell}: {reason}",
                           data={"from": old_host, "to": host, "cell": cell}))


def set_live(store: Store, run_id: str, data: dict) -> None:
    """The run's live progress as its host last reported it (runner phase, pass, iteration):
    one journal row per run, kind "live", updated in place (so `bench watch` and the live
    view read it from the database, and the journal does not grow with polling)."""
    with store.session() as s, s.begin():
        run = _run(s, run_id)
        row = s.scalar(select(JournalEntry).where(JournalEntry.run_ref == run.id,
                                                  JournalEntry.kind == "live"))
        msg = f"{run_id}: {data.get('phase') or '-'}"
        if row is None:
            s.add(JournalEntry(campaign_id=run.campaign_id, run_ref=run.id, kind="live",
                               message=msg, data=data))
        else:
            row.data, row.message, row.t = dict(data), msg, _now()


def set_campaign_state(store: Store, campaign_id: str, state: str, message: str = "") -> None:
    with store.session() as s, s.begin():
        c = s.get(Campaign, campaign_id)
        if c is None:
            raise StoreError(f"no campaign {campaign_id}")
        old, c.state = c.state, state
        s.add(JournalEntry(campaign_id=campaign_id, kind="campaign",
                           message=f"{campaign_id}: {old} -> {state}"
                                   + (f": {message}" if message else "")))


def mark_interrupted(store: Store, campaign_id: str, why: str) -> str:
    """Record that a signal ended the campaign's controller: the campaign becomes `interrupted`
    (with `why` in its journal) unless it finished first. Its runs are left as they are, as a
    crash leaves them, for `bench resume`. Returns the campaign's state now."""
    with store.session() as s, s.begin():
        c = s.get(Campaign, campaign_id)
        if c is None:
            raise StoreError(f"no campaign {campaign_id}")
        if c.state in CAMPAIGN_FINISHED:
            return c.state
        old, c.state = c.state, "interrupted"
        s.add(JournalEntry(campaign_id=campaign_id, kind="campaign",
                           message=f"{campaign_id}: {old} -> interrupted: {why}",
                           data={"from": old, "to": "interrupted", "why": why}))
        return c.state


def journal(store: Store, kind: str, message: str, *, campaign_id: str | None = None,
            data: dict | None = None) -> None:
    with store.session() as s, s.begin():
        s.add(JournalEntry(campaign_id=campaign_id, kind=kind, message=message, data=data))


# reading ----------------------------------------------------------------------------------------

def run_rows(store: Store, campaign_id: str) -> list[RunRow]:
    """The campaign's runs with host, cell, state, spec, retained, in position order."""
    with store.session() as s:
        q = (select(Run.run_id, Run.position, Run.repetition, Run.state, Host.name, Cell.name,
                    Run.spec, Run.retained, Run.id)
             .join(Host, Run.host_id == Host.id).join(Cell, Run.cell_id == Cell.id)
             .where(Run.campaign_id == campaign_id).order_by(Run.position, Run.run_id))
        return [RunRow(run_id=r[0], position=r[1] or 0, repetition=r[2] or 0, state=r[3],
                       host=r[4], cell=r[5], spec=r[6], retained=r[7], ref=r[8])
                for r in s.execute(q)]


def journal_rows(store: Store, campaign_id: str, after_id: int = 0,
                 kinds: tuple[str, ...] | None = None) -> list[JournalRow]:
    with store.session() as s:
        q = (select(JournalEntry).where(JournalEntry.campaign_id == campaign_id)
             .where(JournalEntry.id > after_id).order_by(JournalEntry.id))
        if kinds:
            q = q.where(JournalEntry.kind.in_(kinds))
        return [JournalRow(id=j.id, t=_iso(j.t) or "", kind=j.kind, message=j.message,
                           data=j.data, run_ref=j.run_ref) for j in s.scalars(q)]


def _as_row(c: Campaign, states: dict[str, int] | None = None) -> CampaignRow:
    return CampaignRow(id=c.id, matrix=c.matrix, seed=c.seed, state=c.state,
                       created=_iso(c.created), workload=c.workload, note=c.note,
                       states=states or {}, demo=bool(c.demo), hidden=bool(c.hidden))


def campaign_row(store: Store, campaign_id: str) -> CampaignRow | None:
    with store.session() as s:
        c = s.get(Campaign, campaign_id)
        if c is None:
            return None
        return _as_row(c)


def campaign_list(store: Store, *, include_hidden: bool = False) -> list[CampaignRow]:
    """Every campaign (hidden ones only with include_hidden) with its run counts per state,
    newest first."""
    with store.session() as s:
        q = select(Campaign).order_by(Campaign.created.desc())
        if not include_hidden:
            q = q.where(Campaign.hidden.is_(False))
        cs = list(s.scalars(q))
        counts: dict[str | None, dict[str, int]] = {}      # None: runs outside a campaign
        for cid, st, n in s.execute(select(Run.campaign_id, Run.state, func.count())
                                    .group_by(Run.campaign_id, Run.state)):
            counts.setdefault(cid, {})[st] = n
        return [_as_row(c, counts.get(c.id, {})) for c in cs]


def latest_campaign(store: Store) -> str | None:
    """The newest campaign that is not hidden."""
    with store.session() as s:
        return s.scalar(select(Campaign.id).where(Campaign.hidden.is_(False))
                        .order_by(Campaign.created.desc()).limit(1))


def unfinished_campaigns(store: Store) -> list[CampaignRow]:
    """The campaigns not hidden that `bench resume` has work in (every state but done),
    newest first."""
    with store.session() as s:
        q = (select(Campaign).where(Campaign.hidden.is_(False))
             .where(Campaign.state.not_in(CAMPAIGN_FINISHED)).order_by(Campaign.created.desc()))
        return [_as_row(c) for c in s.scalars(q)]


def demo_capacities(store: Store, mechanism: str = "balloon") -> list[int]:
    """Capacities (bytes) of the `mechanism` cells earlier demo campaigns ran, newest campaign
    first, without repeats (bench demo keeps its balloon capacity while it still fits)."""
    with store.session() as s:
        q = (select(Cell.capacity_bytes).join(Run, Run.cell_id == Cell.id)
             .join(Campaign, Campaign.id == Run.campaign_id)
             .where(Campaign.demo.is_(True), Cell.mechanism == mechanism)
             .order_by(Campaign.created.desc(), Run.id.desc()))
        return list(dict.fromkeys(int(c) for c in s.scalars(q)))


# flags and removal ------------------------------------------------------------------------------

def set_flags(store: Store, campaign_id: str, *, demo: bool | None = None,
              hidden: bool | None = None) -> None:
    """Mark a campaign as made by `bench demo` and/or hide it (or show it again), with a
    journal entry."""
    with store.session() as s, s.begin():
        c = s.get(Campaign, campaign_id)
        if c is None:
            raise StoreError(f"no campaign {campaign_id}", hint="`bench campaigns --all` lists "
                             "them")
        said = []
        if demo is not None:
            c.demo = demo
            said.append("demo" if demo else "not demo")
        if hidden is not None:
            c.hidden = hidden
            said.append("hidden" if hidden else "shown")
        s.add(JournalEntry(campaign_id=campaign_id, kind="campaign",
                           message=f"{campaign_id}: {', '.join(said) or 'unchanged'}"))


def remove_campaign(store: Store, campaign_id: str) -> dict:
    """Delete a campaign, its runs with every row that hangs off them (iterations, counters,
    timeline, raw files, summaries, verdicts, engine rows), its host references and journal,
    in one transaction. The caller holds the campaign's controller lock (so no controller runs
    it meanwhile). Returns {runs, journal} counts deleted. Hosts, cells, boots and
    fingerprints stay (other runs may share them)."""
    from sqlalchemy import delete

    from bench.store.models import (AgentSummary, CampaignHost, CounterDelta, EngineRun,
                                    Iteration, RawFile, TimelineSample, Verdict)
    with store.session() as s, s.begin():
        if s.get(Campaign, campaign_id) is None:
            raise StoreError(f"no campaign {campaign_id}", hint="`bench campaigns --all` lists "
                             "them")
        ids = select(Run.id).where(Run.campaign_id == campaign_id).scalar_subquery()
        n_runs = s.scalar(select(func.count()).select_from(Run)
                          .where(Run.campaign_id == campaign_id)) or 0
        for child in (RawFile, CounterDelta, Iteration, TimelineSample, AgentSummary, Verdict,
                      EngineRun):
            s.execute(delete(child).where(child.run_id.in_(ids)),
                      execution_options={"synchronize_session": False})
        n_journal = s.scalar(select(func.count()).select_from(JournalEntry).where(
            (JournalEntry.campaign_id == campaign_id) | JournalEntry.run_ref.in_(ids))) or 0
        s.execute(delete(JournalEntry).where((JournalEntry.campaign_id == campaign_id)
                                             | JournalEntry.run_ref.in_(ids)),
                  execution_options={"synchronize_session": False})
        s.execute(delete(Run).where(Run.campaign_id == campaign_id),
                  execution_options={"synchronize_session": False})
        s.execute(delete(CampaignHost).where(CampaignHost.campaign_id == campaign_id),
                  execution_options={"synchronize_session": False})
        s.execute(delete(Campaign).where(Campaign.id == campaign_id),
                  execution_options={"synchronize_session": False})
    return {"runs": n_runs, "journal": n_journal}
