"""Views of the trace pipeline: parse, locality, policies, demand, recall."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence

from bench.judge.stats import largest_magnitude
from bench.results.views import LiteralTable, num, pct, source_name


def parse_table(summaries: Sequence[dict]) -> LiteralTable:
    t = LiteralTable(title="Parsed traces (canonical parser)")
    for col in ("trace", "iterations", "normal", "spec-accept", "spec-fallback", "tokens",
                "passes", "reads", "reads/it", "reads/token", "prefill excl.", "dry-run excl."):
        t.add_column(col, justify="left" if col == "trace" else "right")
    for s in summaries:
        t.add_row(source_name(s["source"]), str(s["iterations"]), str(s["normal"]),
                  str(s["spec_accept"]), str(s["spec_fallback"]), str(s["accepted_tokens"]),
                  str(s["passes"]), str(s["reads"]), f"{s['reads_per_iteration']:.0f}",
                  f"{s['reads_per_accepted_token']:.0f}", str(s["prefill_records_excluded"]),
                  str(s["dry_run_iterations_excluded"]))
    return t


def stats_table(result: dict) -> LiteralTable:
    t = LiteralTable(title="Router locality (Table 1 quantities)")
    for col in ("trace", "zipf alpha", "W1", "W8", "W64", "top-8 share first/last/min/max",
                "union cov. min-max", "pool cov."):
        t.add_column(col, justify="left" if col == "trace" else "right")
    for s in result["traces"]:
        ts = s["top8_share"]
        t.add_row(source_name(s["source"]), num(s["zipf_alpha"], ".2f"), pct(s["reuse"]["w1"]),
                  pct(s["reuse"]["w8"]), pct(s["reuse"]["w64"]),
                  f"{pct(ts['first_layer'])} / {pct(ts['last_layer'])} / {pct(ts['min'])} / "
                  f"{pct(ts['max'])}",
                  f"{s['union_coverage']['min']}-{s['union_coverage']['max']} of "
                  f"{s['union_coverage']['of']}", pct(s["pool_coverage"]))
    if result.get("jaccard_range"):
        lo, hi = result["jaccard_range"]
        top = result["traces"][0]["top_set"]
        t.caption = f"domain Jaccard of top-{top} sets: {lo:.3f}-{hi:.3f}"
    dry = [source_name(s["source"]) for s in result["traces"]
           if s.get("dry_run_iterations_excluded")]
    if dry:
        note = "dry-run first iteration excluded: " + ", ".join(dry)
        t.caption = f"{t.caption}\n{note}" if t.caption else note
    return t


def sim_table(rows: Sequence[dict], title: str = "Fair-window hit rates") -> LiteralTable:
    t = LiteralTable(title=title)
    for col in ("trace", "regime", "budget", "policy", "trained on", "hits", "accesses",
                "hit rate"):
        t.add_column(col, justify="left" if col in ("trace", "regime", "policy", "trained on")
                     else "right")
    for r in rows:
        t.add_row(source_name(str(r["trace"])), r["regime"], str(r["budget"]), r["policy"],
                  source_name(str(r.get("train", "-"))), str(r["hits"]), str(r["accesses"]),
                  pct(r["hit_rate"]))
    return t


def curves_table(rows: Sequence[dict]) -> LiteralTable:
    t = LiteralTable(title="Fig. 1: hit rate against budget across domains (mean, min-max)")
    for col in ("policy", "budget", "n", "mean", "min", "max"):
        t.add_column(col, justify="left" if col == "policy" else "right")
    for r in rows:
        t.add_row(r["policy"], str(r["budget"]), str(r["n"]), pct(r["mean"]), pct(r["min"]),
                  pct(r["max"]))
    return t


def off_domain_table(rows: Sequence[dict]) -> LiteralTable:
    t = LiteralTable(title="Fig. 5: static table off its domain vs table-free LRU")
    for col in ("trace", "domain", "budget", "static trained on", "static", "LRU", "accesses"):
        t.add_column(col, justify="left" if col in ("trace", "domain", "static trained on")
                     else "right")
    for r in rows:
        t.add_row(source_name(str(r["trace"])), r["domain"], str(r["budget"]),
                  source_name(str(r["train"])), pct(r["static"]), pct(r["lru"]),
                  str(r["accesses"]))
    return t


def regimes_table(rows: Sequence[dict]) -> LiteralTable:
    t = LiteralTable(title="Global pool vs equal-split per-layer budgets")
    for col in ("trace", "policy", "budget", "per-layer", "global", "gap (pp)", "same order"):
        t.add_column(col, justify="left" if col in ("trace", "policy") else "right")
    for r in rows:
        t.add_row(source_name(str(r["trace"])), r["policy"], str(r["budget"]),
                  pct(r["per_layer"]), pct(r["global"]), f"{r['gap_pp']:+.1f}",
                  "yes" if r["same_order"] else "no")
    worst = largest_magnitude(r["gap_pp"] for r in rows)
    if worst is not None:
        t.caption = f"largest gap {worst:.1f} pp over {len(rows)} rows"
    return t


def demand_table(rows: Sequence[dict]) -> LiteralTable:
    """The demand model's rows; rows whose capacity stands for one of the paper's, scaled to a
    smaller pool (`scaled_from`, as the demo sweeps), say so in a column and the caption."""
    scaled = [r for r in rows if r.get("scaled_from")]
    t = LiteralTable(title="Demand model: LRU over one global pool, measured (second) pass"
                     + (", the paper's capacities scaled to this pool" if scaled else ""))
    for col in ("trace", "capacity", *(("scaled from",) if scaled else ()), "pool keys",
                "misses/it", "nominal miss GB/it", "logical GB/it", "hit rate"):
        t.add_column(col, justify="left" if col == "trace" else "right")
    for r in rows:
        t.add_row(source_name(str(r["trace"])), r["capacity"],
                  *((f"paper {r['scaled_from']}" if r.get("scaled_from") else "-",)
                    if scaled else ()), str(r["capacity_experts"]),
                  f"{r['misses_per_iteration']:.1f}", f"{r['nominal_miss_gb_per_iteration']:.2f}",
                  f"{r['logical_gb_per_iteration']:.2f}", pct(r["hit_rate"]))
    if scaled:
        r = scaled[0]
        t.caption = (f"capacity = the paper's capacity x this pool / the paper's pool "
                     f"({r['scaled_pool_bytes'] / 1e9:.3g} GB / "
                     f"{r['paper_pool_bytes'] / 1e12:g} TB), whole MB: the same share of the "
                     "pool, not the paper's bytes")
    return t


def recall_table(report: dict) -> LiteralTable:
    t = LiteralTable(title="Next-pass prediction recall")
    for col in ("plan", "provenance", "recall", "per-layer range", "precision", "hinted"):
        t.add_column(col, justify="left" if col in ("plan", "provenance") else "right")
    for name, r in (("hints", report["hints"]),
                    ("previous token", report["previous_token_baseline"])):
        rng = r["per_layer_range"]
        t.add_row(name, json.dumps(r["provenance"]), pct(r["recall"]),
                  f"{pct(rng[0])}-{pct(rng[1])}" if rng else "-", pct(r["precision"]),
                  str(r["hinted"]))
    return t


def check_lines(groups: Sequence[Sequence[str]]) -> Iterable[str]:
    for g in groups:
        yield ("suspicious first pass: bit-identical step-0 coverage in " + ", ".join(g) +
               " (a synthetic scheduler dry run recorded as decode?)")
