"""Prefetch end to end on this machine (local transport, the real runner and agent, a real
SQLite store made by the migrations): `bench run` makes the hint plan of the cell's label,
ships it, the runner dumps the plans into the bundle, the agent's hint counters reach the
results, and `hint_provenance` judges the real run:

- a pilot cell with the pilot's plan (previous-token) is retained, with its recall recorded;
- a pilot cell carrying the oracle's plan (`--hints oracle`, or the oracle written to a file
  and named) is rejected by hint_provenance, not by a hand-written bundle;
- `bench results --matrix prefetch` shows the delivery counters of the measured pass alone
  (the agent's per-pass counters), not the warm-up's and the measured pass's together.

Needs root (drop_caches, cgroups) and a C toolchain (the agent is built on deploy)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bench.cli import main
from bench.hosts.inventory import Host, render_host_toml
from bench.trace.synth import generate, preset

pytestmark = [pytest.mark.root, pytest.mark.native]


@pytest.fixture
def local(tmp_path):
    for tool in ("make", "cc", "python3"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (the agent is built on deploy)")
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    (hosts / "local.toml").write_text(render_host_toml(Host(
        name="local", address="localhost", transport="local",
        pool_dir=str(tmp_path / "pool"), work_dir=str(tmp_path / "work"))))
    trace = tmp_path / "tiny.jsonl"
    trace.write_text("\n".join(generate(preset("tiny", tokens=40))) + "\n")
    return trace, ["--host", "local", "--trace", str(trace), "--hosts-dir", str(hosts),
                   "--threads", "2", "--db", str(tmp_path / "bench.db"),
                   "--data-dir", str(tmp_path / "data"), "--json"]


def _run(capsys, argv) -> dict:
    rc = main(argv)
    out = capsys.readouterr()
    assert rc == 0, out.err[-3000:]
    (res,) = json.loads(out.out)
    return res


def _verdict(capsys, db: str, run_id: str) -> dict:
    assert main(["runs", "--db", db, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    return next(r for r in rows if r["run_id"] == run_id)


def test_pilot_runs_retained_and_an_oracle_labelled_pilot_rejected(local, tmp_path, capsys):
    trace, args = local
    db = str(tmp_path / "bench.db")
    good = _run(capsys, ["run", "32M-none-classic-pilot-advice", *args, "--run-id", "pg1"])
    assert good["ingest"]["retained"] is True, good
    bundle = Path(good["bundle"])
    spec = json.loads((bundle / "spec.json").read_text())
    prov = spec["hints_provenance"]
    assert prov["source"] == "previous-token" and prov["hints_sha256"] == spec["hints_sha256"]
    assert prov["trace_sha256"] == spec["workload"]["trace_sha256"]
    assert 0 < prov["recall"] < 1 and prov["exact_next_pass"] is False
    assert (bundle / "hints.bin").is_file() and (bundle / "plan.bin").is_file()
    summary = [json.loads(x) for x in (bundle / "agent.jsonl").read_text().splitlines()][-1]
    h = summary["hints"]
    assert h["submitted"] > 0 and h["submitted"] == h["overwritten"] + h["completed"] + h["left"]

    bad = _run(capsys, ["run", "32M-none-classic-pilot-advice", *args, "--run-id", "po1",
                        "--hints", "oracle"])
    assert bad["ingest"]["retained"] is False and bad["ingest"]["failed"] == ["hint_provenance"]
    row = _verdict(capsys, db, "po1")
    assert row["retained"] is False and row["failed"] == ["hint_provenance"], row

    # the oracle written to a file and named: still the oracle's hints
    plan_out = tmp_path / "p.bin"
    assert main(["plan", str(trace), "-o", str(plan_out), "--hints", "oracle", "--json"]) == 0
    capsys.readouterr()
    hid = _run(capsys, ["run", "32M-none-classic-pilot-advice", *args, "--run-id", "pf1",
                        "--hints", str(tmp_path / "p.hints.bin")])
    assert hid["ingest"]["failed"] == ["hint_provenance"], hid
    spec = json.loads((Path(hid["bundle"]) / "spec.json").read_text())
    assert spec["hints_provenance"]["source"] == "file"
    assert spec["hints_provenance"]["origin"] == "oracle"


def test_an_oracle_cell_with_the_oracle_plan_is_retained(local, tmp_path, capsys):
    _, args = local
    res = _run(capsys, ["run", "32M-none-classic-oracle-block", *args, "--run-id", "ob1"])
    assert res["ingest"]["retained"] is True, res
    spec = json.loads((Path(res["bundle"]) / "spec.json").read_text())
    assert spec["hints_provenance"]["recall"] == 1.0
    assert spec["hints_provenance"]["exact_next_pass"] is True


def test_prefetch_results_count_the_measured_pass_only(local, tmp_path, capsys):
    from bench.plan.planfile import decode
    _, args = local
    res = _run(capsys, ["run", "32M-none-classic-oracle-block", *args, "--run-id", "om1"])
    assert res["ingest"]["retained"] is True, res
    bundle = Path(res["bundle"])
    summary = [json.loads(x) for x in (bundle / "agent.jsonl").read_text().splitlines()][-1]
    # the oracle's hint plan: one pass hints every read of the pass after it, once
    per_pass = decode((bundle / "hints.bin").read_bytes()).reads
    passes = summary["passes_done"]
    assert passes == summary["passes"] >= 2 and per_pass > 0
    assert summary["pass_hints_submitted"] == [per_pass] * passes
    for p in range(passes):     # the identity holds for each pass alone
        assert summary["pass_hints_submitted"][p] == sum(
            summary[f"pass_hints_{c}"][p] for c in ("overwritten", "completed", "left"))
    assert summary["hints"]["submitted"] == per_pass * passes     # the run's total
    assert main(["results", "--matrix", "prefetch", "--db", str(tmp_path / "bench.db"),
                 "--json"]) == 0
    (row,) = [r for r in json.loads(capsys.readouterr().out)["conditions"]
              if r["prefetch"] == "oracle-block"]
    assert row["n"] == 1 and row["counted_over"] == "measured pass"
    assert row["submitted"] == per_pass, row
    assert [row[c] for c in ("overwritten", "completed", "left")] == [
        summary[f"pass_hints_{c}"][-1] for c in ("overwritten", "completed", "left")]


def test_hints_on_a_cell_without_prefetch_is_refused(local, capsys):
    _, args = local
    assert main(["run", "32M-none-classic", *args, "--hints", "oracle"]) == 2
    assert "has no prefetch" in capsys.readouterr().err
