"""The hostile-input corpus (tests/support/hostile_inputs.py) through the real `bench` command
line, each case in a child process capped at 1 GiB of address space: a non-zero exit (2: bad
input), one line naming the file (and line and key) with at most a `fix:` line after it, no
traceback, nothing that is not a bundle moved, and memory bounded (a regression that sizes an
allocation from a header claim dies at the cap and fails here instead of eating the machine).
The peak RSS of every case is printed for the record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.hostile_inputs import (ALL, AS_LIMIT, EXPERT_BYTES, HEADER, hint_plan_bytes,
                                          run_capped, trace_text)

PEAKS: dict[str, int] = {}


@pytest.fixture(scope="module", autouse=True)
def _report_peaks():
    yield
    if PEAKS:
        print("\npeak RSS MiB of bench on hostile input:", json.dumps(PEAKS, sort_keys=True))


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_hostile_input_is_refused_in_one_line(tmp_path, case):
    work = tmp_path / "case"
    work.mkdir()
    argv, named, says = case.build(work)
    before = sorted(p.relative_to(work) for p in work.rglob("*"))
    ran = run_capped(argv, work, tmp_path / "report")
    PEAKS[case.name] = ran.peak_rss_mib
    lines = [ln for ln in ran.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in ran.stderr, ran.stderr[-3000:]
    assert ran.rc == 2, (ran.rc, lines)
    assert lines and len(lines) <= 2, lines
    first = lines[0]
    assert first.startswith(("error: ", "refused ")), first
    assert named in first and says in first, (named, says, first)
    assert len(lines) == 1 or lines[1].startswith("fix: "), lines
    for rel in case.left:                       # what is not a bundle stays where it was
        assert (work / rel).exists(), rel
    after = sorted(p.relative_to(work) for p in work.rglob("*")
                   if p.name not in ("ingest.db", "ingest.db.lock", "plot.db", "plot.db.lock"))
    assert not [p for p in after if p not in before], after     # no output, no rejected/
    assert ran.peak_rss_mib < AS_LIMIT >> 20


def test_the_harness_lets_good_input_through(tmp_path):
    """The same child, cap and checks on good input: exit 0 (a corpus that fails everything
    would prove nothing)."""
    trace = tmp_path / "good.jsonl"
    trace.write_text(trace_text(json.dumps(HEADER)))
    ran = run_capped(["trace", "parse", str(trace), "--json"], tmp_path, tmp_path / "report")
    assert ran.rc == 0, ran.stderr
    assert json.loads(ran.stdout)["model"]["expert_bytes"] == EXPERT_BYTES
    hints = tmp_path / "h.bin"
    hints.write_bytes(hint_plan_bytes(trace))
    ran = run_capped(["trace", "recall", str(trace), "--hints", str(hints), "--json"], tmp_path,
                     tmp_path / "report")
    assert ran.rc == 0, ran.stderr
    out = tmp_path / "made"
    out.mkdir()
    ran = run_capped(["plan", str(trace), "-o", str(out / "p.bin"), "--hints", "oracle",
                      "--freq-out", str(out / "p.freq")], tmp_path, tmp_path / "report")
    assert ran.rc == 0, ran.stderr
    assert sorted(p.name for p in out.iterdir()) == ["p.bin", "p.freq", "p.hints.bin"]


def test_the_cap_is_real(tmp_path):
    """The same child allocating past the cap dies of it (what a regression that sizes memory
    from a header claim would do), where bench on good input ran under it."""
    ran = run_capped([], tmp_path, tmp_path / "report", python=(
        "-c", f"bytearray({AS_LIMIT}); print('allocated')"))
    assert ran.rc != 0 and "MemoryError" in ran.stderr and "allocated" not in ran.stdout


def test_the_not_a_bundle_refusal_leaves_the_current_directory_alone(tmp_path):
    """`bench ingest .` in a damaged bundle's own directory: refused, not moved (moving the
    current directory out from under the shell would surprise), exit 1 like any damaged
    bundle."""
    from tests.support.bundlegen import make_bundle
    b = make_bundle(tmp_path / "in", "r1", "64m-cgroup-mglru")
    (b / "agent.jsonl").write_text("{}\n")
    ran = run_capped(["ingest", ".", "--db", f"sqlite:///{tmp_path}/x.db"], b,
                     tmp_path / "report")
    assert ran.rc == 1 and "Traceback" not in ran.stderr, ran.stderr
    assert "left in place: it is or holds the current directory" in ran.stderr
    assert b.is_dir() and not (b.parent / "rejected").exists()


def test_a_bundle_without_its_manifest_is_left_in_place(tmp_path):
    """A run still writing its bundle (no manifest yet) is not a bundle: ingest refuses it and
    moves nothing (a damaged bundle with a manifest still goes to rejected/)."""
    from tests.support.bundlegen import make_bundle
    b = make_bundle(tmp_path / "in", "r1", "64m-cgroup-mglru")
    (b / "manifest.json").unlink()
    ran = run_capped(["ingest", str(b), "--db", f"sqlite:///{tmp_path}/x.db"], tmp_path,
                     tmp_path / "report")
    assert ran.rc == 2 and f"refused {b}: .: not a run bundle: no manifest.json" in ran.stderr
    assert (b / "spec.json").is_file() and not (b.parent / "rejected").exists()
    d = make_bundle(tmp_path / "in2", "r1", "64m-cgroup-mglru")
    (d / "agent.jsonl").write_text("{}\n")
    ran = run_capped(["ingest", str(d), "--db", f"sqlite:///{tmp_path}/x.db"], tmp_path,
                     tmp_path / "report")
    assert ran.rc == 1 and (d.parent / "rejected" / "r1").is_dir(), ran.stderr


def test_output_paths_are_checked_before_the_work(tmp_path):
    """A missing --freq-out directory is refused before the plan is written: nothing is left
    half-made (no plan without its frequency table)."""
    trace = tmp_path / "good.jsonl"
    trace.write_text(trace_text(json.dumps(HEADER)))
    ran = run_capped(["plan", str(trace), "-o", str(tmp_path / "p.bin"), "--freq-out",
                      str(tmp_path / "no" / "f.txt")], tmp_path, tmp_path / "report")
    assert ran.rc == 2 and not (tmp_path / "p.bin").exists(), ran.stderr
    assert not Path(tmp_path / "no").exists()       # never created
