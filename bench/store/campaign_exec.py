"""Store side of the campaign executor (bench.execute.campaign): executor run states with their journal
entries, the controller lock, hand-over of runs between hosts and progress snapshots.

The executor's states are models.RUN_STATES. Every state change
writes Run.state and a journal entry (kind "state", data {"from", "to", "attempt", ...}) in one
transaction.

Controller lock: one journal row per campaign, kind "lock", updated in place, data {owner, pid,
host, heartbeat (epoch seconds), started}. Taking it is a compare-and-set inside a transaction
that first writes the campaign row (a row lock on PostgreSQL, the write lock on SQLite), so two
controllers cannot both win. A holder is stale when its heartbeat is older than `stale_s`, or at
once when it ran on this machine and its pid is gone (a SIGKILLed controller)."""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime, timezone

from sqlalchemy import func, select, update

from bench.store.db import Store, StoreError
from bench.store.models import RUN_STATES as EXEC_STATES
from bench.store.models import Campaign, Cell, Host, JournalEntry, Run


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _iso(t: datetime | None) -> str | None:
    if t is None:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    return t.isoformat()


def transition(store: Store, run_id: str, state: str, message: str = "",
               data: dict | None = None, *, spec: dict | None = None,
               clear_spec: bool = False) -> str:
    """Set a run's state (and optionally its spec) with a journal entry; returns the old state."""
    if state not in EXEC_STATES:
        raise StoreError(f"unknown executor state {state!r}")
    with store.session() as s, s.begin():
        run = s.scalar(select(Run).where(Run.run_id == run_id))
        if run is None:
            raise StoreError(f"no run {run_id}")
        old, run.state = run.state, state
        if spec is not None:
            run.spec = spec
        if clear_spec:
            run.spec = None
        d = {"from": old, "to": state, **(data or {})}
        s.add(JournalEntry(campaign_id=run.campaign_id, run_ref=run.id, kind="state",
                           message=f"{run_id}: {old} -> {state}" + (f": {message}" if message
                                                                    else ""), data=d))
        return old


def set_live(store: Store, run_id: str, data: dict) -> None:
    """The run's live progress as its host last reported it (runner phase, pass, iteration):
    one journal row per run, kind "live", updated in place (so `bench watch` and the live
    view read it from the database, and the journal does not grow with polling)."""
    with store.session() as s, s.begin():
        run = s.scalar(select(Run).where(Run.run_id == run_id))
        if run is None:
            raise StoreError(f"no run {run_id}")
        row = s.scalar(select(JournalEntry).where(JournalEntry.run_ref == run.id,
                                                  JournalEntry.kind == "live"))
        msg = f"{run_id}: {data.get('phase') or '-'}"
        if row is None:
            s.add(JournalEntry(campaign_id=run.campaign_id, run_ref=run.id, kind="live",
                               message=msg, data=data))
        else:
            row.data, row.message, row.t = dict(data), msg, _now()


def reassign(store: Store, run_id: str, host: str, cell: str, reason: str) -> None:
    """Hand a not-yet-started run to another host (placement `one`), as that host's cell."""
    from bench.store.campaigns import _cell, _host
    with store.session() as s, s.begin():
        run = s.scalar(select(Run).where(Run.run_id == run_id))
        if run is None:
            raise StoreError(f"no run {run_id}")
        old_host = s.get(Host, run.host_id).name
        run.host_id, run.cell_id = _host(s, host).id, _cell(s, cell).id
        run.state, run.spec = "planned", None
        s.add(JournalEntry(campaign_id=run.campaign_id, run_ref=run.id, kind="handover",
                           message=f"{run_id}: {old_host} -> {host} as {cell}: {reason}",
                           data={"from": old_host, "to": host, "cell": cell}))


def run_rows(store: Store, campaign_id: str) -> list[dict]:
    """The campaign's runs with host, cell, state, spec, retained, in position order."""
    with store.session() as s:
        q = (select(Run.run_id, Run.position, Run.repetition, Run.state, Host.name, Cell.name,
                    Run.spec, Run.retained, Run.id)
             .join(Host, Run.host_id == Host.id).join(Cell, Run.cell_id == Cell.id)
             .where(Run.campaign_id == campaign_id).order_by(Run.position, Run.run_id))
        return [dict(run_id=r[0], position=r[1], repetition=r[2], state=r[3], host=r[4],
                     cell=r[5], spec=r[6], retained=r[7], ref=r[8]) for r in s.execute(q)]


def journal_rows(store: Store, campaign_id: str, after_id: int = 0,
                 kinds: tuple[str, ...] | None = None) -> list[dict]:
    with store.session() as s:
        q = (select(JournalEntry).where(JournalEntry.campaign_id == campaign_id)
             .where(JournalEntry.id > after_id).order_by(JournalEntry.id))
        if kinds:
            q = q.where(JournalEntry.kind.in_(kinds))
        return [dict(id=j.id, t=_iso(j.t), kind=j.kind, message=j.message, data=j.data,
                     run_ref=j.run_ref) for j in s.scalars(q)]


def campaign_row(store: Store, campaign_id: str) -> dict | None:
    with store.session() as s:
        c = s.get(Campaign, campaign_id)
        if c is None:
            return None
        return dict(id=c.id, matrix=c.matrix, seed=c.seed, state=c.state,
                    created=_iso(c.created), workload=c.workload, note=c.note)


def campaign_list(store: Store) -> list[dict]:
    """Every campaign with its run counts per state, newest first."""
    with store.session() as s:
        cs = list(s.scalars(select(Campaign).order_by(Campaign.created.desc())))
        counts = {}
        for cid, st, n in s.execute(select(Run.campaign_id, Run.state, func.count())
                                    .group_by(Run.campaign_id, Run.state)):
            counts.setdefault(cid, {})[st] = n
        return [dict(id=c.id, matrix=c.matrix, seed=c.seed, state=c.state,
                     created=_iso(c.created), states=counts.get(c.id, {})) for c in cs]


def latest_campaign(store: Store) -> str | None:
    with store.session() as s:
        return s.scalar(select(Campaign.id).order_by(Campaign.created.desc()).limit(1))


# controller lock -------------------------------------------------------------------------------

def owner_info(purpose: str = "bench campaign") -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "owner": purpose,
            "heartbeat": time.time(), "started": time.time()}


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie counts as dead
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True


def lock_is_stale(holder: dict | None, stale_s: float, now: float | None = None) -> bool:
    if not holder or not holder.get("pid"):
        return True
    now = time.time() if now is None else now
    if now - float(holder.get("heartbeat") or 0) > stale_s:
        return True
    if holder.get("host") == socket.gethostname() and not _pid_alive(int(holder["pid"])):
        return True
    return False


def acquire_lock(store: Store, campaign_id: str, me: dict, stale_s: float = 60.0) -> dict | None:
    """Take the campaign's controller lock; None when taken, else the live holder's data."""
    with store.session() as s, s.begin():
        n = s.execute(update(Campaign).where(Campaign.id == campaign_id)
                      .values(state=Campaign.state)).rowcount
        if n != 1:
            raise StoreError(f"no campaign {campaign_id}", hint="`bench campaigns` lists them")
        row = s.scalar(select(JournalEntry).where(JournalEntry.campaign_id == campaign_id)
                       .where(JournalEntry.kind == "lock").order_by(JournalEntry.id).limit(1))
        holder = row.data if row is not None else None
        same = holder and holder.get("pid") == me["pid"] and holder.get("host") == me["host"]
        if holder and holder.get("pid") and not same and not lock_is_stale(holder, stale_s):
            return holder
        data = dict(me, heartbeat=time.time())
        msg = f"controller lock: pid {me['pid']} on {me['host']}"
        if holder and holder.get("pid") and not same:
            msg += f" (took over from stale pid {holder['pid']} on {holder.get('host')})"
        if row is None:
            s.add(JournalEntry(campaign_id=campaign_id, kind="lock", message=msg, data=data))
        else:
            row.data, row.message, row.t = data, msg, _now()
        s.add(JournalEntry(campaign_id=campaign_id, kind="controller", message=msg,
                           data={"pid": me["pid"], "host": me["host"]}))
    return None


def heartbeat(store: Store, campaign_id: str, me: dict) -> bool:
    """Refresh the heartbeat; False when the lock is no longer ours."""
    with store.session() as s, s.begin():
        row = s.scalar(select(JournalEntry).where(JournalEntry.campaign_id == campaign_id)
                       .where(JournalEntry.kind == "lock").order_by(JournalEntry.id).limit(1))
        if row is None or not row.data or row.data.get("pid") != me["pid"] or \
                row.data.get("host") != me["host"]:
            return False
        row.data = dict(row.data, heartbeat=time.time())
        return True


def release_lock(store: Store, campaign_id: str, me: dict) -> None:
    with store.session() as s, s.begin():
        row = s.scalar(select(JournalEntry).where(JournalEntry.campaign_id == campaign_id)
                       .where(JournalEntry.kind == "lock").order_by(JournalEntry.id).limit(1))
        if row is not None and row.data and row.data.get("pid") == me["pid"] and \
                row.data.get("host") == me["host"]:
            row.data = {"pid": None, "released": time.time(), "host": me["host"]}
            row.message = f"controller lock released by pid {me['pid']}"


def lock_holder(store: Store, campaign_id: str) -> dict | None:
    with store.session() as s:
        row = s.scalar(select(JournalEntry).where(JournalEntry.campaign_id == campaign_id)
                       .where(JournalEntry.kind == "lock").order_by(JournalEntry.id).limit(1))
        return row.data if row is not None and row.data and row.data.get("pid") else None
