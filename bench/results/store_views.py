"""Views of stored results: runs, a cell's statistics and verdicts, campaign-shaped matrices,
comparisons, rechecks, the end-to-end engine table."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from bench.judge import identity
from bench.judge.stats import N_LIMIT, SPREAD_LIMIT
from bench.results import views
from bench.results.report_text import engine_texts, replay_line
from bench.results.views import LiteralTable, capacity_text, compose, gb, num, pct, size_text

# What each table's columns mean, printed under the table and in `bench results --help` (one
# text, so the two cannot drift). Flags are bench.judge.stats.reliability_flags'.
FLAG_LEGEND = (f"! = read with care: fewer than {N_LIMIT} retained runs, or a spread above "
               f"{100 * SPREAD_LIMIT:.0f}% (listed below the table)")
_STAT = ("n = retained/total runs of the cell; spread = (max - min) / median of the retained "
         "runs' per-run median iteration times (- with one run: no spread)")
_CELL_S = ("X s = median iteration seconds over retained runs, written as median (n, spread)")
LEGENDS = {
    "capacity": "C = page-cache capacity left to the pool; med s = median iteration seconds "
                f"over retained runs; {_STAT}; GB/it = median device GB read per iteration; "
                "a/C dev = GB/it against the inverse-capacity reference anchored at the largest "
                "C; miss GB = nominal miss GB/iteration (demand model); amp = GB/it over miss "
                "GB; s/token = med s per accepted token",
    "reclaim": "C = page-cache capacity; on = MGLRU on (the -mglru cell), off = MGLRU off "
               f"(classic LRU, the -classic cell); {_CELL_S}; {_STAT}; GB/it = median device "
               "GB read per iteration; on/off GB = on GB/it over off GB/it; scan/steal on/off = "
               "kswapd pages scanned per page stolen, on/off; locked = share of memory locked by "
               "the mechanism",
    "equal-memory": f"C = the cgroup's memory limit; {_CELL_S} of each mode's cell; {_STAT}; "
                    "GB/it = median device GB read per iteration; served = share of reads "
                    "served without a device read",
    "prefetch": f"C = page-cache capacity; {_CELL_S} of each hint plan x delivery (none: no "
                f"prefetch); {_STAT}",
    "admission": "C = page-cache capacity; admitted GB/s = the fixed set read through the page "
                 "cache (pagecache), bypassed GB/s = read around it (nocache), each median "
                 f"[min-max] over retained runs; {_STAT}; admitted/bypassed = the ratio of "
                 "the two medians; bypassed GB/it = device GB per iteration when bypassing",
    "end-to-end": "admit s / nocache s = median steady-decode seconds of each policy; speedup = "
                  "median over pairs of nocache_s / admit_s [min-max]; MB/tok a/n = median "
                  "device megabytes (10^6 B) per decoded token of admit / nocache runs, the "
                  "whole run (load included); pairs = balanced pairs counted; hashes = every "
                  "pair's two output hashes equal (NO: the pairs that differ); kept/rej = "
                  "retained/rejected engine runs; flagged on the "
                  "pairs: fewer than 3, or per-pair ratios spread (max - min over the median) "
                  f"above {100 * SPREAD_LIMIT:.0f}%",
    "compare": "ratio of medians = median of a over median of b; median pair ratio = median "
               "over pairs of a/b; pair range = min-max of the per-pair ratios; pairs = pairs "
               "counted; flagged on the time pairs: fewer than 3, or ratios spread (max - min "
               f"over the median) above {100 * SPREAD_LIMIT:.0f}%",
}


def n_text(s: dict | None) -> str:
    """Retained / total runs of a cell's summary ("0" for no summary)."""
    return f"{s['n_retained']}/{s['n_retained'] + s['n_rejected']}" if s else "0"


def spread_text(s: dict | None) -> str:
    """The spread of a cell's summary; "-" with fewer than two retained runs: one run has no
    spread to show (0.0% would read as perfectly repeatable)."""
    return "-" if not s or s["n_retained"] < 2 else pct(s["spread"])


def mark(text: str, s: dict | None) -> str:
    """text, followed by "!" when the summary is flagged (FLAG_LEGEND): attached, so that it
    never wraps onto a line of its own."""
    return text + ("!" if s and s.get("flags") else "")


def seconds_cell(s: dict | None, fmt: str = ".3f") -> str:
    """A cell's median seconds with its n and spread: "0.083 (2/3, 2.1%)", "!" when flagged."""
    if not s or s.get("median_s") is None:
        return "-"
    return mark(f"{num(s['median_s'], fmt)} ({n_text(s)},{spread_text(s)})", s)


def flag_lines(items: Sequence[tuple[str, dict | None]]) -> list[str]:
    """One caption line per flag, naming the summaries it holds for, in their order:
    "! n=2 < 3: g1 64Mi balloon on, g1 64Mi cgroup on" (a campaign of two repetitions flags
    every cell: one line, not one per cell)."""
    by_flag: dict[str, list[str]] = {}
    for what, s in items:
        for f in (s or {}).get("flags") or ():
            by_flag.setdefault(f, []).append(what)
    return [f"! {f}: {', '.join(whats)}" for f, whats in by_flag.items()]


def legend_lines(kind: str, flags: Sequence[str]) -> list[str]:
    """Under a table: the flagged cells (with what ! means), then what the columns mean."""
    return ([FLAG_LEGEND, *flags] if flags else []) + [LEGENDS[kind]]


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


def _short(v: str | None) -> str:
    return "-" if not v else v[:12]


def workload_rows(w: dict) -> list[tuple[str, str]]:
    """A workload identity (bench.judge.identity.workload_of) as rows of a quantity table."""
    if w.get("kind") == "engine":
        return [("workload", f"{w['digest']} (engine)"),
                ("engine config / prompt / tokens",
                 f"{_short(w.get('config_sha256'))} / {w.get('prompt')} / {w.get('n_tokens')}")]
    pool = w.get("pool_bytes")
    rows = [("workload", f"{w['digest']} {w.get('trace') or '-'}"),
            ("trace / plan sha256",
             f"{_short(w.get('trace_sha256'))} / {_short(w.get('plan_sha256'))}"),
            ("pool / threads / passes / batch",
             f"{size_text(pool) if isinstance(pool, int) else '-'} / {w.get('threads')} / "
             f"{w.get('passes')} / {w.get('batch')}")]
    if w.get("domain") is not None:
        rows.append(("domain", str(w["domain"])))
    return rows


def key_rows(g: dict) -> list[tuple[str, str]]:
    """A result group's key (host, workload, fingerprint) as rows; a part pooled on request
    lists what was pooled."""
    pooled = g.get("pooled") or {}
    rows = [("host", g["host"] or "pooled: " + ", ".join(pooled.get("hosts", [])))]
    w, f = g.get("workload"), g.get("fingerprint")
    rows += (workload_rows(w) if w else
             [("workload", "pooled: " + ", ".join(pooled.get("workloads", [])))])
    rows += ([("fingerprint", f["digest"] or "- (none stored)"), ("kernel", f["kernel"] or "-"),
              ("controller", f["controller_version"] or "-")] if f else
             [("fingerprint", "pooled: " + ", ".join(pooled.get("fingerprints", [])))])
    rows.append(("campaigns", ", ".join(g.get("campaigns") or []) or "-"))
    return rows


def cell_result_table(res: dict) -> LiteralTable:
    """One result group of a cell (bench.store.queries.cell_results): its key, then its
    statistics; warnings in the caption (the `split` warning, shared by all groups of the cell,
    is cell_split_line's)."""
    split = res.get("split")
    title = res["cell"] + (f", group {res['group']} of {split['groups']}" if split else "") + (
        ", pooled" if res.get("pooled") else "")
    t = LiteralTable(title=title)
    t.add_column("quantity")
    t.add_column("value", justify="right")
    rows = key_rows(res) + [
        ("runs retained / rejected", f"{res['n_retained']} / {res['n_rejected']}"),
        ("median iteration s", num(res["median_s"], ".4f")),
        ("min / max s", f"{num(res['min_s'], '.4f')} / {num(res['max_s'], '.4f')}"),
        ("spread", spread_text(res)),
        ("device GB/iteration", gb(res["device_gb_per_iteration"], ".4f")),
        ("nominal miss GB/iteration", gb(res["nominal_miss_gb_per_iteration"], ".4f")),
        ("amplification", "-" if res["amplification"] is None
         else f"{res['amplification']:.2f}x"),
        ("kswapd scan/steal", num(res["scan_steal"], ".2f")),
        ("cgroup scan/steal", num(res["cgroup_scan_steal"], ".2f")),
        ("served without device reads", pct(res["served_fraction"])),
        ("locked fraction", pct(res["locked_fraction"])),
        ("MGLRU", res["mglru"] or "-")]
    if res.get("seconds_per_accepted_token") is not None:
        rows.insert(len(key_rows(res)) + 3, ("s per accepted token",
                                             num(res["seconds_per_accepted_token"], ".4f")))
    for i, (k, v) in enumerate(rows):
        t.add_row(k, v, end_section=i == len(key_rows(res)) - 1)
    warnings = [w for w in res.get("warnings", []) if not split or w != split["warning"]]
    if warnings:
        t.caption = "\n".join(f"warning: {w}" for w in warnings)
    return t


def cell_split_line(groups: Sequence[dict]) -> Text | None:
    """The one warning line above a cell's groups when there are several (not pooled)."""
    split = groups[0].get("split") if groups else None
    return None if not split else compose(("warning:", "yellow"), " " + split["warning"])


def legend(groups: Sequence[dict], warnings: Sequence[str] = ()) -> str:
    """Caption lines: each group's key (id: host; workload; fingerprint), then warnings."""
    lines = [f"{g['id']}: {identity.group_text(g)}" for g in groups]
    return "\n".join(lines + [f"warning: {w}" for w in warnings])


def _matrix_title(m: dict) -> str:
    return (f"{m['matrix']} matrix" + (f" on {m['host']}" if m.get("host") else "")
            + (f", campaign {m['campaign']}" if m.get("campaign") else "")
            + (f", workload {m['workload']}" if m.get("workload") else ""))


def matrix_table(m: dict) -> LiteralTable:
    """A campaign-shaped table (bench.store.queries.matrix): rows per result group, the group's
    id (and host, when the table spans several) first, each group's key in the caption."""
    kind = m["matrix"]
    if kind == "end-to-end":
        return engine_table(m)
    t = LiteralTable(title=_matrix_title(m), caption_justify="left")
    groups = m.get("groups", [])
    several = len({g["host"] for g in groups}) > 1
    names = {g["id"]: g["id"] + (f" {g['host']}" if several else "") for g in groups}
    t.add_column("group" + (" host" if several else ""))
    if kind == "capacity":
        flags = _capacity_rows(t, m["rows"], names)
    elif kind == "reclaim":
        flags = _reclaim_rows(t, m["rows"], names)
    elif kind == "admission":
        flags = _admission_rows(t, m["rows"], names)
    else:
        flags = _mode_rows(t, m, m["modes"] if kind == "equal-memory" else m["prefetch"], names)
    # literal text (LiteralTable): host, trace and kernel names as stored, never as markup
    extra = agreement_lines(m, names) if kind == "reclaim" else []
    t.caption = "\n".join(x for x in [legend(m.get("groups", []), m.get("warnings", [])),
                                       *extra, *legend_lines(kind, flags)] if x) or None
    return t


def _where(names: dict[str, str], r: dict, *more: str) -> str:
    """A row's name in a flag line: group, capacity and what else tells the cell apart."""
    return " ".join([names[r["group"]], capacity_text(r["capacity_bytes"]), *more])


def agreement_lines(m: dict, names: dict[str, str]) -> list[str]:
    """§4 mechanism agreement at equal C and §5's mem= point on the balloon curve, as text."""
    out = []
    for a in m.get("agreement", []):
        out.append(f"agreement {names[a['group']]} {capacity_text(a['capacity_bytes'])} "
                   f"{a['reclaim']}: {a['mechanism']} vs cgroup: time "
                   f"{_signed(a['time_vs_cgroup'])}, device {_signed(a['device_vs_cgroup'])} "
                   f"(n {a['n']} vs {a['n_cgroup']})")
    for i in m.get("interpolation", []):
        head = (f"mem= on the balloon curve {names[i['group']]} "
                f"{capacity_text(i['capacity_bytes'])} {i['reclaim']}: memboot "
                f"{num(i['memboot_s'])} s (n {i['n']})")
        lo, hi = (capacity_text(c) for c in i["between"]) if i["between"] else ("", "")
        out.append(head + (f", balloon interpolated {num(i['balloon_s'])} s between {lo} and "
                           f"{hi}: {_signed(i['memboot_vs_balloon'])}"
                           if i["status"] == "interpolated" else
                           f", {i['status']}" + (f" {lo}..{hi}: not extrapolated" if lo else "")))
    return out


def _signed(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}%"


def _capacity_rows(t: LiteralTable, rows: Sequence[dict], names: dict[str, str]
                   ) -> list[str]:
    # seconds per accepted token where the workload knows its tokens (the batch replay, §4)
    tokens = any(r.get("seconds_per_accepted_token") is not None for r in rows)
    for col in ("C", "mechanism", "reclaim", "n", "med s", *(("s/token",) if tokens else ()),
                "spread", "GB/it", "a/C dev", "miss GB", "amp"):
        t.add_column(col, justify="left" if col in ("mechanism", "reclaim") else "right")
    for r in rows:
        per_token = (num(r.get("seconds_per_accepted_token"), ".4f"),) if tokens else ()
        t.add_row(names[r["group"]], capacity_text(r["capacity_bytes"]), r["mechanism"],
                  r["reclaim"], n_text(r), mark(num(r["median_s"], ".3f"), r), *per_token,
                  spread_text(r), gb(r["device_gb_per_iteration"], ".4f"),
                  pct(r["a_over_c_dev"]), gb(r["nominal_miss_gb_per_iteration"], ".4f"),
                  "-" if r["amplification"] is None else f"{r['amplification']:.2f}x")
    return flag_lines([(_where(names, r, r["mechanism"], r["reclaim"]), r) for r in rows])


def _reclaim_rows(t: LiteralTable, rows: Sequence[dict], names: dict[str, str]
                  ) -> list[str]:
    for col in ("C", "mechanism", "on s (n, spread)", "off s (n, spread)", "on GB/it",
                "off GB/it", "on/off GB", "scan/steal on/off", "locked"):
        t.add_column(col, justify="left" if col == "mechanism" else "right")
    flags: list[tuple[str, dict | None]] = []
    for r in rows:
        a, b = r.get("mglru") or {}, r.get("classic") or {}
        t.add_row(names[r["group"]], capacity_text(r["capacity_bytes"]), r["mechanism"],
                  seconds_cell(a), seconds_cell(b),
                  gb(a.get("device_gb_per_iteration"), ".4f"),
                  gb(b.get("device_gb_per_iteration"), ".4f"),
                  num(r["mglru_over_classic"], ".2f"), _pair(a.get("scan_steal"),
                                                              b.get("scan_steal")),
                  # the mechanism's locked share: either reclaim's runs measure it
                  pct(a.get("locked_fraction") if a.get("locked_fraction") is not None
                      else b.get("locked_fraction")))
        flags += [(_where(names, r, r["mechanism"], on), s)
                  for on, s in (("on", r.get("mglru")), ("off", r.get("classic")))]
    return flag_lines(flags)


def _pair(a: float | None, b: float | None) -> str:
    """Two values as "a/b" ("-" when neither is known)."""
    return "-" if a is None and b is None else f"{num(a, '.2f')}/{num(b, '.2f')}"


def _admission_rows(t: LiteralTable, rows: Sequence[dict], names: dict[str, str]
                    ) -> list[str]:
    """§9: GB/s of the fixed set admitted to the page cache and bypassing it (min-max, n)."""
    for col in ("C", "mechanism", "admitted GB/s", "n", "spread", "bypassed GB/s", "n",
                "spread", "admitted/bypassed", "bypassed GB/it"):
        t.add_column(col, justify="left" if col == "mechanism" else "right")
    flags: list[tuple[str, dict | None]] = []
    for r in rows:
        a, b = r.get("pagecache") or {}, r.get("nocache") or {}
        ratio = r["admitted_over_bypassed"]
        t.add_row(names[r["group"]], capacity_text(r["capacity_bytes"]), r["mechanism"],
                  mark(_rate(a), a), n_text(a), spread_text(a), mark(_rate(b), b), n_text(b),
                  spread_text(b), "-" if ratio is None else f"{ratio:.2f}x",
                  gb(b.get("device_gb_per_iteration"), ".3f"))
        flags += [(_where(names, r, r["mechanism"], mode), s)
                  for mode, s in (("admitted", a), ("bypassed", b))]
    return flag_lines(flags)


def _rate(s: dict) -> str:
    if s.get("gb_per_s") is None:
        return "-"
    return f"{s['gb_per_s']:.2f} [{s['gb_per_s_min']:.2f}-{s['gb_per_s_max']:.2f}]"


def _mode_rows(t: LiteralTable, m: dict, keys: Sequence[str], names: dict[str, str]
               ) -> list[str]:
    """equal-memory (modes side by side) and prefetch (hint plans side by side)."""
    kind = m["matrix"]
    t.add_column("C", justify="right")
    if kind == "prefetch":
        t.add_column("mechanism")
    for k in keys:
        t.add_column(f"{k} s (n, spread)", justify="right")
    if kind == "equal-memory":
        for k in ("pagecache", "pinned"):
            t.add_column(f"{k} GB/it", justify="right")
            t.add_column(f"{k} served", justify="right")
    flags: list[tuple[str, dict | None]] = []
    for r in m["rows"]:
        cells = [names[r["group"]], capacity_text(r["capacity_bytes"])] + (
            [r["mechanism"]] if kind == "prefetch" else [])
        cells += [seconds_cell(r.get(k)) for k in keys]
        flags += [(_where(names, r, *([r["mechanism"]] if kind == "prefetch" else []), k),
                   r.get(k)) for k in keys]
        if kind == "equal-memory":
            for k in ("pagecache", "pinned"):
                s = r.get(k) or {}
                cells += [gb(s.get("device_gb_per_iteration"), ".4f"),
                          pct(s.get("served_fraction"))]
        t.add_row(*cells)
    return flag_lines(flags)


def _range(c: dict, k: str) -> str:
    lo, hi = c[f"{k}_pair_ratio_min"], c[f"{k}_pair_ratio_max"]
    return "-" if lo is None else f"{lo:.3f}-{hi:.3f}"


def compare_table(c: dict) -> LiteralTable:
    """Two cells per result group (bench.store.queries.compare): the ratio of medians and the
    median of per-pair ratios with their range, pairs within one host and campaign; a pooled
    row only when pooling was asked for."""
    t = LiteralTable(title=f"{c['a']} vs {c['b']} (retained runs {c['n_a']} / {c['n_b']})",
                     caption_justify="left")
    for col in ("group", "quantity", "ratio of medians", "median pair ratio", "pair range",
                "pairs"):
        t.add_column(col, justify="left" if col in ("group", "quantity") else "right")
    rows = list(c["groups"])
    if c.get("pooled"):
        rows.append(dict(c, id="pooled", host="all hosts"))
    for i, g in enumerate(rows):
        head = (f"{g['id']} {g['host'] or '-'}", f"runs {g['n_a']}/{g['n_b']}")
        for j, (k, label) in enumerate((("time", "iteration s"), ("device", "device B/it"))):
            t.add_row(head[j], label, num(g[f"{k}_ratio_of_medians"]),
                      num(g[f"{k}_median_pair_ratio"]), _range(g, k),
                      mark(str(g[f"{k}_pairs"]), g if k == "time" else None),
                      end_section=j == 1 and i < len(rows) - 1)
    notes = []
    if c.get("mechanism_agreement") is not None:
        notes.append(f"mechanisms agree within {100 * c['mechanism_agreement']:.1f}% in "
                     "median time")
    notes.append("a pair: one run of each cell in the same group, campaign and repetition; "
                 "median pair ratio = median over pairs of a/b")
    flags = flag_lines([(f"{g['id']} {g['host'] or '-'} time pairs", g) for g in rows])
    t.caption = (legend(c["groups"], c.get("warnings", [])) + "\n"
                 + "\n".join(notes + legend_lines("compare", flags)))
    return t


def verdict_table(run: dict) -> LiteralTable:
    t = LiteralTable(title=f"{run['run_id']}: {'retained' if run['retained'] else 'rejected'}")
    for col in ("rule", "v", "verdict", "reason"):
        t.add_column(col)
    for v in run.get("verdicts", []):
        t.add_row(v["rule"], str(v["version"]), "pass" if v["passed"] else "FAIL", v["reason"])
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
    """Table 3: per prompt and result group admit and nocache median steady-decode s, the
    median of per-pair ratios [range], pairs, and whether every pair's output hashes match
    (loud when not); each group's key (host, engine config and prompt, fingerprint) below."""
    t = LiteralTable(title="End-to-end decode: page-cache admission vs nocache"
                     + (f" on {res['host']}" if res.get("host") else "")
                     + (f", campaign {res['campaign']}" if res.get("campaign") else ""),
                     caption_justify="left")
    groups = res.get("groups", [])
    several = len({g["host"] for g in groups}) > 1
    by_arm = any(r.get("arm", "ample") != "ample" for r in res["prompts"])
    for col in ("group" + (" host" if several else ""), "prompt") + (("capacity",) if by_arm
                                                                    else ()) + (
            "admit s", "nocache s", "speedup [range]", "MB/tok a/n", "pairs", "hashes",
            "kept/rej"):
        t.add_column(col, justify="left" if col in ("prompt", "capacity", "hashes") or
                     col.startswith("group") else "right")
    for r in res["prompts"]:
        x = engine_texts(r)
        match: str | Text = x["hashes"] if r["hashes_match"] is not False else compose(
            ("NO", "bold red"), ": " + ", ".join(r["mismatched"]))
        t.add_row(r["group"] + (f" {r['host']}" if several else ""), r["prompt"],
                  *([r.get("arm", "ample")] if by_arm else []),
                  num(r["admit_median_s"], ".3g"), num(r["nocache_median_s"], ".3g"),
                  mark(x["speedup"], r), f"{x['mb_admit']}/{x['mb_nocache']}", x["pairs"],
                  match, x["kept"])
    notes: list[str | tuple[str, str]] = [
        "speedup = median over pairs of nocache_s / admit_s (steady decode: wall time minus the "
        "engine's cold load); not the quotient of the two medians"]
    arms = {r["group"]: r.get("arms") or {} for r in res["prompts"]}
    for g in groups:
        notes += ["\n", f"{g['id']}: {identity.group_text(g)}"]
        if arms.get(g["id"]):
            notes += ["; arms " + ", ".join(f"{k} `{v}`" for k, v in arms[g["id"]].items())]
    for line in filter(None, map(replay_line, res["prompts"])):
        notes += ["\n", line]
    for w in res.get("warnings", []):
        notes += ["\n", ("warning:", "bold red"), f" {w}"]
    flags = flag_lines([(f"{r['group']} {r['prompt']} speedup", r) for r in res["prompts"]])
    for line in legend_lines("end-to-end", flags):
        notes += ["\n", line]
    t.caption = compose(*notes, style="table.caption")
    return t


def show_matrix(m: dict) -> None:
    """`bench results --matrix KIND` (but prefetch) as a table on stdout."""
    views.print_table(matrix_table(m))


def show_cell(groups: Sequence[dict], verbose: bool) -> None:
    """`bench results --cell C [-v]` as tables on stdout: the split warning when the cell has
    several groups, each group's table, with -v each run's verdicts."""
    line = cell_split_line(groups)
    if line is not None:
        views.console.print(line)
    for g in groups:
        views.print_table(cell_result_table(g))
        if verbose:
            for r in g["runs"]:
                views.print_table(verdict_table(r))
