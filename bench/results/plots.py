"""Figures from matrix results (matplotlib, Agg backend): capacity response with every run and
the a/C reference (Fig. 2), reclaim pairs MGLRU on/off (Fig. 3), equal memory (Fig. 4).

One series per result group (host, workload, fingerprint: bench.judge.identity) and one
mechanism per curve: a line never joins points of two groups or two mechanisms (a balloon
sweep and a cgroup point are two curves); labels name the group (its key is in the matrix's
`groups`, and in the legend's title)."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from bench.errors import InputError
from bench.judge.stats import a_over_c
from bench.plan.planfile import write_error
from bench.units import format_size


def image_format(out: Path) -> str:
    """The image format OUT's suffix names (none: png); InputError for one matplotlib cannot
    write."""
    fmt = out.suffix[1:].lower() or "png"
    formats = Figure().canvas.get_supported_filetypes()
    if fmt not in formats:
        raise InputError(f"-o {out}: matplotlib cannot write .{fmt} files",
                         hint="use one of " + ", ".join(f".{f}" for f in sorted(formats)))
    return fmt


def draw(kind: str, m: dict, out: Path) -> None:
    """Draw the figure into OUT (its directory must exist: never created); a failed write is
    an error naming OUT."""
    matplotlib.use("Agg")
    if not m["rows"]:
        raise InputError(f"no retained runs for the {kind} plot")
    fmt = image_format(out)
    fig = {"capacity": _capacity, "reclaim": _reclaim, "equal-memory": _equal}[kind](plt, m)
    fig.tight_layout()
    try:
        fig.savefig(out, dpi=120, format=fmt)
    except OSError as exc:
        raise write_error(out, exc) from None
    finally:
        plt.close(fig)


def _hosts(m: dict) -> dict[str, str]:
    return {g["id"]: g["host"] for g in m.get("groups", [])}


def _series_label(m: dict, gid: str, *parts: str) -> str:
    """`g1 host-a balloon mglru`, the group and host only when the figure has several groups."""
    head = [gid, _hosts(m).get(gid, "")] if len(m.get("groups", [])) > 1 else []
    return " ".join(p for p in [*head, *parts] if p)


def _capacity(plt, m):
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    series = sorted({(r["group"], r["reclaim"], r["mechanism"]) for r in m["rows"]})
    for n, (gid, reclaim, mech) in enumerate(series):
        rows = sorted((r for r in m["rows"]
                       if (r["group"], r["reclaim"], r["mechanism"]) == (gid, reclaim, mech)),
                      key=lambda r: r["capacity_bytes"])
        color = f"C{n % 10}"
        label = _series_label(m, gid, mech, reclaim)
        gb = [r["capacity_bytes"] / 1e9 for r in rows]
        left.plot(gb, [r["median_s"] for r in rows], "o-", color=color, label=f"median {label}")
        for r in rows:
            left.plot([r["capacity_bytes"] / 1e9] * 2, [r["min_s"], r["max_s"]], "-",
                      color=color, alpha=.3)
            right.plot([r["capacity_bytes"] / 1e9] * len(r["device_gb_runs"]),
                       r["device_gb_runs"], "o", alpha=.3, color=color)
        right.plot(gb, [r["device_gb_per_iteration"] for r in rows], "o-", color=color,
                   label=f"device {label}")
        if any(r["nominal_miss_gb_per_iteration"] for r in rows):
            right.plot(gb, [r["nominal_miss_gb_per_iteration"] for r in rows], "s--",
                       color=color, label=f"nominal miss {label}")
    for gid, reclaim in sorted({(r["group"], r["reclaim"]) for r in m["rows"]}):
        # the a/C reference of one group and reclaim, anchored at its largest capacity as the
        # table's a/C column is: a reference line, not a measured curve
        rows = sorted((r for r in m["rows"] if (r["group"], r["reclaim"]) == (gid, reclaim)),
                      key=lambda r: r["capacity_bytes"])
        ref = a_over_c([(r["capacity_bytes"], r["device_gb_per_iteration"]) for r in rows])
        caps = sorted(ref)
        right.plot([c / 1e9 for c in caps], [ref[c][0] for c in caps], ":", color="gray",
                   label=f"a/C {_series_label(m, gid, reclaim)}")
    left.set(xlabel="capacity C (GB)", ylabel="s / iteration", title="iteration time")
    right.set(xlabel="capacity C (GB)", ylabel="GB / iteration", xscale="log", yscale="log",
              title="device traffic")
    left.legend(fontsize="small")
    right.legend(fontsize="small")
    return fig


def _reclaim(plt, m):
    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [_series_label(m, r["group"], format_size(r["capacity_bytes"]), r["mechanism"])
              for r in m["rows"]]
    xs = range(len(labels))
    for off, key in ((-0.2, "mglru"), (0.2, "classic")):
        ax.bar([x + off for x in xs], [(r.get(key) or {}).get("device_gb_per_iteration") or 0
                                       for r in m["rows"]], 0.4,
               label=f"MGLRU {'on' if key == 'mglru' else 'off'}")
    ax.set_xticks(list(xs), labels)
    ax.set(ylabel="device GB / iteration", title="reclaim: MGLRU on (left) vs off (right)")
    ax.legend()
    return fig


def _equal(plt, m):
    fig, ax = plt.subplots(figsize=(8, 4))
    modes = [k for k in m["modes"] if any(r.get(k) for r in m["rows"])]
    labels = [_series_label(m, r["group"], format_size(r["capacity_bytes"]))
              for r in m["rows"]]
    w = 0.8 / max(len(modes), 1)
    for i, k in enumerate(modes):
        ax.bar([x + i * w for x in range(len(labels))],
               [(r.get(k) or {}).get("median_s") or 0 for r in m["rows"]], w, label=k)
    ax.set_xticks([x + 0.4 - w / 2 for x in range(len(labels))], labels)
    ax.set(ylabel="s / iteration", title="equal memory under the cgroup wall")
    ax.legend()
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
