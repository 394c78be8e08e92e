"""The figures' plotted data, read back from matplotlib's artists (never image bytes), over
matrix results of a real store filled with bundles from tests/support/bundlegen: every point
and bar carries its n and a min..max error bar equal to the runs' span, one series per group
and mechanism (the ample `none` point never joined to a balloon sweep), a cell with no
retained run is marked missing instead of drawn as zero, sizes read in decimal units, and a
legend names only series that were drawn.

Over a night shaped like the demo's (`night`): a zero device traffic is drawn at zero, log
axes read in plain numbers, every legend entry drew something, no n label covers data or
another label, each figure is titled with its campaign, host group and workload, and the
files are SVG and PNG, the same bytes each time."""

from __future__ import annotations

import re

import matplotlib
import numpy as np
import pytest
from matplotlib.collections import LineCollection
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.lines import Line2D
from matplotlib.path import Path as MPath

from bench.cli import main
from bench.results import figstyle, plots
from bench.store import queries
from bench.store.ingest import ingest_bundle
from tests.support.bundlegen import ensure_campaigns

matplotlib.use("Agg")


def put(store, bundles, rid, cell, *, host="fixture-a", rep=0, speed=1.0, seed=0,
        campaign="c1", nominal=2e7, edit=None):
    ensure_campaigns(store, campaign)
    return ingest_bundle(store, bundles(rid, cell, edit=edit, host=host, campaign=campaign,
                                        repetition=rep, position=seed, speed=speed,
                                        seed=seed),
                         nominal_miss_bytes=nominal)


@pytest.fixture
def filled(store, bundles):
    """A balloon sweep with two runs per point, the ample point, a reclaim pair with its
    classic half missing, and equal-memory modes at one wall."""
    seed = 0
    for cell, speed in (("64Mi-balloon-mglru", 1.6), ("128Mi-balloon-mglru", 1.2),
                        ("64Mi-balloon-classic", 1.3), ("128Mi-balloon-classic", 1.1),
                        ("64Mi-cgroup-mglru", 1.1), ("64Mi-cgroup-mglru-pinned", 0.8)):
        for rep in range(2):
            put(store, bundles, f"{cell}-{rep}", cell, rep=rep, speed=speed * (1 + rep / 10),
                seed=seed)
            seed += 1
    put(store, bundles, "ample", "192Mi-none-mglru", speed=0.9, seed=seed)
    return store


def _errorbars(ax):
    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def _bar_heights(ax):
    return {round(p.get_x() + p.get_width() / 2, 6): p.get_height()
            for c in ax.containers if isinstance(c, BarContainer) for p in c.patches}


def _spans(container):
    """(x, low, high) of each error bar's vertical segment."""
    segs = container.lines[2][0].get_segments()
    return [(s[0][0], min(s[0][1], s[1][1]), max(s[0][1], s[1][1])) for s in segs]


def _texts(ax, prefix):
    return [t for t in ax.texts if t.get_text().startswith(prefix)]


def test_capacity_points_carry_n_spans_and_no_line_across_mechanisms(filled):
    m = queries.matrix(filled, "capacity")
    fig = plots.figure("capacity", m)
    left, right = fig.axes
    bars = {c.get_label(): c for c in _errorbars(left)}
    assert set(bars) == {"balloon mglru", "balloon classic", "none mglru"}
    sweep = bars["balloon mglru"]
    line = sweep.lines[0]
    assert line.get_linestyle() == "-" and bars["none mglru"].lines[0].get_linestyle() \
        == "None"
    rows = sorted((r for r in m["rows"] if (r["mechanism"], r["reclaim"])
                   == ("balloon", "mglru")), key=lambda r: r["capacity_bytes"])
    assert list(line.get_xdata()) == [r["capacity_bytes"] / 1e9 for r in rows]
    assert list(line.get_ydata()) == [r["median_s"] for r in rows]
    for (x, lo, hi), r in zip(_spans(sweep), rows):
        assert x == r["capacity_bytes"] / 1e9
        assert (lo, hi) == pytest.approx((r["min_s"], r["max_s"]))
        assert r["n_retained"] == 2 and r["min_s"] < r["max_s"]
    assert sorted(t.get_text() for t in _texts(left, "n=")) == ["n=1"] + ["n=2"] * 4
    dev = {c.get_label(): c for c in _errorbars(right)}["balloon mglru"]
    for (_x, lo, hi), r in zip(_spans(dev), rows):
        assert (lo, hi) == pytest.approx((min(r["device_gb_runs"]),
                                          max(r["device_gb_runs"])))
    ticks = [t.get_text() for t in left.get_xticklabels()]
    assert ticks == ["67.1 MB", "134 MB", "201 MB"]


def test_reclaim_pairs_mark_the_missing_half_and_draw_both_panels(filled):
    m = queries.matrix(filled, "reclaim")
    rows = m["rows"]
    cgroup = next(i for i, r in enumerate(rows) if r["mechanism"] == "cgroup")
    assert rows[cgroup].get("classic") is None          # only MGLRU on was run there
    fig = plots.figure("reclaim", m)
    dev_ax, time_ax = fig.axes
    for ax, key in ((dev_ax, "device_gb_per_iteration"), (time_ax, "median_s")):
        heights = _bar_heights(ax)
        for i, r in enumerate(rows):
            for off, reclaim in ((-0.2, "mglru"), (0.2, "classic")):
                s = r.get(reclaim)
                x = round(i + off, 6)
                if s is None:
                    assert x not in heights
                else:
                    assert heights[x] == pytest.approx(s[key])
        missing = [t for t in ax.texts if t.get_text() == plots.MISSING]
        want = sorted(round(i + off, 6) for i, r in enumerate(rows)
                      for off, reclaim in ((-0.2, "mglru"), (0.2, "classic"))
                      if r.get(reclaim) is None)
        assert sorted(round(t.xy[0], 6) for t in missing) == want
        assert round(cgroup + 0.2, 6) in want
        assert sorted(ax.get_legend_handles_labels()[1])[:2] == ["MGLRU off", "MGLRU on"]
    assert time_ax.get_ylabel() == "iteration time (s)"
    assert dev_ax.get_ylabel() == "device reads (GB / iteration)"
    labels = [t.get_text() for t in dev_ax.get_xticklabels()]
    assert labels == [plots.readable_size(r["capacity_bytes"]) + "\n" + r["mechanism"]
                      for r in rows]


def test_equal_memory_has_time_and_device_panels_with_missing_modes(filled):
    m = queries.matrix(filled, "equal-memory")
    fig = plots.figure("equal-memory", m)
    time_ax, dev_ax = fig.axes
    for ax in (time_ax, dev_ax):
        labels = ax.get_legend_handles_labels()[1]
        assert labels == ["pagecache", "pinned"]
        assert len(_texts(ax, "n=")) == 2
    row = m["rows"][0]
    heights = sorted(_bar_heights(time_ax).values())
    assert heights == pytest.approx(sorted([row["pagecache"]["median_s"],
                                            row["pinned"]["median_s"]]))
    assert heights[0] > 0


@pytest.mark.parametrize("n,text", [(199229440, "199 MB"), (64e9, "64 GB"), (448e9, "448 GB"),
                                    (62.5e6, "62.5 MB"), (1.5e12, "1.5 TB"), (512, "512 B")])
def test_readable_size(n, text):
    assert plots.readable_size(n) == text


@pytest.mark.parametrize("suffix", [".svg", ".pdf", ".png"])
def test_every_kind_writes_vector_and_raster(filled, tmp_path, suffix):
    for kind in ("capacity", "reclaim", "equal-memory"):
        out = tmp_path / f"{kind}{suffix}"
        plots.draw(kind, queries.matrix(filled, kind), out)
        head = out.read_bytes()[:64]
        assert {".svg": b"<?xml", ".pdf": b"%PDF", ".png": b"\x89PNG"}[suffix] in head


def test_prefetch_conditions_side_by_side(store, bundles):
    seed = 0
    for cell, speed in (("64Mi-cgroup-mglru", 1.0), ("64Mi-cgroup-mglru-oracle-advice", 0.9),
                        ("64Mi-cgroup-mglru-oracle-block", 1.05)):
        for rep in range(2):
            put(store, bundles, f"{cell}-{rep}", cell, rep=rep, speed=speed, seed=seed)
            seed += 1
    m = queries.matrix(store, "prefetch")
    fig = plots.figure("prefetch", m)
    (ax,) = fig.axes
    assert ax.get_legend_handles_labels()[1] == m["prefetch"]
    assert m["prefetch"][0] == "none" and len(m["prefetch"]) == 3
    heights = sorted(_bar_heights(ax).values())
    row = m["rows"][0]
    assert heights == pytest.approx(sorted(row[k]["median_s"] for k in m["prefetch"]))
    assert [t.get_text() for t in _texts(ax, "n=")] == ["n=2"] * 3


def test_admission_bars_are_the_rates_with_the_ratio(store, bundles):
    seed = 0
    for cell, speed in (("192Mi-none-mglru", 1.0), ("192Mi-none-mglru-nocache", 4.0)):
        for rep in range(2):
            put(store, bundles, f"{cell}-{rep}", cell, rep=rep, speed=speed * (1 + rep / 10),
                seed=seed)
            seed += 1
    m = queries.matrix(store, "admission")
    fig = plots.figure("admission", m)
    (ax,) = fig.axes
    (row,) = m["rows"]
    heights = _bar_heights(ax)
    assert heights[-0.2] == pytest.approx(row["pagecache"]["gb_per_s"])
    assert heights[0.2] == pytest.approx(row["nocache"]["gb_per_s"])
    spans = [s for c in _errorbars(ax) for s in _spans(c)]
    got = sorted(v for _x, lo, hi in spans for v in (lo, hi))
    want = sorted(row[k][f"gb_per_s_{e}"] for k in ("pagecache", "nocache")
                  for e in ("min", "max"))
    assert got == pytest.approx(want)
    assert any(t.get_text().startswith(f"{row['admitted_over_bypassed']:.2f}x ")
               for t in ax.texts)


# a night shaped like the demo's ---------------------------------------------------------------

NIGHT = "night-1"
KINDS = ("capacity", "reclaim", "equal-memory")


def _no_device_reads(parts):
    """The capacity holds the whole pool: the measured passes read nothing from the pool's
    device (its diskstats sectors unchanged across each pass)."""
    snaps = parts["snapshots"]
    for p in ("pass0", "pass1"):
        snaps[f"{p}-end"]["proc_diskstats"] = snaps[f"{p}-start"]["proc_diskstats"]


@pytest.fixture
def night(store, bundles):
    """Campaign night-1 on host lab-a: a balloon sweep, MGLRU on and off, whose largest
    capacity holds the pool (device traffic and nominal miss demand 0: the point the log
    traffic panel dropped, and the a/C anchor that left the reference line empty); pairs
    measured once (n=1) whose traffic lies just under the nominal demand (where the n labels
    sat on the nominal line); equal-memory modes at one wall."""
    seed = 0
    for cell, speed, n, nominal, edit in (
            ("64Mi-balloon-mglru", 1.6, 2, 3.6e7, None),
            ("128Mi-balloon-mglru", 1.2, 2, 3.6e7, None),
            ("256Mi-balloon-mglru", 1.0, 2, 0.0, _no_device_reads),
            ("64Mi-balloon-classic", 1.3, 1, 3.6e7, None),
            ("128Mi-balloon-classic", 1.1, 1, 3.6e7, None),
            ("256Mi-balloon-classic", 1.0, 1, 0.0, _no_device_reads),
            ("64Mi-cgroup-mglru", 1.1, 1, 3.6e7, None),
            ("64Mi-cgroup-classic", 1.15, 1, 3.6e7, None),
            ("64Mi-cgroup-mglru-pinned", 0.8, 2, 3.6e7, None)):
        for rep in range(n):
            put(store, bundles, f"n1-{cell}-{rep}", cell, host="lab-a", rep=rep,
                speed=speed * (1 + rep / 10), seed=seed, campaign=NIGHT, nominal=nominal,
                edit=edit)
            seed += 1
    return store


def _night_figure(store, kind):
    m = queries.matrix(store, kind, campaign=NIGHT)
    return m, plots.figure(kind, m, queries.campaigns_in_scope(store, campaign=NIGHT))


def _display_points(artist, xy):
    """Display coordinates of the artist's points that its axes can place (finite)."""
    xy = np.asarray(xy, dtype=float).reshape(-1, 2)
    with np.errstate(all="ignore"):
        disp = artist.get_transform().transform(xy)
    return disp[np.isfinite(disp).all(axis=1)]


def _series(ax, label_end):
    return next(c for c in _errorbars(ax) if c.get_label().endswith(label_end))


def test_zero_device_traffic_is_drawn_at_zero(night):
    """The 256 MB balloon points read 0 GB from the device: the log panel dropped them (and
    the line ran off the axis); they are drawn at 0 on a symlog axis with a 0 tick, and the
    nominal demand of 0 is drawn too."""
    m, fig = _night_figure(night, "capacity")
    right = fig.axes[1]
    zero = [r for r in m["rows"] if r["device_gb_per_iteration"] == 0]
    assert sorted((r["mechanism"], r["reclaim"], r["capacity_bytes"]) for r in zero) == \
        [("balloon", "classic", 268435456), ("balloon", "mglru", 268435456)]
    frame = right.get_window_extent()
    for r in zero:
        line = _series(right, f"balloon {r['reclaim']}").lines[0]
        x = r["capacity_bytes"] / 1e9
        assert dict(zip(line.get_xdata(), line.get_ydata()))[x] == 0
        (px, py), = _display_points(line, [(x, 0.0)])
        assert frame.x0 <= px <= frame.x1 and frame.y0 <= py <= frame.y1
    nominal = next(ln for ln in right.lines if ln.get_label() == "nominal miss demand")
    assert len(_display_points(nominal, nominal.get_xydata())) == len(nominal.get_xdata())
    assert 0.0 in list(nominal.get_ydata())
    assert "0" in [t.get_text() for t in right.get_yticklabels()]


_PLAIN = re.compile(r"^(0|[0-9]+(\.[0-9]+)?)( [kMGT]?B)?$")


def test_log_axes_read_in_plain_numbers(night):
    """Every tick label of the capacity figure is a plain number or a decimal size (no
    `2x10^1`, no mathtext); minor ticks carry no labels; the traffic axis, whose range spans
    less than a decade above its zero, still has at least three labelled ticks."""
    _m, fig = _night_figure(night, "capacity")
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            texts = [t.get_text() for t in axis.get_majorticklabels() if t.get_text()]
            assert texts and all(_PLAIN.match(t) for t in texts), texts
            assert [t.get_text() for t in axis.get_minorticklabels() if t.get_text()] == []
    assert len([t for t in fig.axes[1].get_yticklabels() if t.get_text()]) >= 3


def _draws(ax, handle) -> bool:
    """Whether a legend entry's artist put anything inside its axes."""
    if isinstance(handle, ErrorbarContainer):
        handle = handle.lines[0]
    if isinstance(handle, BarContainer):
        return len(handle.patches) > 0
    if isinstance(handle, Line2D):
        pts = _display_points(handle, handle.get_xydata())
    elif isinstance(handle, LineCollection):
        pts = np.concatenate([_display_points(handle, p.vertices) for p in handle.get_paths()]
                             or [np.empty((0, 2))])
    else:
        raise AssertionError(f"unexpected legend handle {handle!r}")
    f = ax.get_window_extent()
    inside = ((pts[:, 0] >= f.x0 - 1) & (pts[:, 0] <= f.x1 + 1) & (pts[:, 1] >= f.y0 - 1)
              & (pts[:, 1] <= f.y1 + 1))
    return bool(inside.any())


@pytest.mark.parametrize("kind", KINDS)
def test_every_legend_entry_draws_something(night, kind):
    """`a/C classic` had a legend entry and no line (its anchor read 0 GB, so the reference
    was 0 everywhere on a log axis): every entry now names an artist that drew inside its
    axes, and the panel says why a reference is missing."""
    _m, fig = _night_figure(night, kind)
    legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
    assert legends
    artists: dict[str, list] = {}
    for ax in fig.axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            artists.setdefault(lab, []).append((ax, h))
    for leg in legends:
        for t in leg.get_texts():
            assert any(_draws(ax, h) for ax, h in artists[t.get_text()]), t.get_text()
    if kind == "capacity":
        assert "no a/C line for classic, mglru: its largest C read 0 GB" in \
            fig.axes[1].get_title()


def _covers(box, ax, artist_box, renderer) -> list[str]:
    """What of the axes' data the box touches: line paths, markers, line collections (error
    bars, reference lines), bars."""
    hits = []
    for line in ax.lines:
        pts = _display_points(line, line.get_xydata())
        if line.get_linestyle() not in ("None", "") and len(pts) > 1 and \
                MPath(pts).intersects_bbox(box, filled=False):
            hits.append(f"line {line.get_label()}")
        if line.get_marker() not in ("None", "", None):
            r = renderer.points_to_pixels(line.get_markersize()) / 2
            if any(box.x0 - r <= x <= box.x1 + r and box.y0 - r <= y <= box.y1 + r
                   for x, y in pts):
                hits.append(f"marker {line.get_label()}")
    for coll in ax.collections:
        if isinstance(coll, LineCollection):
            for p in coll.get_paths():
                pts = _display_points(coll, p.vertices)
                if len(pts) > 1 and MPath(pts).intersects_bbox(box, filled=False):
                    hits.append(f"segment {coll.get_label()}")
    hits += [f"bar {p}" for p in ax.patches if box.overlaps(artist_box(p))]
    return hits


@pytest.mark.parametrize("kind", KINDS)
def test_n_labels_never_sit_on_data(night, kind):
    """reclaim.png put `n=1` on the nominal-demand line and the capacity figure printed two
    series' labels on top of each other: every n label now covers no line, marker, error
    bar, reference line or bar, no other n label, and stays inside its axes."""
    _m, fig = _night_figure(night, kind)
    renderer = fig.canvas.get_renderer()
    n_labels = 0
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.texts
                 if t.get_text().startswith("n=")]
        frame = ax.get_window_extent(renderer)
        for i, box in enumerate(boxes):
            assert _covers(box, ax, lambda p: p.get_window_extent(renderer), renderer) == []
            assert not any(box.overlaps(other) for other in boxes[:i])
            assert frame.x0 <= box.x0 and box.x1 <= frame.x1
            assert frame.y0 <= box.y0 and box.y1 <= frame.y1
        n_labels += len(boxes)
    assert n_labels >= 4


@pytest.mark.parametrize("kind", KINDS)
def test_each_figure_names_campaign_host_and_workload(night, bundles, kind):
    """The title names the campaign, the host group and the workload in short forms, and
    every text fits inside the figure; two groups are named g1 and g2 with their hosts; a
    name holding `$` or an escape shows as typed (no mathtext, no control character)."""
    m, fig = _night_figure(night, kind)
    wl = m["groups"][0]["workload"]
    title = fig.get_suptitle()
    assert f"campaign {NIGHT}" in title and "host lab-a" in title
    assert f"workload prose.jsonl b1 ({wl['digest'][:8]})" in title
    renderer = fig.canvas.get_renderer()
    texts = [fig._suptitle, *(t for leg in fig.legends for t in leg.get_texts())]
    for ax in fig.axes:
        texts += [ax.title, ax.xaxis.label, ax.yaxis.label, *ax.texts,
                  *ax.get_xticklabels(), *ax.get_yticklabels()]
    fb = fig.bbox
    for t in texts:
        if t is not None and t.get_visible() and t.get_text():
            bb = t.get_window_extent(renderer)
            assert fb.x0 - 1 <= bb.x0 and bb.x1 <= fb.x1 + 1, t.get_text()
            assert fb.y0 - 1 <= bb.y0 and bb.y1 <= fb.y1 + 1, t.get_text()
    put(night, bundles, "n1-b", "64Mi-cgroup-mglru-pinned" if kind == "equal-memory"
        else "64Mi-balloon-mglru", host="lab-b", campaign=NIGHT, seed=99)
    m, fig = _night_figure(night, kind)
    assert "hosts g1 lab-a, g2 lab-b" in fig.get_suptitle()
    m["groups"][0]["host"] = "a$\\frac{b$\x1b[2J"
    title = plots.figure(kind, m, [NIGHT]).get_suptitle()
    assert "g1 a$\\frac{b$\\x1b[2J" in title


def test_files_are_svg_and_png_and_the_same_bytes_each_time(night, tmp_path):
    """`-o NAME` without a suffix writes NAME.svg and NAME.png; a figure drawn twice, or
    returned and saved by a caller (a report embedding the SVG), is the same bytes: no date,
    fixed SVG ids."""
    m = queries.matrix(night, "reclaim", campaign=NIGHT)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = plots.draw("reclaim", m, tmp_path / "a" / "reclaim", [NIGHT])
    b = plots.draw("reclaim", m, tmp_path / "b" / "reclaim", [NIGHT])
    assert [p.name for p in a] == ["reclaim.svg", "reclaim.png"]
    assert a[0].read_bytes()[:5] == b"<?xml" and a[1].read_bytes()[:4] == b"\x89PNG"
    for x, y in zip(a, b):
        assert x.read_bytes() == y.read_bytes(), x.name
    assert b"<dc:date>" not in a[0].read_bytes()
    fig = plots.figure("reclaim", m, [NIGHT])
    figstyle.save(fig, tmp_path / "a" / "caller.svg")
    assert (tmp_path / "a" / "caller.svg").read_bytes() == a[0].read_bytes()
    # written through a temporary file beside it, none left behind
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == \
        ["caller.svg", "reclaim.png", "reclaim.svg"]


def test_plot_cli_writes_both_files_and_names_them(night, db_url, tmp_path, capsys):
    out = tmp_path / "capacity"
    assert main(["plot", "capacity", "-o", str(out), "--campaign", NIGHT,
                 "--db", db_url]) == 0
    err = capsys.readouterr().err
    assert f"wrote {out}.svg, {out}.png" in " ".join(err.split())
    assert (tmp_path / "capacity.svg").stat().st_size > 0
    assert (tmp_path / "capacity.png").stat().st_size > 0
