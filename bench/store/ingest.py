"""Ingest run bundles: one bundle, judged by bench.judge.judgement, -> rows in one transaction;
the same bundle twice changes nothing; a damaged or incomplete bundle is refused (naming the
part) and moved aside to a `rejected/` directory next to it, never half-written. Only a
bundle is ever moved: a directory is one when it holds both spec.json (the controller writes
it before the run) and manifest.json (the runner writes it last, docs/bundle.md); anything
else (`.`, a home directory, a run still being written) is refused as NotABundle and left
exactly where it is. Neither is moved the current directory or one holding it. Also
re-evaluates stored runs under the current rule versions (`recheck`), rebuilding each bundle
from its stored raw files.

Concurrent ingests (several processes, one database) are safe: hosts, cells, campaigns,
boots and fingerprints are got-or-created race-free (bench.store.db.get_or_create), and the
first write of an ingest claims its run (the run row inserted with the bundle's digest, or a
campaign's planned run given it where it has none), so of two ingests of one run exactly one
stores it; the other waits for it and then reports "unchanged" (the same bundle) or refuses
a different bundle under that run id, having written nothing.

Engine runs (docs/engine.md) store no iterations and no agent summary: one engine_runs row
(bench.judge.measured.engine_facts) and the counter deltas of the whole run (pre -> post)."""

from __future__ import annotations

import hashlib
import os
import shutil
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from sqlalchemy import insert, select, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session

from bench.errors import BenchError, FormatError
from bench.judge import measured, retention
from bench.judge.bundle import Bundle, BundleError, Caps, bind, check, load, read_dir, scan_dir
from bench.judge.judgement import METRIC_COLUMNS, bundle_cell, judge, run_metrics
from bench.matrix.cells import Cell as Cell_, parse_cell
from bench.paths import default_data_dir, private_dir, private_tree
from bench.plan.planfile import read_plan
from bench.sim.demand import demand
from bench.store.bandwidth import device_bandwidth
from bench.store.db import Store, StoreError, get_or_create, insert_if_absent, referenced, rowcount
from bench.store.models import (AgentSummary, Boot, Campaign, CampaignHost, Cell, CounterDelta,
                                EngineRun, Fingerprint, Host, Iteration, JournalEntry, RawFile, Run,
                                TimelineSample, Verdict, now)
from bench.store.states import check_transition
from bench.store.workloads import workload_id


class NotABundle(BundleError):
    """A directory ingest was given that is not a run bundle: refused, never moved."""


BUNDLE_MARKERS = ("spec.json", "manifest.json")


def is_bundle(path: Path) -> bool:
    """A real directory (not a symbolic link) holding spec.json and manifest.json entries."""
    return (not path.is_symlink() and path.is_dir()
            and all(os.path.lexists(path / name) for name in BUNDLE_MARKERS))


def _not_a_bundle(path: Path, where: str) -> NotABundle:
    missing = [n for n in BUNDLE_MARKERS if not os.path.lexists(path / n)]
    if path.is_symlink() or not path.is_dir():
        return NotABundle(where, ".", "not a directory (left in place)",
                          hint="a run bundle is a directory: docs/bundle.md")
    nested = any(is_bundle(d) for d in islice(_subdirs(path), 64))
    return NotABundle(where, ".", f"not a run bundle: no {' and no '.join(missing)} (left in "
                      "place)", hint="pass the bundle directories inside it (DIR/*)" if nested
                      else "a run bundle holds spec.json and manifest.json: docs/bundle.md")


def _subdirs(path: Path) -> Iterator[Path]:
    try:
        with os.scandir(path) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    yield Path(e.path)
    except OSError:
        return


def move_aside(path: Path) -> Path | None:
    """Move a refused bundle to rejected/ next to it (a numbered name if taken); rejected/
    and the bundle in it are private like collected bundles (bench.paths). The current
    directory, one holding it, and a file system root stay where they are (None)."""
    path = path.resolve()
    cwd = Path.cwd().resolve()
    if path.parent == path or cwd == path or path in cwd.parents:
        return None
    dest_dir = private_dir(path.parent / "rejected")
    dest = dest_dir / path.name
    n = 1
    while dest.exists():
        dest, n = dest_dir / f"{path.name}.{n}", n + 1
    shutil.move(str(path), str(dest))
    private_tree(dest)
    return dest


_NOMINAL: dict[tuple[str, int], float] = {}     # (plan path, capacity) -> nominal bytes


def nominal_from_plan(plan_path: Path, capacity_bytes: int) -> float:
    """Nominal miss bytes per iteration of the demand model for one capacity (memoised: a
    campaign ingests many runs of one plan)."""
    key = (str(plan_path), capacity_bytes)
    if key not in _NOMINAL:
        _NOMINAL[key] = demand(read_plan(plan_path), [capacity_bytes])[0][
            "nominal_miss_bytes_per_iteration"]
    return _NOMINAL[key]


@dataclass(eq=False)
class Prepared:
    """A bundle read, validated and derived (everything but the write): see prepare_bundle."""
    b: Bundle
    where: str
    cell: Cell_
    metrics: dict
    nominal: float | None
    source: str | None
    fp: dict
    raw: list[dict]


def ingest_bundle(store: Store, path: str | Path, *, nominal_miss_bytes: float | None = None,
                  plan: str | Path | None = None, data_dir: str | Path | None = None,
                  caps: Caps | None = None) -> dict:
    """Returns {"run_id", "status": ingested|unchanged, "retained", "failed": [rule...]}.

    The bundle is read under the caps and validated against the contract (bench.judge.bundle)
    before anything is derived or written; a refused bundle is moved to rejected/ and nothing
    is stored. Under <data_dir>/bundles/<host>/<run_id>/ it must be that run on that host; a run
    already in the store binds it to that row's host and campaign; a campaign not in the
    database is never created (StoreError: the bundle stays where it is). The demand model's
    plan is the caller's (`plan`) or the plan store's <data_dir>/plans/<plan_sha256>.bin:
    never a path the bundle names. prepare_bundle, then write_prepared."""
    return write_prepared(store, prepare_bundle(path, nominal_miss_bytes=nominal_miss_bytes,
                                                plan=plan, data_dir=data_dir, caps=caps))


def prepare_bundle(path: str | Path, *, nominal_miss_bytes: float | None = None,
                   plan: str | Path | None = None, data_dir: str | Path | None = None,
                   caps: Caps | None = None) -> Prepared:
    """Everything of an ingest before its write transaction (no database): read, validate
    (a refused bundle moved aside, as ingest_bundle says), metrics, the demand model's
    figure, the fingerprint and the compressed raw files."""
    path = Path(path)
    where = str(path)
    if not is_bundle(path):
        raise _not_a_bundle(path, where)
    try:
        check(scan_dir(path, caps), where, caps)    # manifest, spec, status: big files unheld
        b = load(read_dir(path, caps), where=where, caps=caps)
        _bound_to_location(b, path)
        cell = bundle_cell(b, where)
        metrics = run_metrics(b)
    except BundleError as exc:
        raise _aside(exc, path) from None
    except FormatError as exc:
        raise _aside(BundleError(where, "bundle", exc.message), path) from None
    nominal, source = ((None, None) if b.is_engine or not b.completed
                       else _nominal(b, path, nominal_miss_bytes, plan, data_dir))
    return Prepared(b, where, cell, metrics, nominal, source, measured.fingerprint(b),
                    _raw_files(b))


def write_prepared(store: Store, p: Prepared) -> dict:
    """A prepared bundle's write, in one transaction (ingest_bundle's answer)."""
    with store.session() as s, s.begin():
        return _write_one(s, p)


def write_batch(store: Store, preps: list[Prepared]) -> list[dict | BaseException]:
    """Several prepared bundles in one transaction, each in a savepoint of its own: a bundle
    whose write fails is rolled back alone and its error returned in its place, the others
    are committed together (one commit, one wait for the write lock). If the commit itself
    fails, every one gets its error (nothing of the batch is stored)."""
    out: list[dict | BaseException] = []
    try:
        with store.session() as s, s.begin():
            for p in preps:
                try:
                    with s.begin_nested():
                        out.append(_write_one(s, p))
                except (BenchError, SQLAlchemyError) as exc:
                    out.append(exc)
    except (BenchError, SQLAlchemyError) as exc:
        return [exc] * len(preps)
    return out


def _write_one(s: Session, p: Prepared) -> dict:
    b, where, cell = p.b, p.where, p.cell
    existing = s.scalar(select(Run).where(Run.run_id == b.run_id))
    if existing is not None and existing.bundle_digest:
        return _stored(b, existing.bundle_digest, existing.retained)
    _bound_to_store(s, b, existing, where)
    host = get_or_create(s, Host, name=b.spec.get("host") or b.host.get("hostname")
                         or "unknown")
    cell_row = get_or_create(s, Cell, dict(
        capacity_bytes=cell.capacity_bytes, mechanism=cell.mechanism, reclaim=cell.reclaim,
        mode=cell.mode, hints=cell.hints, delivery=cell.delivery), name=cell.name)
    run = _claim(s, b, existing, host.id, cell_row.id)
    if run is None:         # another ingest stored this run first (now committed)
        digest, retained = s.execute(select(Run.bundle_digest, Run.retained)
                                     .where(Run.run_id == b.run_id)).one()
        return _stored(b, digest, retained)
    if existing is not None:    # a campaign's run: a checked move of the state machine
        check_transition(b.run_id, run.state, "ingested")
    return _write(s, b, cell_row, host, p.metrics, p.nominal, p.source, run, p.fp, p.raw)


def _aside(exc: BundleError, path: Path) -> BundleError:
    """The refusal, saying where the bundle went (or that it stayed, and why)."""
    dest = move_aside(path)
    if dest is not None:
        return exc.moved(dest)
    first, nl, rest = exc.message.partition("\n")
    err = BundleError(exc.where, exc.part, "", exc.hint)
    err.message = f"{first} (left in place: it is or holds the current directory){nl}{rest}"
    err.args = (err.message,)
    return err


def _stored(b: Bundle, digest: str | None, retained: bool | None) -> dict:
    """The answer for a run already stored: unchanged from this bundle, else refused."""
    if digest == b.digest:
        return {"run_id": b.run_id, "status": "unchanged", "retained": retained}
    raise StoreError(f"run {b.run_id} is already stored from a different bundle",
                     hint="run ids are unique; re-run under a new run id")


def _claim(s: Session, b: Bundle, run: Run | None, host_id: int, cell_id: int) -> Run | None:
    """This ingest's first write to the run, made so that only one ingest of a run gets past
    it: a new run is inserted with the bundle's digest (run_id is unique: a concurrent
    insert waits, then inserts nothing); a campaign's planned run gets the digest only where
    it has none. Returns the run, re-read, or None when another ingest has claimed it."""
    if run is None:
        won = insert_if_absent(s, Run, run_id=b.run_id, host_id=host_id, cell_id=cell_id,
                               state="ingested", bundle_digest=b.digest)
    else:
        won = rowcount(s.execute(update(Run).where(
            Run.id == run.id, Run.bundle_digest.is_(None)).values(bundle_digest=b.digest))) == 1
    if not won:
        return None
    claimed = s.scalar(select(Run).where(Run.run_id == b.run_id))
    assert claimed is not None
    s.refresh(claimed)          # its state as it is now, not as read before the claim
    return claimed


def _bound_to_location(b: Bundle, path: Path) -> None:
    """Where collect puts a bundle, <data_dir>/bundles/<host>/<run_id>/, it must be that run
    on that host (a bundle found anywhere else is bound by the store alone)."""
    p = path.resolve()
    if p.parent.parent.name == "bundles" and p.parent.name != "rejected":
        bind(b.spec, str(path), run_id=p.name, host=p.parent.name, what="its directory names")


def _bound_to_store(s: Session, b: Bundle, run: Run | None, where: str) -> None:
    """The run row already in the store (a campaign's planned run) binds the bundle to its
    host and campaign, and to the spec the controller sent when the row holds it; a campaign
    the bundle names must exist (never created here: a bundle
    of another database's campaign is refused, not stored outside its campaign)."""
    spec = b.spec
    if run is not None:
        host = referenced(s, Host, run.host_id).name
        for key, stored in (("host", host), ("campaign", run.campaign_id)):
            if spec.get(key) != stored:
                raise StoreError(f"{where}: spec.json: {key} {spec.get(key)!r} is not the "
                                 f"{key} of run {b.run_id} in the store ({stored!r})",
                                 hint="a bundle is bound to its run: this one is not the "
                                      "bundle of that run (nothing was stored)")
        if run.spec is not None and run.spec != spec:     # the spec the controller sent
            key = next(k for k in sorted(set(spec) | set(run.spec))
                       if spec.get(k) != run.spec.get(k))
            raise StoreError(f"{where}: spec.json: key '{key}' is not what the controller "
                             f"sent for run {b.run_id} (the store holds its spec)",
                             hint="a bundle is bound to its run: its spec was rewritten "
                                  "(nothing was stored)")
    campaign = spec.get("campaign")
    if campaign and s.get(Campaign, campaign) is None:
        raise StoreError(f"{where}: spec.json: campaign {campaign!r} is not in this database "
                         "(ingest never creates a campaign; nothing was stored)",
                         hint="ingest it into the database that holds the campaign (--db URL "
                              "or BENCH_DB)")


def _nominal(b: Bundle, path: Path, given: float | None, plan: str | Path | None,
             data_dir: str | Path | None) -> tuple[float | None, str | None]:
    """The demand model's nominal misses: given, the caller's plan, or the plan store's copy
    of the plan whose sha256 the validated spec records (checked before it is used)."""
    if given is not None:
        return given, "given"
    if plan and Path(plan).is_file():
        return nominal_from_plan(Path(plan), b.spec["capacity_bytes"]), f"demand:{Path(plan).name}"
    sha = b.spec.get("plan_sha256")
    if not sha:
        return None, None
    for d in _data_dirs(path, data_dir):
        p = d / "plans" / f"{sha}.bin"
        if p.is_file() and not p.is_symlink() and _file_sha256(p) == sha:
            return nominal_from_plan(p, b.spec["capacity_bytes"]), f"demand:{p.name}"
    return None, None


def _data_dirs(path: Path, data_dir: str | Path | None) -> list[Path]:
    """The data directory given, else the one the bundle is collected into, then the
    default."""
    if data_dir is not None:
        return [Path(data_dir)]
    p = path.resolve()
    out = [p.parent.parent.parent] if p.parent.parent.name == "bundles" else []
    return out + [default_data_dir()]


_SHA: dict[tuple[str, int, int], str] = {}       # (path, size, mtime_ns) -> sha256


def _file_sha256(p: Path) -> str:
    st = p.stat()
    key = (str(p), st.st_size, st.st_mtime_ns)
    if key not in _SHA:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _SHA[key] = h.hexdigest()
    return _SHA[key]


def reference_fingerprint(s: Session, campaign_id: str | None, host_id: int, *,
                          refresh: bool = True) -> dict | None:
    """The campaign's reference fingerprint for a host, under the current definition
    (bench.judge.measured.FINGERPRINT_DEFINITION). One stored under an older definition (before
    the fingerprint read the kernel the runner writes and the host's settings) is recomputed
    from the stored bundle of the run that set it, the campaign's first ingested run on that
    host carrying it; with `refresh` the campaign then points at the recomputed one (read-only
    callers pass False)."""
    if not campaign_id:
        return None
    ch = s.get(CampaignHost, (campaign_id, host_id))
    if ch is None or ch.fingerprint_id is None:
        return None
    data = referenced(s, Fingerprint, ch.fingerprint_id).data
    if data.get("definition") == measured.FINGERPRINT_DEFINITION:
        return data
    first = s.scalar(select(Run).where(Run.campaign_id == campaign_id, Run.host_id == host_id,
                                       Run.fingerprint_id == ch.fingerprint_id,
                                       Run.bundle_digest.is_not(None))
                     .order_by(Run.ingested_at, Run.id).limit(1))
    if first is None:           # nothing to recompute from: the old record, named as it is
        return data
    try:
        fp = measured.fingerprint(stored_bundle(s, first))
    except BundleError:         # its stored bundle no longer validates: the old record
        return data
    if refresh:
        ch.fingerprint_id = get_or_create(s, Fingerprint, {"data": fp}, host_id=host_id,
                                          digest=fp["digest"]).id
    return fp


def _reference(s: Session, campaign_id: str, host_id: int, fp_id: int) -> dict | None:
    """The fingerprint a campaign's runs on a host are judged against: the first stored
    one's. None when this run is the first (it becomes the reference, set only where none
    is, so two first runs stored at once agree on one)."""
    ref = reference_fingerprint(s, campaign_id, host_id)
    if ref is not None:
        return ref
    ch = get_or_create(s, CampaignHost, {"fingerprint_id": fp_id}, campaign_id=campaign_id,
                       host_id=host_id)
    if ch.fingerprint_id is None:
        s.execute(update(CampaignHost).where(
            CampaignHost.campaign_id == campaign_id, CampaignHost.host_id == host_id,
            CampaignHost.fingerprint_id.is_(None)).values(fingerprint_id=fp_id))
        s.refresh(ch)
    if ch.fingerprint_id is None or ch.fingerprint_id == fp_id:
        return None
    return referenced(s, Fingerprint, ch.fingerprint_id).data


def _write(s: Session, b: Bundle, cell_row: Cell, host: Host, metrics: dict, nominal, source,
           run: Run, fp: dict, raw: list[dict]) -> dict:
    """Everything of a claimed run (its fingerprint and compressed raw files made before the
    transaction)."""
    spec = b.spec
    fp_row = get_or_create(s, Fingerprint, {"data": fp}, host_id=host.id, digest=fp["digest"])
    boot = get_or_create(s, Boot, dict(cmdline=b.host.get("cmdline", ""),
                                       mem_total_bytes=b.host.get("mem_total_bytes"),
                                       mglru_mask=b.host.get("mglru")),
                         host_id=host.id, boot_id=b.host.get("boot_id") or "unknown")
    campaign_id = spec.get("campaign")          # in the database: _bound_to_store checked
    ref = None
    if campaign_id:
        ref = _reference(s, campaign_id, host.id, fp_row.id)
    verdict = judge(b, ref, device_bandwidth(s, host.id, measured.pool_device(b)))
    verdicts, keep = verdict.verdicts, verdict.retained
    run.campaign_id, run.host_id, run.cell_id = campaign_id, host.id, cell_row.id
    run.boot_ref, run.fingerprint_id = boot.id, fp_row.id
    run.position, run.repetition = spec.get("position"), spec.get("repetition")
    run.state, run.spec, run.bundle_digest = "ingested", spec, b.digest
    run.workload_id = workload_id(s, spec)
    run.runner_ok, run.runner_reason = b.status.get("ok"), b.status.get("reason")
    run.retained, run.ingested_at = keep, now()
    for col in METRIC_COLUMNS:
        setattr(run, col, metrics[col])
    run.nominal_miss_bytes_per_iteration, run.nominal_source = nominal, source
    s.flush()
    rid = run.id
    _write_parts(s, rid, b, raw)
    _rows(s, Verdict, [{"run_id": rid, "rule": v.rule, "version": v.version, "passed": v.passed,
                        "reason": v.reason, "current": True, "evaluated_at": now()}
                       for v in verdicts])
    failed = verdict.failed
    s.add(JournalEntry(campaign_id=campaign_id, run_ref=rid, kind="ingest",
                       message=f"ingested {b.run_id}: " + ("retained" if keep else
                                                          "rejected by " + ", ".join(failed)),
                       data={"digest": b.digest}))
    return {"run_id": b.run_id, "status": "ingested", "retained": keep, "failed": failed}


def _raw_files(b: Bundle) -> list[dict]:
    """The bundle's files as raw_files rows (zlib-compressed, hashed), less the run id."""
    return [{"path": p, "size": len(d), "codec": "zlib", "sha256": hashlib.sha256(d).hexdigest(),
             "data": zlib.compress(d, 6)} for p, d in b.files.items()]


def _write_parts(s: Session, rid: int, b: Bundle, raw: list[dict]) -> None:
    """The run's raw files (compressed), counter deltas, iterations, timeline and summary."""
    _batched(s, RawFile, (dict(r, run_id=rid) for r in raw), 64)
    _rows(s, CounterDelta, [dict(r, run_id=rid, interval=name)
                            for name in (("run",) if b.is_engine else ("measured", "run"))
                            for r in measured.interval(b, name)])
    _batched(s, Iteration, ({"run_id": rid, "pass_no": r["pass"], "iter_no": r["iter"],
                             "wall_ns": r["wall_ns"], "bytes": r["bytes"], "reads": r["reads"],
                             "arena_hits": r.get("arena_hits")} for r in b.records), 20_000)
    _rows(s, TimelineSample, [dict(r, run_id=rid, seq=i) for i, r in enumerate(b.timeline)])
    sm, hints = b.summary, b.summary.get("hints") or {}
    facts = measured.engine_facts(b)                # None for a replay run
    if facts is not None:
        s.add(_engine_row(rid, b, facts))
    else:
        s.add(AgentSummary(run_id=rid, ok=sm.get("ok"), mode=sm.get("mode"),
                           arena_bytes=sm.get("arena_bytes"),
                           preload_bytes=sm.get("preload_bytes"),
                           vmlck_bytes=sm.get("vmlck_bytes"),
                           vmlck_end_bytes=sm.get("vmlck_end_bytes"),
                           hints_submitted=hints.get("submitted"),
                           hints_overwritten=hints.get("overwritten"),
                           hints_completed=hints.get("completed"), data=sm))


def _engine_row(rid: int, b: Bundle, f: dict) -> EngineRun:
    """The engine_runs row of an engine run (`f`: measured.engine_facts)."""
    return EngineRun(run_id=rid, prompt=f["prompt"], policy=f["policy"],
                     pair_index=f["pair_index"], pair_order=f["pair_order"],
                     pair_position=f["pair_position"], wall_s=f["wall_s"], load_s=f["load_s"],
                     steady_s=f["steady_s"], backend_found=f["backend_found"],
                     backend_line=f["backend_line"], tokens=f["tokens"],
                     output_sha256=f["output_sha256"], exit_code=f["exit_code"],
                     signal=f["signal"], timed_out=f["timed_out"],
                     device_bytes=f["device_bytes"],
                     config_sha256=b.spec["engine"].get("config_sha256"),
                     data=dict(f))


def _rows(s: Session, model, rows: list[dict]) -> None:
    if rows:
        s.execute(insert(model), rows)


def _batched(s: Session, model, rows: Iterator[dict], n: int) -> None:
    """Insert rows n at a time (a large run's rows, or its compressed raw files, are never
    all in memory at once)."""
    while batch := list(islice(rows, n)):
        s.execute(insert(model), batch)


def stored_bundle(s: Session, run: Run) -> Bundle:
    files = {rf.path: zlib.decompress(rf.data) if rf.codec == "zlib" else rf.data
             for rf in s.scalars(select(RawFile).where(RawFile.run_id == run.id))}
    return load(files, where=f"stored run {run.run_id}")


def recheck(store: Store) -> list[dict]:
    """Re-evaluate every stored run under the current rules; returns the changes. A run's
    stored fingerprint (and its campaign's reference) of an older definition is replaced by
    the current one, computed from its stored bundle."""
    changes = []
    with store.session() as s, s.begin():
        runs = s.scalars(select(Run).where(Run.bundle_digest.is_not(None)).order_by(Run.id))
        for run in runs.all():
            old = {v.rule: v for v in s.scalars(select(Verdict).where(
                Verdict.run_id == run.id, Verdict.current.is_(True)))}
            try:
                b = stored_bundle(s, run)
            except BundleError as exc:
                verdicts, keep = [retention.contract_verdict(exc.message)], False
            else:
                ref = reference_fingerprint(s, run.campaign_id, run.host_id)
                _refresh_fingerprint(s, run, measured.fingerprint(b))
                new = judge(b, ref, device_bandwidth(s, run.host_id, measured.pool_device(b)))
                verdicts, keep = new.verdicts, new.retained
            changes += _replace_verdicts(s, run, old, verdicts)
            if keep != run.retained:
                s.add(JournalEntry(campaign_id=run.campaign_id, run_ref=run.id, kind="recheck",
                                   message=f"{run.run_id}: {'retained' if keep else 'rejected'} "
                                           "under the current rules"))
                run.retained = keep
    return changes


def _replace_verdicts(s: Session, run: Run, old: dict[str, Verdict],
                      verdicts: list[retention.Verdict]) -> list[dict]:
    """Store the verdicts that changed (version or outcome); returns the changes."""
    changes = []
    for v in verdicts:
        o = old.get(v.rule)
        if o is not None and (o.version, o.passed) == (v.version, v.passed):
            continue
        changes.append({"run_id": run.run_id, "rule": v.rule,
                        "old": None if o is None else {"version": o.version, "passed": o.passed},
                        "new": {"version": v.version, "passed": v.passed}, "reason": v.reason})
        if o is not None:
            o.current = False
        s.add(Verdict(run_id=run.id, rule=v.rule, version=v.version, passed=v.passed,
                      reason=v.reason, current=True))
    return changes


def _refresh_fingerprint(s: Session, run: Run, fp: dict) -> None:
    """Point the run at its fingerprint under the current definition."""
    if run.fingerprint_id is not None and \
            referenced(s, Fingerprint, run.fingerprint_id).digest == fp["digest"]:
        return
    run.fingerprint_id = get_or_create(s, Fingerprint, {"data": fp}, host_id=run.host_id,
                                       digest=fp["digest"]).id


def set_nominal(store: Store, cell: str, nominal_miss_bytes: float, source: str = "given") -> int:
    """Let a caller supply the demand model's figure for every stored run of a cell (its name
    read case-insensitively, like every cell name bench takes)."""
    with store.session() as s, s.begin():
        cell_id = s.scalar(select(Cell.id).where(Cell.name == parse_cell(cell).name))
        res = s.execute(update(Run).where(Run.cell_id == cell_id).values(
            nominal_miss_bytes_per_iteration=nominal_miss_bytes, nominal_source=source))
        return rowcount(res)
