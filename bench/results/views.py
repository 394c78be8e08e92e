"""Human views of results: rich tables and progress. Only this module and the CLI import rich."""

from __future__ import annotations

import json
import shlex
import sys
import time as _time
from collections.abc import Iterable, Sequence
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from bench.units import format_size

console = Console()
err_console = Console(stderr=True)


def emit_json(obj) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def parse_table(summaries: Sequence[dict]) -> Table:
    t = Table(title="Parsed traces (canonical parser)")
    for col in ("trace", "iterations", "normal", "spec-accept", "spec-fallback", "tokens",
                "passes", "reads", "reads/it", "reads/token", "prefill excl."):
        t.add_column(col, justify="left" if col == "trace" else "right")
    for s in summaries:
        t.add_row(_name(s["source"]), str(s["iterations"]), str(s["normal"]), str(s["spec_accept"]),
                  str(s["spec_fallback"]), str(s["accepted_tokens"]), str(s["passes"]),
                  str(s["reads"]), f"{s['reads_per_iteration']:.0f}",
                  f"{s['reads_per_accepted_token']:.0f}", str(s["prefill_records_excluded"]))
    return t


def stats_table(result: dict) -> Table:
    t = Table(title="Router locality (Table 1 quantities)")
    for col in ("trace", "zipf alpha", "W1", "W8", "W64", "top-8 share first/last/min/max",
                "union cov. min-max", "pool cov."):
        t.add_column(col, justify="left" if col == "trace" else "right")
    for s in result["traces"]:
        ts = s["top8_share"]
        t.add_row(_name(s["source"]), _num(s["zipf_alpha"], ".2f"), _pct(s["reuse"]["w1"]),
                  _pct(s["reuse"]["w8"]), _pct(s["reuse"]["w64"]),
                  f"{_pct(ts['first_layer'])} / {_pct(ts['last_layer'])} / {_pct(ts['min'])} / "
                  f"{_pct(ts['max'])}",
                  f"{s['union_coverage']['min']}-{s['union_coverage']['max']} of "
                  f"{s['union_coverage']['of']}", _pct(s["pool_coverage"]))
    if result.get("jaccard_range"):
        lo, hi = result["jaccard_range"]
        t.caption = f"domain Jaccard of top-{result['traces'][0]['top_set']} sets: {lo:.3f}-{hi:.3f}"
    return t


def _name(source: str) -> str:
    return Path(source).name if "/" in source else source


def sim_table(rows: Sequence[dict], title: str = "Fair-window hit rates") -> Table:
    t = Table(title=title)
    for col in ("trace", "regime", "budget", "policy", "trained on", "hits", "accesses",
                "hit rate"):
        t.add_column(col, justify="left" if col in ("trace", "regime", "policy", "trained on")
                     else "right")
    for r in rows:
        t.add_row(_name(str(r["trace"])), r["regime"], str(r["budget"]), r["policy"],
                  _name(str(r.get("train", "-"))), str(r["hits"]), str(r["accesses"]),
                  _pct(r["hit_rate"]))
    return t


def demand_table(rows: Sequence[dict]) -> Table:
    t = Table(title="Demand model: LRU over one global pool, measured (second) pass")
    for col in ("trace", "capacity", "pool keys", "misses/it", "nominal miss GB/it",
                "logical GB/it", "hit rate"):
        t.add_column(col, justify="left" if col == "trace" else "right")
    for r in rows:
        t.add_row(_name(str(r["trace"])), r["capacity"], str(r["capacity_experts"]),
                  f"{r['misses_per_iteration']:.1f}", f"{r['nominal_miss_gb_per_iteration']:.2f}",
                  f"{r['logical_gb_per_iteration']:.2f}", _pct(r["hit_rate"]))
    return t


def recall_table(report: dict) -> Table:
    t = Table(title="Next-pass prediction recall")
    for col in ("plan", "provenance", "recall", "per-layer range", "precision", "hinted"):
        t.add_column(col, justify="left" if col in ("plan", "provenance") else "right")
    for name, r in (("hints", report["hints"]), ("previous token", report["previous_token_baseline"])):
        rng = r["per_layer_range"]
        t.add_row(name, json.dumps(r["provenance"]), _pct(r["recall"]),
                  f"{_pct(rng[0])}-{_pct(rng[1])}" if rng else "-", _pct(r["precision"]),
                  str(r["hinted"]))
    return t


def check_lines(groups: Sequence[Sequence[str]]) -> Iterable[str]:
    for g in groups:
        yield ("suspicious first pass: bit-identical step-0 coverage in " + ", ".join(g) +
               " (a synthetic scheduler dry run recorded as decode?)")


@contextmanager
def progress_bar(description: str, total: int):
    """Yields update(done, total, bytes) for long work; quiet when stderr is not a terminal."""
    cols = [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), TimeRemainingColumn()]
    with Progress(*cols, console=err_console, transient=False,
                  disable=not err_console.is_terminal) as prog:
        task = prog.add_task(description, total=total)

        def update(done: int, _total: int, done_bytes: int = 0) -> None:
            prog.update(task, completed=done)

        yield update


def print_table(table: Table) -> None:
    console.print(table)


def say(message: str) -> None:
    err_console.print(message)


# hosts and labs (fleet) ---------------------------------------------------------------------------

def hosts_table(hosts: Sequence[dict]) -> Table:
    t = Table(title="Inventory")
    for col in ("host", "transport", "address", "tags", "memory", "mem floor", "reboot",
                "work dir"):
        t.add_column(col)
    for h in hosts:
        r = h["reboot"]
        addr = "-" if h["transport"] == "local" else f"{h['user']}@{h['address']}:{h['port']}"
        t.add_row(h["name"], h["transport"], addr,
                  " ".join(f"{k}={v}" for k, v in h["tags"].items()) or "-",
                  _size(h.get("mem_total")), _size(h.get("mem_floor")),
                  r["method"] if r["allowed"] else "never", h["work_dir"])
    return t


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    return format_size(n)


def inventory_check_table(rows: Sequence[dict]) -> Table:
    t = Table(title="Inventory check")
    for col in ("file", "ok", "problem"):
        t.add_column(col)
    for r in rows:
        problem = "-" if r["ok"] else r["error"] + (f" (fix: {r['hint']})" if r.get("hint") else "")
        t.add_row(r["file"], "yes" if r["ok"] else "[red]no[/]", problem)
    return t


def probe_table(results: Sequence[dict]) -> Table:
    t = Table(title="Host facts")
    for col in ("host", "kernel", "arch", "page", "MemTotal", "MemAvail", "swap", "mglru",
                "cgroup", "systemd", "pool device", "python", "agent", "boot_id / error"):
        t.add_column(col)
    for r in results:
        f = r["facts"]
        if r["error"]:
            t.add_row(r["host"], *["-"] * 12, f"[red]{r['error']['type']}: {r['error']['message']}[/]")
            continue
        dev = f.get("pool_device")
        devs = "-" if not dev else f"{dev['name']} ({dev['devno']})" + (
            f" on {','.join(dev['leaves'])}" if dev["leaves"] != [dev["name"]] else "")
        agent = f.get("agent")
        t.add_row(r["host"], str(f.get("kernel", "-")), str(f.get("arch", "-")),
                  str(f.get("page_size", "-")), _gib(f.get("mem_total_bytes")),
                  _gib(f.get("mem_available_bytes")), _gib(f.get("swap_total_bytes")),
                  f.get("mglru") or "absent",
                  (f.get("cgroup") or {}).get("backend", "-"),
                  "yes" if f.get("systemd_pid1") else "no", devs, f.get("python3") or "-",
                  agent["source_sha256"][:12] if agent else "-",
                  str(f.get("boot_id", "-")) + ("" if not r["fact_errors"] else
                                                 f" [yellow]({', '.join(r['fact_errors'])} failed)[/]"))
    return t


def _gib(n: int | None) -> str:
    return "-" if n is None else f"{n / (1 << 30):.1f}G"


def deploy_table(results: Sequence[dict]) -> Table:
    t = Table(title="Deploy")
    for col in ("host", "status", "agent source_sha256", "seconds", "error"):
        t.add_column(col)
    for r in results:
        err = r.get("error")
        t.add_row(r["host"], r["status"], (r.get("source_sha256") or "-")[:16],
                  str(r.get("seconds", "-")),
                  "-" if not err else f"[red]{err['type']}: {err['message']}[/]")
    return t


def lab_table(status: dict) -> Table:
    t = Table(title=f"Lab ({status['kind']}) in {status['state_dir']}"
                    + ("" if status["up"] else ": down"))
    for col in ("host", "address", "netns", "sshd", "boot_id", "cmdline"):
        t.add_column(col)
    for h in status["hosts"]:
        t.add_row(h["name"], h["address"], h["netns"] + ("" if h["netns_exists"] else " (gone)"),
                  f"up (pid {h['sshd_pid']})" if h["sshd"] else "[red]down[/]", h["boot_id"],
                  h["cmdline"])
    if status["up"]:
        t.caption = f"inventory: {status['hosts_dir']} (use --hosts-dir or BENCH_HOSTS)"
    return t


def vm_lab_table(rows: Sequence[dict]) -> Table:
    t = Table(title="Lab (vm: qemu guests)" + ("" if rows else ": down"))
    for col in ("host", "qemu", "ssh port", "ssh", "boot_id / cmdline", "inventory"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["name"], f"pid {r['pid']}" if r["running"] else "[red]stopped[/]",
                  str(r["port"]), r.get("ssh", "-"), r.get("detail", "-"), str(r["inventory"]))
    return t


# results store (bench results, runs, compare, sizing) -------------------------------------------

def _gbx(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def _cap(n: int) -> str:
    return format_size(n)


def runs_table(rows: Sequence[dict]) -> Table:
    t = Table(title="Runs")
    for col in ("run", "campaign", "host", "cell", "rep", "verdict", "median s", "GB/it",
                "failed rules"):
        t.add_column(col, justify="right" if col in ("rep", "median s", "GB/it") else "left")
    for r in rows:
        verdict = {True: "retained", False: "rejected", None: "pending"}[r["retained"]]
        t.add_row(r["run_id"], r["campaign"] or "-", r["host"], r["cell"],
                  "-" if r["repetition"] is None else str(r["repetition"]), verdict,
                  _num(r["iteration_median_s"]), _num(r["device_gb_per_iteration"], ".4f"),
                  ", ".join(r["failed"]) or "-")
    return t


def cell_result_table(res: dict) -> Table:
    t = Table(title=f"{res['cell']}" + (f" on {res['host']}" if res.get("host") else "")
              + (f", campaign {res['campaign']}" if res.get("campaign") else ""))
    t.add_column("quantity")
    t.add_column("value", justify="right")
    rows = [("runs retained / rejected", f"{res['n_retained']} / {res['n_rejected']}"),
            ("median iteration s", _num(res["median_s"], ".4f")),
            ("min / max s", f"{_num(res['min_s'], '.4f')} / {_num(res['max_s'], '.4f')}"),
            ("spread", _pct(res["spread"])),
            ("device GB/iteration", _gbx(res["device_gb_per_iteration"], ".4f")),
            ("nominal miss GB/iteration", _gbx(res["nominal_miss_gb_per_iteration"], ".4f")),
            ("amplification", "-" if res["amplification"] is None
             else f"{res['amplification']:.2f}x"),
            ("kswapd scan/steal", _num(res["scan_steal"], ".2f")),
            ("cgroup scan/steal", _num(res["cgroup_scan_steal"], ".2f")),
            ("served without device reads", _pct(res["served_fraction"])),
            ("locked fraction", _pct(res["locked_fraction"])),
            ("MGLRU", res["mglru"] or "-")]
    for k, v in rows:
        t.add_row(k, v)
    if res.get("warnings"):
        t.caption = "\n".join(f"warning: {w}" for w in res["warnings"])
    return t


def verdict_table(run: dict) -> Table:
    t = Table(title=f"{run['run_id']}: {'retained' if run['retained'] else 'rejected'}")
    for col in ("rule", "v", "verdict", "reason"):
        t.add_column(col)
    for v in run.get("verdicts", []):
        t.add_row(v["rule"], str(v["version"]), "pass" if v["passed"] else "FAIL", v["reason"])
    return t


def matrix_table(m: dict) -> Table:
    kind = m["matrix"]
    if kind == "end-to-end":
        return engine_table(m)
    t = Table(title=f"{kind} matrix" + (f" on {m['host']}" if m.get("host") else "")
              + (f", campaign {m['campaign']}" if m.get("campaign") else ""))
    if kind == "capacity":
        for col in ("C", "reclaim", "n", "med s", "spread", "GB/it", "a/C dev", "miss GB",
                    "amp"):
            t.add_column(col, justify="left" if col == "reclaim" else "right")
        for r in m["rows"]:
            t.add_row(_cap(r["capacity_bytes"]), r["reclaim"],
                      f"{r['n_retained']}/{r['n_retained'] + r['n_rejected']}",
                      _num(r["median_s"], ".3f"), _pct(r["spread"]),
                      _gbx(r["device_gb_per_iteration"], ".4f"), _pct(r["a_over_c_dev"]),
                      _gbx(r["nominal_miss_gb_per_iteration"], ".4f"),
                      "-" if r["amplification"] is None else f"{r['amplification']:.2f}x")
    elif kind == "reclaim":
        for col in ("C", "mechanism", "GB/it mglru", "GB/it classic", "on/off",
                    "s mglru", "s classic", "scan/steal mglru", "scan/steal classic", "locked"):
            t.add_column(col, justify="left" if col == "mechanism" else "right")
        for r in m["rows"]:
            a, b = r.get("mglru") or {}, r.get("classic") or {}
            t.add_row(_cap(r["capacity_bytes"]), r["mechanism"],
                      _gbx(a.get("device_gb_per_iteration"), ".4f"),
                      _gbx(b.get("device_gb_per_iteration"), ".4f"),
                      _num(r["mglru_over_classic"], ".2f"), _num(a.get("median_s")),
                      _num(b.get("median_s")), _num(a.get("scan_steal"), ".2f"),
                      _num(b.get("scan_steal"), ".2f"),
                      # the mechanism's locked share: either reclaim's runs measure it
                      _pct(a.get("locked_fraction") if a.get("locked_fraction") is not None
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
            cells = [_cap(r["capacity_bytes"])] + ([r["mechanism"]] if kind == "prefetch" else [])
            cells += [_num((r.get(k) or {}).get("median_s")) for k in keys]
            if kind == "equal-memory":
                for k in ("pagecache", "pinned"):
                    s = r.get(k) or {}
                    cells += [_gbx(s.get("device_gb_per_iteration"), ".4f"),
                              _pct(s.get("served_fraction"))]
            t.add_row(*cells)
    return t


def compare_table(c: dict) -> Table:
    t = Table(title=f"{c['a']} vs {c['b']} (retained runs {c['n_a']} / {c['n_b']})")
    for col in ("quantity", "ratio of medians", "median of pair ratios", "pairs"):
        t.add_column(col, justify="left" if col == "quantity" else "right")
    for k, label in (("time", "iteration time"), ("device", "device bytes/iteration")):
        t.add_row(label, _num(c[f"{k}_ratio_of_medians"]), _num(c[f"{k}_median_pair_ratio"]),
                  str(c[f"{k}_pairs"]))
    if c.get("mechanism_agreement") is not None:
        t.caption = f"mechanisms agree within {100 * c['mechanism_agreement']:.1f}% in median time"
    return t


def recheck_table(changes: Sequence[dict]) -> Table:
    t = Table(title=f"Retention recheck: {len(changes)} verdict(s) changed")
    for col in ("run", "rule", "was", "now", "reason"):
        t.add_column(col)
    for ch in changes:
        old = ch["old"]
        t.add_row(ch["run_id"], ch["rule"],
                  "-" if old is None else f"v{old['version']} {'pass' if old['passed'] else 'FAIL'}",
                  f"v{ch['new']['version']} {'pass' if ch['new']['passed'] else 'FAIL'}",
                  ch["reason"])
    return t


# matrices and campaign plans (plain fixed-width text: the dry-run plan is golden-tested) ----------

def duration(seconds: float) -> str:
    """12345 -> '3h 25m'; under an hour '12m 30s'."""
    s = int(round(seconds))
    if s >= 3600:
        return f"{s // 3600}h {s % 3600 // 60:02d}m"
    return f"{s // 60}m {s % 60:02d}s"


def _tags_text(tags) -> str:
    if tags == "any":
        return "any host"
    return ", ".join(f"{k} in {'|'.join(v)}" for k, v in tags.items())


def matrix_list_table(rows: Sequence[dict]) -> Table:
    t = Table(title="Shipped matrices (bench matrix show NAME)")
    for col in ("name", "cells", "reps", "hosts", "description"):
        t.add_column(col, justify="right" if col in ("cells", "reps") else "left")
    for r in rows:
        t.add_row(r["name"], str(r["points"]), str(r["repetitions"]),
                  f"{_tags_text(r['hosts']['tags'])} ({r['hosts']['placement']})",
                  r["description"])
    return t


def _workload_text(w: dict) -> str:
    parts = [f"trace {w['trace']}"]
    geo = [f"{w[k]} {k.replace('_', ' ')}" for k in ("layers", "experts", "tokens") if w.get(k)]
    if w.get("expert_bytes"):
        geo.append(f"{w['expert_bytes'] >> 20} MiB experts" if w["expert_bytes"] >= 1 << 20
                   else f"{w['expert_bytes']} B experts")
    if geo:
        parts.append("re-sized to " + " x ".join(geo))
    if w.get("domain"):
        parts.append(f"domain {w['domain']}")
    parts.append(f"batch {w['batch']}")
    if w.get("passes", 2) != 2:
        parts.append(f"{w['passes']} passes")
    if w.get("fixed_set_bytes"):
        parts.append(f"fixed set {w['fixed_set_bytes'] / 1e9:g} GB")
    return ", ".join(parts)


def matrix_text(m: dict) -> str:
    if m.get("engine"):
        return engine_matrix_text(m)
    o = m["order"]
    pool = m.get("pool_bytes")
    lines = [f"matrix {m['name']}" + (f" at scale {m['scale']}" if m.get("scale") else "")
             + f": {m['description']}",
             f"  source       {m['source']}"]
    if m.get("reference"):
        lines.append(f"  reference    {m['reference']}")
    if m.get("scales") and not m.get("scale"):
        lines.append(f"  scales       {', '.join(m['scales'])} (--scale NAME)")
    lines += [
        f"  workload     {_workload_text(m['workload'])}"
        + (f" (pool {pool / 1e12:.3g} TB)" if pool and pool >= 1e12 else
           f" (pool {pool} bytes)" if pool else ""),
        f"  repetitions  {m['repetitions']}; order: "
        + ("randomized" if o["randomize"] else "as written")
        + (", repetitions interleaved" if o["interleave_reps"] else ", repetitions back to back"),
        f"  hosts        {_tags_text(m['hosts']['tags'])}, placement {m['hosts']['placement']}",
        f"  boot         memboot mem = C + {m['memboot_overhead']}; MGLRU "
        + ("at boot (bench.lru_gen=)" if m["mglru_at_boot"] else "toggled at run time"),
        f"  estimate     {duration(m['estimate']['run_seconds'])} per run, "
        f"{duration(m['estimate']['reboot_seconds'])} per reboot",
        "  protocol     cgroup memory.max = C + "
        + str((m.get("protocol") or {}).get("cgroup_headroom") or "6G")
        + (f"; balloons lock at most {m['protocol']['balloon_max']}"
           if (m.get("protocol") or {}).get("balloon_max") else ""),
        f"  cells ({len(m['points'])}):"]
    w = max(len(p["point"]) for p in m["points"])
    for p in m["points"]:
        extra = []
        if p["repetitions"] != m["repetitions"]:
            extra.append(f"{p['repetitions']} reps")
        if p["placement"] != m["hosts"]["placement"]:
            extra.append(f"placement {p['placement']}")
        if p["tags"] != m["hosts"]["tags"]:
            extra.append(_tags_text(p["tags"]))
        lines.append((f"    {p['point']:<{w}}" + (f"  ({'; '.join(extra)})" if extra else "")).rstrip())
    return "\n".join(lines) + "\n"


def plan_text(m: dict, plan: dict, expansion: dict) -> str:
    """The dry-run plan: per host its ordered runs by boot group, reboots, estimate."""
    o = m["order"]
    lines = [f"campaign {plan['campaign']}: matrix {m['name']}"
             + (f" at scale {m['scale']}" if m.get("scale") else "") + f", seed {plan['seed']}",
             (f"engine {m['engine']['command'][0]}, {m['engine']['pairs']} pairs per prompt; "
              if m.get("engine") else f"workload {_workload_text(m['workload'])}; ")
             + ("randomized" if o["randomize"] else "as written")
             + (", repetitions interleaved" if o["interleave_reps"] else "")
             + f"; estimate {duration(plan['estimates']['run_seconds'])} per run, "
               f"{duration(plan['estimates']['reboot_seconds'])} per reboot",
             ""]
    for h in plan["hosts"]:
        runs = h["runs"]
        lines.append(f"host {h['host']}: {len(runs)} runs, {h['reboots']} reboots "
                     f"(lower bound {h['reboot_lower_bound']}), estimate "
                     f"{duration(h['estimate_s'])}")
        if not runs:
            lines.append("  (no runs)")
            lines.append("")
            continue
        wid = max(len(r["run_id"]) for r in runs)
        for gi, b in enumerate(h["boot_groups"], 1):
            group = [r for r in runs if r["boot"]["label"] == b["label"]]
            how = "reboot" if group[0]["reboot_before"] else "current boot, no reboot"
            lines.append(f"  boot {gi}/{len(h['boot_groups'])}: {b['label']} ({how}), "
                         f"{len(group)} runs")
            cw = max(len(r["cell"]) for r in group) if group[0].get("pair") else 0
            lines.append(f"    {'pos':>4}  {'run id':<{wid}}  {'rep':>3}  cell"
                         + (f"{'':<{cw - 4}}  pair order" if cw else ""))
            for r in group:
                lines.append(f"    {r['position']:>4}  {r['run_id']:<{wid}}  {r['rep']:>3}  "
                             f"{r['cell']:<{cw}}" + (f"  {r['pair']['order']}" if cw else ""))
        lines.append("")
    if expansion["skipped"]:
        lines.append(f"skipped ({len(expansion['skipped'])}):")
        for s in expansion["skipped"]:
            lines.append(f"  {s['point']} on {s['host'] or '(no host)'}: {s['reason']}")
        lines.append("")
    for wmsg in expansion["warnings"]:
        lines.append(f"warning: {wmsg}")
    lines.append(f"total: {plan['runs']} runs, {plan['reboots']} reboots, estimate "
                 f"{duration(plan['estimate_s'])} (hosts in parallel)")
    return "\n".join(lines) + "\n"


# campaigns: live view, plain progress lines, the campaign list ------------------------------------

def _dur(s: float | None) -> str:
    return "-" if s is None else duration(max(0.0, s))


def campaign_renderable(p: dict):
    """One rich renderable of a campaign snapshot (bench.execute.progress, as a dict): one row
    per host (phase, cell, run, pass and iteration as the host last reported them, elapsed,
    ETA), an overall bar, the last verdicts, quarantined hosts and warnings."""
    ctl = p.get("controller")
    head = Text.from_markup(
        f"[bold]{p['campaign']}[/]  matrix {p['matrix']}  seed {p['seed']}  state "
        f"[bold]{p['state']}[/]  controller "
        + (f"pid {ctl['pid']} on {ctl['host']}" if ctl else "[yellow]none[/]"))
    t = Table(expand=False)
    for col in ("host", "phase", "cell", "run", "pass", "iteration", "elapsed", "done", "ETA"):
        t.add_column(col)
    for h in p["hosts"]:
        phase = f"[red]{h['phase']}[/]" if h["quarantined"] else h["phase"]
        has = h.get("passes") is not None
        t.add_row(h["host"], phase, h["cell"] or "-", h["run_id"] or "-",
                  f"{h['pass'] + 1}/{h['passes']}" if has else "-",
                  f"{h['iteration']}/{h['iterations']}" if has else "-",
                  _dur(h["elapsed_s"]), f"{h['done']}/{h['total']}", _dur(h["eta_s"]))
    bar = ProgressBar(total=max(1, p["total"]), completed=p["finished"], width=50)
    line = Text(f" {p['finished']}/{p['total']} runs finished, {p['failed']} failed, "
                f"ETA {_dur(p['eta_s'])} (run ~{_dur(p['run_seconds'])}, reboot "
                f"~{_dur(p['reboot_seconds'])})")
    parts = [head, t, Group(bar, line)]
    if p["verdicts"]:
        v = Table(title="last verdicts", show_header=False, box=None)
        for x in p["verdicts"]:
            color = "green" if x["verdict"] == "validated" else "yellow"
            v.add_row(x["t"][11:19], x["run_id"], f"[{color}]{x['verdict']}[/]", x["message"])
        parts.append(v)
    for h, why in (p.get("quarantined") or {}).items():
        parts.append(Text.from_markup(f"[red]quarantined[/] {h}: {why}"))
    for w in p.get("warnings") or []:
        parts.append(Text.from_markup(f"[yellow]warning[/] {w['t'][11:19]} {w['message']}"))
    return Group(*parts)


def campaign_live(snapshot, finished, interval: float = 1.0, journal=None) -> None:
    """Show a campaign until finished() is true: a rich Live view on a terminal, else plain
    timestamped lines (one per journal entry, from journal(after_id) -> rows)."""
    if err_console.is_terminal:
        with Live(campaign_renderable(snapshot()), console=err_console,
                  refresh_per_second=2) as live:
            while not finished():
                _time.sleep(interval)
                try:
                    live.update(campaign_renderable(snapshot()))
                except Exception:  # noqa: BLE001 - a busy database: next tick
                    pass
            live.update(campaign_renderable(snapshot()))
        return
    last = 0
    while True:
        done = finished()
        try:
            rows = journal(last) if journal else []
        except Exception:  # noqa: BLE001
            rows = []
        for j in rows:
            last = j.id
            if j.kind in ("lock", "live"):    # rows updated in place, not events
                continue
            print(f"{j.t[:19].replace('T', ' ')} {j.kind:<10} {j.message}", flush=True)
        if done:
            return
        _time.sleep(interval)


def campaigns_table(rows: Sequence[dict]) -> Table:
    t = Table(title="campaigns")
    for col in ("campaign", "matrix", "seed", "state", "created", "finished", "progress",
                "states"):
        t.add_column(col)
    for r in rows:
        st = r["states"]
        total = sum(st.values())
        fin = st.get("validated", 0) + st.get("rejected", 0)
        t.add_row(r["id"], r["matrix"] or "-", str(r["seed"]), r["state"],
                  (r["created"] or "")[:19], f"{fin}/{total}",
                  f"{100 * fin / total:.0f}%" if total else "-",
                  ", ".join(f"{k} {v}" for k, v in sorted(st.items())))
    return t


# end-to-end engine cells (bench.matrix.engine) ----------------------------------------------------------

def engine_matrix_text(m: dict) -> str:
    """`bench matrix show` of an engine matrix: the engine, its policies and gates, the cells."""
    e, o = m["engine"], m["order"]
    lines = [f"matrix {m['name']}: {m['description']}", f"  source       {m['source']}"]
    if m.get("reference"):
        lines.append(f"  reference    {m['reference']}")

    def env(d: dict) -> str:
        return " ".join(f"{k}={shlex.quote(v)}" for k, v in d.items())
    lines += [f"  engine       {shlex.join(e['command'])}",
              f"  run          cwd {e['cwd'] or '(the runner default)'}; timeout "
              f"{duration(e['timeout_s'])}; {e['n_tokens']} tokens (at least {e['min_tokens']})"
              + (f"; env {env(e['env'])}" if e["env"] else "")]
    for pol, p in e["policies"].items():
        parts = (([shlex.join(p["args"])] if p["args"] else [])
                 + ([f"env {env(p['env'])}"] if p["env"] else []))
        lines.append(f"  {pol:<12} " + (" ".join(parts) or "(the command's {policy} only)"))
    lines += [f"  gates        backend {e['backend']!r} in its output; exit 0; cold load "
              f"/{e['load_regex']}/; output token IDs /{e['tokens_regex']}/, not degenerate",
              f"  pairs        {e['pairs']} per prompt: pair 0 admit-first, pair 1 nocache-first"
              + (", then a shuffle seeded by the schedule's seed" if e["pairs"] > 2 else "")
              + "; pair blocks " + ("randomized" if o["randomize"] else "as written")
              + (", interleaved" if o["interleave_reps"] else ", back to back"),
              f"  hosts        {_tags_text(m['hosts']['tags'])}, placement "
              f"{m['hosts']['placement']}; ample capacity (no mechanism), reclaim as the host "
              "runs it",
              f"  estimate     {duration(m['estimate']['run_seconds'])} per run",
              f"  cells ({len(m['points'])}):"]
    w = max(len(p["point"]) for p in m["points"])
    for p in m["points"]:
        prompt = p["point"].split("-")[1]
        lines.append(f"    {p['point']:<{w}}  {e['prompts'][prompt]}")
    return "\n".join(lines) + "\n"


def engine_table(res: dict) -> Table:
    """Table 3: per prompt admit and nocache median steady-decode s, the median of per-pair
    ratios [range], pairs, and whether every pair's output hashes match (loud when not)."""
    t = Table(title="End-to-end decode: page-cache admission vs nocache"
              + (f" on {res['host']}" if res.get("host") else "")
              + (f", campaign {res['campaign']}" if res.get("campaign") else ""))
    for col in ("prompt", "admit s", "nocache s", "speedup \\[range]", "pairs", "hashes match",
                "runs kept/rejected"):
        t.add_column(col, justify="left" if col in ("prompt", "hashes match") else "right")
    for r in res["prompts"]:
        sp = "-" if r["speedup"] is None else (
            f"{r['speedup']:.2f}x [{r['speedup_min']:.2f}-{r['speedup_max']:.2f}]")
        match = {True: "yes", False: "[bold red]NO[/] (pairs " + ", ".join(r["mismatched"]) + ")",
                 None: "-"}[r["hashes_match"]]
        t.add_row(r["prompt"], _num(r["admit_median_s"], ".1f"),
                  _num(r["nocache_median_s"], ".1f"), sp,
                  str(r["pairs"]) + (f" (+{len(r['incomplete'])} incomplete)"
                                     if r["incomplete"] else ""),
                  match, f"{r['n_retained']}/{r['n_rejected']}")
    notes = ["speedup = median over pairs of nocache_s / admit_s (steady decode: wall time "
             "minus the engine's cold load); not the quotient of the two medians"]
    notes += [f"[bold red]warning:[/] {w}" for w in res.get("warnings", [])]
    t.caption = "\n".join(notes)
    return t
