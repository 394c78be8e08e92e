"""The API the campaign executor writes through: campaigns, planned runs, run states and the
journal. Every state change writes a journal entry in the same transaction."""

from __future__ import annotations

from sqlalchemy import select

from bench.matrix.cells import parse_cell
from bench.errors import InputError
from bench.store.db import Store, StoreError
from bench.store.models import RUN_STATES, Campaign, Cell, Host, JournalEntry, Run


def _host(s, name: str) -> Host:
    h = s.scalar(select(Host).where(Host.name == name))
    if h is None:
        h = Host(name=name)
        s.add(h)
        s.flush()
    return h


def _cell(s, name: str) -> Cell:
    c = parse_cell(name)
    row = s.scalar(select(Cell).where(Cell.name == c.name))
    if row is None:
        row = Cell(name=c.name, capacity_bytes=c.capacity_bytes, mechanism=c.mechanism,
                   reclaim=c.reclaim, mode=c.mode, hints=c.hints, delivery=c.delivery)
        s.add(row)
        s.flush()
    return row


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
    _check_state(state)
    with store.session() as s, s.begin():
        if s.get(Campaign, campaign_id) is None:
            raise StoreError(f"no campaign {campaign_id}")
        run = Run(run_id=run_id, campaign_id=campaign_id, host_id=_host(s, host).id,
                  cell_id=_cell(s, cell).id, position=position, repetition=repetition,
                  state=state)
        s.add(run)
        s.flush()
        s.add(JournalEntry(campaign_id=campaign_id, run_ref=run.id, kind="run",
                           message=f"{run_id}: {state} ({cell} on {host}, #{position})"))
        return run.id


def set_run_state(store: Store, run_id: str, state: str, message: str = "",
                  data: dict | None = None) -> None:
    _check_state(state)
    with store.session() as s, s.begin():
        run = s.scalar(select(Run).where(Run.run_id == run_id))
        if run is None:
            raise StoreError(f"no run {run_id}")
        old, run.state = run.state, state
        s.add(JournalEntry(campaign_id=run.campaign_id, run_ref=run.id, kind="state",
                           message=f"{run_id}: {old} -> {state}" + (f": {message}" if message
                                                                    else ""), data=data))


def set_campaign_state(store: Store, campaign_id: str, state: str, message: str = "") -> None:
    with store.session() as s, s.begin():
        c = s.get(Campaign, campaign_id)
        if c is None:
            raise StoreError(f"no campaign {campaign_id}")
        old, c.state = c.state, state
        s.add(JournalEntry(campaign_id=campaign_id, kind="campaign",
                           message=f"{campaign_id}: {old} -> {state}"
                                   + (f": {message}" if message else "")))


def journal(store: Store, kind: str, message: str, *, campaign_id: str | None = None,
            data: dict | None = None) -> None:
    with store.session() as s, s.begin():
        s.add(JournalEntry(campaign_id=campaign_id, kind=kind, message=message, data=data))


def runs_of(store: Store, campaign_id: str, state: str | None = None) -> list[dict]:
    """The campaign's runs in position order (what a resuming executor reads)."""
    with store.session() as s:
        q = (select(Run.run_id, Run.position, Run.repetition, Run.state, Host.name, Cell.name)
             .join(Host, Run.host_id == Host.id).join(Cell, Run.cell_id == Cell.id)
             .where(Run.campaign_id == campaign_id).order_by(Run.position))
        if state:
            q = q.where(Run.state == state)
        return [dict(run_id=r[0], position=r[1], repetition=r[2], state=r[3], host=r[4],
                     cell=r[5]) for r in s.execute(q)]


def journal_of(store: Store, campaign_id: str | None = None) -> list[dict]:
    with store.session() as s:
        q = select(JournalEntry).order_by(JournalEntry.id)
        if campaign_id:
            q = q.where(JournalEntry.campaign_id == campaign_id)
        return [dict(t=j.t, kind=j.kind, message=j.message, data=j.data) for j in s.scalars(q)]


def _check_state(state: str) -> None:
    if state not in RUN_STATES:
        raise InputError(f"unknown run state {state!r}", hint=f"valid: {', '.join(RUN_STATES)}")
