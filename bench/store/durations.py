"""Measured durations for estimates (bench.matrix.estimate): how long earlier runs took, per
host and cell, and how long each host's reboots took, read from the journal. A run's duration
is from its last entering boot_verified (its host in the run's boot, after any reboot) to its
verdict (validated or rejected): the reboot before it is counted apart, as a reboot, and a
failed attempt before the one that finished is not counted; a run that never reached a
verdict says nothing. A reboot's is the seconds its journal entry records (successful ones)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime

from sqlalchemy import select

from bench.store.db import Store
from bench.store.models import Cell, Host, JournalEntry, Run
from bench.store.states import TERMINAL

START = "boot_verified"


def _seconds(t: datetime) -> float:
    return t.timestamp()


def measured_durations(store: Store, hosts: Iterable[str], *, exclude_campaign: str | None = None
                       ) -> tuple[dict[tuple[str, str], list[float]], dict[str, list[float]]]:
    """({(host, cell): [run seconds]}, {host: [reboot seconds]}) over the store's journal for
    these hosts, leaving out one campaign's (the campaign being estimated)."""
    names = sorted(set(hosts))
    runs: dict[tuple[str, str], list[float]] = defaultdict(list)
    reboots: dict[str, list[float]] = defaultdict(list)
    if not names:
        return {}, {}
    q = (select(Run.id, Host.name, Cell.name, JournalEntry.t, JournalEntry.data)
         .join(JournalEntry, JournalEntry.run_ref == Run.id)
         .join(Host, Host.id == Run.host_id).join(Cell, Cell.id == Run.cell_id)
         .where(JournalEntry.kind == "state").where(Host.name.in_(names))
         .order_by(JournalEntry.id))
    if exclude_campaign is not None:
        q = q.where((Run.campaign_id.is_(None)) | (Run.campaign_id != exclude_campaign))
    start: dict[int, float] = {}
    with store.session() as s:
        for ref, host, cell, t, data in s.execute(q):
            d = data or {}
            if d.get("to") == START:
                start[ref] = _seconds(t)
            elif d.get("to") in TERMINAL and ref in start:
                runs[(host, cell)].append(_seconds(t) - start.pop(ref))
        rq = (select(JournalEntry.data, JournalEntry.campaign_id)
              .where(JournalEntry.kind == "reboot").order_by(JournalEntry.id))
        for data, cid in s.execute(rq):
            d = data or {}
            if (d.get("host") in names and d.get("ok") and d.get("seconds")
                    and (exclude_campaign is None or cid != exclude_campaign)):
                reboots[d["host"]].append(float(d["seconds"]))
    return dict(runs), dict(reboots)
