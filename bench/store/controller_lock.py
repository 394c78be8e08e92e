"""One controller per campaign: a lock row in the journal with a lease.

One journal row per campaign, kind "lock", updated in place, data {owner, pid, host, boot_id,
start_ticks, heartbeat, clock: "db", started}. Taking it is a compare-and-set inside a
transaction that first writes the campaign row (a row lock on PostgreSQL, the write lock on
SQLite), so two controllers cannot both win.

Whether the holder is alive is decided without the controllers' wall clocks, which may be
skewed (a controller whose clock ran 120 s ahead used to find a live holder's heartbeat "old"
and take its lock):
- on the holder's own machine (same host name and boot id) its process decides: the holder is
  (pid, process start time), and only that process, alive, holds the lock; gone (a SIGKILLed
  controller, or a zombie), or its pid now another process's (a pid wrap: the start time,
  /proc/PID/stat field 22, differs) frees it at once;
- from another machine, or a holder whose boot id differs from this machine's (this machine
  before a reboot, or another machine of the same host name: either way its pid says nothing
  here), the lease decides, timed by the database's own clock: the heartbeat is
  the database's time when it was written (SQLite: julianday('now') in the database engine;
  PostgreSQL: clock_timestamp() on the server), and the lock is free once the database's now is
  more than `stale_s` past it. Controllers on machines with skewed clocks read one clock.
With SQLite the database's clock is the clock of the machine that holds the file, the one every
controller of it runs on. A row written before the lease used the database clock (no "clock"
key) is read the same way: its heartbeat was wall-clock epoch seconds, the same scale.

Every transaction that writes the lock row reads it FOR UPDATE (PostgreSQL; SQLite's writers are
serialized by the file's write lock): a heartbeat that raced a takeover would otherwise read its
own old row, then overwrite the new holder's row, and two controllers would both hold the lock.
On PostgreSQL those transactions also end the session of a client that stalls inside one for
LOCK_TXN_IDLE_S (idle_in_transaction_session_timeout, for that transaction only): a controller
frozen mid-heartbeat (SIGSTOP, a paused VM) would otherwise keep the row lock, and every other
controller's takeover would wait on it for good. The frozen holder finds its session gone when
it wakes and learns at its next heartbeat that the lock moved on."""

from __future__ import annotations

import os
import socket
import time
from datetime import datetime, timezone

from sqlalchemy import select, text, update

from bench.store.db import Store, StoreError, rowcount
from bench.store.models import Campaign, JournalEntry

# the database's clock, in epoch seconds
_DB_NOW = {"sqlite": "SELECT (julianday('now') - 2440587.5) * 86400.0",
           "postgresql": "SELECT extract(epoch FROM clock_timestamp())"}


# Lock transactions are three statements: a client silent inside one this long is stalled.
LOCK_TXN_IDLE_S = 5.0


def _now() -> datetime:
    return datetime.now(timezone.utc)


def boot_id() -> str | None:
    """This machine's boot id (a new one each boot); None where the kernel does not say."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip() or None
    except OSError:
        return None


def start_ticks(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (/proc/PID/stat field 22): with
    the pid and the boot id it names one process, whatever pid wraps came after it. None when
    there is no such process (or no /proc)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            # the command name (field 2) may hold spaces and ")": the fields after it start at 3
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def owner_info(purpose: str = "bench campaign") -> dict:
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "boot_id": boot_id(),
            "start_ticks": start_ticks(pid), "owner": purpose,
            "heartbeat": time.time(), "started": time.time()}


def db_now(s) -> float:
    """The database's clock (epoch seconds), read in session s."""
    name = s.get_bind().dialect.name
    if name not in _DB_NOW:
        raise StoreError(f"no clock for database dialect {name!r}",
                         hint="bench stores in SQLite or PostgreSQL")
    return float(s.execute(text(_DB_NOW[name])).scalar_one())


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


def _this_machine(holder: dict) -> bool:
    """The holder ran on this machine in this boot: same host name, and the same boot id
    (a row written before boot ids were kept has none: its host name decides)."""
    if holder.get("host") != socket.gethostname():
        return False
    theirs, ours = holder.get("boot_id"), boot_id()
    return theirs is None or ours is None or theirs == ours


def _holder_alive(holder: dict) -> bool:
    """The holder's process (pid and start time) still runs on this machine."""
    pid = int(holder["pid"])
    if not _pid_alive(pid):
        return False
    theirs = holder.get("start_ticks")
    if theirs is None:              # written before start times were kept: the pid decides
        return True
    now = start_ticks(pid)
    return now is None or now == theirs


def lock_is_stale(holder: dict | None, stale_s: float, db_time: float) -> bool:
    """Free to take: no holder; a holder on this machine (this boot) whose process is gone or
    whose pid another process has now; a holder on another machine or from another boot whose
    lease (its heartbeat by the database clock) ran out at db_time."""
    if not holder or not holder.get("pid"):
        return True
    if _this_machine(holder):
        return not _holder_alive(holder)
    try:
        beat = float(holder.get("heartbeat") or 0)
    except (TypeError, ValueError):
        beat = 0.0
    return db_time - beat > stale_s


def lock_wait_hint(holder: dict, stale_s: float) -> str:
    """When the lock that `holder` has passes on, as lock_is_stale decides it, in words."""
    if _this_machine(holder):
        return f"the lock passes on when pid {holder.get('pid')} exits (it is on this machine)"
    where = ("another boot of this machine, or another machine of that name"
             if holder.get("host") == socket.gethostname() else "another machine")
    return (f"the lock passes on {stale_s:.0f}s after its last heartbeat by the database "
            f"clock (pid {holder.get('pid')} runs on {where}, {holder.get('host')})")


def _bound_stall(s) -> None:
    """First statement of a lock transaction (module doc): PostgreSQL ends this session if the
    client stalls inside the transaction."""
    if s.get_bind().dialect.name == "postgresql":
        s.execute(text(f"SET LOCAL idle_in_transaction_session_timeout = "
                       f"{int(LOCK_TXN_IDLE_S * 1000)}"))


def _lock_row(s, campaign_id: str, *, write: bool = False) -> JournalEntry | None:
    q = (select(JournalEntry).where(JournalEntry.campaign_id == campaign_id)
         .where(JournalEntry.kind == "lock").order_by(JournalEntry.id).limit(1))
    return s.scalar(q.with_for_update() if write else q)


def _ours(data: dict | None, me: dict) -> bool:
    """The row names this process: host and pid, and boot id and start time where both say."""
    if data is None or data.get("pid") != me["pid"] or data.get("host") != me["host"]:
        return False
    return all(data.get(k) is None or me.get(k) is None or data.get(k) == me.get(k)
               for k in ("boot_id", "start_ticks"))


def acquire_lock(store: Store, campaign_id: str, me: dict, stale_s: float = 60.0) -> dict | None:
    """Take the campaign's controller lock; None when taken, else the live holder's data (its
    "age_s": seconds since its heartbeat by the database clock)."""
    with store.session() as s, s.begin():
        _bound_stall(s)
        n = rowcount(s.execute(update(Campaign).where(Campaign.id == campaign_id)
                               .values(state=Campaign.state)))
        if n != 1:
            raise StoreError(f"no campaign {campaign_id}", hint="`bench campaigns` lists them")
        row = _lock_row(s, campaign_id, write=True)
        now = db_now(s)         # read under the write lock the update above took
        holder = row.data if row is not None else None
        same = _ours(holder, me)
        if holder and holder.get("pid") and not same and not lock_is_stale(holder, stale_s, now):
            try:
                age = round(now - float(holder.get("heartbeat") or 0), 1)
            except (TypeError, ValueError):
                age = None
            return dict(holder, age_s=age)
        data = dict(me, heartbeat=now, clock="db")
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
    """Renew the lease (the database's now); False when the lock is no longer ours."""
    with store.session() as s, s.begin():
        _bound_stall(s)
        row = _lock_row(s, campaign_id, write=True)
        if row is None or row.data is None or not _ours(row.data, me):
            return False
        row.data = dict(row.data, heartbeat=db_now(s), clock="db")
        return True


def release_lock(store: Store, campaign_id: str, me: dict) -> None:
    with store.session() as s, s.begin():
        _bound_stall(s)
        row = _lock_row(s, campaign_id, write=True)
        if row is not None and _ours(row.data, me):
            row.data = {"pid": None, "released": db_now(s), "host": me["host"]}
            row.message = f"controller lock released by pid {me['pid']}"


def lock_holder(store: Store, campaign_id: str) -> dict | None:
    with store.session() as s:
        row = _lock_row(s, campaign_id)
        return row.data if row is not None and row.data and row.data.get("pid") else None


def judged_holder(store: Store, campaign_id: str, stale_s: float) -> tuple[dict | None, bool]:
    """(the lock's holder or None, whether that holder is live as acquire_lock would judge
    it): a holder that is not live is a controller that is gone (killed, its machine
    rebooted) without releasing the lock."""
    with store.session() as s:
        row = _lock_row(s, campaign_id)
        holder = row.data if row is not None and row.data and row.data.get("pid") else None
        return holder, holder is not None and not lock_is_stale(holder, stale_s, db_now(s))


def live_holder(store: Store, campaign_id: str, stale_s: float) -> dict | None:
    """The lock's holder while it is live (as acquire_lock would judge it), else None."""
    holder, alive = judged_holder(store, campaign_id, stale_s)
    return holder if alive else None
