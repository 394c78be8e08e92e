"""A run's stored workload identity (migration 0006): bench.judge.identity.workload_of of its
spec, kept once per distinct identity in `workloads` and referenced by runs.workload_id, so a
results view reads one integer per run instead of parsing every run's spec.json.

One source of truth: ingest (`workload_id`) and the migration's backfill of existing rows
(`backfill`) both compute the identity here, with identity.workload_of. A run whose
workload_id is NULL (a spec written before 0006 by a path that does not set it, or a row
inserted by hand) is read the old way, from its spec (bench.store.spec_parts)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from bench.judge import identity
from bench.store.db import get_or_create

BACKFILL_BATCH = 2000

# Core tables as of 0006, so that the migration's backfill does not depend on the models
_WORKLOADS = sa.table("workloads", sa.column("id", sa.Integer), sa.column("key", sa.String),
                      sa.column("digest", sa.String), sa.column("data", sa.JSON))
_RUNS = sa.table("runs", sa.column("id", sa.Integer), sa.column("spec", sa.JSON),
                 sa.column("workload_id", sa.Integer))


def identity_of(spec: dict | None) -> tuple[str, dict]:
    """(key, workload): identity.workload_of(spec) and the sha256 of its JSON (sorted keys)."""
    w = identity.workload_of(spec)
    text = json.dumps(w, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest(), w


def workload_id(s: Session, spec: dict | None) -> int | None:
    """The workloads row of this spec's identity (inserted when new, safe against a concurrent
    writer); None for no spec."""
    if spec is None:
        return None
    from bench.store.models import Workload
    key, w = identity_of(spec)
    return get_or_create(s, Workload, {"digest": w["digest"], "data": w}, key=key).id


def backfill(conn: sa.Connection, *, only_missing: bool = True) -> int:
    """Set runs.workload_id of every run with a spec (those without one when `only_missing`),
    in batches by id; returns how many runs were set. Used by migration 0006 and by tools that
    bulk-insert runs (tests/perf)."""
    known: dict[str, int] = {k: i for i, k in conn.execute(
        sa.select(_WORKLOADS.c.id, _WORKLOADS.c.key))}
    done, last = 0, 0
    while True:
        q = (sa.select(_RUNS.c.id, _RUNS.c.spec).where(_RUNS.c.id > last,
                                                       _RUNS.c.spec.is_not(None))
             .order_by(_RUNS.c.id).limit(BACKFILL_BATCH))
        if only_missing:
            q = q.where(_RUNS.c.workload_id.is_(None))
        rows = conn.execute(q).all()
        if not rows:
            return done
        by_wid: dict[int, list[int]] = {}
        for rid, spec in rows:
            by_wid.setdefault(_known_id(conn, known, _spec(spec)), []).append(rid)
        for wid, ids in by_wid.items():
            conn.execute(_RUNS.update().where(_RUNS.c.id.in_(ids)).values(workload_id=wid))
        done += len(rows)
        last = rows[-1][0]


def _spec(spec: Any) -> dict | None:
    # sa.table's JSON column returns the parsed value; a spec stored as a JSON scalar or
    # array is no spec identity.workload_of can read: treat it as none
    return spec if isinstance(spec, dict) else None


def _known_id(conn: sa.Connection, known: dict[str, int], spec: dict | None) -> int:
    key, w = identity_of(spec)
    wid = known.get(key)
    if wid is None:
        conn.execute(_WORKLOADS.insert().values(key=key, digest=w["digest"], data=w))
        wid = known[key] = conn.execute(
            sa.select(_WORKLOADS.c.id).where(_WORKLOADS.c.key == key)).scalar_one()
    return wid
