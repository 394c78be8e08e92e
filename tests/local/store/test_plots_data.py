"""The figures' plotted data, read back from matplotlib's artists (never image bytes), over
matrix results of a real store filled with bundles from tests/support/bundlegen: every point
and bar carries its n and a min..max error bar equal to the runs' span, one series per group
and mechanism (the ample `none` point never joined to a balloon sweep), a cell with no
retained run is marked missing instead of drawn as zero, sizes read in decimal units, and a
legend names only series that were drawn."""

from __future__ import annotations

import matplotlib
import pytest
from matplotlib.container import BarContainer, ErrorbarContainer

from bench.results import plots
from bench.store import queries
from bench.store.ingest import ingest_bundle
from tests.support.bundlegen import ensure_campaigns

matplotlib.use("Agg")


def put(store, bundles, rid, cell, *, host="fixture-a", rep=0, speed=1.0, seed=0):
    ensure_campaigns(store, "c1")
    return ingest_bundle(store, bundles(rid, cell, host=host, campaign="c1", repetition=rep,
                                        position=seed, speed=speed, seed=seed),
                         nominal_miss_bytes=2e7)


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
    try:
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
        dev = {c.get_label(): c for c in _errorbars(right)}["measured balloon mglru"]
        for (_x, lo, hi), r in zip(_spans(dev), rows):
            assert (lo, hi) == pytest.approx((min(r["device_gb_runs"]),
                                              max(r["device_gb_runs"])))
        ticks = [t.get_text() for t in left.get_xticklabels()]
        assert ticks == ["67.1 MB", "134 MB", "201 MB"]
    finally:
        matplotlib.pyplot.close(fig)


def test_reclaim_pairs_mark_the_missing_half_and_draw_both_panels(filled):
    m = queries.matrix(filled, "reclaim")
    rows = m["rows"]
    cgroup = next(i for i, r in enumerate(rows) if r["mechanism"] == "cgroup")
    assert rows[cgroup].get("classic") is None          # only MGLRU on was run there
    fig = plots.figure("reclaim", m)
    try:
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
    finally:
        matplotlib.pyplot.close(fig)


def test_equal_memory_has_time_and_device_panels_with_missing_modes(filled):
    m = queries.matrix(filled, "equal-memory")
    fig = plots.figure("equal-memory", m)
    try:
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
    finally:
        matplotlib.pyplot.close(fig)


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
    try:
        (ax,) = fig.axes
        assert ax.get_legend_handles_labels()[1] == m["prefetch"]
        assert m["prefetch"][0] == "none" and len(m["prefetch"]) == 3
        heights = sorted(_bar_heights(ax).values())
        row = m["rows"][0]
        assert heights == pytest.approx(sorted(row[k]["median_s"] for k in m["prefetch"]))
        assert [t.get_text() for t in _texts(ax, "n=")] == ["n=2"] * 3
    finally:
        matplotlib.pyplot.close(fig)


def test_admission_bars_are_the_rates_with_the_ratio(store, bundles):
    seed = 0
    for cell, speed in (("192Mi-none-mglru", 1.0), ("192Mi-none-mglru-nocache", 4.0)):
        for rep in range(2):
            put(store, bundles, f"{cell}-{rep}", cell, rep=rep, speed=speed * (1 + rep / 10),
                seed=seed)
            seed += 1
    m = queries.matrix(store, "admission")
    fig = plots.figure("admission", m)
    try:
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
        assert f"{row['admitted_over_bypassed']:.2f}x" in [t.get_text() for t in ax.texts]
    finally:
        matplotlib.pyplot.close(fig)
