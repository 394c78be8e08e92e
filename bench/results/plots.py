"""Figures from matrix results (matplotlib, Agg backend), drawn as the paper draws them: the
capacity response (Fig. 2), reclaim pairs MGLRU on/off (Fig. 3), equal memory (Fig. 4),
prefetch conditions (Fig. 6) and cache admission (§9: GB/s admitted and bypassed).

What a reviewer needs from every figure: the paper's axes and decimal units; the number of
retained runs (n) next to every plotted point or bar; error bars spanning min..max of the
retained runs' values; one series per result group (host, workload, fingerprint:
bench.judge.identity) and per mechanism, so a line never joins two groups or two mechanisms
(the ample `none` point is a marker of its own); a cell with no retained run is marked
"missing" where its bar or point would be, never drawn as zero; sizes read as `199 MB`,
`64 GB`. The suffix of the output file picks the format: .svg and .pdf are vector output,
.png is rendered at 200 dpi."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from bench.errors import InputError
from bench.judge.stats import a_over_c, span
from bench.plan.planfile import write_error

RASTER_DPI = 200
MISSING = "missing"
ON, OFF = "C0", "C1"        # MGLRU on / off, as the paper's left and right bars


def image_format(out: Path) -> str:
    """The image format OUT's suffix names (none: png); InputError for one matplotlib cannot
    write."""
    fmt = out.suffix[1:].lower() or "png"
    formats = Figure().canvas.get_supported_filetypes()
    if fmt not in formats:
        raise InputError(f"-o {out}: matplotlib cannot write .{fmt} files",
                         hint="use one of " + ", ".join(f".{f}" for f in sorted(formats)))
    return fmt


KINDS = ("capacity", "reclaim", "equal-memory", "prefetch", "admission")


def figure(kind: str, m: dict) -> Figure:
    """The figure of one matrix result (bench.store.queries.matrix); the caller closes it."""
    matplotlib.use("Agg")
    if not m["rows"]:
        raise InputError(f"no retained runs for the {kind} plot",
                         hint="`bench runs` lists the stored runs; --host, --campaign and "
                              "--workload choose which are drawn")
    draw_fn = {"capacity": _capacity, "reclaim": _reclaim, "equal-memory": _equal,
               "prefetch": _prefetch, "admission": _admission}[kind]
    fig = draw_fn(m)
    fig.tight_layout()
    return fig


def draw(kind: str, m: dict, out: Path) -> None:
    """Draw the figure into OUT (its directory must exist: never created); a failed write is
    an error naming OUT."""
    fmt = image_format(out)
    fig = figure(kind, m)
    try:
        fig.savefig(out, dpi=RASTER_DPI, format=fmt)
    except OSError as exc:
        raise write_error(out, exc) from None
    finally:
        plt.close(fig)


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
    head = [gid, _hosts(m).get(gid, "")] if len(m.get("groups", [])) > 1 else []
    return " ".join(p for p in [*head, *parts] if p)


# drawing primitives -----------------------------------------------------------------------

def _errorbar(ax: Axes, xs: list[float], ys: list[float],
              spans: list[tuple[float, float] | None], **kw):
    """Points with min..max error bars (a point without a span gets none)."""
    lo = [y - s[0] if s else 0.0 for y, s in zip(ys, spans)]
    hi = [s[1] - y if s else 0.0 for y, s in zip(ys, spans)]
    return ax.errorbar(xs, ys, yerr=[lo, hi], capsize=3, **kw)


def _n_labels(ax: Axes, xs: Sequence[float], ys: Sequence[float], ns: Sequence[int]) -> None:
    for x, y, n in zip(xs, ys, ns):
        ax.annotate(f"n={n}", (x, y), xytext=(0, 5), textcoords="offset points",
                    ha="center", va="bottom", fontsize=7)


def _missing(ax: Axes, x: float) -> None:
    """A cell with no retained run: a gray cross on the axis and the word, never a zero."""
    ax.plot([x], [0.02], marker="x", color="gray", linestyle="none",
            transform=ax.get_xaxis_transform())
    ax.annotate(MISSING, (x, 0.04), xycoords=("data", "axes fraction"), rotation=90,
                ha="center", va="bottom", fontsize=7, color="gray")


def _bars(ax: Axes, xs: list[float], stats: list[dict | None], key: str, width: float,
          color: str, label: str) -> None:
    """One bar per measured cell (median of `key`) with its min..max error bar and n; a
    missing cell gets the missing mark. The label goes to the legend only when a bar exists."""
    got = [(x, s) for x, s in zip(xs, stats) if s and s.get(key) is not None]
    for x, s in zip(xs, stats):
        if not (s and s.get(key) is not None):
            _missing(ax, x)
    if not got:
        return
    bx = [x for x, _ in got]
    ys = [s[key] for _, s in got]
    ax.bar(bx, ys, width, color=color, label=label)
    _errorbar(ax, bx, ys, [_value_span(s, key) for _, s in got], fmt="none", ecolor="black",
              elinewidth=1)
    _n_labels(ax, bx, [_top(s, key) for _, s in got], [s["n_retained"] for _, s in got])


def _value_span(s: dict, key: str) -> tuple[float, float] | None:
    if key == "median_s":
        return (s["min_s"], s["max_s"]) if s.get("min_s") is not None else None
    if key == "device_gb_per_iteration":
        return span(s.get("device_gb_runs") or [])
    if key == "gb_per_s" and s.get("gb_per_s_min") is not None:
        return (s["gb_per_s_min"], s["gb_per_s_max"])
    return None


def _top(s: dict, key: str) -> float:
    rng = _value_span(s, key)
    return rng[1] if rng else s[key]


def _size_axis(ax: Axes, caps: Sequence[int]) -> None:
    """Ticks at the measured capacities, labelled in decimal units."""
    xs = sorted({c / 1e9 for c in caps})
    ax.set_xticks(xs, [readable_size(x * 1e9) for x in xs], rotation=30, ha="right")
    ax.minorticks_off()


def _pair_labels(m: dict, rows: list[dict], extra: str = "mechanism") -> list[str]:
    """One tick label per slot, a line each: the group and host (when several), the size,
    the mechanism."""
    several = len(m.get("groups", [])) > 1
    return ["\n".join(p for p in (f"{r['group']} {r.get('host', '')}".strip() if several
                                   else "", readable_size(r["capacity_bytes"]),
                                   r.get(extra, "") if extra else "") if p)
            for r in rows]


def _width(n_slots: float) -> float:
    return max(6.0, 1.2 * n_slots + 2.0)


def _bar_axes_finish(ax: Axes) -> None:
    """Room above the tallest bar for its n and a legend in one row, so neither hides a bar."""
    ax.set_ylim(0, max(ax.get_ylim()[1], 1e-12) * 1.45)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", loc="upper left", ncol=2)


# Fig. 2 -----------------------------------------------------------------------------------

def _capacity(m: dict) -> Figure:
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    series = sorted({(r["group"], r["mechanism"], r["reclaim"]) for r in m["rows"]})
    for n, key in enumerate(series):
        rows = sorted((r for r in m["rows"]
                       if (r["group"], r["mechanism"], r["reclaim"]) == key),
                      key=lambda r: r["capacity_bytes"])
        # a sweep is a curve; a mechanism with one point (the ample `none`) is a marker
        style = "o-" if len(rows) > 1 else "D"
        _capacity_series(left, right, m, key, rows, f"C{n % 10}", style)
    for gid, reclaim in sorted({(r["group"], r["reclaim"]) for r in m["rows"]}):
        # the a/C reference of one group and reclaim anchored at its largest capacity, as the
        # table's a/C column is: a reference line, not a measured curve
        rows = [r for r in m["rows"] if (r["group"], r["reclaim"]) == (gid, reclaim)]
        ref = a_over_c([(r["capacity_bytes"], r["device_gb_per_iteration"]) for r in rows])
        caps = sorted(ref)
        if len(caps) > 1:
            right.plot([c / 1e9 for c in caps], [ref[c][0] for c in caps], ":", color="gray",
                       label=f"a/C {_series_label(m, gid, reclaim)}")
    caps = [r["capacity_bytes"] for r in m["rows"]]
    left.set(xlabel="capacity C", ylabel="iteration time (s)", xscale="log",
             title="iteration time (median, min-max, every run)")
    right.set(xlabel="capacity C", ylabel="device reads (GB / iteration)", xscale="log",
              yscale="log", title="block-layer device traffic")
    for ax in (left, right):
        _size_axis(ax, caps)
        ax.legend(fontsize="small")
    return fig


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
        _errorbar(left, xs, ys, [(r["min_s"], r["max_s"]) for r in timed], fmt=style,
                  color=color, label=label)
        _n_labels(left, xs, [r["max_s"] for r in timed], [r["n_retained"] for r in timed])
        for r in timed:
            runs = r.get("iteration_s_runs") or []
            left.plot([r["capacity_bytes"] / 1e9] * len(runs), runs, "o", color=color,
                      alpha=.25, markersize=4)
    dev = [r for r in rows if r["device_gb_per_iteration"] is not None]
    if dev:
        xs = [r["capacity_bytes"] / 1e9 for r in dev]
        ys = [r["device_gb_per_iteration"] for r in dev]
        _errorbar(right, xs, ys, [span(r["device_gb_runs"]) for r in dev], fmt=style,
                  color=color, label=f"measured {label}")
        _n_labels(right, xs, [max(r["device_gb_runs"] or [r["device_gb_per_iteration"]])
                              for r in dev], [r["n_retained"] for r in dev])
        for r in dev:
            right.plot([r["capacity_bytes"] / 1e9] * len(r["device_gb_runs"]),
                       r["device_gb_runs"], "o", alpha=.25, color=color, markersize=4)
    nominal = [r for r in rows if r["nominal_miss_gb_per_iteration"]]
    if nominal:
        right.plot([r["capacity_bytes"] / 1e9 for r in nominal],
                   [r["nominal_miss_gb_per_iteration"] for r in nominal],
                   "s--" if len(nominal) > 1 else "s", color=color,
                   label=f"nominal miss {label}")


# Fig. 3 -----------------------------------------------------------------------------------

def _reclaim(m: dict) -> Figure:
    rows = m["rows"]
    fig, (dev_ax, time_ax) = plt.subplots(1, 2, figsize=(2 * _width(len(rows)) * 0.7, 4.5))
    xs = [float(i) for i in range(len(rows))]
    for ax, key in ((dev_ax, "device_gb_per_iteration"), (time_ax, "median_s")):
        for off, reclaim, color in ((-0.2, "mglru", ON), (0.2, "classic", OFF)):
            _bars(ax, [x + off for x in xs], [r.get(reclaim) for r in rows], key, 0.4, color,
                  f"MGLRU {'on' if reclaim == 'mglru' else 'off'}")
        ax.set_xticks(xs, _pair_labels(m, rows), fontsize=8)
        ax.set_xlim(-0.7, len(rows) - 0.3)
    for x, r in zip(xs, rows):
        nominal = [s["nominal_miss_gb_per_iteration"] for s in (r.get("mglru"),
                                                                 r.get("classic"))
                   if s and s.get("nominal_miss_gb_per_iteration")]
        if nominal:
            dev_ax.hlines(nominal[0], x - 0.45, x + 0.45, colors="black", linestyles=":",
                          label="nominal miss demand" if x == xs[0] else None)
    dev_ax.set(ylabel="device reads (GB / iteration)",
               title="device traffic (MGLRU on left, off right)")
    time_ax.set(ylabel="iteration time (s)", title="seconds per iteration")
    for ax in (dev_ax, time_ax):
        _bar_axes_finish(ax)
    return fig


# Fig. 4 -----------------------------------------------------------------------------------

def _equal(m: dict) -> Figure:
    rows = m["rows"]
    modes = [k for k in m["modes"] if any(r.get(k) for r in rows)]
    fig, (time_ax, dev_ax) = plt.subplots(2, 1, figsize=(_width(len(rows) * len(modes) / 2),
                                                         7), sharex=True)
    w = 0.8 / max(len(modes), 1)
    xs = [float(i) for i in range(len(rows))]
    for ax, key in ((time_ax, "median_s"), (dev_ax, "device_gb_per_iteration")):
        for i, mode in enumerate(modes):
            _bars(ax, [x + (i - (len(modes) - 1) / 2) * w for x in xs],
                  [r.get(mode) for r in rows], key, w, f"C{i}", mode)
        _bar_axes_finish(ax)
    dev_ax.set_xticks(xs, _pair_labels(m, rows, extra=""), fontsize=8)
    time_ax.set(ylabel="iteration time (s)", title="equal memory under one cgroup wall")
    dev_ax.set(ylabel="device reads (GB / iteration)", xlabel="capacity C")
    return fig


# Fig. 6 -----------------------------------------------------------------------------------

def _prefetch(m: dict) -> Figure:
    rows = m["rows"]
    kinds = m.get("prefetch") or []
    fig, ax = plt.subplots(figsize=(_width(len(rows) * len(kinds) / 2), 4.5))
    w = 0.8 / max(len(kinds), 1)
    xs = [float(i) for i in range(len(rows))]
    for i, k in enumerate(kinds):
        _bars(ax, [x + (i - (len(kinds) - 1) / 2) * w for x in xs], [r.get(k) for r in rows],
              "median_s", w, f"C{i}", k)
    labels = [_series_label(m, r["group"], readable_size(r["capacity_bytes"]),
                            r["mechanism"], r["reclaim"]) for r in rows]
    ax.set_xticks(xs, labels, fontsize=8)
    ax.set(ylabel="iteration time (s)", title="one bounded prefetch worker")
    _bar_axes_finish(ax)
    return fig


# §9 ---------------------------------------------------------------------------------------

def _admission(m: dict) -> Figure:
    rows = m["rows"]
    fig, ax = plt.subplots(figsize=(_width(len(rows)), 4.5))
    xs = [float(i) for i in range(len(rows))]
    for off, mode, label, color in ((-0.2, "pagecache", "admitted (page cache)", ON),
                                    (0.2, "nocache", "bypassed (nocache)", OFF)):
        _bars(ax, [x + off for x in xs], [r.get(mode) for r in rows], "gb_per_s", 0.4, color,
              label)
    for x, r in zip(xs, rows):
        if r.get("admitted_over_bypassed"):
            ax.annotate(f"{r['admitted_over_bypassed']:.2f}x", (x, 0.9),
                        xycoords=("data", "axes fraction"), ha="center", fontsize=9)
    ax.set_xticks(xs, _pair_labels(m, rows), fontsize=8)
    ax.set(ylabel="fixed set read rate (GB/s)", title="cache admission: the same fixed set")
    _bar_axes_finish(ax)
    return fig


# Simulation figures (no host): data from bench.sim.figures ----------------------------------

def sim_figure(kind: str, rows: list[dict]) -> Figure:
    """Fig. 1 (`curves`: per policy the mean hit rate against budget, a min-max band across the
    domains, n in the label) or Fig. 5 (`off-domain`: static and LRU bars per trace)."""
    matplotlib.use("Agg")
    if not rows:
        raise InputError(f"no rows for the {kind} figure")
    if kind == "curves":
        return _sim_curves(plt, rows)
    if kind == "off-domain":
        return _sim_off_domain(plt, rows)
    raise InputError(f"no figure for the {kind!r} view", hint="figures: curves, off-domain")


def draw_sim(kind: str, rows: list[dict], out: Path) -> None:
    """`sim_figure` written to OUT (format from its suffix; a failed write names OUT)."""
    fmt = image_format(out)
    fig = sim_figure(kind, rows)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=200, format=fmt)
    except OSError as exc:
        raise write_error(out, exc) from None
    finally:
        plt.close(fig)


def _sim_curves(plt, rows):
    fig, ax = plt.subplots(figsize=(6, 4))
    for n, policy in enumerate(dict.fromkeys(r["policy"] for r in rows)):
        pts = sorted((r for r in rows if r["policy"] == policy), key=lambda r: r["budget"])
        xs = [r["budget"] for r in pts]
        counts = sorted({r["n"] for r in pts})
        label = f"{policy} (n={'/'.join(map(str, counts))})"
        ax.plot(xs, [r["mean"] for r in pts], "o-", color=f"C{n % 10}", label=label)
        ax.fill_between(xs, [r["min"] for r in pts], [r["max"] for r in pts],
                        color=f"C{n % 10}", alpha=.2, linewidth=0)
    ax.set(xscale="log", xlabel="budget B (experts per layer)", ylabel="hit rate (fair window)",
           ylim=(0, 1), title="hit rate against budget: mean, min-max across domains")
    ax.set_xticks(sorted({r["budget"] for r in rows}),
                  [str(b) for b in sorted({r["budget"] for r in rows})])
    ax.legend(fontsize="small")
    return fig


def _sim_off_domain(plt, rows):
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r["static"] for r in rows], 0.4, label="static table")
    ax.bar([x + 0.2 for x in xs], [r["lru"] for r in rows], 0.4, label="LRU")
    ax.set_xticks(list(xs), [f"{Path(str(r['trace'])).name}\n({r['domain']})" for r in rows])
    budgets = sorted({r["budget"] for r in rows})
    ax.set(ylabel="hit rate (fair window)", ylim=(0, 1),
           title=f"static table off its domain vs LRU, B={'/'.join(map(str, budgets))}")
    ax.legend(fontsize="small")
    return fig
