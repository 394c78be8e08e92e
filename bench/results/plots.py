"""Figures from matrix results (matplotlib, Agg backend): capacity response with every run and
the a/C reference (Fig. 2), reclaim pairs MGLRU on/off (Fig. 3), equal memory (Fig. 4)."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt

from bench.errors import InputError
from bench.judge.stats import a_over_c
from bench.units import format_size


def draw(kind: str, m: dict, out: Path) -> None:
    matplotlib.use("Agg")
    if not m["rows"]:
        raise InputError(f"no retained runs for the {kind} plot")
    fig = {"capacity": _capacity, "reclaim": _reclaim, "equal-memory": _equal}[kind](plt, m)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


def _capacity(plt, m):
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for reclaim in sorted({r["reclaim"] for r in m["rows"]}):
        rows = sorted((r for r in m["rows"] if r["reclaim"] == reclaim),
                      key=lambda r: r["capacity_bytes"])
        gb = [r["capacity_bytes"] / 1e9 for r in rows]
        left.plot(gb, [r["median_s"] for r in rows], "o-", label=f"median ({reclaim})")
        for r in rows:
            left.plot([r["capacity_bytes"] / 1e9] * 2, [r["min_s"], r["max_s"]], "k-", alpha=.3)
            right.plot([r["capacity_bytes"] / 1e9] * len(r["device_gb_runs"]),
                       r["device_gb_runs"], "o", alpha=.3, color="C0")
        right.plot(gb, [r["device_gb_per_iteration"] for r in rows], "o-", label="device")
        if any(r["nominal_miss_gb_per_iteration"] for r in rows):
            right.plot(gb, [r["nominal_miss_gb_per_iteration"] for r in rows], "s--",
                       label="nominal miss")
        ref = a_over_c([(r["capacity_bytes"], r["device_gb_per_iteration"]) for r in rows])
        right.plot(gb, [ref[r["capacity_bytes"]][0] for r in rows], ":", label="a/C")
    left.set(xlabel="capacity C (GB)", ylabel="s / iteration", title="iteration time")
    right.set(xlabel="capacity C (GB)", ylabel="GB / iteration", xscale="log", yscale="log",
              title="device traffic")
    left.legend()
    right.legend()
    return fig


def _reclaim(plt, m):
    fig, ax = plt.subplots(figsize=(8, 4))
    labels = [f"{format_size(r['capacity_bytes'])} {r['mechanism']}" for r in m["rows"]]
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
    labels = [format_size(r["capacity_bytes"]) for r in m["rows"]]
    w = 0.8 / max(len(modes), 1)
    for i, k in enumerate(modes):
        ax.bar([x + i * w for x in range(len(labels))],
               [(r.get(k) or {}).get("median_s") or 0 for r in m["rows"]], w, label=k)
    ax.set_xticks([x + 0.4 - w / 2 for x in range(len(labels))], labels)
    ax.set(ylabel="s / iteration", title="equal memory under the cgroup wall")
    ax.legend()
    return fig
