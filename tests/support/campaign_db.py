"""Read a campaign's database as the lab-tier campaign tests check it: its runs, its journal
entries of some kinds and its progress summary, each through a store opened and closed here
(the controller under test may still hold its own)."""

from __future__ import annotations

from typing import Any


def _with_store(db: str, fn):
    from bench.store.db import open_store
    store = open_store(db)
    try:
        return fn(store)
    finally:
        store.close()


def rows_of(db: str, cid: str) -> list:
    from bench.store.campaigns import run_rows
    return _with_store(db, lambda s: run_rows(s, cid))


def journal_of(c: dict[str, Any], kinds) -> list:
    """Journal entries of `kinds` of the campaign c (a dict with "db" and "cid")."""
    from bench.store.campaigns import journal_rows
    return _with_store(c["db"], lambda s: journal_rows(s, c["cid"], kinds=kinds))


def progress_of(c: dict[str, Any]) -> dict:
    from bench.execute.campaign.watch import progress
    return _with_store(c["db"], lambda s: progress(s, c["cid"]))
