"""Ingest run bundles: one bundle, judged by bench.judge.judgement, -> rows in one transaction;
the same bundle twice changes nothing; a damaged or incomplete bundle is refused (naming the
part) and moved aside to a `rejected/` directory next to it, never half-written. Also
re-evaluates stored runs under the current rule versions (`recheck`), rebuilding each bundle
from its stored raw files.

Engine runs (docs/engine.md) store no iterations and no agent summary: one engine_runs row
(bench.judge.measured.engine_facts) and the counter deltas of the whole run (pre -> post)."""

from __future__ import annotations

import hashlib
import shutil
import zlib
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from sqlalchemy import insert, select, update
from sqlalchemy.orm import Session

from bench.errors import FormatError
from bench.judge import measured, retention
from bench.judge.bundle import Bundle, BundleError, Caps, bind, check, load, read_dir, scan_dir
from bench.judge.judgement import METRIC_COLUMNS, bundle_cell, judge, run_metrics
from bench.paths import default_data_dir
from bench.plan.planfile import read_plan
from bench.sim.demand import demand
from bench.store.db import Store, StoreError, referenced, rowcount
from bench.store.models import (AgentSummary, Boot, Campaign, CampaignHost, Cell, CounterDelta,
                                EngineRun, Fingerprint, Host, Iteration, JournalEntry, RawFile, Run,
                                TimelineSample, Verdict, now)
from bench.store.states import check_transition


def move_aside(path: Path) -> Path:
    """Move a refused bundle to rejected/ next to it (a numbered name if taken)."""
    dest_dir = path.parent / "rejected"
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / path.name
    n = 1
    while dest.exists():
        dest, n = dest_dir / f"{path.name}.{n}", n + 1
    shutil.move(str(path), str(dest))
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
    never a path the bundle names."""
    path = Path(path)
    where = str(path)
    if path.is_symlink() or not path.is_dir():
        raise BundleError(where, ".", "not a directory")
    try:
        check(scan_dir(path, caps), where, caps)    # manifest, spec, status: big files unheld
        b = load(read_dir(path, caps), where=where, caps=caps)
        _bound_to_location(b, path)
        cell = bundle_cell(b, where)
        metrics = run_metrics(b)
    except BundleError as exc:
        raise exc.moved(move_aside(path)) from None
    except FormatError as exc:
        raise BundleError(where, "bundle", exc.message).moved(move_aside(path)) from None
    nominal, source = ((None, None) if b.is_engine or not b.completed
                       else _nominal(b, path, nominal_miss_bytes, plan, data_dir))
    with store.session() as s, s.begin():
        existing = s.scalar(select(Run).where(Run.run_id == b.run_id))
        if existing is not None and existing.bundle_digest == b.digest:
            return {"run_id": b.run_id, "status": "unchanged", "retained": existing.retained}
        if existing is not None and existing.bundle_digest:
            raise StoreError(f"run {b.run_id} is already stored from a different bundle",
                             hint="run ids are unique; re-run under a new run id")
        _bound_to_store(s, b, existing, where)
        return _write(s, b, cell, metrics, nominal, source, existing)


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


def _get(s: Session, model, defaults: dict | None = None, **key):
    obj = s.scalar(select(model).filter_by(**key))
    if obj is None:
        obj = model(**key, **(defaults or {}))
        s.add(obj)
        s.flush()
    return obj


def reference_fingerprint(s: Session, campaign_id: str | None, host_id: int) -> dict | None:
    if not campaign_id:
        return None
    ch = s.get(CampaignHost, (campaign_id, host_id))
    if ch is None or ch.fingerprint_id is None:
        return None
    return referenced(s, Fingerprint, ch.fingerprint_id).data


def _write(s: Session, b: Bundle, cell, metrics: dict, nominal, source, run: Run | None) -> dict:
    spec = b.spec
    host = _get(s, Host, name=spec.get("host") or b.host.get("hostname") or "unknown")
    cell_row = _get(s, Cell, dict(capacity_bytes=cell.capacity_bytes, mechanism=cell.mechanism,
                                  reclaim=cell.reclaim, mode=cell.mode, hints=cell.hints,
                                  delivery=cell.delivery), name=cell.name)
    fp = measured.fingerprint(b)
    fp_row = _get(s, Fingerprint, {"data": fp}, host_id=host.id, digest=fp["digest"])
    boot = _get(s, Boot, dict(cmdline=b.host.get("cmdline", ""),
                              mem_total_bytes=b.host.get("mem_total_bytes"),
                              mglru_mask=b.host.get("mglru")),
                host_id=host.id, boot_id=b.host.get("boot_id") or "unknown")
    campaign_id = spec.get("campaign")          # in the database: _bound_to_store checked
    ref = None
    if campaign_id:
        ref = reference_fingerprint(s, campaign_id, host.id)
        if ref is None:
            ch = _get(s, CampaignHost, campaign_id=campaign_id, host_id=host.id)
            ch.fingerprint_id = fp_row.id
    verdict = judge(b, ref)
    verdicts, keep = verdict.verdicts, verdict.retained
    if run is None:             # a run made outside any campaign starts here
        run = Run(run_id=b.run_id)
        s.add(run)
    else:                       # a campaign's run: a checked move of the state machine
        check_transition(b.run_id, run.state, "ingested")
    run.campaign_id, run.host_id, run.cell_id = campaign_id, host.id, cell_row.id
    run.boot_ref, run.fingerprint_id = boot.id, fp_row.id
    run.position, run.repetition = spec.get("position"), spec.get("repetition")
    run.state, run.spec, run.bundle_digest = "ingested", spec, b.digest
    run.runner_ok, run.runner_reason = b.status.get("ok"), b.status.get("reason")
    run.retained, run.ingested_at = keep, now()
    for col in METRIC_COLUMNS:
        setattr(run, col, metrics[col])
    run.nominal_miss_bytes_per_iteration, run.nominal_source = nominal, source
    s.flush()
    rid = run.id
    _write_parts(s, rid, b)
    _rows(s, Verdict, [{"run_id": rid, "rule": v.rule, "version": v.version, "passed": v.passed,
                        "reason": v.reason, "current": True, "evaluated_at": now()}
                       for v in verdicts])
    failed = verdict.failed
    s.add(JournalEntry(campaign_id=campaign_id, run_ref=rid, kind="ingest",
                       message=f"ingested {b.run_id}: " + ("retained" if keep else
                                                          "rejected by " + ", ".join(failed)),
                       data={"digest": b.digest}))
    return {"run_id": b.run_id, "status": "ingested", "retained": keep, "failed": failed}


def _write_parts(s: Session, rid: int, b: Bundle) -> None:
    """The run's raw files (compressed), counter deltas, iterations, timeline and summary."""
    _batched(s, RawFile, ({"run_id": rid, "path": p, "size": len(d), "codec": "zlib",
                           "sha256": hashlib.sha256(d).hexdigest(), "data": zlib.compress(d, 6)}
                          for p, d in b.files.items()), 64)
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
    """Re-evaluate every stored run under the current rules; returns the changes. A stored
    bundle that no longer validates against the contract is rejected by bundle_contract (its
    other verdicts stay as they were)."""
    changes: list[dict] = []
    with store.session() as s, s.begin():
        for run in s.scalars(select(Run).where(Run.bundle_digest.is_not(None)).order_by(Run.id)):
            old = {v.rule: v for v in s.scalars(select(Verdict).where(
                Verdict.run_id == run.id, Verdict.current.is_(True)))}
            try:
                b = stored_bundle(s, run)
            except BundleError as exc:
                verdicts, keep = [retention.contract_verdict(exc.message)], False
            else:
                new = judge(b, reference_fingerprint(s, run.campaign_id, run.host_id))
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


def set_nominal(store: Store, cell: str, nominal_miss_bytes: float, source: str = "given") -> int:
    """Let a caller supply the demand model's figure for every stored run of a cell."""
    with store.session() as s, s.begin():
        cell_id = s.scalar(select(Cell.id).where(Cell.name == cell))
        res = s.execute(update(Run).where(Run.cell_id == cell_id).values(
            nominal_miss_bytes_per_iteration=nominal_miss_bytes, nominal_source=source))
        return rowcount(res)
