"""Views of matrices and campaign plans: plain fixed-width text (the dry-run plan is
golden-tested; control characters of names and reasons shown as escapes) and the matrix
list."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from bench.results.views import LiteralTable, duration, visible
from bench.units import format_size


def _tags_text(tags) -> str:
    if tags == "any":
        return "any host"
    return ", ".join(f"{k} in {'|'.join(v)}" for k, v in tags.items())


def matrix_list_table(rows: Sequence[dict]) -> LiteralTable:
    t = LiteralTable(title="Shipped matrices (bench matrix show NAME)")
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
        parts.append(f"fixed set {format_size(int(w['fixed_set_bytes']))}")
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
        f"  boot         memboot mem = C + {m['memboot_overhead']}; "
        + ("balloons boot the host where they lock the paper's share ("
           + ", ".join(f"{c}: mem={v}" for c, v in m["balloon_boots"].items()) + "); "
           if m.get("balloon_boots") else "")
        + "MGLRU " + ("at boot (bench.lru_gen=)" if m["mglru_at_boot"] else "toggled at run time"),
        f"  estimate     {duration(m['estimate']['run_seconds'])} per run, "
        f"{duration(m['estimate']['reboot_seconds'])} per reboot",
        "  protocol     cgroup memory.max = C + "
        + str((m.get("protocol") or {}).get("cgroup_headroom") or "6Gi")
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
        note = f"  ({'; '.join(extra)})" if extra else ""
        lines.append(f"    {p['point']:<{w}}{note}".rstrip())
    return visible("\n".join(lines) + "\n")


def estimates_text(e: dict) -> str:
    """Where the plan's estimates come from: runs measured (earlier runs of the same cell on
    the same host) or modelled (the matrix's per-run figure); reboots likewise, or none."""
    runs = e.get("runs", "modelled")
    text = (f"runs {runs}" + (f" ({duration(e['run_seconds'])} per run)"
                              if runs != "measured" and "modelled" in runs else ""))
    reboots = e.get("reboots", "modelled")
    return text + ("; no reboot" if reboots == "none" else
                   f"; reboots {reboots}" + (f" ({duration(e['reboot_seconds'])} per reboot)"
                                             if "modelled" in reboots else ""))


def _host_estimate_text(h: dict) -> str:
    """A host's estimate: what its runs' estimates rest on, and its reboots' (if any)."""
    if "run_estimates" not in h or not h["runs"]:
        return ""
    parts = [f"runs {h['run_estimates']}"]
    if h["reboots"]:
        parts.append(f"{h['reboots']} x {duration(h['reboot_estimate_s'])} reboot "
                     f"{h['reboot_estimate']}")
    return " (" + "; ".join(parts) + ")"


def _engine_name(m: dict) -> str:
    """The engine's program; the built-in one ({bench} engine run) by its name."""
    argv = m["engine"]["command"]
    if argv[:3] == ["{bench}", "engine", "run"]:
        return "bench engine run (built-in: llama.cpp; the local host only)"
    return argv[0]


def plan_text(m: dict, plan: dict, expansion: dict) -> str:
    """The dry-run plan: per host its ordered runs by boot group, reboots, estimate."""
    o = m["order"]
    lines = [f"campaign {plan['campaign']}: matrix {m['name']}"
             + (f" at scale {m['scale']}" if m.get("scale") else "") + f", seed {plan['seed']}",
             (f"engine {_engine_name(m)}, {m['engine']['pairs']} pairs per prompt; "
              if m.get("engine") else f"workload {_workload_text(m['workload'])}; ")
             + ("randomized" if o["randomize"] else "as written")
             + (", repetitions interleaved" if o["interleave_reps"] else "")
             + f"; estimate {estimates_text(plan['estimates'])}",
             ""]
    for h in plan["hosts"]:
        runs = h["runs"]
        lines.append(f"host {h['host']}: {len(runs)} runs, {h['reboots']} reboots "
                     f"(lower bound {h['reboot_lower_bound']}), estimate "
                     f"{duration(h['estimate_s'])}" + _host_estimate_text(h))
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
    return visible("\n".join(lines) + "\n")


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
    if e.get("prepare"):
        lines.append(f"  prepare      {shlex.join(e['prepare'])} (before the caches are dropped)")
    if m.get("engine_local_only"):
        lines.append(f"  where        {m['engine_local_only']}")
    for pol, p in e["policies"].items():
        parts = (([shlex.join(p["args"])] if p["args"] else [])
                 + ([f"env {env(p['env'])}"] if p["env"] else [])
                 + ([f"(backend {p['backend']!r})"] if p.get("backend") else []))
        lines.append(f"  {pol:<12} " + (" ".join(parts) or "(the command's {policy} only)"))
    lines += [f"  gates        backend {e['backend']!r} in its output; exit 0; cold load "
              f"/{e['load_regex']}/; output token IDs /{e['tokens_regex']}/, not degenerate",
              f"  pairs        {e['pairs']} per prompt: pair 0 admit-first, pair 1 nocache-first"
              + (", then a shuffle seeded by the schedule's seed" if e["pairs"] > 2 else "")
              + ("; after each pair the agent replays the engine's trace (the replay-vs-"
                 "engine line)" if "replay" in e["policies"] else "")
              + "; pair blocks " + ("randomized" if o["randomize"] else "as written")
              + (", interleaved" if o["interleave_reps"] else ", back to back"),
              f"  hosts        {_tags_text(m['hosts']['tags'])}, placement "
              f"{m['hosts']['placement']}; ample capacity (no mechanism)"
              + "".join(f", {x}" for x in e.get("capacities", []))
              + "; reclaim as the host runs it",
              f"  estimate     {duration(m['estimate']['run_seconds'])} per run",
              f"  cells ({len(m['points'])}):"]
    w = max(len(p["point"]) for p in m["points"])
    for p in m["points"]:
        prompt = p["point"].split("-")[1]
        lines.append(f"    {p['point']:<{w}}  {e['prompts'][prompt]}")
    return visible("\n".join(lines) + "\n")
