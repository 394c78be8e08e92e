"""`bench report` of a real campaign on this machine: `bench demo` runs its campaign through
the real executor (root: cgroups, mlock, drop_caches), prints its report's path, and
`bench report` (HTML and Markdown, through the CLI) is checked against the database: every run
listed once in the run sections, the counts `bench campaigns --json` reports, every rejected
run with its rule and every skipped cell with its reason."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from bench.store import queries
from bench.store.campaigns import journal_rows, run_rows
from bench.store.db import open_store

REPO = Path(__file__).resolve().parents[2]


def _bench(tmp_path: Path, *args: str, timeout: int = 60) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), COLUMNS="200",
               XDG_DATA_HOME=str(tmp_path / "xdg"), BENCH_DATA_DIR=str(tmp_path / "data-env"))
    return subprocess.run([sys.executable, "-m", "bench", *args], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=timeout)


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: list[str] = []
        self.refs: list[str] = []
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if a.get("id"):
            self.ids.append(a["id"])
        self.refs += [v for k, v in attrs if k in ("href", "src") and v]

    def handle_data(self, d):
        self.text.append(d)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("needs root (the demo's campaign: cgroups, mlock, drop_caches)")
    tmp = tmp_path_factory.mktemp("report")
    db = f"sqlite:///{tmp / 'bench.db'}"
    r = _bench(tmp, "demo", "--model", "tiny", "--no-trace", "--out", str(tmp / "demo"),
               "--db", db, timeout=600)
    assert r.returncode in (0, 1), (r.stdout + r.stderr)[-4000:]   # 1: a run not validated
    return tmp, db, r


@pytest.mark.root
@pytest.mark.native
@pytest.mark.slow
def test_report_of_a_local_campaign_matches_the_database(demo):
    tmp, db, demo_run = demo
    # the demo's last line: its report, written into its --out directory
    last = demo_run.stderr.strip().splitlines()[-1]
    assert last.startswith("report: ") and str(tmp / "demo" / "report.html") in last
    assert (tmp / "demo" / "report.html").is_file()

    listing = json.loads(_bench(tmp, "campaigns", "--json", "--db", db).stdout)
    [camp] = listing
    cid = camp["id"]
    r = _bench(tmp, "report", "--db", db, "-o", str(tmp / "r.html"), timeout=300)
    assert r.returncode == 0, r.stderr
    assert f"report of campaign {cid}" in r.stderr          # the default, said
    assert r.stdout.strip() == str(tmp / "r.html")
    page_text = (tmp / "r.html").read_text()
    page = _Page()
    page.feed(page_text)

    store = open_store(db, write=False)
    try:
        runs = run_rows(store, cid)
        verdicts = queries.verdicts(store, [x.run_id for x in runs])
        plan = journal_rows(store, cid, kinds=("plan",))[0].data
    finally:
        store.close()
    # every run once, with its own section, and only the campaign's runs
    sections = [i for i in page.ids if i.startswith("run-")]
    assert sorted(sections) == sorted(f"run-{x.run_id}" for x in runs)
    # counts as `bench campaigns --json` reports them
    st = camp["states"]
    text = " ".join("".join(page.text).split())
    line = (f"{sum(st.values())}: {st.get('validated', 0)} validated, "
            f"{st.get('rejected', 0)} rejected, {st.get('failed', 0)} failed, "
            f"{st.get('pending', 0)} pending")
    assert line in text
    assert f"{len(plan['skipped'])} cell(s) skipped at planning" in text
    for s in plan["skipped"]:
        assert s["reason"] in text
    # every rejected run with its failed rules, linked to its section
    for x in runs:
        if x.state == "rejected":
            assert f'href="#run-{x.run_id}"' in page_text
            for v in verdicts[x.run_id]:
                if not v["passed"]:
                    assert v["rule"] in text
    # self-contained: no script, nothing fetched, links only within the page
    assert "script" not in page.tags
    assert all(h.startswith("#") for h in page.refs), page.refs
    try:
        import matplotlib  # noqa: F401
        assert "<svg" in page_text
    except ModuleNotFoundError:
        assert "bench[plot]" in page_text

    # the same content as Markdown (-o NAME.md)
    r = _bench(tmp, "report", cid, "--db", db, "-o", str(tmp / "r.md"), timeout=300)
    assert r.returncode == 0, r.stderr
    md = (tmp / "r.md").read_text()
    assert sorted(re.findall(r'<a id="(run-[^"]+)"></a>', md)) == sorted(sections)
    assert line in md.replace("\\", "")


@pytest.mark.root
@pytest.mark.native
@pytest.mark.slow
def test_report_names_a_missing_campaign_in_one_line(demo):
    tmp, db, _ = demo
    r = _bench(tmp, "report", "no-such-campaign", "--db", db)
    assert r.returncode == 2 and "no campaign no-such-campaign" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp / "report-no-such-campaign.html").exists()
