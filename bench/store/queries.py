"""Read side: runs with verdicts, per-cell results, campaign-shaped matrices, comparisons,
sizing and exports. One query per request over the denormalised run metrics; the statistics
themselves are bench.judge.stats (pure). End-to-end engine cells (docs/engine.md) have their own
table (`engine_results`, `bench results --matrix end-to-end`) and stay out of the replay ones."""

from __future__ import annotations

from collections import defaultdict
from functools import lru_cache
from operator import itemgetter
from typing import Any

from sqlalchemy import case, select

from bench.errors import InputError
from bench.judge import engine_gates, identity, stats
from bench.judge.columns import METRIC_COLUMNS
from bench.matrix.cells import parse_cell
from bench.store.db import Store
from bench.store import shapes
from bench.store.left_out import DEMO_FIX, demo_note, hidden_demo_runs
from bench.store.spec_parts import (CELL_COLS, RUNS, VERDICTS, attach_identity, cells_hosts,
                                    fetch_rows, runs_by_identity, runs_filter)
from bench.units import format_size
from bench.version import controller_version

RUN_COLS = ("run_id", "campaign_id", "position", "repetition", "state", "retained",
            "nominal_miss_bytes_per_iteration") + METRIC_COLUMNS
# what a matrix and a cell's cross-check read of each run: every column that
# bench.judge.stats.summarize reads (it reads with .get, so a column left out here reads as
# None: test_workload_identity_0006 compares the views with reads of every column)
SUMMARY_COLS = ("retained", "iteration_median_s", "device_bytes_per_iteration",
                "logical_bytes_per_iteration", "nominal_miss_bytes_per_iteration",
                "scan_steal", "cgroup_scan_steal", "served_fraction", "locked_fraction",
                "mglru_loop_entry", "mglru_end")
cell_of = lru_cache(maxsize=4096)(parse_cell)  # names repeat over every run of a view


def load_runs(store: Store, *, cell: str | None = None, host: str | None = None,
              campaign: str | None = None, ingested_only: bool = True,
              with_identity: bool = False, include_demo: bool = False,
              mechanisms: tuple[str, ...] | None = None,
              columns: tuple[str, ...] = RUN_COLS,
              cell_ids: tuple[int, ...] | None = None) -> list[dict]:
    """Stored runs as flat rows (`columns` of runs, by default RUN_COLS; cell, host,
    CELL_COLS), in the order they were stored. `with_identity` adds what
    a result group is keyed by (bench.judge.identity): `workload` (the stored identity of its
    spec, bench.store.workloads), `fingerprint` (the stored digest and its main fields) and
    `fingerprint_data`.

    Runs of demo campaigns (`bench demo`) are left out unless `include_demo`, and runs of
    hidden campaigns (`bench campaigns hide`) always, unless `campaign` names the campaign:
    then every run of it is read. `mechanisms` keeps the cells of those mechanisms alone,
    `cell_ids` the cells of those ids.

    One query over runs alone, which the covering index ix_runs_results serves: cells, hosts
    and the campaigns left out are small tables read first, and filters become their ids."""
    run = RUNS.c
    cols = [run[c] for c in columns] + [run.cell_id, run.host_id, run.id]
    if with_identity:
        cols += [run.workload_id, run.fingerprint_id]
    with store.engine.connect() as s:
        cells, hosts = cells_hosts(s)
        q = runs_filter(s, select(*cols), cells, hosts, cell=cell, host=host,
                        campaign=campaign, include_demo=include_demo, mechanisms=mechanisms)
        if ingested_only:
            q = q.where(run.bundle_digest.is_not(None))
        if cell_ids is not None:
            q = q.where(run.cell_id.in_(cell_ids))
        n = len(columns)
        # sorted here, not by ORDER BY: SQLite would scan the table in id order rather than
        # the index, to skip a sort
        found = sorted(fetch_rows(s, q), key=itemgetter(n + 2))
        names = columns + ("cell", "host") + CELL_COLS + (
            ("_pk", "workload_id", "fingerprint_id") if with_identity else ())
        where = {(c, h): (cells[c][0], hosts[h], *cells[c][1:])
                 for c in cells for h in hosts}
        rows = [dict(zip(names, (*row[:n], *where[row[n], row[n + 1]], *row[n + 2:])))
                for row in found]
        if with_identity:
            attach_identity(s, rows, store.engine.dialect.name)
    return rows


def cross_check_scope(store: Store, *, host=None, campaign=None,
                      include_demo: bool = False) -> list[dict]:
    """What a balloon cell's cross-check (cross_check_warnings, through identity.key_of)
    reads of the balloon, cgroup and memboot runs in scope: their cell (CELL_COLS), host,
    identity and `retained`, one row per distinct such tuple rather than per run (at 100,000
    runs, 91,000 Python rows for a few hundred distinct ones). A run without a stored
    workload identity keeps a row of its own (its identity comes from its spec)."""
    run = RUNS.c
    with store.engine.connect() as s:
        cells, hosts = cells_hosts(s)
        own = case((run.workload_id.is_(None), run.id), else_=None)
        q = select(run.cell_id, run.host_id, run.retained, own, run.workload_id,
                   run.fingerprint_id).distinct().where(run.bundle_digest.is_not(None))
        q = runs_filter(s, q, cells, hosts, cell=None, host=host, campaign=campaign,
                        include_demo=include_demo, mechanisms=CROSS_CHECK_MECHANISMS)
        names = ("cell", "host", *CELL_COLS, "retained", "_pk", "workload_id",
                 "fingerprint_id")
        rows = [dict(zip(names, (cells[c][0], hosts[h], *cells[c][1:], *rest)))
                for c, h, *rest in fetch_rows(s, q)]
        attach_identity(s, rows, store.engine.dialect.name)
    return rows


def scope(store: Store, *, host=None, campaign=None, workload=None,
          include_demo: bool = False, cell: str | None = None,
          mechanisms: tuple[str, ...] | None = None,
          columns: tuple[str, ...] = RUN_COLS,
          cell_ids: tuple[int, ...] | None = None) -> list[dict]:
    """Stored runs with their identity, filtered by host, campaign and workload digest prefix
    (bench.judge.identity.select_workload: ambiguous or unknown prefixes are refused). `cell`
    and `mechanisms` (and `cell_ids`) narrow the runs read (load_runs) when no workload prefix
    is given: a prefix is matched against every run in scope."""
    runs = load_runs(store, host=host, campaign=campaign, with_identity=True,
                     include_demo=include_demo, cell=None if workload else cell,
                     mechanisms=None if workload else mechanisms, columns=columns,
                     cell_ids=None if workload else cell_ids)
    return identity.select_workload(runs, workload)


def campaigns_in_scope(store: Store, *, host=None, campaign=None, workload=None,
                       include_demo: bool = False) -> list[str]:
    """The campaigns of the retained runs a matrix or figure in this scope draws from, in the
    order of their first runs (what a figure's title names)."""
    runs = scope(store, host=host, campaign=campaign, workload=workload,
                 include_demo=include_demo, columns=("campaign_id", "retained"))
    return list(dict.fromkeys(r["campaign_id"] for r in runs
                              if r.get("retained") and r.get("campaign_id")))


def verdicts(store: Store, run_ids: list[str]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    if not run_ids:
        return out
    run, v = RUNS.c, VERDICTS.c
    q = (select(run.run_id, v.rule, v.version, v.passed, v.reason)
         .join_from(VERDICTS, RUNS, v.run_id == run.id)
         .where(v.current.is_(True), run.run_id.in_(run_ids)).order_by(v.id))
    with store.engine.connect() as s:
        for rid, rule, version, passed, reason in s.execute(q):
            out[rid].append({"rule": rule, "version": version, "passed": passed,
                             "reason": reason})
    return out


def list_runs(store: Store, *, cell=None, host=None, campaign=None, rejected=False,
              include_demo: bool = False) -> list[dict]:
    runs = load_runs(store, cell=cell, host=host, campaign=campaign, include_demo=include_demo)
    if rejected:
        runs = [r for r in runs if r["retained"] is False]
    v = verdicts(store, [r["run_id"] for r in runs])
    return [{"run_id": r["run_id"], "campaign": r["campaign_id"], "host": r["host"],
             "cell": r["cell"], "position": r["position"], "repetition": r["repetition"],
             "retained": r["retained"], "iteration_median_s": r["iteration_median_s"],
             "device_gb_per_iteration": _gb(r["device_bytes_per_iteration"]),
             "failed": [x["rule"] for x in v[r["run_id"]] if not x["passed"]],
             "verdicts": v[r["run_id"]]} for r in runs]


def campaign_fingerprints(store: Store, campaign_id: str) -> dict[str, dict]:
    """{host name: the reference fingerprint the campaign recorded for it (current
    definition)}; read-only. An unknown campaign is an InputError."""
    from bench.store.ingest import reference_fingerprint   # not on the results views' path
    from bench.store.models import Campaign, CampaignHost, Host
    with store.session() as s:
        if s.get(Campaign, campaign_id) is None:
            raise InputError(f"no campaign {campaign_id!r} in the database",
                             hint="`bench campaigns` lists them")
        q = (select(CampaignHost.host_id, Host.name).join(Host, CampaignHost.host_id == Host.id)
             .where(CampaignHost.campaign_id == campaign_id))
        out = {}
        for host_id, name in s.execute(q).all():
            ref = reference_fingerprint(s, campaign_id, host_id, refresh=False)
            if ref is not None:
                out[name] = ref
        return out


def probe_vs_campaign(store: Store, campaign_id: str, results: list[dict]) -> list[dict]:
    """Each probed host (`bench hosts probe` results as dicts) against the reference
    fingerprint its campaign recorded for it: adds `campaign` = {id, fingerprint (of the
    probed host with this controller), reference (its digest, None when the campaign has no
    run on the host), matches (None then), differences (bench.judge.measured.fingerprint_diff:
    probed vs reference)}. Hosts whose probe failed get none."""
    from bench.hosts.facts import as_host_json              # not on the results views' path
    from bench.judge.measured import fingerprint_diff, fingerprint_of
    refs = campaign_fingerprints(store, campaign_id)
    for r in results:
        if r.get("error"):
            continue
        fp = fingerprint_of(as_host_json(r["facts"]), {"controller_version": controller_version()})
        ref = refs.get(r["host"])
        diff = [] if ref is None else fingerprint_diff(fp, ref)
        r["campaign"] = {"id": campaign_id, "fingerprint": fp["digest"],
                         "reference": None if ref is None else ref.get("digest"),
                         "matches": None if ref is None else not diff, "differences": diff}
    return results


def _gb(x):
    return None if x is None else x / stats.GB


def _where(host, campaign, workload) -> str:
    return ((f" on {host}" if host else "") + (f" in {campaign}" if campaign else "")
            + (f" with workload {workload}" if workload else ""))


def cell_results(store: Store, cell: str, *, host=None, campaign=None, workload=None,
                 include_demo: bool = False,
                 pool: bool = False, verbose: bool = False) -> list[dict]:
    """One cell's statistics, one entry per result group (bench.judge.identity: host, workload,
    fingerprint), never pooled across groups unless `pool`: then one entry whose `pooled`
    says which groups were pooled and what differs between them."""
    c = parse_cell(cell)
    name = c.name
    # What the view reads besides the cell's runs: a balloon cell's cross-check
    # (cross_check_warnings) looks at balloon, cgroup and memboot runs; other cells at none.
    # Without a workload prefix the cell's runs are read whole and the cross-check's only
    # for what it compares (SUMMARY_COLS); a prefix is matched against every run in scope.
    balloon = c.mechanism == "balloon"
    where = dict(host=host, campaign=campaign, workload=workload, include_demo=include_demo)
    if balloon and workload is None:
        runs_in_scope = cross_check_scope(store, host=host, campaign=campaign,
                                          include_demo=include_demo)
        runs = scope(store, **where, cell=name)
    else:
        runs_in_scope = scope(store, **where, cell=None if balloon else name,
                              mechanisms=CROSS_CHECK_MECHANISMS if balloon else None)
        runs = [r for r in runs_in_scope if r["cell"] == name]
    if not runs:
        hid = hidden_demo_runs(store, cells=(name,), host=host, campaign=campaign,
                               include_demo=include_demo)
        raise InputError(f"no stored runs of cell {name}{_where(host, campaign, workload)}"
                         + (f" ({demo_note(hid)})" if hid else ""),
                         hint=DEMO_FIX if hid else "`bench runs` lists what is stored")
    groups = identity.label_groups(identity.group_runs(runs))
    diff = identity.differences(groups) if len(groups) > 1 else {}
    why = identity.describe_differences(diff)
    if pool and len(groups) > 1:
        groups = [_pooled(groups, diff, why)]
    out = [_cell_group(name, g, runs_in_scope) for g in groups]
    if len(out) > 1:
        split = {"groups": len(out), "differs_in": diff,
                 "warning": f"{len(out)} groups, not pooled: they differ in {why} "
                            "(--pool pools them)"}
        for g in out:
            g["split"] = split
            g["warnings"].insert(0, split["warning"])
    if verbose:
        v = verdicts(store, [r["run_id"] for r in runs])
        for g in out:
            for r in g["runs"]:
                r["verdicts"] = v[r["run_id"]]
    return out


def per_token(median_s: float | None, workload: dict | None) -> float | None:
    """Seconds per accepted token (the §4 batch replay's figure): seconds per iteration over
    the workload's accepted tokens per iteration; None where either is unknown."""
    tpi = (workload or {}).get("tokens_per_iteration")
    return None if median_s is None or not tpi else median_s / tpi


def _pooled(groups: list[dict], diff: dict, why: str) -> dict:
    """Groups pooled on request: a key part shared by all of them stays, others are None."""
    def same(part):
        return groups[0][part] if all(g[part] == groups[0][part] for g in groups) else None
    return {"id": "pooled", "cell": groups[0]["cell"], "host": same("host"),
            "workload": same("workload"), "fingerprint": same("fingerprint"),
            "runs": [r for g in groups for r in g["runs"]],
            "pooled": {"groups": len(groups), "hosts": sorted({g["host"] for g in groups}),
                       "workloads": sorted({g["workload"]["digest"] for g in groups}),
                       "fingerprints": sorted({g["fingerprint"]["digest"] or "-"
                                               for g in groups}),
                       "differs_in": diff,
                       "reason": f"pooled on request (--pool): {len(groups)} groups that "
                                 f"differ in {why}"}}


def flagged(summary: dict) -> dict:
    """A cell's summary with its reliability flags (stats.reliability_flags: too few retained
    runs, too wide a spread), for JSON readers and the views alike."""
    return summary | {"flags": stats.reliability_flags(summary["n_retained"], summary["spread"])}


def _cell_group(name: str, g: dict, runs_in_scope: list[dict]) -> dict:
    runs = g["runs"]
    summary = flagged(stats.summarize(runs))
    keys = {identity.key_of(r)[1:] for r in runs}
    near = [r for r in runs_in_scope if identity.key_of(r)[1:] in keys]
    out = {"cell": name, "group": g["id"], "host": g["host"], "workload": g["workload"],
           "fingerprint": g["fingerprint"],
           "campaigns": sorted({r["campaign_id"] for r in runs if r["campaign_id"]}),
           "pooled": g.get("pooled"), "split": None, **summary,
           "seconds_per_accepted_token": per_token(summary["median_s"], g.get("workload")),
           "warnings": [f"read with care: {f}" for f in summary["flags"]]
           + stats.indicators(summary) + cross_check_warnings(name, near)}
    if g.get("pooled"):
        out["warnings"].insert(0, g["pooled"]["reason"])
    if cell_of(name).is_engine:
        out["warnings"].append("an end-to-end engine cell has no replay figures: its pairs "
                               "are in `bench results --matrix end-to-end`")
    out["runs"] = [{k: r[k] for k in ("run_id", "host", "campaign_id", "repetition", "retained",
                                      "iteration_median_s", "device_bytes_per_iteration",
                                      "scan_steal", "locked_fraction")}
                   | {"workload": r["workload"]["digest"],
                      "fingerprint": r["fingerprint"]["digest"]} for r in runs]
    return out


CROSS_CHECK_MECHANISMS = ("balloon", "cgroup", "memboot")


def cross_check_warnings(name: str, scope: list[dict]) -> list[str]:
    """A low-capacity balloon cell needs a cgroup or memboot cross-check near its capacity
    (`scope`: the runs of the same host, workload and fingerprint)."""
    c = cell_of(name)
    if c.mechanism != "balloon":
        return []
    balloon_caps = [r["capacity_bytes"] for r in scope if r["mechanism"] == "balloon"]
    if not balloon_caps or c.capacity_bytes >= max(balloon_caps):
        return []
    near = [r for r in scope if r["mechanism"] in ("cgroup", "memboot") and r["retained"]
            and c.capacity_bytes / 1.5 <= r["capacity_bytes"] <= c.capacity_bytes * 1.5]
    if near:
        return []
    return [f"low-capacity balloon result with no cgroup or memboot cross-check near "
            f"{format_size(c.capacity_bytes)}: add cell {format_size(c.capacity_bytes)}"
            f"-cgroup-{c.reclaim} (balloon pressure can inflate traffic about 2x)"]


def _group(runs: list[dict]) -> dict[str, list[dict]]:
    g: dict[str, list[dict]] = defaultdict(list)
    for r in runs:
        g[r["cell"]].append(r)
    return g


def group_keys(groups: list[dict]) -> list[dict]:
    """The key of each labelled group, without its runs (what JSON and legends show)."""
    return [{k: g[k] for k in ("id", "host", "workload", "fingerprint")} for g in groups]


def matrix_groups(store: Store, *, host=None, campaign=None, workload=None,
                  include_demo: bool = False) -> tuple[list[dict], dict]:
    """(groups, cells) of a matrix: the labelled result groups and {(group id, cell name):
    (Cell, summary)}. The runs in scope (engine cells left out) are summarized per host,
    workload, fingerprint and cell first, and those summaries grouped: grouping a few hundred
    summaries, not every run, gives the same groups (identity.group_runs keys a group by
    host, workload and fingerprint, which one summary's runs share), in the order of their
    first runs, each group's fingerprint data its first run's."""
    if workload is None:
        parts = runs_by_identity(store, SUMMARY_COLS, host=host, campaign=campaign,
                                 include_demo=include_demo)
    else:       # a workload prefix is matched against every run in scope (scope)
        runs = scope(store, host=host, campaign=campaign, workload=workload,
                     include_demo=include_demo, columns=SUMMARY_COLS)
        found: dict[tuple, tuple[dict, list[dict]]] = {}
        for r in runs:
            k = (r["host"], r["workload"]["digest"], r["fingerprint"]["digest"], r["cell"])
            if k not in found:
                if cell_of(r["cell"]).is_engine:
                    continue
                found[k] = ({c: r[c] for c in _PART_KEYS}, [])
            found[k][1].append(r)
        parts = list(found.values())
    summarized = [first | {"summary": flagged(stats.summarize(rs))} for first, rs in parts]
    groups = identity.label_groups(identity.group_runs(summarized, with_cell=False))
    cells = {(g["id"], p["cell"]): (cell_of(p["cell"]), p["summary"])
             for g in groups for p in g["runs"]}
    return groups, cells


_PART_KEYS = ("cell", "host", "workload", "fingerprint", "fingerprint_data")


MATRICES = ("capacity", "reclaim", "equal-memory", "prefetch", "admission")
ENGINE_MATRIX = "end-to-end"


def matrix(store: Store, kind: str, *, host=None, campaign=None, workload=None,
           include_demo: bool = False) -> dict:
    """A campaign-shaped table with rows per result group (host, workload, fingerprint): a row
    never pools runs of two groups; `groups` holds each group's key, rows name theirs."""
    if kind == ENGINE_MATRIX:
        return engine_results(store, host=host, campaign=campaign, workload=workload,
                              include_demo=include_demo)
    if kind not in MATRICES:
        raise InputError(f"unknown matrix {kind!r}",
                         hint=f"valid: {', '.join(MATRICES + (ENGINE_MATRIX,))}")
    groups, cells = matrix_groups(store, host=host, campaign=campaign, workload=workload,
                                  include_demo=include_demo)
    res = shapes.SHAPES[kind](cells)
    used = {r["group"] for r in res["rows"]}
    shown = [g for g in groups if g["id"] in used]
    for r in res["rows"]:
        g = next(g for g in shown if g["id"] == r["group"])
        r["host"] = g["host"]
        if "median_s" in r:
            r["seconds_per_accepted_token"] = per_token(r["median_s"], g["workload"])
    warnings = []
    if len(shown) > 1:
        warnings.append(f"{len(shown)} groups, not pooled: they differ in "
                        f"{identity.describe_differences(identity.differences(shown))}")
    return res | {"matrix": kind, "host": host, "campaign": campaign, "workload": workload,
                  "groups": group_keys(shown), "warnings": warnings}


def engine_rows(store: Store, *, host=None, campaign=None, workload=None,
                include_demo: bool = False) -> list[dict]:
    """Stored engine runs: load_runs rows + their engine_runs row (+ engine_gates.from_data)."""
    runs = {r["run_id"]: r for r in scope(store, host=host, campaign=campaign, workload=workload,
                   include_demo=include_demo)
            if cell_of(r["cell"]).is_engine}
    if not runs:
        return []
    from bench.store.models import EngineRun, Run      # not on the replay views' path
    cols = [c for c in EngineRun.__table__.columns.keys() if c not in ("run_id", "data")]
    q = (select(Run.run_id, EngineRun.data, *[getattr(EngineRun, c) for c in cols])
         .join(EngineRun, EngineRun.run_id == Run.id).where(Run.run_id.in_(list(runs)))
         .order_by(Run.id))
    with store.session() as s:
        return [runs[row[0]] | dict(zip(cols, row[2:])) | engine_gates.from_data(row[1])
                for row in s.execute(q)]


def engine_results(store: Store, *, host=None, campaign=None, workload=None,
                   include_demo: bool = False) -> dict:
    """Table 3 per prompt, arm and result group (host, engine config and prompt, fingerprint)
    over retained engine runs: engine_gates.pair_stats (a pair is campaign, host, pair index)
    and replay_stats (the replay-vs-engine line), the runs kept and rejected."""
    rows = engine_rows(store, host=host, campaign=campaign, workload=workload,
                       include_demo=include_demo)
    groups = engine_gates.by_arm(identity.group_runs(rows, with_cell=False))
    identity.label_groups(groups)
    prompts = [g["runs"][0]["prompt"] + ("" if g["arm"] == "ample" else f" {g['arm']}")
               for g in groups]
    out = {"matrix": "end-to-end", "host": host, "campaign": campaign, "workload": workload,
           "prompts": [], "groups": group_keys(groups), "warnings": []}
    for g, prompt in zip(groups, prompts):
        name = prompt if prompts.count(prompt) == 1 else f"{prompt} ({g['id']})"
        kept = [dict(r, pair=f"{r['campaign_id'] or '-'}/{r['host']}/{r['pair_index']}")
                for r in g["runs"] if r["retained"]]
        st = engine_gates.pair_stats(g["runs"][0]["prompt"], kept).as_dict()
        st.update(replay=engine_gates.replay_stats(kept), group=g["id"], arm=g["arm"],
                  host=g["host"], workload=g["workload"]["digest"],
                  fingerprint=g["fingerprint"]["digest"], arms=engine_gates.arms(g["runs"]),
                  n_retained=len(kept), n_rejected=sum(r["retained"] is False for r in g["runs"]))
        sp = st["speedup"]      # flagged on its pairs and their ratios' spread
        st["flags"] = stats.reliability_flags(
            st["pairs"], sp and (st["speedup_max"] - st["speedup_min"]) / sp)
        out["prompts"].append(st)
        if st["hashes_match"] is False:
            out["warnings"].append(f"{name}: output hashes differ within pair(s) "
                                   f"{', '.join(st['mismatched'])}: admit and nocache did not "
                                   "decode the same tokens")
        if st["incomplete"]:
            out["warnings"].append(f"{name}: {len(st['incomplete'])} pair(s) without two "
                                   f"retained runs, not counted: {', '.join(st['incomplete'])}")
    if len(groups) > len(set(prompts)):
        out["warnings"].append(f"{len(groups)} groups for {len(set(prompts))} prompt(s), not "
                               "pooled: they differ in "
                               + identity.describe_differences(identity.differences(groups)))
    out["runs"] = [{k: r[k] for k in (
        "run_id", "host", "campaign_id", "cell", "prompt", "policy", "pair_index", "pair_order",
        "pair_position", "retained", "wall_s", "load_s", "steady_s", "tokens", "output_sha256",
        "backend_found", "device_bytes", "policy_args")} for r in rows]
    return out


METRICS = (("time", "iteration_median_s"), ("device", "device_bytes_per_iteration"))


def compare(store: Store, a: str, b: str, *, host=None, campaign=None, workload=None,
            include_demo: bool = False,
            pool: bool = False) -> dict:
    """Two cells, per result group (host, workload, fingerprint): the ratio of medians and the
    median, min and max of per-pair ratios, where a pair is one run of each cell in the same
    group, campaign and repetition (bench.judge.identity.pair_runs). The top-level figures are
    that one group's, or with several groups None unless `pool`: then the ratio of all medians
    and the median over every group's pairs (pairs never cross a host or a campaign)."""
    ca, cb = parse_cell(a), parse_cell(b)
    runs = [r for r in scope(store, host=host, campaign=campaign, workload=workload,
                   include_demo=include_demo)
            if r["retained"]]
    ra = [r for r in runs if r["cell"] == ca.name]
    rb = [r for r in runs if r["cell"] == cb.name]
    groups = identity.label_groups(identity.group_runs(ra + rb, with_cell=False))
    diff = [f for f in ("capacity_bytes", "mechanism", "reclaim", "mode", "prefetch")
            if getattr(ca, f) != getattr(cb, f)]
    per = []
    for g in groups:
        ga = [r for r in g["runs"] if r["cell"] == ca.name]
        gb_ = [r for r in g["runs"] if r["cell"] == cb.name]
        per.append({k: g[k] for k in ("id", "host", "workload", "fingerprint")}
                   | {"campaigns": sorted({r["campaign_id"] for r in g["runs"]
                                           if r["campaign_id"]})}
                   | _comparison(ga, gb_, identity.pair_runs(ga, gb_), diff))
    out: dict[str, Any] = {"a": ca.name, "b": cb.name, "n_a": len(ra), "n_b": len(rb),
                           "differs_in": diff, "groups": per, "pooled": None, "warnings": []}
    if len(groups) <= 1:
        top = per[0] if per else _comparison([], [], [], diff)
        out.update({k: v for k, v in top.items() if k not in ("n_a", "n_b")})
        return out
    why = identity.describe_differences(identity.differences(groups))
    if pool:
        pairs = [p for g in groups for p in identity.pair_runs(
            [r for r in g["runs"] if r["cell"] == ca.name],
            [r for r in g["runs"] if r["cell"] == cb.name])]
        top = _comparison(ra, rb, pairs, diff)
        out.update({k: v for k, v in top.items() if k not in ("n_a", "n_b")})
        out["pooled"] = {"groups": len(groups), "reason": f"pooled on request (--pool): "
                         f"{len(groups)} groups that differ in {why}; pairs stay within one "
                         "host and campaign"}
        out["warnings"].append(out["pooled"]["reason"])
    else:
        out.update({k: None for k in _comparison([], [], [], diff) if k not in ("n_a", "n_b")})
        out["warnings"].append(f"{len(groups)} groups, not pooled: they differ in {why}; "
                               "per-group ratios only (--pool pools them)")
    return out


def _comparison(ra: list[dict], rb: list[dict], pairs: list[tuple[dict, dict]],
                diff: list[str]) -> dict:
    """stats.comparison, flagged on its time pairs: their count, their ratios' spread."""
    c = stats.comparison(ra, rb, pairs, METRICS, diff)
    med, lo, hi = (c[f"time_{k}"] for k in ("median_pair_ratio", "pair_ratio_min",
                                            "pair_ratio_max"))
    return c | {"flags": stats.reliability_flags(c["time_pairs"], med and (hi - lo) / med)}


SIZING_PREFERENCE = {"cgroup": 0, "memboot": 0, "none": 1, "balloon": 2}


def sizing(store: Store, target_s: float, *, reclaim: str = "mglru", host=None,
           campaign=None, workload=None, include_demo: bool = False) -> dict:
    """DRAM for a target iteration time, read off measured capacity curves (pagecache, no
    prefetch, the given reclaim): one curve per result group and per mechanism (a cgroup curve
    is never completed with balloon points), each with its own answer. With one curve its
    answer is also at the top level (`status`, `capacity_bytes`, `curve`, ...)."""
    runs = [r for r in scope(store, host=host, campaign=campaign, workload=workload,
                   include_demo=include_demo)
            if _sizing_cell(r["cell"], reclaim)]
    groups = identity.label_groups(identity.group_runs(runs, with_cell=False))
    curves = []
    for g in groups:
        for mech in sorted({r["mechanism"] for r in g["runs"]},
                           key=lambda m: (SIZING_PREFERENCE.get(m, 3), m)):
            curve = _sizing_curve(g, mech, target_s)
            if curve is not None:
                curves.append(curve)
    out: dict[str, Any] = {"target_s": target_s, "reclaim": reclaim, "curves": curves,
                           "groups": group_keys(groups), "warnings": []}
    if len(curves) == 1:
        out.update({k: v for k, v in curves[0].items() if k not in out})
    elif not curves:
        out.update(status="no_data", capacity_bytes=None, curve=[])
    else:
        out["warnings"].append(f"{len(curves)} curves (one per group and mechanism), not "
                               "pooled: each has its own answer")
    return out


def _sizing_cell(name: str, reclaim: str) -> bool:
    c = cell_of(name)
    return (not c.is_engine and c.mode == "pagecache" and c.hints is None
            and c.reclaim == reclaim)


def _sizing_curve(g: dict, mech: str, target_s: float) -> dict | None:
    """One mechanism's capacity curve of one group, and its answer."""
    pts = []
    for name, rs in _group([r for r in g["runs"] if r["mechanism"] == mech]).items():
        s = stats.summarize(rs)
        if s["median_s"] is not None:
            pts.append((cell_of(name).capacity_bytes, s["median_s"]))
    if not pts:
        return None
    curve = sorted(pts)
    res = stats.interpolate_capacity(curve, target_s)
    used = res.get("between") or ([res["capacity_bytes"]] if res.get("capacity_bytes") else [])
    res.update({"group": g["id"], "host": g["host"], "workload": g["workload"],
                "fingerprint": g["fingerprint"], "mechanism": mech,
                "curve": [{"capacity_bytes": c, "median_s": t, "mechanism": mech}
                          for c, t in curve]})
    res["balloon_conditioned"] = bool(used) and mech == "balloon"
    if res["balloon_conditioned"] and min(used) < curve[-1][0]:
        res["caveat"] = ("the points used were measured only under a balloon, which inflates "
                         "low-capacity traffic with MGLRU; cross-check with a cgroup or mem= "
                         "curve of the same host and workload")
    return res


def export_rows(store: Store, *, host=None, campaign=None, include_demo: bool = False
                ) -> list[dict]:
    return load_runs(store, host=host, campaign=campaign, include_demo=include_demo)
