"""The paper's numbers bench ships (bench/data/reference/paper.toml) and how the report sets a
campaign's beside them: at a lab scale every paper cell maps through the shipped matrix's
[scale.lab].capacities and says it is scaled, and the ratio of two cells (what keeps its
meaning at a scale) is compared per result group."""

from __future__ import annotations

import pytest

from bench.matrix.load import load_matrix
from bench.results import report_data, report_text
from bench.results.reference import paper_ratios, paper_values


def test_the_shipped_numbers_hold_the_papers_printed_ratios():
    # §5: MGLRU on/off under the 64G balloon is 2.0x (33.6 vs 16.8 GB/it)
    [r] = paper_ratios("reclaim")
    assert r["value"] == pytest.approx(2.0)
    # every shipped cell names a cell of its matrix at full scale
    for matrix in ("capacity", "reclaim"):
        names = {f"{p.capacity.text}-{p.mechanism}-{p.reclaim}"
                 for p in load_matrix(matrix).points}
        assert {v["cell"] for v in paper_values(matrix)} <= names, matrix
    assert paper_values("demo") == [] and paper_ratios(None) == []


def test_a_lab_campaign_is_compared_at_its_scaled_cells():
    lab = dict(load_matrix("reclaim", "lab").capacity_map)
    mglru, classic = (f"{lab['64G']}-balloon-{r}" for r in ("mglru", "classic"))
    rows = [{"group": g, "cell": cell, "host": h, "device_gb": gb, "campaign": "c"}
            for g, h, cell, gb in (("g1", "a", mglru, 0.03), ("g1", "a", classic, 0.012),
                                   ("g2", "b", mglru, 0.02), ("g3", "b", "235M-memboot-mglru",
                                                              0.05))]
    ref = report_data._reference({"id": "c", "matrix": "reclaim", "scale": "lab"},
                                 [{"kind": "reclaim", "rows": rows}])
    assert ref["reference"] == "paper §5, Fig. 3" and ["64G", lab["64G"]] in ref["mapping"]
    by = {(r["cell"], r["host"]): r for r in ref["rows"]}
    assert by[("64G-balloon-mglru", "a")]["measured_cell"] == mglru
    assert by[("64G-balloon-mglru", "a")]["ratio"] == pytest.approx(0.03 / 33.6)
    # a row per group that measured the cell: g2 has no classic run
    assert [r["host"] for r in ref["rows"] if r["cell"] == "64G-balloon-classic"] == ["a"]
    ratios = {r["group"]: r for r in ref["ratios"]}
    assert ratios["g1"]["measured"] == pytest.approx(2.5)
    assert ratios["g1"]["ratio"] == pytest.approx(1.25) and ratios["g2"]["measured"] is None
    assert "g3" not in ratios       # a group (another boot) with neither cell: no empty row
    none = report_data._reference({"id": "c", "matrix": "reclaim", "scale": "lab"},
                                  [{"kind": "reclaim", "rows": rows[3:]}])
    assert [(r["group"], r["measured"]) for r in none["ratios"]] == [(None, None)]
    assert report_text.ratio_table(none)[1][0][2:4] == ["-", "-"]
    head, table = report_text.reference_table(ref)
    assert all(row[1].endswith("(scaled)") for row in table)
    lines = report_text.reference_lines(ref)
    assert any("every capacity is scaled" in x and f"64G -> {lab['64G']}" in x for x in lines)
