"""The simulation figures' data (bench.sim.figures: Fig. 1 curves, Fig. 5 off-domain, §3
regimes) against direct `simulate` calls, their `bench sim --view` output, and the plotted
artists' values (not image bytes)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench.cli import main
from bench.errors import InputError
from bench.sim.figures import fig1_curves, fig5_off_domain, regimes
from bench.sim.simulate import simulate
from bench.trace.parse import parse_lines
from bench.trace.synth import generate, preset

BUDGETS = (2, 4, 8)


def _lines(domain):
    return list(generate(preset("tiny", tokens=200, domain=domain, seed=3, drift=0.3,
                                phase=20.0, phase_set=4, order="score")))


@pytest.fixture(scope="module")
def traces():
    return [parse_lines(_lines(d), f"tiny-d{d}") for d in range(3)]


def test_fig1_rows_are_mean_min_max_of_the_per_trace_rates(traces):
    rows = fig1_curves(traces, ("lru", "static"), BUDGETS)
    assert [(r["policy"], r["budget"]) for r in rows] == [(p, b) for p in ("lru", "static")
                                                          for b in BUDGETS]
    for r in rows:
        rates = [next(x["hit_rate"] for x in simulate(t, (r["policy"],), budgets=(r["budget"],)))
                 for t in traces]
        assert r["n"] == 3
        assert r["mean"] == pytest.approx(np.mean(rates))
        assert (r["min"], r["max"]) == (min(rates), max(rates))
        assert [x["hit_rate"] for x in r["per_trace"]] == rates
    with pytest.raises(InputError):
        fig1_curves([], ("lru",), BUDGETS)


def test_fig5_own_row_uses_the_warm_window_and_off_rows_the_training_trace(traces):
    rows = fig5_off_domain(traces[0], traces[1:], 4)
    assert [(r["domain"], r["train"]) for r in rows] == [("own", "warm"), ("off", "tiny-d0"),
                                                         ("off", "tiny-d0")]
    off = {r["policy"]: r["hit_rate"] for r in
           simulate(traces[2], ("lru", "static"), budgets=(4,), train=traces[0])}
    assert (rows[2]["static"], rows[2]["lru"]) == (off["static"], off["lru"])
    with pytest.raises(InputError):
        fig5_off_domain(traces[0], [], 4)


def test_regimes_gap_is_global_minus_per_layer(traces):
    rows = regimes(traces[0], ("lru", "static"), BUDGETS)
    glo = {(r["policy"], r["budget"]): r["hit_rate"]
           for r in simulate(traces[0], ("lru", "static"), "global", BUDGETS)}
    for r in rows:
        assert r["global"] == glo[(r["policy"], r["budget"])]
        assert r["gap_pp"] == pytest.approx(100 * (r["global"] - r["per_layer"]))
        per = {x["policy"]: x["per_layer"] for x in rows if x["budget"] == r["budget"]}
        gl = {x["policy"]: x["global"] for x in rows if x["budget"] == r["budget"]}
        assert r["same_order"] == ((per["lru"] >= per["static"]) == (gl["lru"] >= gl["static"]))


def test_plotted_artists_carry_the_rows(traces):
    from matplotlib.collections import PolyCollection

    from bench.results.plots import sim_figure
    rows = fig1_curves(traces, ("lru", "static"), BUDGETS)
    ax = sim_figure("curves", rows).axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert set(lines) == {"lru (n=3 traces)", "static (n=3 traces)"}
    for policy in ("lru", "static"):
        pts = [r for r in rows if r["policy"] == policy]
        assert list(lines[f"{policy} (n=3 traces)"].get_xdata()) == list(BUDGETS)
        assert list(lines[f"{policy} (n=3 traces)"].get_ydata()) == [r["mean"] for r in pts]
    bands = [c for c in ax.collections if isinstance(c, PolyCollection)]
    assert len(bands) == 2
    ys = bands[0].get_paths()[0].vertices[:, 1]
    lru = [r for r in rows if r["policy"] == "lru"]
    assert min(ys) == pytest.approx(min(r["min"] for r in lru))
    assert max(ys) == pytest.approx(max(r["max"] for r in lru))
    off = fig5_off_domain(traces[0], traces[1:], 4)
    ax = sim_figure("off-domain", off).axes[0]
    heights = [p.get_height() for p in ax.patches]
    assert heights == [r["static"] for r in off] + [r["lru"] for r in off]
    with pytest.raises(InputError):
        sim_figure("regimes", rows)


def test_log_budget_axis_reads_as_the_budgets(traces):
    """`sim --plot` over budgets 8,16,32 labelled its log axis `2x10^1` and `3x10^1` (minor
    tick labels over 32): the axis now shows the budgets in plain numbers and nothing else,
    and the title names the traces simulated."""
    from bench.results.plots import sim_figure
    fig = sim_figure("curves", fig1_curves(traces, ("lru", "static"), (8, 16, 32)))
    (ax,) = fig.axes
    assert ax.get_xscale() == "log"
    major = [t.get_text() for t in ax.get_xticklabels() if t.get_visible()]
    minor = [t.get_text() for t in ax.xaxis.get_minorticklabels() if t.get_text()]
    assert major == ["8", "16", "32"] and minor == []
    for t in ax.get_yticklabels():
        assert t.get_text() == "" or float(t.get_text()) >= 0, t.get_text()
    title = fig.get_suptitle()
    assert "simulated, no host" in title and "tiny-d0, tiny-d1, tiny-d2" in title
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["lru (n=3 traces)",
                                                                  "static (n=3 traces)"]


def _write(tmp_path):
    paths = []
    for d in range(3):
        p = tmp_path / f"d{d}.jsonl"
        p.write_text("\n".join(_lines(d)) + "\n")
        paths.append(p)
    return paths


def test_cli_views_json_and_plot(tmp_path, capsys, traces):
    paths = _write(tmp_path)
    assert main(["sim", *map(str, paths), "--view", "curves", "--budgets", "2,4,8",
                 "--policy", "lru,static", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    want = fig1_curves(traces, ("lru", "static"), BUDGETS)
    assert [(r["n"], r["mean"], r["min"], r["max"]) for r in got] == \
        [(r["n"], r["mean"], r["min"], r["max"]) for r in want]
    out = tmp_path / "fig5.svg"
    assert main(["sim", *map(str, paths), "--view", "off-domain", "--budgets", "4",
                 "--plot", str(out)]) == 0
    std = capsys.readouterr()
    assert "Fig. 5" in std.out and out.stat().st_size > 0 and f"wrote {out}" in std.err
    # no suffix: both the SVG a report embeds and the PNG
    assert main(["sim", *map(str, paths), "--view", "curves", "--budgets", "2,4",
                 "--plot", str(tmp_path / "fig1")]) == 0
    assert (tmp_path / "fig1.svg").read_bytes()[:5] == b"<?xml"
    assert (tmp_path / "fig1.png").read_bytes()[:4] == b"\x89PNG"
    assert f"wrote {tmp_path / 'fig1.svg'}, {tmp_path / 'fig1.png'}" in capsys.readouterr().err
    assert main(["sim", str(paths[0]), "--view", "regimes", "--budgets", "2,4"]) == 0
    assert "largest gap" in capsys.readouterr().out


def test_cli_view_refusals(tmp_path, capsys):
    paths = _write(tmp_path)
    assert main(["sim", *map(str, paths), "--view", "off-domain", "--budgets", "4,8"]) == 2
    assert "one budget" in capsys.readouterr().err
    assert main(["sim", str(paths[0]), "--plot", str(tmp_path / "x.png")]) == 2
    assert "--plot draws" in capsys.readouterr().err
