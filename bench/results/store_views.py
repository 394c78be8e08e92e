"""Views of stored results: runs, a cell's statistics and verdicts, campaign-shaped matrices,
comparisons, rechecks, the end-to-end engine table."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from bench.results.views import LiteralTable, capacity_text, compose, gb, num, pct


def runs_table(rows: Sequence[dict]) -> LiteralTable:
    t = LiteralTable(title="Runs")
    for col in ("run", "campaign", "host", "cell", "rep", "verdict", "median s", "GB/it",
                "failed rules"):
        t.add_column(col, justify="right" if col in ("rep", "median s", "GB/it") else "left")
    for r in rows:
        verdict = {True: "retained", False: "rejected", None: "pending"}[r["retained"]]
        t.add_row(r["run_id"], r["campaign"] or "-", r["host"], r["cell"],
                  "-" if r["repetition"] is None else str(r["repetition"]), verdict,
                  num(r["iteration_median_s"]), num(r["device_gb_per_iteration"], ".4f"),
                  ", ".join(r["failed"]) or "-")
    return t


def cell_result_table(res: dict) -> LiteralTable:
    t = LiteralTable(title=f"{res['cell']}" + (f" on {res['host']}" if res.get("host") else "")
                     + (f", campaign {res['campaign']}" if res.get("campaign") else ""))
    t.add_column("quantity")
    t.add_column("value", justify="right")
    rows = [("runs retained / rejected", f"{res['n_retained']} / {res['n_rejected']}"),
            ("median iteration s", num(res["median_s"], ".4f")),
            ("min / max s", f"{num(res['min_s'], '.4f')} / {num(res['max_s'], '.4f')}"),
            ("spread", pct(res["spread"])),
            ("device GB/iteration", gb(res["device_gb_per_iteration"], ".4f")),
            ("nominal miss GB/iteration", gb(res["nominal_miss_gb_per_iteration"], ".4f")),
            ("amplification", "-" if res["amplification"] is None
             else f"{res['amplification']:.2f}x"),
            ("kswapd scan/steal", num(res["scan_steal"], ".2f")),
            ("cgroup scan/steal", num(res["cgroup_scan_steal"], ".2f")),
            ("served without device reads", pct(res["served_fraction"])),
            ("locked fraction", pct(res["locked_fraction"])),
            ("MGLRU", res["mglru"] or "-")]
    for k, v in rows:
        t.add_row(k, v)
    if res.get("warnings"):
        t.caption = "\n".join(f"warning: {w}" for w in res["warnings"])
    return t


def verdict_table(run: dict) -> LiteralTable:
    t = LiteralTable(title=f"{run['run_id']}: {'retained' if run['retained'] else 'rejected'}")
    for col in ("rule", "v", "verdict", "reason"):
        t.add_column(col)
    for v in run.get("verdicts", []):
        t.add_row(v["rule"], str(v["version"]), "pass" if v["passed"] else "FAIL", v["reason"])
    return t


def matrix_table(m: dict) -> LiteralTable:
    kind = m["matrix"]
    if kind == "end-to-end":
        return engine_table(m)
    t = LiteralTable(title=f"{kind} matrix" + (f" on {m['host']}" if m.get("host") else "")
                     + (f", campaign {m['campaign']}" if m.get("campaign") else ""))
    if kind == "capacity":
        for col in ("C", "reclaim", "n", "med s", "spread", "GB/it", "a/C dev", "miss GB",
                    "amp"):
            t.add_column(col, justify="left" if col == "reclaim" else "right")
        for r in m["rows"]:
            t.add_row(capacity_text(r["capacity_bytes"]), r["reclaim"],
                      f"{r['n_retained']}/{r['n_retained'] + r['n_rejected']}",
                      num(r["median_s"], ".3f"), pct(r["spread"]),
                      gb(r["device_gb_per_iteration"], ".4f"), pct(r["a_over_c_dev"]),
                      gb(r["nominal_miss_gb_per_iteration"], ".4f"),
                      "-" if r["amplification"] is None else f"{r['amplification']:.2f}x")
    elif kind == "reclaim":
        for col in ("C", "mechanism", "GB/it mglru", "GB/it classic", "on/off",
                    "s mglru", "s classic", "scan/steal mglru", "scan/steal classic", "locked"):
            t.add_column(col, justify="left" if col == "mechanism" else "right")
        for r in m["rows"]:
            a, b = r.get("mglru") or {}, r.get("classic") or {}
            t.add_row(capacity_text(r["capacity_bytes"]), r["mechanism"],
                      gb(a.get("device_gb_per_iteration"), ".4f"),
                      gb(b.get("device_gb_per_iteration"), ".4f"),
                      num(r["mglru_over_classic"], ".2f"), num(a.get("median_s")),
                      num(b.get("median_s")), num(a.get("scan_steal"), ".2f"),
                      num(b.get("scan_steal"), ".2f"),
                      # the mechanism's locked share: either reclaim's runs measure it
                      pct(a.get("locked_fraction") if a.get("locked_fraction") is not None
                           else b.get("locked_fraction")))
    else:
        keys = m["modes"] if kind == "equal-memory" else m["prefetch"]
        t.add_column("C", justify="right")
        if kind == "prefetch":
            t.add_column("mechanism")
        for k in keys:
            t.add_column(f"{k} s", justify="right")
        if kind == "equal-memory":
            for k in ("pagecache", "pinned"):
                t.add_column(f"{k} GB/it", justify="right")
                t.add_column(f"{k} served", justify="right")
        for r in m["rows"]:
            cells = [capacity_text(r["capacity_bytes"])] + (
                [r["mechanism"]] if kind == "prefetch" else [])
            cells += [num((r.get(k) or {}).get("median_s")) for k in keys]
            if kind == "equal-memory":
                for k in ("pagecache", "pinned"):
                    s = r.get(k) or {}
                    cells += [gb(s.get("device_gb_per_iteration"), ".4f"),
                              pct(s.get("served_fraction"))]
            t.add_row(*cells)
    return t


def compare_table(c: dict) -> LiteralTable:
    t = LiteralTable(title=f"{c['a']} vs {c['b']} (retained runs {c['n_a']} / {c['n_b']})")
    for col in ("quantity", "ratio of medians", "median of pair ratios", "pairs"):
        t.add_column(col, justify="left" if col == "quantity" else "right")
    for k, label in (("time", "iteration time"), ("device", "device bytes/iteration")):
        t.add_row(label, num(c[f"{k}_ratio_of_medians"]), num(c[f"{k}_median_pair_ratio"]),
                  str(c[f"{k}_pairs"]))
    if c.get("mechanism_agreement") is not None:
        t.caption = f"mechanisms agree within {100 * c['mechanism_agreement']:.1f}% in median time"
    return t


def recheck_table(changes: Sequence[dict]) -> LiteralTable:
    t = LiteralTable(title=f"Retention recheck: {len(changes)} verdict(s) changed")
    for col in ("run", "rule", "was", "now", "reason"):
        t.add_column(col)
    for ch in changes:
        old = ch["old"]
        t.add_row(ch["run_id"], ch["rule"],
                  "-" if old is None else
                  f"v{old['version']} {'pass' if old['passed'] else 'FAIL'}",
                  f"v{ch['new']['version']} {'pass' if ch['new']['passed'] else 'FAIL'}",
                  ch["reason"])
    return t


def engine_table(res: dict) -> LiteralTable:
    """Table 3: per prompt admit and nocache median steady-decode s, the median of per-pair
    ratios [range], pairs, and whether every pair's output hashes match (loud when not)."""
    t = LiteralTable(title="End-to-end decode: page-cache admission vs nocache"
                     + (f" on {res['host']}" if res.get("host") else "")
                     + (f", campaign {res['campaign']}" if res.get("campaign") else ""))
    for col in ("prompt", "admit s", "nocache s", "speedup [range]", "pairs", "hashes match",
                "runs kept/rejected"):
        t.add_column(col, justify="left" if col in ("prompt", "hashes match") else "right")
    for r in res["prompts"]:
        sp = "-" if r["speedup"] is None else (
            f"{r['speedup']:.2f}x [{r['speedup_min']:.2f}-{r['speedup_max']:.2f}]")
        match: str | Text = {True: "yes", None: "-"}.get(r["hashes_match"]) or compose(
            ("NO", "bold red"), " (pairs " + ", ".join(r["mismatched"]) + ")")
        t.add_row(r["prompt"], num(r["admit_median_s"], ".1f"),
                  num(r["nocache_median_s"], ".1f"), sp,
                  str(r["pairs"]) + (f" (+{len(r['incomplete'])} incomplete)"
                                     if r["incomplete"] else ""),
                  match, f"{r['n_retained']}/{r['n_rejected']}")
    notes: list[str | tuple[str, str]] = [
        "speedup = median over pairs of nocache_s / admit_s (steady decode: wall time minus the "
        "engine's cold load); not the quotient of the two medians"]
    for w in res.get("warnings", []):
        notes += ["\n", ("warning:", "bold red"), f" {w}"]
    t.caption = compose(*notes, style="table.caption")
    return t
