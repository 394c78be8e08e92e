"""A campaign's progress read from the database only (`bench watch` and the live view never
touch a host): the rows the fold of bench.execute.progress needs, and the fold."""

from __future__ import annotations

import time
from collections.abc import Callable

from bench.execute.progress import Progress, fold
from bench.store.campaigns import campaign_row, journal_rows, run_rows
from bench.store.controller_lock import lock_holder
from bench.store.db import Store, StoreError


def snapshot(store: Store, campaign_id: str,
             clock: Callable[[], float] = time.time) -> Progress:
    c = campaign_row(store, campaign_id)
    if c is None:
        raise StoreError(f"no campaign {campaign_id}", hint="`bench campaigns` lists them")
    return fold(c, run_rows(store, campaign_id), journal_rows(store, campaign_id),
                lock_holder(store, campaign_id), clock())


def progress(store: Store, campaign_id: str) -> dict:
    """The snapshot as the views and `bench watch --json` show it."""
    return snapshot(store, campaign_id).as_dict()
