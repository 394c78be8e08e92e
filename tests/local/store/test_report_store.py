"""`bench report` over a database of real ingested bundles (tests/support/bundlegen, the real
migrations): campaign c1 of the results tests, ten cells twice and one run rejected for a
kernel I/O error. Checked against the database: every run once in the run sections, the counts
`bench campaigns --json` reports, the rejected run with each failed rule and its version, a
table for every matrix shape with rows, each flagged as bench.judge.stats.reliability_flags
says."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest

from bench.cli import main
from bench.judge.stats import reliability_flags
from bench.store import queries
from bench.store.campaigns import run_rows
from bench.store.db import open_store
from tests.local.store.test_results_cli import populate


@pytest.fixture
def c1(tmp_path, bundles):
    url = f"sqlite:///{tmp_path}/report.db"
    st = open_store(url)
    populate(st, bundles)
    yield st, url
    st.close()


def _run(capsys, *argv) -> tuple[int, str, str]:
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_report_of_c1_matches_the_database(c1, capsys, tmp_path):
    store, url = c1
    rc, out, _ = _run(capsys, "campaigns", "--json", "--db", url)
    [camp] = json.loads(out)
    rc, out, err = _run(capsys, "report", "c1", "--db", url, "-o", tmp_path / "r.md")
    assert rc == 0, err
    assert out.strip() == str(tmp_path / "r.md")
    md = (tmp_path / "r.md").read_text()
    plain = unescape(md.replace("\\", ""))
    runs = run_rows(store, "c1")
    verdicts = queries.verdicts(store, [r.run_id for r in runs])
    # every run once, in its own section
    assert sorted(re.findall(r'<a id="run-([^"]+)"></a>', md)) == sorted(r.run_id for r in runs)
    # runs ingested outside the executor count by their verdict; the states as stored are
    # the counts of `bench campaigns --json`
    st = camp["states"]
    kept = sum(r.retained is True for r in runs)
    assert set(st) == {"ingested"} and kept == len(runs) - 1
    assert (f"- **runs**: {sum(st.values())}: {kept} validated, 1 rejected, 0 failed, "
            f"0 pending (as stored: ingested {st['ingested']})") in plain
    # the rejected run (retained False in the store) with each failed rule and version
    rejected = plain[plain.index("### Rejected runs"):plain.index("### Failed runs")]
    bad = [r for r in runs if r.retained is False]
    assert [r.run_id for r in bad] == ["c1-bad"]
    for r in bad:
        failed = [v for v in verdicts[r.run_id] if not v["passed"]]
        assert failed
        for v in failed:
            assert re.search(rf"\[{r.run_id}\]\(#run-{r.run_id}\) \|[^\n]*\| {v['rule']} \| "
                             rf"{v['version']} \|", rejected), (v, rejected)
    # a table per matrix shape with rows, each cell flagged as reliability_flags says
    for kind in queries.MATRICES:
        m = queries.matrix(store, kind, campaign="c1")
        if not m["rows"]:
            continue
        head = plain.index(f"### {_title(kind)}")
        section = plain[head:plain.index("\n### ", head + 4)]
        # the capacity shape holds each cell's summary in its row: its line says its flags
        for row in m["rows"] if kind == "capacity" else []:
            flags = "; ".join(reliability_flags(row["n_retained"], row["spread"])) or "-"
            line = next(x for x in section.splitlines() if x.startswith(f"| {row['cell']} |"))
            assert line.endswith(f"| {flags} |") and f"| {row['n_retained']}/" in line, line
    # the HTML says the same, with a section per run
    rc, _, err = _run(capsys, "report", "c1", "--db", url, "-o", tmp_path / "r.html")
    assert rc == 0, err
    page = (tmp_path / "r.html").read_text()
    for r in runs:
        assert page.count(f'id="run-{r.run_id}"') == 1
    assert 'href="#run-c1-bad"' in page


def _title(kind: str) -> str:
    from bench.results.report_data import FIGURE_TITLES
    return FIGURE_TITLES[kind]


def test_report_of_an_empty_database_is_one_line_with_the_fix(tmp_path, capsys):
    url = f"sqlite:///{tmp_path}/empty.db"
    open_store(url).close()
    rc, out, err = _run(capsys, "report", "--db", url)
    assert rc == 2 and out == ""
    assert "no campaign in the database to report on" in err and "bench demo" in err
    assert not list(tmp_path.glob("report-*"))
