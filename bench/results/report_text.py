"""The report's content as text blocks, from the dict of bench.results.report_data: the
same blocks feed the HTML (report_html) and the Markdown (report_md), so the two say the same.
Pure; nothing here escapes (the renderers do), so every value stays as the store holds it.

A table is (headers, rows); a cell is a str, or a Link(run_id) that the renderers turn into a
link to the run's own section (id "run-<id>")."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench.judge.stats import N_LIMIT, SPREAD_LIMIT
from bench.units import format_size

Table = tuple[list[str], list[list]]

SECTIONS = (("summary", "Summary"), ("figures", "Results per figure"),
            ("reference", "Against the reference"),
            ("exceptions", "Rejected, failed and skipped"), ("provenance", "Provenance"),
            ("runs", "Runs"))

FIGURE_LEGEND = (
    "median s: median over retained runs of each run's median iteration time; min-max: the "
    "fastest and slowest retained run; n: retained / all judged runs of the cell; spread: "
    "(max - min) / median; GB/it: median device traffic per iteration (10^9 bytes); "
    f"flagged: n < {N_LIMIT} or spread > {100 * SPREAD_LIMIT:.0f}% (the protocol's thresholds).")


@dataclass(frozen=True)
class Link:
    run_id: str


def anchor(run_id: str) -> str:
    return f"run-{run_id}"


def num(x, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def sig(x, places: int = 3) -> str:
    """A measured value that keeps its digits: `places` decimals down to 0.1, below that three
    significant digits (a 0.2 ms iteration reads 0.000215, not 0.000; 0 stays 0)."""
    if x is None:
        return "-"
    return format(x, f".{places}f") if x == 0 or abs(x) >= 0.1 else format(x, ".3g")


def pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def duration(s) -> str:
    if s is None:
        return "-"
    s = int(round(s))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return (f"{h}h{m:02d}m" if h else f"{m}m{sec:02d}s" if m else f"{sec}s")


def when(t: str | None) -> str:
    """An ISO time to the second, in UTC as the store writes it."""
    return "-" if not t else t[:19].replace("T", " ") + " UTC"


def title(data: dict) -> str:
    ids = ", ".join(c["id"] for c in data["campaigns"])
    return f"bench report: campaign{'s' if len(data['campaigns']) > 1 else ''} {ids}"


def summary_pairs(c: dict) -> list[tuple[str, str]]:
    """One campaign's summary as (label, value) lines."""
    n = c["counts"]
    est = c.get("estimate_s")
    dur = duration(c["duration_s"]) + (f" (plan's estimate {duration(est)})" if est else
                                       " (no estimate stored)")
    reb = str(c["reboots_done"])
    if c.get("reboots_planned") is not None:
        reb += f" (planned {c['reboots_planned']}"
        reb += (f", lower bound {c['reboot_lower_bound']})"
                if c.get("reboot_lower_bound") is not None else ")")
    w = {k: v for k, v in (c.get("workload") or {}).items() if v is not None}
    engine = w.get("trace") == "engine"         # an engine matrix replays no trace
    work = ("the engine's own decode of each prompt (no trace replayed)" if engine else
            ", ".join(f"{k} {_value(k, v)}" for k, v in w.items()) or "-")
    return [("campaign", f"{c['id']} ({c['state']}{', demo' if c.get('demo') else ''})"),
            ("matrix", (c["matrix"] or "ad hoc") + (
                f", scale {c['scale']}" + ("" if engine else " (capacities scaled)")
                if c["scale"] else "")),
            ("seed", "-" if c["seed"] is None else str(c["seed"])),
            ("hosts", ", ".join(c["hosts"]) or "-"),
            ("workload", work),
            ("start", when(c["start"])), ("end", when(c["end"])),
            ("duration", dur),
            ("runs", f"{n['runs']}: {n['validated']} validated, {n['rejected']} rejected, "
                     f"{n['failed']} failed, {n['pending']} pending"
                     + "".join(f", {k} {v}" for k, v in
                               sorted((c.get("other_states") or {}).items()))
                     + (" (as stored: " + ", ".join(
                         f"{k} {v}" for k, v in sorted(c["stored_states"].items())) + ")"
                        if c.get("stored_states") else "")
                     + f"; {n['skipped']} cell(s) skipped at planning"),
            ("reboots", reb)]


def _value(key: str, v: object) -> str:
    """A workload field: byte counts in the paper's units (format_size), the rest as stored."""
    if isinstance(v, int) and not isinstance(v, bool) and ("bytes" in key or key == "pool"):
        return format_size(v)
    return str(v)


ENGINE_TITLE = "Table 3: end-to-end decode, page-cache admission vs nocache"


def _mb(x: float | None) -> str:
    return "-" if x is None else f"{x / 1e6:.3g}"


def engine_texts(r: dict) -> dict[str, str]:
    """The texts of one Table 3 row both views print (the terminal marks them up): speedup
    [range], MB/token of admit and nocache, pairs, hashes, kept/rejected."""
    return {"speedup": "-" if r["speedup"] is None else (
                f"{r['speedup']:.2f}x [{r['speedup_min']:.2f}-{r['speedup_max']:.2f}]"),
            "mb_admit": _mb(r.get("admit_bytes_per_token")),
            "mb_nocache": _mb(r.get("nocache_bytes_per_token")),
            "pairs": str(r["pairs"]) + (f" (+{len(r['incomplete'])} incomplete)"
                                        if r["incomplete"] else ""),
            "hashes": {True: "yes", None: "-"}.get(r["hashes_match"]) or (
                "NO: " + ", ".join(r["mismatched"])),
            "kept": f"{r['n_retained']}/{r['n_rejected']}"}


def engine_table(e: dict) -> Table:
    """One campaign's Table 3 (bench.store.queries.engine_results): per prompt and result
    group the steady-decode medians, the median pair ratio, device bytes per token, n."""
    res = e["results"]
    hosts = len({r["host"] for r in res["prompts"]}) > 1
    head = ["group", "prompt", "capacity"] + (["host"] if hosts else []) + [
        "admit s", "nocache s", "speedup [range]", "MB/tok admit", "MB/tok nocache", "pairs",
        "hashes", "kept/rej", "flagged"]
    rows = []
    for r in res["prompts"]:
        x = engine_texts(r)
        rows.append([r["group"], r["prompt"], r.get("arm") or "ample"]
                    + ([r["host"]] if hosts else []) + [
            sig(r["admit_median_s"]), sig(r["nocache_median_s"]), x["speedup"],
            x["mb_admit"], x["mb_nocache"], x["pairs"], x["hashes"], x["kept"],
            "; ".join(r["flags"]) or "-"])
    return head, rows


ENGINE_LEGEND = (
    "admit s / nocache s: median steady-decode seconds (wall time minus the engine's reported "
    "cold load) over the counted pairs; speedup: median over pairs of nocache_s / admit_s "
    "[min-max], not the quotient of the medians; MB/tok: median device megabytes (10^6 bytes) "
    "per decoded token, the whole run with its load; pairs: balanced pairs with both runs "
    "retained; hashes: every pair's two output hashes equal; kept/rej: retained/rejected runs.")


def replay_line(r: dict) -> str | None:
    """The replay-vs-engine line of one Table 3 row (engine_gates.replay_stats), or None:
    device MB per decoded token of the engine (admit) and of the agent replaying its trace
    over the same file, each with n, their ratio, what each left in the page cache (experts
    and the rest of the model file) and whether the replayed trace decoded the engine's
    output."""
    x = r.get("replay")
    if not x:
        return None
    e, p = x["engine"], x["replay"]
    out = (f"{r['group']} {r['prompt']} {r.get('arm') or 'ample'}: replay vs engine, device "
           f"MB/token: engine (admit) {_mb(e['bytes_per_token'])} (n={e['n']}), the agent "
           f"replaying its trace {_mb(p['bytes_per_token'])} (n={p['n']}), ratio "
           + ("-" if x["ratio"] is None else f"{x['ratio']:.2f}x"))
    split = [f"{name} experts {_mb(s['experts'])} of {_mb(s['model_experts'])}, the rest "
             f"{_mb(s['rest'])} of {_mb(s['model_rest'])}"
             for name, s in (("engine", e), ("replay", p)) if s["n_split"]]
    if split:
        out += "; MB of the model file in the page cache after the run: " + "; ".join(split)
    return out + {True: "; the replayed trace decoded the engine's output",
                  False: "; NO: the replayed trace's output differs from the engine's",
                  None: ""}[x["outputs_match"]]


def engine_lines(e: dict) -> list[str]:
    """Under a Table 3: each group's identity and arms, the replay-vs-engine lines, then the
    warnings."""
    from bench.judge.identity import group_text
    res = e["results"]
    arms = {r["group"]: r.get("arms") or {} for r in res["prompts"]}
    out = []
    for g in res["groups"]:
        a = arms.get(g["id"]) or {}
        out.append(f"{g['id']} ({e['campaign']}): {group_text(g)}"
                   + ("; arms " + ", ".join(f"{k} `{v}`" for k, v in a.items()) if a else ""))
    replay = [x for r in res["prompts"] if (x := replay_line(r))]
    return out + replay + [f"warning: {w}" for w in res["warnings"]]


def figure_table(f: dict) -> Table:
    several = len({(r.get("campaign"), r["group"]) for r in f["rows"]}) > 1
    hosts = len({r["host"] for r in f["rows"]}) > 1     # one host: the group line names it
    head = (["group"] if several else []) + ["cell"] + (["host"] if hosts else []) + [
        "median s", "min-max s", "n", "spread", "GB/it", "flagged"]
    rows = []
    for r in f["rows"]:
        stats = [sig(r["median_s"]),
                 "-" if r["min_s"] is None else f"{sig(r['min_s'])}-{sig(r['max_s'])}",
                 f"{r['n_retained']}/{r['n_retained'] + r['n_rejected']}",
                 pct(r["spread"]) if r["n_retained"] > 1 else "-", sig(r["device_gb"], 4),
                 "; ".join(r["flags"]) or "-"]
        rows.append(([r["group"]] if several else []) + [r["cell"]]
                    + ([r["host"]] if hosts else []) + stats)
    return head, rows


def group_lines(f: dict) -> list[str]:
    from bench.judge.identity import group_text
    return [f"{g['id']} ({g['campaign']}): {group_text(g)}" for g in f["groups"]]


def reference_table(ref: dict) -> Table:
    head = ["paper cell", "measured cell", "host", "metric", "paper", "measured",
            "measured/paper", "source"]
    rows = [[r["cell"], r["measured_cell"] + (" (scaled)" if r["scaled"] else ""),
             r.get("host") or "-", r["metric"], num(r["value"], ".4g"), num(r["measured"], ".4g"),
             "-" if r["ratio"] is None else f"{r['ratio']:.3g}x", r["source"]]
            for r in ref["rows"]]
    return head, rows


def ratio_table(ref: dict) -> Table:
    """The paper's ratios of two cells beside the measured ones (per result group): at a
    scale, the comparison that keeps its meaning."""
    head = ["ratio", "cells (measured)", "group", "host", "paper", "measured",
            "measured/paper"]
    rows = [[r["what"], f"{r['measured_a']} / {r['measured_b']}", r["group"] or "-",
             r["host"] or "-",
             f"{r['value']:.3g}x", "-" if r["measured"] is None else f"{r['measured']:.3g}x",
             "-" if r["ratio"] is None else f"{r['ratio']:.3g}"]
            for r in ref.get("ratios", [])]
    return head, rows


def reference_lines(ref: dict) -> list[str]:
    out = [f"campaign {ref['campaign']}: matrix {ref['matrix'] or 'ad hoc'}"
           + (f", reference {ref['reference']}" if ref["reference"] else
              ", not one of the paper's shipped matrices: nothing to set beside it")]
    if ref.get("note"):
        out.append(ref["note"])
    if ref["mapping"]:
        out.append(f"scale {ref['scale']}: every capacity is scaled (paper -> this campaign): "
                   + ", ".join(f"{a} -> {b}" for a, b in ref["mapping"])
                   + "; measured values at scaled capacities compare in shape, not in size")
    if ref["reference"] and not ref["rows"]:
        out.append("bench ships no printed number of the paper for this matrix")
    return out


def rejected_table(data: dict) -> Table:
    head = ["run", "host", "cell", "rule", "version", "reason"]
    rows = []
    for r in data["rejected"]:
        bad = [v for v in r["verdicts"] if not v["passed"]] or [
            {"rule": "-", "version": "-", "reason": "no failed verdict stored"}]
        for v in bad:
            rows.append([Link(r["run_id"]), r["host"], r["cell"], str(v["rule"]),
                         str(v["version"]), str(v["reason"] or "-")])
    return head, rows


def failed_table(data: dict) -> Table:
    head = ["run", "host", "cell", "state now", "why it failed", "recovery ladder"]
    rows = [[Link(r["run_id"]), r["host"], r["cell"], r["state"],
             "; ".join(failure_text(f, r["run_id"], bool(r["ladder"]))
                       for f in r.get("failures") or []) or "-",
             "; ".join(ladder_line(s) for s in r["ladder"]) or "no ladder climbed"]
            for r in data["failed"]]
    return head, rows


# the executor's failure line ends in the ladder's summary (bench.execute.campaign.worker);
# the report shows the steps in their own column
_LADDER_TAIL = re.compile(r"; (?:host recovered by the ladder|recovery ladder): .*\Z", re.DOTALL)


def failure_text(message: str, run_id: str, ladder_shown: bool) -> str:
    """A journal line that failed a run, as its row shows it: without the run id the row
    names, and without the ladder's summary when the ladder column has its steps."""
    text = message.removeprefix(f"{run_id}: ")
    return _LADDER_TAIL.sub("", text) if ladder_shown else text


def ladder_line(s: dict) -> str:
    return (f"{str(s.get('at', ''))[11:19]} {s.get('rung')}: {s.get('outcome')} "
            f"({s.get('detail')}, {float(s.get('seconds') or 0):.0f}s)")


def skipped_table(data: dict) -> Table:
    return (["campaign", "cell", "host", "reason"],
            [[s["campaign"], s["cell"] or s["point"] or "-", s["host"] or "-",
              s["reason"] or "-"] for s in data["skipped"]])


def provenance_groups(data: dict) -> list[tuple[str, list[tuple[str, str]]]]:
    """Each result group's identity as (heading, (label, value) lines): a list, not a table,
    since a kernel command line or a workload is a paragraph of its own."""
    out = []
    for i, g in enumerate(data["provenance"]["groups"], 1):
        out.append((f"group {i}: {g['host']}", [
            ("host", g["host"]), ("workload", g["workload"]),
            ("fingerprint", str(g["fingerprint"] or "- (none stored)")),
            ("kernel", str(g["kernel"] or "-")), ("arch", str(g.get("arch") or "-")),
            ("kernel command line", str(g["cmdline"] or "-")),
            ("controller", str(g["controller"] or "-")), ("agent", str(g["agent"] or "-")),
            ("campaigns", ", ".join(dict.fromkeys(g["campaigns"])))]))
    return out


def run_pairs(r: dict) -> list[tuple[str, str]]:
    out = [("campaign", r["campaign"]), ("host", r["host"]), ("cell", r["cell"]),
           ("state", r["state"] + ("" if r["retained"] is None else
                                   ", retained" if r["retained"] else ", not retained")),
           ("position", f"{r['position']} (repetition {r['repetition']})")]
    m = r["metrics"]
    out += [(label, fmt(m[k])) for k, label, fmt in _METRICS if m.get(k) is not None]
    return out


def _bytes(v) -> str:
    """GB from 0.1 GB, MB from 10 kB, bytes below (a few stray reads are not "0.00 MB")."""
    if v >= 1e8:
        return f"{v / 1e9:.4f} GB"
    return f"{v / 1e6:.2f} MB" if v >= 1e4 else f"{v:.3g} B"


def _onoff(v) -> str:
    return "on" if v else "off"


# a run's measured quantities, labelled in words with their units (RUN_METRICS's keys)
_METRICS = (("iterations", "iterations measured", str),
            ("iteration_median_s", "iteration time, median", lambda v: f"{sig(v, 4)} s"),
            ("iteration_min_s", "iteration time, min", lambda v: f"{sig(v, 4)} s"),
            ("iteration_max_s", "iteration time, max", lambda v: f"{sig(v, 4)} s"),
            ("device_bytes_per_iteration", "device reads per iteration", _bytes),
            ("logical_bytes_per_iteration", "bytes requested per iteration", _bytes),
            ("nominal_miss_bytes_per_iteration", "nominal misses per iteration", _bytes),
            ("served_fraction", "served without device reads", lambda v: pct(v)),
            ("scan_steal", "kswapd scan/steal", lambda v: f"{v:.2f}"),
            ("cgroup_scan_steal", "cgroup scan/steal", lambda v: f"{v:.2f}"),
            ("locked_fraction", "locked share of memory", lambda v: pct(v)),
            ("mem_total_bytes", "MemTotal", lambda v: f"{v / 1e9:.2f} GB"),
            ("mglru_loop_entry", "MGLRU at loop entry", _onoff),
            ("mglru_end", "MGLRU at the end", _onoff))


def verdict_table(r: dict) -> Table:
    """The rules a run failed, in full; the rules it passed are one line (passed_line)."""
    return (["rule", "version", "reason"],
            [[str(v["rule"]), str(v["version"]), str(v["reason"] or "-")]
             for v in r["verdicts"] if not v["passed"]])


def passed_line(r: dict) -> str:
    ok = [f"{v['rule']} v{v['version']}" for v in r["verdicts"] if v["passed"]]
    return (f"passed {len(ok)} of {len(r['verdicts'])} rules: " + ", ".join(ok)) if ok else \
        ("no verdict stored" if not r["verdicts"] else "passed no rule")


def timeline_table(r: dict) -> Table:
    return (["time", "kind", "message"],
            [[t["t"][:19], t["kind"], t["message"]] for t in r["timeline"]]
            + [[str(s.get("at", ""))[:19], "ladder", ladder_line(s)] for s in r["ladder"]])
