"""Read side: runs with verdicts, per-cell results, campaign-shaped matrices, comparisons,
sizing and exports. One query per request over the denormalised run metrics; the statistics
themselves are bench.judge.stats (pure). End-to-end engine cells (docs/engine.md) have their own
table (`engine_results`, `bench results --matrix end-to-end`) and stay out of the replay ones."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from sqlalchemy import select

from bench.errors import InputError
from bench.hosts.facts import as_host_json
from bench.judge import engine, stats
from bench.judge.judgement import METRIC_COLUMNS
from bench.judge.measured import fingerprint_diff, fingerprint_of
from bench.matrix.cells import parse_cell
from bench.store.db import Store
from bench.store.ingest import reference_fingerprint
from bench.store.models import Campaign, CampaignHost, Cell, EngineRun, Host, Run, Verdict
from bench.units import format_size
from bench.version import controller_version

RUN_COLS = ("run_id", "campaign_id", "position", "repetition", "state", "retained",
            "nominal_miss_bytes_per_iteration") + METRIC_COLUMNS
CELL_COLS = ("capacity_bytes", "mechanism", "reclaim", "mode", "hints", "delivery")


def load_runs(store: Store, *, cell: str | None = None, host: str | None = None,
              campaign: str | None = None, ingested_only: bool = True) -> list[dict]:
    cols = [getattr(Run, c) for c in RUN_COLS] + [Cell.name, Host.name] + \
           [getattr(Cell, c) for c in CELL_COLS]
    q = select(*cols).join(Cell, Run.cell_id == Cell.id).join(Host, Run.host_id == Host.id)
    if cell:
        q = q.where(Cell.name == parse_cell(cell).name)
    if host:
        q = q.where(Host.name == host)
    if campaign:
        q = q.where(Run.campaign_id == campaign)
    if ingested_only:
        q = q.where(Run.bundle_digest.is_not(None))
    names = RUN_COLS + ("cell", "host") + CELL_COLS
    with store.session() as s:
        return [dict(zip(names, row)) for row in s.execute(q.order_by(Run.id))]


def verdicts(store: Store, run_ids: list[str]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    if not run_ids:
        return out
    q = (select(Run.run_id, Verdict.rule, Verdict.version, Verdict.passed, Verdict.reason)
         .join(Run, Verdict.run_id == Run.id)
         .where(Verdict.current.is_(True), Run.run_id.in_(run_ids)).order_by(Verdict.id))
    with store.session() as s:
        for rid, rule, version, passed, reason in s.execute(q):
            out[rid].append({"rule": rule, "version": version, "passed": passed,
                             "reason": reason})
    return out


def list_runs(store: Store, *, cell=None, host=None, campaign=None, rejected=False) -> list[dict]:
    runs = load_runs(store, cell=cell, host=host, campaign=campaign)
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


def cell_results(store: Store, cell: str, *, host=None, campaign=None, verbose=False) -> dict:
    name = parse_cell(cell).name
    scope = load_runs(store, host=host, campaign=campaign)
    runs = [r for r in scope if r["cell"] == name]
    if not runs:
        where = (f" on {host}" if host else "") + (f" in {campaign}" if campaign else "")
        raise InputError(f"no stored runs of cell {name}{where}",
                         hint="`bench runs` lists what is stored")
    summary = stats.summarize(runs)
    out = {"cell": name, "host": host, "campaign": campaign, **summary,
           "warnings": stats.indicators(summary) + cross_check_warnings(name, scope)}
    if parse_cell(name).is_engine:
        out["warnings"].append("an end-to-end engine cell has no replay figures: its pairs "
                               "are in `bench results --matrix end-to-end`")
    out["runs"] = [{k: r[k] for k in ("run_id", "host", "campaign_id", "repetition", "retained",
                                      "iteration_median_s", "device_bytes_per_iteration",
                                      "scan_steal", "locked_fraction")} for r in runs]
    if verbose:
        v = verdicts(store, [r["run_id"] for r in runs])
        for r in out["runs"]:
            r["verdicts"] = v[r["run_id"]]
    return out


def cross_check_warnings(name: str, scope: list[dict]) -> list[str]:
    """A low-capacity balloon cell needs a cgroup or memboot cross-check near its capacity."""
    c = parse_cell(name)
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


MATRICES = ("capacity", "reclaim", "equal-memory", "prefetch")
ENGINE_MATRIX = "end-to-end"


def matrix(store: Store, kind: str, *, host=None, campaign=None) -> dict:
    if kind == ENGINE_MATRIX:
        return engine_results(store, host=host, campaign=campaign)
    if kind not in MATRICES:
        raise InputError(f"unknown matrix {kind!r}",
                         hint=f"valid: {', '.join(MATRICES + (ENGINE_MATRIX,))}")
    groups = _group([r for r in load_runs(store, host=host, campaign=campaign)
                     if not parse_cell(r["cell"]).is_engine])
    cells = {name: (parse_cell(name), stats.summarize(rs)) for name, rs in groups.items()}
    return {"capacity": _capacity, "reclaim": _reclaim, "equal-memory": _equal,
            "prefetch": _prefetch}[kind](cells, groups) | {"matrix": kind, "host": host,
                                                           "campaign": campaign}


def _capacity(cells, groups) -> dict:
    """Table 2: the balloon (and ample) sweep per capacity, largest first, with a/C."""
    rows = []
    for name, (c, s) in cells.items():
        if c.mechanism in ("balloon", "none") and c.mode == "pagecache" and c.hints is None:
            rows.append({"cell": name, "capacity_bytes": c.capacity_bytes,
                         "reclaim": c.reclaim, **s})
    rows.sort(key=lambda r: (r["reclaim"], -r["capacity_bytes"]))
    for reclaim in {r["reclaim"] for r in rows}:
        sub = [r for r in rows if r["reclaim"] == reclaim]
        ref = stats.a_over_c([(r["capacity_bytes"], r["device_gb_per_iteration"]) for r in sub])
        for r in sub:
            r["a_over_c_dev"] = ref.get(r["capacity_bytes"], (None, None))[1]
    return {"rows": rows}


def _reclaim(cells, groups) -> dict:
    """Fig. 3: per capacity and mechanism, MGLRU on next to off."""
    pairs: dict[tuple, dict] = {}
    for name, (c, s) in cells.items():
        if c.mode != "pagecache" or c.hints is not None:
            continue
        row = pairs.setdefault((c.capacity_bytes, c.mechanism),
                               {"capacity_bytes": c.capacity_bytes, "mechanism": c.mechanism})
        row[c.reclaim] = s
        row[f"{c.reclaim}_cell"] = name
    rows = sorted(pairs.values(), key=lambda r: (r["capacity_bytes"], r["mechanism"]))
    for r in rows:
        m, k = r.get("mglru"), r.get("classic")
        a = m and m["device_gb_per_iteration"]
        b = k and k["device_gb_per_iteration"]
        r["mglru_over_classic"] = a / b if a and b else None
    return {"rows": rows}


def _equal(cells, groups) -> dict:
    """Fig. 4: cgroup wall per capacity: pagecache / pinned / hybrid / random side by side."""
    rows: dict[int, dict] = {}
    for c, s in cells.values():
        if c.mechanism == "cgroup" and c.hints is None:
            rows.setdefault(c.capacity_bytes, {"capacity_bytes": c.capacity_bytes})[c.mode] = s
    return {"rows": sorted(rows.values(), key=lambda r: -r["capacity_bytes"]),
            "modes": ["pagecache", "pinned", "hybrid", "random", "nocache"]}


def _prefetch(cells, groups) -> dict:
    """Fig. 6: per capacity and mechanism: none and each hint plan x delivery."""
    rows: dict[tuple, dict] = {}
    for c, s in cells.values():
        if c.mode != "pagecache":
            continue
        rows.setdefault((c.capacity_bytes, c.mechanism, c.reclaim),
                        {"capacity_bytes": c.capacity_bytes, "mechanism": c.mechanism,
                         "reclaim": c.reclaim})[c.prefetch] = s
    out = [r for r in rows.values() if len(r) > 4]
    return {"rows": sorted(out, key=lambda r: -r["capacity_bytes"]),
            "prefetch": sorted({k for r in out for k in r if k not in
                                ("capacity_bytes", "mechanism", "reclaim")},
                               key=lambda k: (k != "none", k))}


def engine_rows(store: Store, *, host=None, campaign=None) -> list[dict]:
    """Stored engine runs (load_runs rows joined with their engine_runs row)."""
    runs = {r["run_id"]: r for r in load_runs(store, host=host, campaign=campaign)
            if parse_cell(r["cell"]).is_engine}
    if not runs:
        return []
    cols = [c for c in EngineRun.__table__.columns.keys() if c not in ("run_id", "data")]
    q = (select(Run.run_id, *[getattr(EngineRun, c) for c in cols])
         .join(EngineRun, EngineRun.run_id == Run.id).where(Run.run_id.in_(list(runs)))
         .order_by(Run.id))
    with store.session() as s:
        return [runs[row[0]] | dict(zip(cols, row[1:])) for row in s.execute(q)]


def engine_results(store: Store, *, host=None, campaign=None) -> dict:
    """Table 3 per prompt over retained engine runs: admit and nocache median steady-decode
    s, the median of per-pair ratios nocache/admit with its range, the pairs counted, and
    whether every pair's two output hashes match. A pair is (campaign, host, pair index)."""
    rows = engine_rows(store, host=host, campaign=campaign)
    out = {"matrix": "end-to-end", "host": host, "campaign": campaign, "prompts": [],
           "warnings": []}
    for prompt in sorted({r["prompt"] for r in rows}):
        mine = [r for r in rows if r["prompt"] == prompt]
        kept = [dict(r, pair=f"{r['campaign_id'] or '-'}/{r['host']}/{r['pair_index']}")
                for r in mine if r["retained"]]
        st = engine.pair_stats(prompt, kept).as_dict()
        st.update(n_retained=len(kept), n_rejected=sum(r["retained"] is False for r in mine),
                  configs=len({r["config_sha256"] for r in mine}))
        out["prompts"].append(st)
        if st["hashes_match"] is False:
            out["warnings"].append(f"{prompt}: output hashes differ within pair(s) "
                                   f"{', '.join(st['mismatched'])}: admit and nocache did not "
                                   "decode the same tokens")
        if st["incomplete"]:
            out["warnings"].append(f"{prompt}: {len(st['incomplete'])} pair(s) without two "
                                   f"retained runs, not counted: {', '.join(st['incomplete'])}")
        if st["configs"] > 1:
            out["warnings"].append(f"{prompt}: runs under {st['configs']} different engine "
                                   "configurations are mixed (filter with --campaign)")
    out["runs"] = [{k: r[k] for k in ("run_id", "host", "campaign_id", "cell", "prompt",
                                      "policy", "pair_index", "pair_order", "pair_position",
                                      "retained", "wall_s", "load_s", "steady_s", "tokens",
                                      "output_sha256", "backend_found")} for r in rows]
    return out


def compare(store: Store, a: str, b: str, *, host=None, campaign=None) -> dict:
    ca, cb = parse_cell(a), parse_cell(b)
    runs = load_runs(store, host=host, campaign=campaign)
    ra = [r for r in runs if r["cell"] == ca.name and r["retained"]]
    rb = [r for r in runs if r["cell"] == cb.name and r["retained"]]
    out: dict[str, Any] = {"a": ca.name, "b": cb.name, "n_a": len(ra), "n_b": len(rb)}
    for key, label in (("iteration_median_s", "time"), ("device_bytes_per_iteration", "device")):
        xa = [r[key] for r in ra if r[key] is not None]
        xb = [r[key] for r in rb if r[key] is not None]
        by = {(r["campaign_id"], r["repetition"]): r[key] for r in rb if r[key] is not None}
        pairs = [(r[key], by[(r["campaign_id"], r["repetition"])]) for r in ra
                 if r[key] is not None and r["campaign_id"] is not None
                 and (r["campaign_id"], r["repetition"]) in by]
        out[f"{label}_ratio_of_medians"] = stats.ratio_of_medians(xa, xb)
        out[f"{label}_median_pair_ratio"] = stats.median_pair_ratio(pairs)
        out[f"{label}_pairs"] = len(pairs)
    diff = [f for f in ("capacity_bytes", "mechanism", "reclaim", "mode", "prefetch")
            if getattr(ca, f) != getattr(cb, f)]
    out["differs_in"] = diff
    r = out["time_ratio_of_medians"]
    out["mechanism_agreement"] = abs(r - 1) if diff == ["mechanism"] and r else None
    return out


def sizing(store: Store, target_s: float, *, reclaim: str = "mglru", host=None,
           campaign=None) -> dict:
    """DRAM for a target iteration time, read off the measured capacity curve (pagecache, no
    prefetch): per capacity a cgroup/memboot point is preferred to a balloon one."""
    pref = {"cgroup": 0, "memboot": 0, "none": 1, "balloon": 2}
    best: dict[int, tuple] = {}
    for name, rs in _group(load_runs(store, host=host, campaign=campaign)).items():
        c = parse_cell(name)
        if c.is_engine or c.mode != "pagecache" or c.hints is not None or c.reclaim != reclaim:
            continue
        s = stats.summarize(rs)
        if s["median_s"] is None:
            continue
        cand = (pref[c.mechanism], c.mechanism, s["median_s"])
        if c.capacity_bytes not in best or cand < best[c.capacity_bytes]:
            best[c.capacity_bytes] = cand
    curve = sorted((cap, v[2]) for cap, v in best.items())
    res = stats.interpolate_capacity(curve, target_s)
    mech = {cap: v[1] for cap, v in best.items()}
    used = res.get("between") or ([res["capacity_bytes"]] if res.get("capacity_bytes") else [])
    res.update({"target_s": target_s, "reclaim": reclaim,
                "curve": [{"capacity_bytes": c, "median_s": t, "mechanism": mech[c]}
                          for c, t in curve]})
    res["balloon_conditioned"] = bool(used) and all(mech[c] == "balloon" for c in used)
    if res["balloon_conditioned"] and min(used) < max(best):
        res["caveat"] = ("the points used were measured only under a balloon, which inflates "
                         "low-capacity traffic with MGLRU; cross-check with a cgroup or mem= cell")
    return res


def export_rows(store: Store, *, host=None, campaign=None) -> list[dict]:
    return load_runs(store, host=host, campaign=campaign)
