"""The one style of every bench figure (bench.results.plots: the matrix figures and the
simulation figures): fonts, grid, legend place, readable axes, n labels that never sit on data,
the title that names campaign, host group and workload, and reproducible files.

A figure is built inside `styled()` on a `new_figure()` (an Agg canvas of its own, no pyplot
state, so nothing leaks between figures and a caller never has to close one) and ended with
`finish()`, which lays it out once, places the n labels where they cover no data and freezes
the layout: the returned Figure saves to SVG or PNG (`save`) with the same geometry. SVG is
deterministic (a fixed svg.hashsalt, no date), so a report embedding it is reproducible.

Axes: a log axis is labelled in plain numbers (8, 16, 32; 0.02, 0.05) at chosen ticks with no
minor tick labels, never `2x10^1`; an axis that must show a zero is symlog (linear from 0 up to
the first decade below the smallest positive value), so a zero is drawn at 0, not dropped."""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

import matplotlib
import numpy as np
from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.path import Path as MPath
from matplotlib.text import Annotation, Text
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator
from matplotlib.transforms import Bbox
from matplotlib.typing import RcKeyType

from bench.errors import InputError
from bench.paths import write_replacing
from bench.plan.planfile import write_error

RASTER_DPI = 200
# What `-o NAME` writes when NAME has no image suffix: the vector file a report embeds and the
# raster one a slide or chat takes.
DEFAULT_FORMATS = ("svg", "png")
TITLE_SIZE = 10
RC: dict[RcKeyType, Any] = {
    "font.size": 9, "axes.titlesize": 10, "axes.labelsize": 9, "figure.titlesize": TITLE_SIZE,
    "legend.fontsize": 8, "xtick.labelsize": 8, "ytick.labelsize": 8,
    "axes.grid": True, "axes.grid.axis": "y", "grid.alpha": 0.3, "grid.linewidth": 0.6,
    "axes.spines.top": False, "axes.spines.right": False,
    "legend.frameon": False, "errorbar.capsize": 3, "lines.markersize": 5,
    # names a host or bundle supplied may hold `$`: never parsed as mathtext
    "axes.formatter.use_mathtext": False, "text.usetex": False, "text.parse_math": False,
    "savefig.dpi": RASTER_DPI, "svg.fonttype": "path",
    # the ids of an SVG's clip paths and glyphs hash a random salt unless one is fixed
    "svg.hashsalt": "bench-figure",
}
# no timestamps in the files: the same figure is the same bytes
METADATA = {"svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None},
            "png": {}}
N_FONTSIZE = 7


@contextmanager
def styled() -> Iterator[None]:
    """Every figure is built and saved inside this (rc values are read when an artist is made
    and, for SVG ids, when it is written)."""
    with matplotlib.rc_context(RC):
        yield


def new_figure(nrows: int = 1, ncols: int = 1, *, figsize: tuple[float, float],
               sharex: bool = False) -> tuple[Figure, list[Axes]]:
    """A figure with a constrained layout on an Agg canvas of its own, and its axes in order."""
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(nrows, ncols, sharex=sharex, squeeze=False)
    return fig, [ax for row in axes for ax in row]


# text ---------------------------------------------------------------------------------------

def shown(text: object) -> str:
    """A name a host, bundle or file supplied, as a figure shows it: characters that do not
    print as escapes (`\\x1b`, `\\u202e`); `$` stays itself because `finish` turns mathtext off."""
    return "".join(c if c.isprintable() else
                   (f"\\x{ord(c):02x}" if ord(c) < 0x100 else f"\\u{ord(c):04x}")
                   for c in str(text))


def short_list(items: Sequence[str], most: int = 3) -> str:
    """`a, b, c` or `a, b, c +4 more`."""
    head = ", ".join(items[:most])
    return head + (f" +{len(items) - most} more" if len(items) > most else "")


def title(fig: Figure, what: str, context: Sequence[str]) -> None:
    """The figure's title: what it shows, then what it was measured on (`context`'s parts
    joined by ` · `, broken between parts so no line is wider than the figure)."""
    size = TITLE_SIZE
    # an average glyph of DejaVu Sans is about 0.6 em wide
    width = max(20, int(fig.get_figwidth() * 72 / (size * 0.6)) - 4)
    lines: list[str] = [what]
    line = ""
    for part in context:
        joined = f"{line} · {part}" if line else part
        if line and len(joined) > width:
            lines.append(line)
            joined = part
        line = joined
    lines.append(line)
    fig.suptitle("\n".join(lines), fontsize=size)


def plain(v: float) -> str:
    """A tick value as a reader writes it: 32, 0.05, 1500, 0.00002 (never 3x10^1)."""
    if v == 0:
        return "0"
    text = f"{v:.4g}"
    if "e" in text:
        text = np.format_float_positional(float(text), trim="-")
    return text


# axes ---------------------------------------------------------------------------------------

def log_ticks(lo: float, hi: float, most: int = 8) -> list[float]:
    """Tick values inside [lo, hi] (lo > 0) for a log axis: decades, else 1-2-5, else 1..9 per
    decade, else evenly spaced round values; at least two where the range allows."""
    if lo <= 0 or hi <= lo:
        return [v for v in (lo, hi) if v > 0][:1]
    e0, e1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
    for mant in ((1,), (1, 2, 5), (1, 2, 3, 5), tuple(range(1, 10))):
        ticks = [m * 10.0 ** e for e in range(e0, e1 + 1) for m in mant
                 if lo * (1 - 1e-9) <= m * 10.0 ** e <= hi * (1 + 1e-9)]
        if len(ticks) >= 3 or (len(ticks) >= 2 and mant == tuple(range(1, 10))):
            step = math.ceil(len(ticks) / most)
            return [float(f"{t:.6g}") for t in ticks[::step]]
    ticks = [t for t in MaxNLocator(4).tick_values(lo, hi) if lo <= t <= hi and t > 0]
    return [float(f"{t:.6g}") for t in ticks]


def _set_ticks(ax: Axes, axis: str, ticks: Sequence[float], labels: Sequence[str] | None):
    a = ax.xaxis if axis == "x" else ax.yaxis
    a.set_major_locator(FixedLocator(list(ticks)))
    named = dict(zip(ticks, labels or ()))
    a.set_major_formatter(FuncFormatter(lambda v, _pos: named.get(v, plain(v))))
    a.set_minor_locator(NullLocator())


def log_axis(ax: Axes, axis: str, *, ticks: Sequence[float] | None = None,
             labels: Sequence[str] | None = None, zero: bool = False) -> None:
    """A readable log axis: ticks at `ticks` (default: log_ticks over the view) labelled with
    `labels` or plain numbers, no minor tick labels. `zero`: the axis holds a zero value, so it
    is symlog (linear from 0 to the decade below its smallest positive tick or value, log
    above) with a tick at 0."""
    get_lim = ax.get_xlim if axis == "x" else ax.get_ylim
    set_lim = ax.set_xlim if axis == "x" else ax.set_ylim
    set_scale = ax.set_xscale if axis == "x" else ax.set_yscale
    data = _positive_data(ax, axis)
    if not zero:
        set_scale("log")
        lo, hi = get_lim()
        chosen = list(ticks) if ticks is not None else log_ticks(lo, hi)
        _set_ticks(ax, axis, chosen, labels)
        return
    smallest = min([*data, *(t for t in (ticks or ()) if t > 0)], default=1.0)
    linthresh = 10.0 ** math.floor(math.log10(smallest))
    set_scale("symlog", linthresh=linthresh, linscale=0.4)
    hi = max(data, default=linthresh * 10) * 1.6
    set_lim(-0.12 * linthresh, hi)
    chosen = [0.0, *(ticks if ticks is not None else log_ticks(linthresh, hi))]
    _set_ticks(ax, axis, chosen, None if labels is None else ["0", *labels])


def _positive_data(ax: Axes, axis: str) -> list[float]:
    i = 0 if axis == "x" else 1
    vals: list[float] = []
    for line in ax.lines:
        xy = np.asarray(line.get_xydata(), dtype=float)
        if xy.size:
            vals += [v for v in xy[:, i] if np.isfinite(v) and v > 0]
    for coll in ax.collections:
        for p in coll.get_paths():
            vals += [v for v in np.asarray(p.vertices, dtype=float)[:, i]
                     if np.isfinite(v) and v > 0]
    return vals


def legend_below(fig: Figure, axes: Sequence[Axes], ncol: int | None = None,
                 title: str | None = None) -> None:
    """One legend for the figure, under the axes, each label once, in the order drawn; only
    entries whose artist drew something (a line with a point inside its axes, a bar)."""
    seen: dict[str, Artist] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab and not lab.startswith("_") and lab not in seen and draws_something(h, ax):
                seen[lab] = h
    if seen:
        fig.legend(list(seen.values()), list(seen), loc="outside lower center",
                   ncol=ncol or min(len(seen), 3), title=title)


def draws_something(handle, ax: Axes) -> bool:
    """Whether a legend handle's artist put anything visible on `ax`: a line or marker with a
    finite point the axis scales can place, or a bar patch; an errorbar container by its data
    line."""
    lines = getattr(handle, "lines", None)
    if lines is not None:                       # ErrorbarContainer: (data line, caps, bars)
        handle = lines[0]
    patches = getattr(handle, "patches", None)
    if patches is not None:                     # BarContainer
        return len(patches) > 0
    if isinstance(handle, Line2D):
        xy = np.asarray(handle.get_xydata(), dtype=float)
        return bool(len(xy)) and bool(_placeable(ax, xy).any())
    if isinstance(handle, LineCollection):
        return any(len(np.asarray(p.vertices)) for p in handle.get_paths())
    return True


def _placeable(ax: Axes, xy: np.ndarray) -> np.ndarray:
    ok = np.isfinite(xy).all(axis=1)
    if ax.get_xscale() == "log":
        ok &= xy[:, 0] > 0
    if ax.get_yscale() == "log":
        ok &= xy[:, 1] > 0
    return ok


# n labels that never sit on data -------------------------------------------------------------

# each label's candidate places, best first: (anchor x, anchor y, offset points, ha, va)
_PLACES: WeakKeyDictionary[Annotation, list[tuple]] = WeakKeyDictionary()


def n_label(ax: Axes, x: float, y: float, lo: float, hi: float, text: str,
            **kw) -> Annotation:
    """A label (`n=3`) for the point or bar at (x, y) whose error bar spans lo..hi: `finish`
    puts it above the bar, else below, right or left of the point, else higher above, at the
    first place that covers no data, no other label and stays inside the axes."""
    ann = ax.annotate(text, (x, hi), xytext=(0, 4), textcoords="offset points", ha="center",
                      va="bottom", fontsize=N_FONTSIZE, **kw)
    ann.set_in_layout(False)
    _PLACES[ann] = ([(x, hi, (0, 4), "center", "bottom"), (x, lo, (0, -4), "center", "top"),
                     (x, y, (7, 0), "left", "center"), (x, y, (-7, 0), "right", "center")]
                    + [(x, hi, (0, 4 + 10 * k), "center", "bottom") for k in range(1, 7)]
                    + [(x, y, (7, 10 * k * s), "left", "center") for k in range(1, 4)
                       for s in (1, -1)])
    return ann


def finish(fig: Figure) -> Figure:
    """Lay the figure out once, move every n label to its first free place, turn mathtext off
    for every text (names a host supplied may hold `$`), and freeze the layout so the saved
    files keep this geometry."""
    for t in fig.findobj(Text):
        t.set_parse_math(False)
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()    # type: ignore[attr-defined]  # Agg's canvas
    for ax in fig.axes:
        labels = [t for t in ax.texts if isinstance(t, Annotation) and t in _PLACES]
        if not labels:
            continue
        data = obstacles(ax, renderer, exclude=labels)
        frame = ax.get_window_extent(renderer)
        placed: list[Bbox] = []
        for ann in labels:
            best = None
            for anchor_x, anchor_y, off, ha, va in _PLACES[ann]:
                ann.xy = (anchor_x, anchor_y)
                ann.set_position(off)
                ann.set_horizontalalignment(ha)
                ann.set_verticalalignment(va)
                box = ann.get_window_extent(renderer)
                hits = sum(hit(box, o) for o in data) + sum(box.overlaps(p) for p in placed)
                inside = frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1)
                score = hits + (0 if inside else 100)
                if best is None or score < best[0]:
                    best = (score, anchor_x, anchor_y, off, ha, va)
                if score == 0:
                    break
            assert best is not None
            _, anchor_x, anchor_y, off, ha, va = best
            ann.xy = (anchor_x, anchor_y)
            ann.set_position(off)
            ann.set_horizontalalignment(ha)
            ann.set_verticalalignment(va)
            placed.append(ann.get_window_extent(renderer))
    fig.set_layout_engine("none")
    return fig


def obstacles(ax: Axes, renderer, exclude: Iterable[Text] = ()) -> list:
    """What a label must not cover on `ax`, in display coordinates: each line's path (and its
    markers), each segment of a line collection (error bars, reference lines), each bar, each
    other text."""
    skip = set(map(id, exclude))
    out: list = []
    for line in ax.lines:
        if not line.get_visible():
            continue
        xy = np.asarray(line.get_xydata(), dtype=float)
        xy = xy[_placeable(ax, xy)]
        if not len(xy):
            continue
        pts = line.get_transform().transform(xy)
        if line.get_linestyle() not in ("None", "none", "", " ") and len(pts) > 1:
            out.append(MPath(pts))
        if line.get_marker() not in (None, "None", "none", "", " "):
            r = line.get_markersize() * renderer.points_to_pixels(1) / 2
            out += [Bbox([[x - r, y - r], [x + r, y + r]]) for x, y in pts]
    for coll in ax.collections:
        if isinstance(coll, LineCollection) and coll.get_visible():
            tr = coll.get_transform()
            for path in coll.get_paths():
                vertices = np.asarray(path.vertices, dtype=float)
                if len(vertices) > 1:
                    out.append(MPath(tr.transform(vertices)))
    for p in ax.patches:
        if isinstance(p, Rectangle) and p.get_visible():
            out.append(p.get_window_extent(renderer))
    out += [t.get_window_extent(renderer) for t in ax.texts
            if id(t) not in skip and t.get_visible() and t.get_text()]
    return out


def hit(box: Bbox, obstacle) -> bool:
    """Whether a label's box touches an obstacle (a path: any segment crossing or inside it;
    a box: overlap)."""
    if isinstance(obstacle, MPath):
        return bool(obstacle.intersects_bbox(box, filled=False))
    return bool(box.overlaps(obstacle))


# files --------------------------------------------------------------------------------------

def outputs(out: Path, option: str = "") -> list[Path]:
    """The files `-o OUT` names: OUT alone when its suffix is an image format, else OUT.svg
    and OUT.png; InputError (naming `option` and OUT) for a suffix matplotlib cannot write."""
    suffix = out.suffix[1:].lower()
    if not suffix:
        return [out.with_name(f"{out.name}.{fmt}") for fmt in DEFAULT_FORMATS]
    formats = FigureCanvasAgg(Figure()).get_supported_filetypes()
    if suffix not in formats:
        raise InputError(f"{option} {out}: matplotlib cannot write .{suffix} files".lstrip(),
                         hint="use one of " + ", ".join(f".{f}" for f in sorted(formats))
                              + ", or a name without a suffix for both .svg and .png")
    return [out]


def save(fig: Figure, out: Path) -> None:
    """Write `fig` to OUT in the format its suffix names, reproducibly (no dates, fixed SVG
    ids), through a temporary file beside it so a failed write leaves no partial file; a
    failed write is an error naming OUT."""
    fmt = out.suffix[1:].lower()

    def draw(f) -> None:
        with styled():
            fig.savefig(f, format=fmt, dpi=RASTER_DPI, metadata=METADATA.get(fmt))
    try:
        write_replacing(out, draw)
    except OSError as exc:
        raise write_error(out, exc) from None


def svg_text(fig: Figure, prefix: str) -> str:
    """`fig` as an <svg> element to inline in an HTML page: no XML prolog or doctype, and its
    ids (fixed by svg.hashsalt, so the same in every figure) prefixed with `prefix`, so that two
    figures on one page never share a clip path or glyph id."""
    import io
    import re
    buf = io.BytesIO()
    with styled():
        fig.savefig(buf, format="svg", metadata=METADATA["svg"])
    text = buf.getvalue().decode("utf-8")
    text = text[text.index("<svg"):]
    # the root's fixed width and height (pt) go: the page sizes it, its viewBox keeps the shape
    head, rest = text.split(">", 1)
    head = re.sub(r'\s(width|height)="[^"]*"', "", head)
    text = head + ">" + rest
    text = re.sub(r'\bid="([^"]+)"', rf'id="{prefix}\1"', text)
    text = re.sub(r"url\(#([^)]+)\)", rf"url(#{prefix}\1)", text)
    return re.sub(r'href="#([^"]+)"', rf'href="#{prefix}\1"', text)
