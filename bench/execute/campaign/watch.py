"""A campaign's progress read from the database only (`bench watch` and the live view never
touch a host): the rows the fold of bench.execute.progress needs, and the fold.

The controller shown is the lock's holder only while it is live, judged as a second controller
would judge it (bench.store.controller_lock): a holder that is gone without releasing the lock
(killed, its machine rebooted, its pid now another process's) is `controller_gone`, so a
campaign left `running` by a dead controller does not look driven."""

from __future__ import annotations

import time
from collections.abc import Callable

from bench.execute.progress import Progress, fold
from bench.store.campaigns import campaign_row, journal_rows, run_rows
from bench.store.controller_lock import judged_holder
from bench.store.db import Store, StoreError
from bench.store.states import CAMPAIGN_FINISHED

# as the executor's default lease (bench.execute.campaign.record.Settings.lock_stale_s)
STALE_S = 60.0


def _snapshot(store: Store, campaign_id: str, clock: Callable[[], float],
              stale_s: float) -> tuple[Progress, dict | None]:
    c = campaign_row(store, campaign_id)
    if c is None:
        raise StoreError(f"no campaign {campaign_id}", hint="`bench campaigns` lists them")
    holder, alive = judged_holder(store, campaign_id, stale_s)
    p = fold(c, run_rows(store, campaign_id), journal_rows(store, campaign_id),
             holder if alive else None, clock())
    return p, (None if alive else holder)


def progress(store: Store, campaign_id: str, stale_s: float = STALE_S) -> dict:
    """The snapshot as the views and `bench watch --json` show it, with `controller_gone` (the
    lock's holder that is no longer live, else None) and `resume` (the command that goes on
    with a campaign no live controller drives and that is not finished, else None)."""
    p, gone = _snapshot(store, campaign_id, time.time, stale_s)
    d = p.as_dict()
    d["controller_gone"] = gone
    d["resume"] = (f"bench resume {campaign_id}"
                   if p.controller is None and p.state not in CAMPAIGN_FINISHED else None)
    return d
