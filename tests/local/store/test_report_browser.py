"""`bench report` as a reader's browser sees it: a campaign made by a real producer, its report
written through the real CLI (`bench report CAMPAIGN --db DB -o OUT.html`), then opened in
Debian's headless Chromium (tests/support/browser.py): no console warning or error, no script
exception, no request leaving the file, a full-page screenshot that is not blank; and with
JavaScript off (the report needs none): every in-page link landing on an element of the page,
every run's own section (id="run-<run id>") present, each rejected run's id linked to it, and
nothing wider than a 1280 px window.

Two campaigns: `reclaim`, runs of the reclaim matrix's cells ingested from bundles built by
tests/support/bundlegen.py (captured /proc output) into SQLite made by the real migrations,
one of them rejected by a retention rule (tables, figures, the rejected-runs section); and
`local`, a short campaign of `none` cells run by the real executor, runner and agent on this
machine (the executor's record: plan, estimate, states, journal; needs root and a C
toolchain).

With BENCH_REPORT_SCREENSHOT=PATH.png the reclaim report's screenshot is copied to PATH.png and
the local one's to PATH-local.png, to be looked at."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from bench.cli import main
from bench.store.campaigns import create_campaign
from bench.store.db import open_store
from bench.store.ingest import ingest_bundle
from tests.support import browser

pytestmark = pytest.mark.skipif(browser.missing() is not None, reason=browser.MISSING)

# the cells of test_results_cli, each with its relative speed (binary capacities: the fixture
# bundles come from a real 64 MiB + 32 MiB cgroup)
CELLS = [("64Mi-balloon-mglru", 1.6), ("128Mi-balloon-mglru", 1.2),
         ("160Mi-balloon-mglru", 1.0), ("64Mi-balloon-classic", 1.1), ("64Mi-cgroup-mglru", 1.15),
         ("64Mi-cgroup-classic", 1.12), ("64Mi-cgroup-mglru-pinned", 1.05)]


def _reclaim_campaign(tmp_path: Path, bundles) -> tuple[str, str, list[str]]:
    db = f"sqlite:///{tmp_path / 'report.db'}"
    store = open_store(db)
    rids = []
    try:
        create_campaign(store, "c1", matrix="reclaim", seed=7)
        pos = 0
        for rep in range(2):
            for cell, speed in CELLS:
                rid = f"c1-r{pos:03d}"
                ingest_bundle(store, bundles(rid, cell, position=pos, repetition=rep,
                                             speed=speed, seed=pos), nominal_miss_bytes=2.0e7)
                rids.append(rid)
                pos += 1
        # rejected by kernel_log_clean: an I/O error in the kernel log
        ingest_bundle(store, bundles("c1-bad", "64Mi-balloon-mglru", position=pos, repetition=2,
                                     edit=lambda p: p.update(
                                         {"kmsg.txt": "Buffer I/O error on dev vda\n"})))
        rids.append("c1-bad")
    finally:
        store.close()
    return db, "c1", rids


def _local_campaign(tmp_path: Path) -> tuple[str, str, list[str]]:
    from bench.cli.schedule import build_plan
    from bench.execute.campaign.executor import Executor
    from bench.execute.campaign.record import create
    from tests.support.local_host import local_hosts_dir, local_settings, none_matrix
    hosts = local_hosts_dir(tmp_path)               # skips without root or a C toolchain
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(none_matrix("report-local"))
    db = f"sqlite:///{tmp_path / 'report.db'}"
    plan, exp, m = build_plan(str(matrix), ["local"], hosts, 5, "lx")
    s = local_settings(tmp_path, hosts, db)
    store = open_store(db)
    try:
        create(store, plan, exp, m, ["local"], s, str(matrix))
        res = Executor(store, "lx", s).run()
        assert res.state == "done", res
    finally:
        store.close()
    return db, "lx", [r.run_id for r in plan.runs]


@pytest.mark.parametrize("source", ["reclaim", pytest.param(
    "local", marks=[pytest.mark.root, pytest.mark.native, pytest.mark.slow])])
def test_the_report_renders_clean_in_a_real_browser(source, tmp_path, bundles, capsys):
    db, cid, rids = (_reclaim_campaign(tmp_path, bundles) if source == "reclaim"
                     else _local_campaign(tmp_path))
    # the rejected runs as `bench runs --rejected` names them (reclaim: c1-bad, local: none)
    assert main(["runs", "--rejected", "--json", "--db", db]) == 0
    rejected = sorted(r["run_id"] for r in json.loads(capsys.readouterr().out))
    assert rejected == (["c1-bad"] if source == "reclaim" else [])
    out = tmp_path / "report.html"
    assert main(["report", cid, "--db", db, "-o", str(out)]) == 0
    assert out.stat().st_size > 0
    shot = tmp_path / "report.png"
    r = browser.render(out, shot)
    wanted = os.environ.get("BENCH_REPORT_SCREENSHOT")
    if wanted:
        dest = Path(wanted)
        if source != "reclaim":
            dest = dest.with_name(f"{dest.stem}-{source}{dest.suffix}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, dest)
    assert r.console == [] and r.exceptions == []
    assert r.leaving == [], "requests leaving the file"
    assert r.requests[0] == out.resolve().as_uri()
    # what a reader with JavaScript off gets (the report needs none): the page's structure
    sections = json.dumps([f"run-{x}" for x in rids])
    bare = browser.render(out, tmp_path / "report-nojs.png", javascript=False, evaluate={
        "dangling": browser.DANGLING_ANCHORS,
        "missing_sections": f"{sections}.filter(id => !document.getElementById(id))",
        "run_links": "[...document.querySelectorAll('a[href^=\"#run-\"]')]"
                     ".map(a => a.getAttribute('href'))",
        "overflowing": browser.OVERFLOWING,
    })
    assert bare.leaving == [] and bare.console == []
    assert bare.checks["dangling"] == [], "links to no element of the page"
    assert bare.checks["missing_sections"] == [], "runs without their own section"
    # a rejected run is listed with its rule, its id a link to its own section
    assert [x for x in rejected if f"#run-{x}" not in bare.checks["run_links"]] == [], \
        "rejected runs whose id links to nothing"
    # nothing makes the reader scroll sideways in a 1280 px window
    assert bare.checks["overflowing"] == [], "elements wider than the window"
    # a real full-page picture: the page's width, taller than one screen, not one colour
    assert r.size[0] == 1280 and r.size[1] > browser.VIEWPORT_HEIGHT
    from matplotlib.image import imread
    px = imread(shot)[:, :, :3].reshape(-1, 3)
    assert len({tuple(p) for p in px[:: max(1, len(px) // 20000)]}) > 8, "a blank screenshot"
