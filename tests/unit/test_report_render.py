"""The report's renderers (bench.results.report_html, report_md) fed with data in the shape
bench.results.report_data gathers: every value a host or bundle supplied shows as text (a host
named `<script>` is escaped, never markup), every run has one section its id links to, the
HTML has no script and no external reference, and both formats say the same counts."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from bench.judge.stats import reliability_flags
from bench.results import report_html, report_md

HOSTILE = '<script>alert(1)</script>'
MD_HOSTILE = "a|b](http://x)*y*"


def _run(rid: str, state: str, host: str = HOSTILE, **kw) -> dict:
    return {"run_id": rid, "campaign": "c1", "host": host, "cell": "110M-balloon-mglru",
            "state": state, "retained": state == "validated", "position": 1, "repetition": 0,
            "metrics": {"iteration_median_s": 0.25}, "verdicts": kw.get("verdicts", []),
            "timeline": [{"t": "2026-12-06T05:00:00+00:00", "kind": "state",
                          "message": f"{rid}: planned -> running {HOSTILE}"}],
            "ladder": kw.get("ladder", [])}


def data() -> dict:
    rejected = _run("c1-r2", "rejected", verdicts=[
        {"rule": "stable_iterations", "version": 2, "passed": False, "reason": HOSTILE},
        {"rule": "bundle_complete", "version": 1, "passed": True, "reason": None}])
    failed = _run("c1-r3", "failed", host=MD_HOSTILE, ladder=[
        {"at": "2026-12-06T05:01:02+00:00", "rung": "reconnect", "outcome": "failed",
         "detail": "ssh refused", "seconds": 3.0},
        {"at": "2026-12-06T05:01:05+00:00", "rung": "reboot", "outcome": "ok",
         "detail": "came back", "seconds": 40.0}])
    runs = [_run("c1-r1", "validated"), rejected, failed]
    row = {"group": "g1", "host": HOSTILE, "cell": "110M-balloon-mglru", "median_s": 0.25,
           "min_s": 0.2, "max_s": 0.4, "n_retained": 2, "n_rejected": 1, "spread": 0.8,
           "device_gb": 0.01, "flags": reliability_flags(2, 0.8), "campaign": "c1"}
    group = {"id": "g1", "host": HOSTILE, "campaign": "c1",
             "workload": {"digest": "abc", "trace": HOSTILE},
             "fingerprint": {"digest": "f00", "kernel": HOSTILE}}
    return {
        "campaigns": [{"id": "c1", "matrix": "reclaim", "scale": "lab", "seed": 7,
                       "state": "done", "demo": False, "hosts": [HOSTILE, MD_HOSTILE],
                       "start": "2026-12-06T05:00:00+00:00", "end": "2026-12-06T05:10:00+00:00",
                       "duration_s": 600.0, "estimate_s": 540.0, "reboots_planned": 2,
                       "reboot_lower_bound": 1, "reboots_done": 1,
                       "counts": {"validated": 1, "rejected": 1, "failed": 1, "pending": 0,
                                  "other": 0, "skipped": 1, "runs": 3},
                       "matrix_ref": "reclaim", "workload": {"trace": HOSTILE},
                       "skipped": []}],
        "findings": [f"agreement g1 110M mglru: {HOSTILE}"],
        "figures": [{"kind": "reclaim", "title": "Fig. 3", "rows": [row], "groups": [group],
                     "warnings": [HOSTILE], "matrices": [],
                     "commands": ["bench plot reclaim --campaign c1 -o reclaim-c1"]}],
        "reference": [{"campaign": "c1", "matrix": "reclaim", "reference": "paper §5, Fig. 3",
                       "scale": "lab", "mapping": [["64G", "110M"]],
                       "rows": [{"cell": "64G-balloon-mglru", "metric": "device_gb",
                                 "value": 33.6, "source": "paper §5, Fig. 3",
                                 "measured_cell": "110M-balloon-mglru", "measured": 0.01,
                                 "scaled": True, "ratio": 0.01 / 33.6}]}],
        "rejected": [rejected], "failed": [failed],
        "skipped": [{"campaign": "c1", "point": "p", "cell": "64G-memboot-mglru",
                     "host": HOSTILE, "reason": HOSTILE}],
        "provenance": {"groups": [{"host": HOSTILE, "workload": HOSTILE, "fingerprint": "f00",
                                   "kernel": HOSTILE, "arch": "x86_64", "cmdline": HOSTILE,
                                   "controller": "1.0", "agent": "aa", "campaigns": ["c1"]}],
                       "drift": [f"{HOSTILE}: 2 fingerprints"],
                       "rerun": [f"bench schedule --matrix reclaim --hosts {HOSTILE}"],
                       "figures": ["bench plot reclaim --campaign c1 -o reclaim-c1"],
                       "report": "bench report c1"},
        "runs": runs}


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, d):
        self.text.append(d)


def test_html_escapes_host_text_and_links_every_run():
    page = report_html.render(data(), {"reclaim": '<svg id="f0-0-a"></svg>'})
    p = _Collect()
    p.feed(page)
    tags = [t for t, _ in p.tags]
    assert "script" not in tags                     # the host's <script> is text, not a tag
    assert HOSTILE in "".join(p.text)               # ... and reads as written
    ids = [a["id"] for _, a in p.tags if "id" in a and a["id"].startswith("run-")]
    assert sorted(ids) == ["run-c1-r1", "run-c1-r2", "run-c1-r3"]   # one section per run
    hrefs = [a["href"] for _, a in p.tags if "href" in a]
    assert all(h.startswith("#") for h in hrefs)     # no request leaves the file
    assert {"#run-c1-r2", "#run-c1-r3"} <= set(hrefs)
    assert not any("src" in a for _, a in p.tags)
    # the sections in the order
    order = [page.index(f'id="{k}"') for k in ("summary", "figures", "reference",
                                                "exceptions", "provenance", "runs")]
    assert order == sorted(order)
    text = "".join(p.text)
    assert "stable_iterations" in text and "reboot: ok" in text and "64G-memboot-mglru" in text
    assert "spread 80% > 10%" in text and "110M-balloon-mglru (scaled)" in text
    assert "10m00s (plan's estimate 9m00s)" in text and "1 (planned 2, lower bound 1)" in text


def test_html_without_matplotlib_says_how_to_get_figures():
    page = report_html.render(data(), None)
    assert report_html.PLOT_HINT.replace("'", "&#x27;") in page and "<svg" not in page


def test_markdown_escapes_cells_and_keeps_one_row_per_line():
    text = report_md.render(data())
    # outside the fenced commands block (literal text in every renderer) nothing is raw
    outside = re.sub(r"^```\n.*?^```$", "", text, flags=re.M | re.S)
    assert "bench schedule" not in outside and "bench schedule" in text
    assert HOSTILE not in outside and "<script>" not in outside
    assert "&lt;script&gt;" in text
    # the table cell with a pipe does not split the row: every table row has its columns
    for block in re.findall(r"((?:^\|.*\|$\n?)+)", text, flags=re.M):
        widths = {len(re.split(r"(?<!\\)\|", line)) for line in block.strip().splitlines()}
        assert len(widths) == 1, block
    assert "\\](http://x)" in text                   # a host's link is not a link
    assert not re.search(r"(?<!\\)\]\(http", text)
    assert text.count('<a id="run-') == 3
    assert "[c1\\-r2](#run-c1-r2)" in text or "[c1-r2](#run-c1-r2)" in text


def test_markdown_and_html_say_the_same_counts():
    d = data()
    md, page = report_md.render(d), report_html.render(d, None)
    line = "3: 1 validated, 1 rejected, 1 failed, 0 pending; 1 cell(s) skipped at planning"
    assert line in page and report_md.md(line) in md


def test_small_measured_values_keep_their_digits():
    """A 0.2 ms iteration and 7 kB per iteration are not printed as 0.000 (a reader saw a
    21% spread around a median of 0.000)."""
    from bench.results.report_text import sig
    assert sig(0.000215) == "0.000215" and sig(7.1e-6, 4) == "7.1e-06"
    assert sig(1.5) == "1.500" and sig(0.25) == "0.250" and sig(0.0336, 4) == "0.0336"
    assert sig(0) == "0.000" and sig(None) == "-"
    from bench.results.report_text import run_pairs
    r = _run("c1-r1", "validated")
    r["metrics"] = {"iteration_median_s": 0.000154, "iteration_min_s": 0.000104,
                    "device_bytes_per_iteration": 10.6, "logical_bytes_per_iteration": 1.16e6}
    facts = dict(run_pairs(r))
    assert facts["iteration time, median"] == "0.000154 s"
    assert facts["iteration time, min"] == "0.000104 s"
    assert facts["device reads per iteration"] == "10.6 B"
    assert facts["bytes requested per iteration"] == "1.16 MB"


def test_a_failure_line_leaves_the_ladder_to_its_column():
    from bench.results.report_text import failure_text
    msg = ("c1-r3: running -> failed: attempt 1/3, not retried: interrupted by the recovery "
           "ladder: unreachable for 3s; host recovered by the ladder: 05:01 look: unreachable")
    want = ("running -> failed: attempt 1/3, not retried: interrupted by the recovery ladder: "
            "unreachable for 3s")
    assert failure_text(msg, "c1-r3", ladder_shown=True) == want
    assert failure_text(msg.replace("host recovered by the ladder", "recovery ladder"),
                        "c1-r3", ladder_shown=True) == want
    assert failure_text(msg, "c1-r3", ladder_shown=False) == msg.removeprefix("c1-r3: ")
    assert failure_text(msg, "c1-r9", ladder_shown=False) == msg


def test_identity_columns_keep_whole_beside_prose():
    page = report_html.render(data(), None)
    assert re.search(r'<td class="key">[^<]*110M-balloon-mglru</td>', page)
    assert '<td class="key">failed</td>' in page
