"""The §8 arithmetic (bench.results.placement), with data: rules 2 and 3 from the shipped example
bandwidth file (the paper's 1.06 comes out of the computation, its 5.6% within the rounding
of the printed rates), the file's checks (one
line naming file and key), and the worked sizing example over capacity rows shaped as
`bench results --matrix capacity` returns them (the rows of the paper's Table 2)."""

from __future__ import annotations

import pytest

from bench.errors import InputError
from bench.results import placement
from tests.support.paths import REPO

EXAMPLE = REPO / "bench" / "data" / "bandwidths" / "paper-gh200.toml"
GOOD = """
[measured]
host = "gh200-b"
[gb_per_s]
hbm = 2938
host_read = 327
streaming = 346
"""


def test_the_example_file_gives_the_papers_rule_numbers():
    bw = placement.read_bandwidths(EXAMPLE)
    rep = placement.placement_report(bw)
    r2, r3 = rep["rule2"], rep["rule3"]
    rates = bw["gb_per_s"]
    assert (rates["hbm"], rates["host_read"], rates["streaming"]) == (2938, 327, 346)
    # the paper: r* = 1.06
    assert round(r2["breakeven_reuse"], 2) == 1.06 and "1.06" in r2["text"]
    # "within 5.6% ... computed on unrounded rates": the printed rates give 5.5%, and every pair
    # of rates that rounds to the printed 327 and 346 gives a gap that holds the paper's 5.6%
    assert round(r3["gap"] * 100, 1) == 5.5 and "5.5%" in r3["text"]
    lo = placement.rule3({**rates, "host_read": 327.5, "streaming": 345.5})["gap"]
    hi = placement.rule3({**rates, "host_read": 326.5, "streaming": 346.5})["gap"]
    assert lo < 0.056 < hi
    assert placement.report_lines(rep)[0].startswith(f"bandwidths: {EXAMPLE}, measured on ")


def test_rule2_is_the_papers_formula_and_rule3_the_gap_to_streaming():
    bw = placement.parse_bandwidths(GOOD, "f.toml")
    r2 = placement.rule2(bw["gb_per_s"])
    assert r2["transfer_s_per_gb"] == pytest.approx(1 / 346)
    assert r2["saving_s_per_gb_per_use"] == pytest.approx(1 / 327 - 1 / 2938)
    assert r2["breakeven_reuse"] == pytest.approx((1 / 346) / (1 / 327 - 1 / 2938))
    r3 = placement.rule3(bw["gb_per_s"])
    assert r3["gap"] == pytest.approx(1 - 327 / 346)
    assert bw["measured"]["host"] == "gh200-b" and bw["gb_per_s"]["link_ceiling"] is None


def test_host_reads_as_fast_as_hbm_never_repay_and_faster_direct_reads_say_so():
    rates = {"hbm": 300.0, "host_read": 300.0, "streaming": 200.0}
    assert placement.rule2(rates)["breakeven_reuse"] is None
    assert "never repays" in placement.rule2(rates)["text"]
    r3 = placement.rule3(rates)
    assert r3["gap"] == pytest.approx(-0.5) and "50.0% faster" in r3["text"]


@pytest.mark.parametrize("text,key", [
    (GOOD + "extra = 1\n", "gb_per_s.extra"),
    (GOOD.replace("hbm = 2938", "hbm = \"fast\""), "gb_per_s.hbm"),
    (GOOD.replace("hbm = 2938", "hbm = true"), "gb_per_s.hbm"),
    (GOOD.replace("hbm = 2938", "hbm = 0"), "gb_per_s.hbm"),
    (GOOD.replace("hbm = 2938", "hbm = -3.0"), "gb_per_s.hbm"),
    (GOOD.replace("hbm = 2938", "hbm = 1e12"), "gb_per_s.hbm"),
    (GOOD.replace("hbm = 2938", "hbm = nan"), "gb_per_s.hbm"),
    (GOOD.replace("hbm = 2938\n", ""), "gb_per_s.hbm"),
    (GOOD + "link_ceiling = 300\n", "gb_per_s.streaming"),
    (GOOD.replace('host = "gh200-b"', 'host = "a b"'), "measured.host"),
    (GOOD.replace('host = "gh200-b"', 'note = "x"'), "measured.host"),
    (GOOD.replace('host = "gh200-b"', 'host = "a"\nnote = "x\\u001b[31m"'), "measured.note"),
    (GOOD.replace('host = "gh200-b"', 'host = "a"\nkernel = 6'), "measured.kernel"),
    (GOOD.replace('host = "gh200-b"', 'host = "a"\nmachine = "b"'), "measured.machine"),
    (GOOD.replace('host = "gh200-b"', 'host = "' + "h" * 65 + '"'), "measured.host"),
    (GOOD + "[other]\n", "other"),
    ("[measured]\nhost = \"a\"\n", "gb_per_s"),
    ("gb_per_s = 3\n[measured]\nhost = \"a\"\n", "gb_per_s"),
])
def test_every_key_is_checked_with_one_line_naming_file_and_key(text, key):
    with pytest.raises(InputError) as e:
        placement.parse_bandwidths(text, "bw.toml")
    msg = e.value.message
    assert msg.startswith(f"bw.toml: key {key}: ") and "\n" not in msg
    assert e.value.exit_code == 2


def test_files_that_are_not_bandwidth_files_are_refused(tmp_path):
    big = tmp_path / "big.toml"
    big.write_text(GOOD + "#" * placement.MAX_FILE_BYTES)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"[measured]\nhost = \"\xff\"\n")
    bad = tmp_path / "bad.toml"
    bad.write_text("[measured\n")
    for path, what in ((big, "larger than 64 KiB"), (binary, ":2: not UTF-8"),
                       (bad, "not valid TOML"), (tmp_path / "none.toml", "cannot read")):
        with pytest.raises(InputError, match=what) as e:
            placement.read_bandwidths(path)
        assert str(path) in e.value.message


# the worked sizing example -----------------------------------------------------------------

TABLE2 = [(448, 0.99, 5.3), (256, 1.37, 9.8), (128, 1.95, 17.4), (64, 2.76, 33.6)]


def _group(gid, host, tpi=None):
    return {"id": gid, "host": host, "fingerprint": {"digest": "f" * 16},
            "workload": {"digest": "w" * 12, "kind": "replay", "trace": "prose.jsonl",
                         "tokens_per_iteration": tpi}}


def _rows(gid, mechanism="balloon", points=TABLE2, n=3):
    return [{"group": gid, "cell": f"{c}G-{mechanism}-mglru", "capacity_bytes": c * 10 ** 9,
             "mechanism": mechanism, "reclaim": "mglru", "median_s": t, "min_s": t,
             "max_s": t, "n_retained": n, "device_gb_per_iteration": d}
            for c, t, d in points]


def test_sizing_on_the_papers_table2_rows():
    m = {"rows": _rows("g1"), "groups": [_group("g1", "machine-a", tpi=299 / 285)]}
    s = placement.sizing_example(m, 2.0)
    (c,) = s["curves"]
    a = c["answer"]
    frac = (1.95 - 2.0) / (1.95 - 2.76)           # 2 s lies between 128 GB and 64 GB
    assert a["status"] == "interpolated" and a["between"] == [64 * 10 ** 9, 128 * 10 ** 9]
    assert a["capacity_bytes"] == pytest.approx(128e9 + frac * (64e9 - 128e9), abs=1)
    assert a["device_gb_per_iteration"] == pytest.approx(17.4 + frac * (33.6 - 17.4))
    assert a["upper_bound"] is True and a["n"] == [3, 3]
    top = c["largest"]
    # the paper: "the replay sustains 1.01 engine iterations per second per stream"
    assert round(top["iterations_per_s"], 2) == 1.01 and top["n"] == 3
    assert top["seconds_per_accepted_token"] == pytest.approx(0.99 * 285 / 299)
    assert s["warnings"] == [] and s["not_interpolated_across"] == {}
    lines = placement.report_lines({"bandwidths": placement.parse_bandwidths(GOOD, "f"),
                                "rule2": {"text": "x"}, "rule3": {"text": "y"}, "sizing": s})
    assert any("upper bound" in x and "interpolated between 64 GB and 128 GB" in x
               for x in lines)


def test_a_measured_point_a_fast_curve_and_an_unreachable_target():
    m = {"rows": _rows("g1"), "groups": [_group("g1", "a")]}
    at = placement.sizing_example(m, 1.37)["curves"][0]["answer"]
    assert at["status"] == "measured" and at["capacity_bytes"] == 256 * 10 ** 9
    assert at["device_gb_per_iteration"] == 9.8
    assert placement.sizing_example(m, 5.0)["curves"][0]["answer"]["status"] == "below_range"
    assert placement.sizing_example(m, 0.5)["curves"][0]["answer"]["status"] == "unreachable"
    none = placement.sizing_example(m, None)["curves"][0]
    assert none["answer"]["status"] == "no_target" and none["largest"]["iterations_per_s"]
    assert none["largest"]["seconds_per_accepted_token"] is None     # no tokens recorded


def test_groups_and_mechanisms_are_never_interpolated_across():
    """g1 has only the fast end, g2 only the slow end: pooled they would bracket 2 s; apart,
    neither does, and the output says what differs."""
    rows = _rows("g1", points=TABLE2[:2]) + _rows("g2", points=TABLE2[3:]) + \
        _rows("g1", mechanism="none", points=[(448, 0.95, 5.0)])
    m = {"rows": rows, "groups": [_group("g1", "machine-a"), _group("g2", "machine-b")]}
    s = placement.sizing_example(m, 2.0, bandwidth_host="machine-b")
    got = {(c["group"], c["mechanism"]): c["answer"]["status"] for c in s["curves"]}
    assert got == {("g1", "balloon"): "below_range", ("g1", "none"): "below_range",
                   ("g2", "balloon"): "unreachable"}
    none = next(c for c in s["curves"] if c["mechanism"] == "none")
    assert none["answer"]["upper_bound"] is False
    assert any("never interpolated across groups" in w and "machine-a, machine-b" in w
               for w in s["warnings"])
    assert any("measured on machine-b, the capacity curves on machine-a" in w
               for w in s["warnings"])


def test_no_capacity_rows_is_no_data():
    s = placement.sizing_example({"rows": [], "groups": []}, 2.0)
    assert s["status"] == "no_data" and s["curves"] == []


def test_a_shipped_file_is_named_by_its_stem_and_a_missing_one_is_refused(tmp_path):
    shipped = placement.resolve_bandwidths("paper-gh200")
    assert shipped == placement.shipped_bandwidths()["paper-gh200"]
    assert placement.read_bandwidths(shipped)["gb_per_s"]["hbm"] == 2938
    own = tmp_path / "mine.toml"
    assert placement.resolve_bandwidths(str(own)) == own        # a path is a path, found or not
    with pytest.raises(InputError) as exc:
        placement.resolve_bandwidths("paper-h100")
    assert "no such bandwidth file" in exc.value.message and "paper-gh200" in exc.value.hint


def test_bench_rules_is_placement_under_its_old_name_with_one_warning(capsys):
    """`bench rules` (the name before `bench placement`) stays one release: hidden from the
    help, the same output and exit code, and one line on stderr naming the new command."""
    from bench.cli import main
    assert main(["placement", "--bandwidths", str(EXAMPLE), "--json"]) == 0
    new = capsys.readouterr()
    assert main(["rules", "--bandwidths", str(EXAMPLE), "--json"]) == 0
    old = capsys.readouterr()
    assert old.out == new.out and new.err == ""
    assert old.err.splitlines() == ["warning: `bench rules` is deprecated and will be removed "
                                    "in the next release; use `bench placement`"]
    assert main(["rules", "--bandwidths", str(REPO / "no-such.toml")]) == \
        main(["placement", "--bandwidths", str(REPO / "no-such.toml")]) == 2
    capsys.readouterr()
    assert main(["--help"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.split("Commands:")[1]
              .splitlines() if line.strip()]
    assert "placement" in listed and "rules" not in listed
