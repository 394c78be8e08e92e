"""What `bench report` shows of one or more campaigns, gathered from the store into one plain
dict (data flows one way: this module reads the store through bench.store.campaigns and
bench.store.queries; bench.results.report_html and report_md render the dict, and nothing
else). Every string in it is as the store holds it: host names, journal messages and verdict
reasons come from hosts and bundles and are untrusted, so the renderers escape all of it.

The dict (`gather`):
  campaigns   [{id, matrix, scale, seed, state, hosts, start, end, duration_s, estimate_s,
                reboots_done, reboots_planned, reboot_lower_bound, counts, matrix_ref,
                reference, workload}]
  findings    [str]     mechanism agreement, balloon cross-check and mem= lines, in words
  figures     [{kind, title, matrix (bench.store.queries.matrix), rows, legend, warnings,
                campaigns, command}]
  engine      [{campaign, results (bench.store.queries.engine_results)}]: Table 3, per
                campaign with retained or rejected engine runs
  reference   [{campaign, matrix, reference, scale, mapping, rows}]
  rejected, failed, skipped, provenance, runs (see the functions below)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from bench.judge import identity
from bench.judge.stats import GB, reliability_flags
from bench.store import queries
from bench.store.campaigns import campaign_row, journal_rows, run_rows
from bench.store.db import Store
from bench.units import format_size

# per-figure titles (as bench.results.plots names them, without matplotlib)
FIGURE_TITLES = {"capacity": "Table 2 / Fig. 2: capacity response",
                 "reclaim": "Fig. 3: reclaim (MGLRU on vs off)",
                 "equal-memory": "Fig. 4: equal memory under one cgroup wall",
                 "prefetch": "Fig. 6: one bounded prefetch worker",
                 "admission": "§9: cache admission, admitted vs bypassed"}
# the counts the summary names, in order (a run state each, and the cells skipped at planning)
COUNTED = ("validated", "rejected", "failed", "pending")
# the metric columns a run's own section shows
RUN_METRICS = ("iterations", "iteration_median_s", "iteration_min_s", "iteration_max_s",
               "device_bytes_per_iteration", "logical_bytes_per_iteration",
               "nominal_miss_bytes_per_iteration", "served_fraction", "scan_steal",
               "cgroup_scan_steal", "locked_fraction", "mem_total_bytes", "mglru_loop_entry",
               "mglru_end")


def gather(store: Store, campaign_ids: Sequence[str], db: str | None = None) -> dict:
    """The report's data of `campaign_ids` (each must exist: the caller checked)."""
    camps = [_campaign(store, cid) for cid in campaign_ids]
    runs: list[dict] = []
    for c in camps:
        runs += _runs(store, c)
    figures, findings = _figures(store, campaign_ids, db)
    for c in camps:         # the typed rows were for the functions above only
        del c["journal"], c["run_rows"]
    engine = [{"campaign": cid, "results": res} for cid in campaign_ids
              if (res := queries.engine_results(store, campaign=cid, include_demo=True))
              ["prompts"]]
    return {"campaigns": camps, "findings": findings, "figures": figures, "engine": engine,
            "reference": [_reference(c, figures) for c in camps],
            # rejected at ingest, or no longer retained after `bench retention recheck`
            "rejected": [r for r in runs if r["state"] == "rejected" or r["retained"] is False],
            # runs that are failed now, or failed once and were redone, or that a recovery
            # ladder climbed for
            "failed": [r for r in runs if r["state"] == "failed" or r["failures"] or r["ladder"]],
            "skipped": [s | {"campaign": c["id"]} for c in camps for s in c["skipped"]],
            "provenance": _provenance(store, camps, figures, db),
            "runs": runs}


# the campaign -----------------------------------------------------------------------------------

def _campaign(store: Store, cid: str) -> dict:
    row = campaign_row(store, cid)
    assert row is not None
    rows = run_rows(store, cid)
    plan_rows = journal_rows(store, cid, kinds=("plan",))
    plan = (plan_rows[0].data or {}) if plan_rows else {}
    est = plan.get("estimate") or _estimate_of(plan_rows[0].message if plan_rows else "")
    all_j = journal_rows(store, cid)
    times = [j.t for j in all_j if j.kind != "live"]
    start, end = (times[0], times[-1]) if times else (row.created, row.created)
    counts = {s: sum(_counted_state(r) == s for r in rows) for s in COUNTED}
    counts["other"] = len(rows) - sum(counts.values())
    # runs in no counted state (left mid-way, or ingested and not judged), by state
    others: dict[str, int] = {}
    for r in rows:
        if _counted_state(r) not in COUNTED:
            others[r.state] = others.get(r.state, 0) + 1
    # the states as stored (what `bench campaigns` counts), when judging changed any
    stored: dict[str, int] = {}
    if any(_counted_state(r) != r.state for r in rows):
        for r in rows:
            stored[r.state] = stored.get(r.state, 0) + 1
    counts["skipped"] = len(plan.get("skipped") or [])
    counts["runs"] = len(rows)
    return {"id": cid, "matrix": row.matrix, "scale": plan.get("scale"), "seed": row.seed,
            "state": row.state, "demo": row.demo,
            "hosts": plan.get("hosts") or sorted({r.host for r in rows}),
            "start": start, "end": end, "duration_s": _seconds(start, end),
            "estimate_s": est.get("estimate_s"), "reboots_planned": est.get("reboots"),
            "reboot_lower_bound": est.get("reboot_lower_bound"),
            "reboots_done": sum(1 for j in all_j if j.kind == "reboot"
                                and "reboot into" in j.message),
            "counts": counts, "other_states": others, "stored_states": stored,
            "matrix_ref": plan.get("matrix_ref"),
            "workload": row.workload or plan.get("workload") or {},
            "skipped": [{"point": s.get("point"), "cell": s.get("cell"), "host": s.get("host"),
                         "reason": s.get("reason")} for s in plan.get("skipped") or []],
            "journal": all_j, "run_rows": rows}


def _counted_state(r) -> str:
    """The state a run counts under: a run ingested outside the executor (state `ingested`)
    and judged counts as validated or rejected by its verdict, as the executor's runs do."""
    if r.state == "ingested" and r.retained is not None:
        return "validated" if r.retained else "rejected"
    return r.state


def _estimate_of(message: str) -> dict:
    """The estimate a campaign planned before its record stored one: from its plan line
    ("plan: 6 runs on a, b, 2 reboots, estimate 540s")."""
    m = re.search(r"(\d+) reboots, estimate (\d+)s", message)
    return {"reboots": int(m[1]), "estimate_s": float(m[2])} if m else {}


def _seconds(a: str | None, b: str | None) -> float | None:
    try:
        return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds() \
            if a and b else None
    except ValueError:
        return None


# the runs ---------------------------------------------------------------------------------------

def _runs(store: Store, c: dict) -> list[dict]:
    """Every run of the campaign, in plan order, with its metrics, verdicts, journal lines and
    recovery-ladder steps."""
    measured = {r["run_id"]: r for r in queries.load_runs(
        store, campaign=c["id"], ingested_only=False,
        columns=("run_id",) + tuple(dict.fromkeys(RUN_METRICS)))}
    verdicts = queries.verdicts(store, [r.run_id for r in c["run_rows"]])
    by_ref: dict[int, list] = {}
    for j in c["journal"]:
        if j.run_ref is not None and j.kind != "live":
            by_ref.setdefault(j.run_ref, []).append(j)
    ladder: dict[str, list[dict]] = {}
    for j in c["journal"]:
        step = j.get("ladder")
        if isinstance(step, dict) and j.get("run_id"):
            ladder.setdefault(str(j.get("run_id")), []).append(step)
    out = []
    for r in c["run_rows"]:
        m = measured.get(r.run_id, {})
        out.append({"run_id": r.run_id, "campaign": c["id"], "host": r.host, "cell": r.cell,
                    "state": r.state, "retained": r.retained, "position": r.position,
                    "repetition": r.repetition,
                    "metrics": {k: m.get(k) for k in RUN_METRICS if m.get(k) is not None},
                    "verdicts": verdicts.get(r.run_id, []),
                    "timeline": [{"t": j.t, "kind": j.kind, "message": j.message}
                                 for j in by_ref.get(r.ref, [])],
                    "ladder": ladder.get(r.run_id, []),
                    "failures": [j.message for j in by_ref.get(r.ref, [])
                                 if j.kind == "state" and j.get("to") == "failed"]})
    return out


# the figures ------------------------------------------------------------------------------------

def _figures(store: Store, cids: Sequence[str], db: str | None) -> tuple[list[dict], list[str]]:
    """One entry per matrix shape that has rows in these campaigns (the campaign's own matrix
    first), and the findings lines of the reclaim shape."""
    rows = [campaign_row(store, cid) for cid in cids]
    own = [r.matrix for r in rows if r is not None and r.matrix in queries.MATRICES]
    kinds = list(dict.fromkeys(own + list(queries.MATRICES)))
    figures, findings = [], []
    for kind in kinds:
        rows_all, groups, warnings, ms = [], [], [], []
        for cid in cids:
            m = queries.matrix(store, kind, campaign=cid, include_demo=True)
            if not m["rows"]:
                continue
            ms.append((cid, m))
            names = {g["id"]: g["id"] for g in m["groups"]}
            rows_all += [r | {"campaign": cid} for r in _cell_rows(kind, m)]
            groups += [g | {"campaign": cid} for g in m["groups"]]
            warnings += m["warnings"]
            if kind == "reclaim":
                findings += [f"{cid}: {line}" if len(cids) > 1 else line
                             for line in _agreement(m, names)]
        if not ms:
            continue
        figures.append({"kind": kind, "title": FIGURE_TITLES[kind], "rows": rows_all,
                        "groups": groups, "warnings": warnings,
                        "matrices": [{"campaign": cid, "matrix": m} for cid, m in ms],
                        "commands": [_cmd(f"bench plot {kind} --campaign {cid} -o {kind}-{cid}",
                                          db) for cid, _ in ms]})
    return figures, findings + _cross_checks(store, cids)


def _agreement(m: dict, names: dict[str, str]) -> list[str]:
    from bench.results.store_views import agreement_lines
    return agreement_lines(m, names)


def _cross_checks(store: Store, cids: Sequence[str]) -> list[str]:
    """The balloon cross-check warnings of each balloon cell the campaigns ran."""
    out = []
    for cid in cids:
        scope = queries.cross_check_scope(store, campaign=cid, include_demo=True)
        for name in sorted({r["cell"] for r in scope if r["mechanism"] == "balloon"}):
            out += [f"balloon cross-check {name}: {w}" for w in
                    queries.cross_check_warnings(name, [r for r in scope])]
    return list(dict.fromkeys(out))


def _summary_row(group: str, host: str, label: str, s: dict) -> dict:
    n = s.get("n_retained") or 0
    return {"group": group, "host": host, "cell": label, "median_s": s.get("median_s"),
            "min_s": s.get("min_s"), "max_s": s.get("max_s"), "n_retained": n,
            "n_rejected": s.get("n_rejected") or 0, "spread": s.get("spread"),
            "device_gb": s.get("device_gb_per_iteration"),
            "flags": reliability_flags(n, s.get("spread"))}


def _cell_rows(kind: str, m: dict) -> list[dict]:
    """One row per (group, cell) a figure draws, whatever the shape: the capacity shape holds
    the summary in the row, the others one summary per reclaim, mode or hint plan."""
    out = []
    for r in m["rows"]:
        host = r.get("host") or ""
        if kind == "capacity":
            out.append(_summary_row(r["group"], host, r["cell"], r))
            continue
        where = " ".join(x for x in (format_size(r["capacity_bytes"]), r.get("mechanism"),
                                     r.get("reclaim")) if x)
        for k, s in r.items():
            if isinstance(s, dict) and "n_retained" in s:
                label = r.get(f"{k}_cell") or f"{where} {k}"
                out.append(_summary_row(r["group"], host, label, s))
    return out


# against the reference --------------------------------------------------------------------------

def _reference(c: dict, figures: list[dict]) -> dict:
    """The paper's numbers (bench/data/reference/paper.toml) beside this campaign's, with the
    scale's capacity mapping (paper C -> scaled C) when the matrix ran at a scale."""
    from bench.matrix.load import load_matrix, shipped_names
    from bench.results.reference import paper_ratios, paper_values
    out: dict = {"campaign": c["id"], "matrix": c["matrix"], "reference": None,
                 "scale": c["scale"], "mapping": [], "rows": [], "ratios": []}
    if c["matrix"] not in shipped_names():
        return out
    try:
        mx = load_matrix(c["matrix"], c["scale"])
    except Exception:       # noqa: BLE001 - a matrix file changed since: no reference, said so
        out["note"] = f"the shipped matrix {c['matrix']} no longer loads at this scale"
        return out
    out["reference"] = mx.reference or None
    out["mapping"] = [list(p) for p in mx.capacity_map]
    scaled = {lab: paper for paper, lab in mx.capacity_map}
    # the campaign's own figure (else every figure once): a cell's row per result group
    own = [f for f in figures if f["kind"] == c["matrix"]] or figures
    rows = list({(r["group"], r["cell"]): r for f in own for r in f["rows"]
                 if r.get("campaign") == c["id"]}.values())
    def lab(cell: str) -> str:
        for paper_c, lab_c in mx.capacity_map:
            if cell.startswith(paper_c + "-"):
                return lab_c + cell[len(paper_c):]
        return cell
    for ratio in paper_ratios(c["matrix"]):
        a, b = lab(ratio["a"]), lab(ratio["b"])
        # only the groups that ran one of the two cells (a group of another boot has neither);
        # none at all still shows the paper's ratio, with nothing measured beside it
        groups = [g for g in dict.fromkeys(r["group"] for r in rows)
                  if any(r["group"] == g and r["cell"] in (a, b) for r in rows)] or [None]
        for g in groups:
            ra = next((r for r in rows if r["group"] == g and r["cell"] == a), None)
            rb = next((r for r in rows if r["group"] == g and r["cell"] == b), None)
            va, vb = (None if x is None else x.get(ratio["metric"]) for x in (ra, rb))
            got = va / vb if va is not None and vb else None
            out["ratios"].append(ratio | {
                "measured_a": a, "measured_b": b, "group": g,
                "host": (ra or rb or {}).get("host"), "measured": got,
                "ratio": got / ratio["value"] if got is not None and ratio["value"] else None})
    for ref in paper_values(c["matrix"]):
        lab_cell = lab(ref["cell"])
        found = [r for r in rows if r["cell"] == lab_cell] or [None]
        for row in found:
            got = None if row is None else row.get(ref["metric"])
            out["rows"].append(ref | {
                "measured_cell": lab_cell, "host": None if row is None else row["host"],
                "measured": got, "scaled": lab_cell != ref["cell"] or bool(scaled),
                "ratio": got / ref["value"] if got and ref["value"] else None})
    return out


# provenance -------------------------------------------------------------------------------------

def _provenance(store: Store, camps: list[dict], figures: list[dict], db: str | None) -> dict:
    groups: dict[tuple, dict] = {}
    for f in figures:
        for g in f["groups"]:
            fp = g["fingerprint"] or {}
            key = (g["host"], (g["workload"] or {}).get("digest"), fp.get("digest"))
            groups.setdefault(key, {"host": g["host"],
                                    "workload": identity.workload_text(g["workload"]),
                                    "fingerprint": fp.get("digest"),
                                    "kernel": fp.get("kernel"), "arch": fp.get("arch"),
                                    "cmdline": fp.get("cmdline"),
                                    "controller": fp.get("controller_version"),
                                    "agent": fp.get("agent_sha256"),
                                    "campaigns": []})["campaigns"].append(g["campaign"])
    drift = []
    gl = list(groups.values())
    for host in sorted({g["host"] for g in gl}):
        fps = {g["fingerprint"] for g in gl if g["host"] == host}
        if len(fps) > 1:
            drift.append(f"{host}: {len(fps)} fingerprints within the report's runs "
                         f"({', '.join(str(x)[:12] for x in sorted(map(str, fps)))})")
    for fld in ("kernel", "controller", "agent", "cmdline"):
        vals = {g[fld] for g in gl}
        if len({g['host'] for g in gl}) > 1 and len(vals) > 1:
            drift.append(f"{fld} differs between hosts: "
                         + "; ".join(f"{g['host']} {g[fld]}" for g in gl))
    for c in camps:
        ref_fps = queries.campaign_fingerprints(store, c["id"])
        c["reference_fingerprints"] = {h: f.get("digest") for h, f in ref_fps.items()}
    rerun = [_rerun(c, db) for c in camps]
    return {"groups": gl, "drift": drift, "rerun": rerun,
            "figures": [cmd for f in figures for cmd in f["commands"]],
            "report": _cmd("bench report " + " ".join(c["id"] for c in camps), db)}


def _rerun(c: dict, db: str | None) -> str:
    """The command that runs the campaign again (a new campaign of the same plan)."""
    if c["demo"]:
        return _cmd("bench demo", db)
    matrix = c["matrix_ref"] or c["matrix"]
    if not matrix:
        return (f"# {c['id']}: no matrix recorded (runs of `bench run` or ingested bundles): "
                "rerun each cell with `bench run`")
    return _cmd(f"bench schedule --matrix {matrix}" + (f" --scale {c['scale']}" if c["scale"]
                                                       else "")
                + f" --hosts {','.join(c['hosts'])}"
                + (f" --seed {c['seed']}" if c["seed"] is not None else ""), db)


def _cmd(text: str, db: str | None) -> str:
    return text + (f" --db {db}" if db else "")


def gb(x: float | None) -> float | None:
    return None if x is None else x / GB
