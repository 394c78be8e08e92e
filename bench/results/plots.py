"""Figures from matrix results, drawn as the paper draws them: the capacity response (Fig. 2),
reclaim pairs MGLRU on/off (Fig. 3), equal memory (Fig. 4), prefetch conditions (Fig. 6) and
cache admission (§9: GB/s admitted and bypassed); and the simulation figures (Fig. 1, Fig. 5).

What a reviewer needs from every figure: a title naming what it shows and what it was measured
on (campaign, host group, workload); the paper's axes and decimal units; the number of retained
runs (n) next to every plotted point or bar, never on top of data; error bars spanning min..max
of the retained runs' values; one series per result group (host, workload, fingerprint:
bench.judge.identity) and per mechanism, so a line never joins two groups or two mechanisms
(the ample `none` point is a marker of its own); a zero drawn at zero (a symlog axis), never
dropped; a cell with no retained run marked "missing" where its bar or point would be, never
drawn as zero; sizes read as `199 MB`, `64 GB`; a legend entry only for what was drawn. The
style, axes, label placement and files are bench.results.figstyle's, shared by every figure.

`figure` and `sim_figure` return a finished Figure (the caller saves it as SVG, PNG or PDF with
figstyle.save); `draw` and `draw_sim` write the files `-o` names (figstyle.outputs)."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from bench.errors import InputError
from bench.judge.stats import a_over_c, span
from bench.results import figstyle
from bench.results.figstyle import legend_below, n_label, new_figure, shown, short_list

RASTER_DPI = figstyle.RASTER_DPI
MISSING = "missing"
ON, OFF = "C0", "C1"        # MGLRU on / off, as the paper's left and right bars
NOMINAL = "black"

KINDS = ("capacity", "reclaim", "equal-memory", "prefetch", "admission")
TITLES = {"capacity": "Fig. 2 capacity response: iteration time and device traffic against C",
          "reclaim": "Fig. 3 reclaim: MGLRU on and off at each capacity",
          "equal-memory": "Fig. 4 equal memory under one cgroup wall",
          "prefetch": "Fig. 6 one bounded prefetch worker",
          "admission": "§9 cache admission: the same fixed set admitted and bypassed"}


def figure(kind: str, m: dict, campaigns: Sequence[str] = ()) -> Figure:
    """The finished figure of one matrix result (bench.store.queries.matrix), titled with
    `campaigns` (the campaigns of its runs: bench.store.queries.campaigns_in_scope; none given:
    the matrix's --campaign filter)."""
    if not m["rows"]:
        raise InputError(f"no retained runs for the {kind} plot",
                         hint="`bench runs` lists the stored runs; --host, --campaign and "
                              "--workload choose which are drawn")
    draw_fn = {"capacity": _capacity, "reclaim": _reclaim, "equal-memory": _equal,
               "prefetch": _prefetch, "admission": _admission}[kind]
    with figstyle.styled():
        fig = draw_fn(m)
        figstyle.title(fig, TITLES[kind], context(m, campaigns))
        return figstyle.finish(fig)


def draw(kind: str, m: dict, out: Path, campaigns: Sequence[str] = ()) -> list[Path]:
    """The figure written to the files OUT names (figstyle.outputs: OUT, or OUT.svg and
    OUT.png); their directory must exist (never created). Returns the files written."""
    files = figstyle.outputs(out)
    fig = figure(kind, m, campaigns)
    for f in files:
        figstyle.save(fig, f)
    return files


def context(m: dict, campaigns: Sequence[str] = ()) -> list[str]:
    """What a figure was measured on, in short forms: `campaign c1 · host a · workload
    prose.jsonl b1 (386eeda9)`; several groups as `g1 a, g2 b`."""
    camps = list(dict.fromkeys(campaigns)) or ([m["campaign"]] if m.get("campaign") else [])
    camp = (("campaign " if len(camps) == 1 else "campaigns ")
            + short_list([shown(c) for c in camps])) if camps else "campaign not named"
    groups = m.get("groups") or []
    if len(groups) == 1:
        hosts = f"host {shown(groups[0]['host'])}"
    else:
        hosts = "hosts " + short_list([f"{g['id']} {shown(g['host'])}" for g in groups])
    loads = list(dict.fromkeys(workload_text(g.get("workload") or {}) for g in groups))
    load = ("workload " if len(loads) == 1 else "workloads ") + short_list(loads, 2)
    return [camp, hosts, load]


def workload_text(w: dict) -> str:
    """`prose.jsonl b1 (386eeda9)`: trace name, batch and the workload digest's head."""
    name = shown(Path(str(w.get("trace") or w.get("prompt") or "?")).name)
    batch = f" b{w['batch']}" if w.get("batch") is not None else ""
    digest = f" ({shown(str(w['digest'])[:8])})" if w.get("digest") else ""
    return f"{name}{batch}{digest}"


def readable_size(n: float) -> str:
    """Decimal, three significant digits: 199229440 -> '199 MB', 64e9 -> '64 GB'."""
    for unit, name in ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB")):
        if n >= unit:
            return f"{n / unit:.3g} {name}"
    return f"{n:g} B"


def _hosts(m: dict) -> dict[str, str]:
    return {g["id"]: g["host"] for g in m.get("groups", [])}


def _series_label(m: dict, gid: str, *parts: str) -> str:
    """`g1 host-a balloon mglru`, the group and host only when the figure has several groups."""
    head = [gid, shown(_hosts(m).get(gid, ""))] if len(m.get("groups", [])) > 1 else []
    return " ".join(p for p in [*head, *parts] if p)


# drawing primitives -----------------------------------------------------------------------

def _errorbar(ax: Axes, xs: list[float], ys: list[float],
              spans: Sequence[tuple[float, float] | None], **kw):
    """Points with min..max error bars (a point without a span gets none)."""
    lo = [y - s[0] if s else 0.0 for y, s in zip(ys, spans)]
    hi = [s[1] - y if s else 0.0 for y, s in zip(ys, spans)]
    return ax.errorbar(xs, ys, yerr=[lo, hi], **kw)


def _n_labels(ax: Axes, xs: Sequence[float], ys: Sequence[float],
              spans: Sequence[tuple[float, float] | None], ns: Sequence[int],
              color: str = "black") -> None:
    """`n=3` by each point or bar, in its series' color (two series meeting at one point keep
    their labels apart and told apart)."""
    for x, y, s, n in zip(xs, ys, spans, ns):
        lo, hi = s if s else (y, y)
        n_label(ax, x, y, min(lo, y), max(hi, y), f"n={n}", color=color)


def _missing(ax: Axes, x: float) -> None:
    """A cell with no retained run: a gray cross on the axis and the word, never a zero."""
    ax.plot([x], [0.02], marker="x", color="gray", linestyle="none",
            transform=ax.get_xaxis_transform())
    ann = ax.annotate(MISSING, (x, 0.04), xycoords=("data", "axes fraction"), rotation=90,
                      ha="center", va="bottom", fontsize=7, color="gray")
    ann.set_in_layout(False)


def _bars(ax: Axes, xs: list[float], stats: list[dict | None], key: str, width: float,
          color: str, label: str) -> None:
    """One bar per measured cell (median of `key`) with its min..max error bar and n; a bar of
    height zero gets a thick mark at zero so it shows; a missing cell gets the missing mark.
    The label goes to the legend only when a bar exists."""
    got = [(x, s) for x, s in zip(xs, stats) if s and s.get(key) is not None]
    for x, s in zip(xs, stats):
        if not (s and s.get(key) is not None):
            _missing(ax, x)
    if not got:
        return
    bx = [x for x, _ in got]
    ys = [s[key] for _, s in got]
    ax.bar(bx, ys, width, color=color, label=label)
    zeros = [x for x, y in zip(bx, ys) if y == 0]
    if zeros:
        ax.hlines([0.0] * len(zeros), [x - width / 2 for x in zeros],
                  [x + width / 2 for x in zeros], colors=color, linewidth=3, clip_on=False)
    spans = [_value_span(s, key) for _, s in got]
    _errorbar(ax, bx, ys, spans, fmt="none", ecolor="black", elinewidth=1)
    _n_labels(ax, bx, ys, spans, [s["n_retained"] for _, s in got])


def _value_span(s: dict, key: str) -> tuple[float, float] | None:
    if key == "median_s":
        return (s["min_s"], s["max_s"]) if s.get("min_s") is not None else None
    if key == "device_gb_per_iteration":
        return span(s.get("device_gb_runs") or [])
    if key == "gb_per_s" and s.get("gb_per_s_min") is not None:
        return (s["gb_per_s_min"], s["gb_per_s_max"])
    return None


def _size_axis(ax: Axes, caps: Sequence[int]) -> None:
    """A log capacity axis with ticks at the measured capacities, in decimal units."""
    xs = sorted({c / 1e9 for c in caps})
    figstyle.log_axis(ax, "x", ticks=xs, labels=[readable_size(x * 1e9) for x in xs])
    ax.tick_params(axis="x", labelrotation=30)
    for t in ax.get_xticklabels():
        t.set_horizontalalignment("right")
    ax.set_xlabel("capacity C")


def _pair_labels(m: dict, rows: list[dict], extra: str = "mechanism") -> list[str]:
    """One tick label per slot, a line each: the group and host (when several), the size,
    the mechanism."""
    several = len(m.get("groups", [])) > 1
    return ["\n".join(p for p in (f"{r['group']} {shown(r.get('host', ''))}".strip()
                                   if several else "", readable_size(r["capacity_bytes"]),
                                   r.get(extra, "") if extra else "") if p)
            for r in rows]


def _width(n_slots: float) -> float:
    return max(6.0, 1.2 * n_slots + 2.0)


def _bar_axes_finish(ax: Axes) -> None:
    """Room above the tallest bar for its n label."""
    ax.set_ylim(0, max(ax.get_ylim()[1], 1e-12) * 1.25)


# Fig. 2 -----------------------------------------------------------------------------------

def _capacity(m: dict) -> Figure:
    fig, (left, right) = new_figure(1, 2, figsize=(11, 5.2))
    series = sorted({(r["group"], r["mechanism"], r["reclaim"]) for r in m["rows"]})
    colors: dict[tuple, str] = {}
    for n, key in enumerate(series):
        rows = sorted((r for r in m["rows"]
                       if (r["group"], r["mechanism"], r["reclaim"]) == key),
                      key=lambda r: r["capacity_bytes"])
        colors[key] = f"C{n % 10}"
        # a sweep is a curve; a mechanism with one point (the ample `none`) is a marker
        style = "o-" if len(rows) > 1 else "D"
        _capacity_series(left, right, m, key, rows, colors[key], style)
    _nominal_lines(right, m)
    no_ref = []
    several = len(m.get("groups", [])) > 1
    for gid, reclaim in sorted({(r["group"], r["reclaim"]) for r in m["rows"]}):
        # the a/C reference of one group and reclaim anchored at its largest capacity, as the
        # table's a/C column is: a reference line, not a measured curve; an anchor that read
        # 0 GB makes the reference 0 everywhere, which draws nothing: said, not drawn
        rows = [r for r in m["rows"] if (r["group"], r["reclaim"]) == (gid, reclaim)]
        ref = a_over_c([(r["capacity_bytes"], r["device_gb_per_iteration"]) for r in rows])
        caps = sorted(ref)
        if len(caps) < 2:
            continue
        if ref[caps[-1]][0] <= 0:
            no_ref.append(f"{gid} {reclaim}" if several else reclaim)
            continue
        color = next(colors[k] for k in series if (k[0], k[2]) == (gid, reclaim))
        right.plot([c / 1e9 for c in caps], [ref[c][0] for c in caps], ":", color=color,
                   label=f"a/C reference {_series_label(m, gid, reclaim)}")
    caps_all = [r["capacity_bytes"] for r in m["rows"]]
    left.set(ylabel="iteration time (s)",
             title="iteration time: median, min-max, every run")
    right_title = "block-layer device traffic"
    if no_ref:
        right_title += "\n" + "\n".join(textwrap.wrap(
            f"(no a/C line for {', '.join(no_ref)}: its largest C read 0 GB)", 60))
    right.set(title=right_title)
    for ax in (left, right):
        _size_axis(ax, caps_all)
    left.set_ylim(0, left.get_ylim()[1] * 1.12)     # room above the top point for its n
    values = [v for r in m["rows"] for v in (r["device_gb_per_iteration"],
                                              r["nominal_miss_gb_per_iteration"],
                                              *(r.get("device_gb_runs") or []))
              if v is not None]
    zero = any(v == 0 for v in values)
    figstyle.log_axis(right, "y", zero=zero)
    right.set_ylabel("device reads (GB / iteration)"
                     + ("\nlog; linear near 0 to show zeros" if zero else ", log"))
    legend_below(fig, (left, right))
    return fig


def _nominal_lines(ax: Axes, m: dict) -> None:
    """The nominal miss demand: it depends on the capacity and the workload, not on the
    mechanism, the reclaim or the host, so one line for all groups whose demand is the same
    (named by its groups only when the lines differ)."""
    lines: dict[tuple, list[str]] = {}
    for gid in sorted({r["group"] for r in m["rows"]}):
        nominal = {r["capacity_bytes"]: r["nominal_miss_gb_per_iteration"] for r in m["rows"]
                   if r["group"] == gid and r["nominal_miss_gb_per_iteration"] is not None}
        if nominal:
            lines.setdefault(tuple(sorted(nominal.items())), []).append(gid)
    for points, gids in lines.items():
        label = "nominal miss demand" + (f" {', '.join(gids)}" if len(lines) > 1 else "")
        ax.plot([c / 1e9 for c, _ in points], [v for _, v in points],
                "s--" if len(points) > 1 else "s", color=NOMINAL, mfc="none", label=label)


def _capacity_series(left: Axes, right: Axes, m: dict, key: tuple, rows: list[dict],
                     color: str, style: str) -> None:
    gid, mech, reclaim = key
    label = _series_label(m, gid, mech, reclaim)
    timed = [r for r in rows if r["median_s"] is not None]
    for r in rows:
        if r["median_s"] is None:
            _missing(left, r["capacity_bytes"] / 1e9)
        if r["device_gb_per_iteration"] is None:
            _missing(right, r["capacity_bytes"] / 1e9)
    if timed:
        xs = [r["capacity_bytes"] / 1e9 for r in timed]
        ys = [r["median_s"] for r in timed]
        spans = [(r["min_s"], r["max_s"]) for r in timed]
        _errorbar(left, xs, ys, spans, fmt=style, color=color, label=label)
        _n_labels(left, xs, ys, spans, [r["n_retained"] for r in timed], color)
        for r in timed:
            runs = r.get("iteration_s_runs") or []
            left.plot([r["capacity_bytes"] / 1e9] * len(runs), runs, "o", color=color,
                      alpha=.25, markersize=4)
    dev = [r for r in rows if r["device_gb_per_iteration"] is not None]
    if dev:
        xs = [r["capacity_bytes"] / 1e9 for r in dev]
        ys = [r["device_gb_per_iteration"] for r in dev]
        dspans = [span(r["device_gb_runs"]) for r in dev]
        _errorbar(right, xs, ys, dspans, fmt=style, color=color, label=label)
        _n_labels(right, xs, ys, dspans, [r["n_retained"] for r in dev], color)
        for r in dev:
            right.plot([r["capacity_bytes"] / 1e9] * len(r["device_gb_runs"]),
                       r["device_gb_runs"], "o", alpha=.25, color=color, markersize=4)


# Fig. 3 -----------------------------------------------------------------------------------

def _reclaim(m: dict) -> Figure:
    rows = m["rows"]
    fig, (dev_ax, time_ax) = new_figure(1, 2, figsize=(2 * _width(len(rows)) * 0.7, 5))
    xs = [float(i) for i in range(len(rows))]
    for ax, key in ((dev_ax, "device_gb_per_iteration"), (time_ax, "median_s")):
        for off, reclaim, color in ((-0.2, "mglru", ON), (0.2, "classic", OFF)):
            _bars(ax, [x + off for x in xs], [r.get(reclaim) for r in rows], key, 0.4, color,
                  f"MGLRU {'on' if reclaim == 'mglru' else 'off'}")
        ax.set_xticks(xs, _pair_labels(m, rows))
        ax.set_xlim(-0.7, len(rows) - 0.3)
    labelled = False
    for x, r in zip(xs, rows):
        nominal = [s["nominal_miss_gb_per_iteration"] for s in (r.get("mglru"),
                                                                 r.get("classic"))
                   if s and s.get("nominal_miss_gb_per_iteration") is not None]
        if nominal:
            dev_ax.hlines(nominal[0], x - 0.45, x + 0.45, colors=NOMINAL, linestyles=":",
                          label="_nominal" if labelled else "nominal miss demand")
            labelled = True
    dev_ax.set(ylabel="device reads (GB / iteration)",
               title="device traffic (MGLRU on left, off right)")
    time_ax.set(ylabel="iteration time (s)", title="seconds per iteration")
    for ax in (dev_ax, time_ax):
        _bar_axes_finish(ax)
    legend_below(fig, (dev_ax, time_ax))
    return fig


# Fig. 4 -----------------------------------------------------------------------------------

def _equal(m: dict) -> Figure:
    rows = m["rows"]
    modes = [k for k in m["modes"] if any(r.get(k) for r in rows)]
    fig, (time_ax, dev_ax) = new_figure(2, 1, figsize=(_width(len(rows) * len(modes) / 2), 7),
                                        sharex=True)
    w = 0.8 / max(len(modes), 1)
    xs = [float(i) for i in range(len(rows))]
    for ax, key in ((time_ax, "median_s"), (dev_ax, "device_gb_per_iteration")):
        for i, mode in enumerate(modes):
            _bars(ax, [x + (i - (len(modes) - 1) / 2) * w for x in xs],
                  [r.get(mode) for r in rows], key, w, f"C{i}", mode)
        _bar_axes_finish(ax)
    dev_ax.set_xticks(xs, _pair_labels(m, rows, extra=""))
    time_ax.set(ylabel="iteration time (s)")
    dev_ax.set(ylabel="device reads (GB / iteration)", xlabel="capacity C (the cgroup wall)")
    legend_below(fig, (time_ax, dev_ax), title="mode")
    return fig


# Fig. 6 -----------------------------------------------------------------------------------

def _prefetch(m: dict) -> Figure:
    rows = m["rows"]
    kinds = m.get("prefetch") or []
    fig, (ax,) = new_figure(figsize=(_width(len(rows) * len(kinds) / 2), 5))
    w = 0.8 / max(len(kinds), 1)
    xs = [float(i) for i in range(len(rows))]
    for i, k in enumerate(kinds):
        _bars(ax, [x + (i - (len(kinds) - 1) / 2) * w for x in xs], [r.get(k) for r in rows],
              "median_s", w, f"C{i}", k)
    labels = [_series_label(m, r["group"], readable_size(r["capacity_bytes"]),
                            r["mechanism"], r["reclaim"]) for r in rows]
    ax.set_xticks(xs, labels)
    ax.set(ylabel="iteration time (s)")
    _bar_axes_finish(ax)
    legend_below(fig, (ax,), title="prefetch")
    return fig


# §9 ---------------------------------------------------------------------------------------

def _admission(m: dict) -> Figure:
    rows = m["rows"]
    fig, (ax,) = new_figure(figsize=(_width(len(rows)), 5))
    xs = [float(i) for i in range(len(rows))]
    for off, mode, label, color in ((-0.2, "pagecache", "admitted (page cache)", ON),
                                    (0.2, "nocache", "bypassed (nocache)", OFF)):
        _bars(ax, [x + off for x in xs], [r.get(mode) for r in rows], "gb_per_s", 0.4, color,
              label)
    ax.set_xticks(xs, _pair_labels(m, rows))
    ax.set(ylabel="fixed set read rate (GB/s)")
    _bar_axes_finish(ax)
    top = ax.get_ylim()[1]
    ax.set_ylim(0, top * 1.15)       # a band above every bar and label for the ratios
    for x, r in zip(xs, rows):
        if r.get("admitted_over_bypassed"):
            ann = ax.annotate(f"{r['admitted_over_bypassed']:.2f}x admitted / bypassed",
                              (x, top * 1.07), ha="center", va="center", fontsize=8)
            ann.set_in_layout(False)
    legend_below(fig, (ax,))
    return fig


# Simulation figures (no host): data from bench.sim.figures ----------------------------------

SIM_TITLES = {"curves": "Fig. 1 hit rate against budget B: mean, min-max across domains",
              "off-domain": "Fig. 5 a static table off its domain, against LRU"}


def sim_figure(kind: str, rows: list[dict]) -> Figure:
    """Fig. 1 (`curves`: per policy the mean hit rate against budget, a min-max band across the
    domains, n in the label) or Fig. 5 (`off-domain`: static and LRU bars per trace); titled
    with the traces simulated (no host, no campaign)."""
    if not rows:
        raise InputError(f"no rows for the {kind} figure")
    if kind not in SIM_TITLES:
        raise InputError(f"no figure for the {kind!r} view", hint="figures: curves, off-domain")
    with figstyle.styled():
        fig = _sim_curves(rows) if kind == "curves" else _sim_off_domain(rows)
        figstyle.title(fig, SIM_TITLES[kind], sim_context(kind, rows))
        return figstyle.finish(fig)


def draw_sim(kind: str, rows: list[dict], out: Path) -> list[Path]:
    """`sim_figure` written to the files OUT names (figstyle.outputs); returns them."""
    files = figstyle.outputs(out)
    fig = sim_figure(kind, rows)
    for f in files:
        figstyle.save(fig, f)
    return files


def sim_context(kind: str, rows: list[dict]) -> list[str]:
    """`simulated, no host · traces a.jsonl, b.jsonl · per-layer, window 0.6`."""
    if kind == "curves":
        traces = [shown(Path(str(t["trace"])).name)
                  for t in dict((p["trace"], p) for r in rows
                                for p in r.get("per_trace", [])).values()]
        how = f"{rows[0].get('regime', '')}, window {rows[0].get('window', '')}"
    else:
        traces = [shown(Path(str(r["trace"])).name) for r in rows]
        how = f"static trained on {traces[0]}"
    return ["simulated, no host",
            ("trace " if len(traces) == 1 else "traces ") + short_list(traces), how]


def _sim_curves(rows: list[dict]) -> Figure:
    fig, (ax,) = new_figure(figsize=(6.5, 4.8))
    for n, policy in enumerate(dict.fromkeys(r["policy"] for r in rows)):
        pts = sorted((r for r in rows if r["policy"] == policy), key=lambda r: r["budget"])
        xs = [r["budget"] for r in pts]
        counts = sorted({r["n"] for r in pts})
        label = f"{policy} (n={'/'.join(map(str, counts))} traces)"
        ax.plot(xs, [r["mean"] for r in pts], "o-", color=f"C{n % 10}", label=label)
        ax.fill_between(xs, [r["min"] for r in pts], [r["max"] for r in pts],
                        color=f"C{n % 10}", alpha=.2, linewidth=0)
    budgets = sorted({r["budget"] for r in rows})
    ax.set(xlabel="budget B (experts per layer)", ylabel="hit rate (fair window)", ylim=(0, 1))
    figstyle.log_axis(ax, "x", ticks=[float(b) for b in budgets],
                      labels=[str(b) for b in budgets])
    legend_below(fig, (ax,))
    return fig


def _sim_off_domain(rows: list[dict]) -> Figure:
    fig, (ax,) = new_figure(figsize=(max(6.0, 1.4 * len(rows) + 2), 4.8))
    xs = list(range(len(rows)))
    ax.bar([x - 0.2 for x in xs], [r["static"] for r in rows], 0.4, label="static table")
    ax.bar([x + 0.2 for x in xs], [r["lru"] for r in rows], 0.4, label="LRU")
    ax.set_xticks(xs, [f"{shown(Path(str(r['trace'])).name)}\n({r['domain']})" for r in rows])
    budgets = sorted({r["budget"] for r in rows})
    ax.set(ylabel="hit rate (fair window)", ylim=(0, 1),
           xlabel=f"scored trace (budget B={'/'.join(map(str, budgets))})")
    legend_below(fig, (ax,))
    return fig
