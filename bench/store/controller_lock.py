"""One controller per campaign: a lock row in the journal with a heartbeat.

One journal row per campaign, kind "lock", updated in place, data {owner, pid, host, heartbeat
(epoch seconds), started}. Taking it is a compare-and-set inside a transaction that first
writes the campaign row (a row lock on PostgreSQL, the write lock on SQLite), so two
controllers cannot both win. A holder is stale when its heartbeat is older than `stale_s`, or at
once when it ran on this machine and its pid is gone (a SIGKILLed controller)."""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime, timezone

from sqlalchemy import select, update

from bench.store.db import Store, StoreError, rowcount
from bench.store.models import Campaign, JournalEntry


def _now() -> datetime:
    return datetime.now(timezone.utc)


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
        n = rowcount(s.execute(update(Campaign).where(Campaign.id == campaign_id)
                               .values(state=Campaign.state)))
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
