"""The plausibility rules (bench.judge.rules_plausible; issue 22, item 1) on bundles made from
real captured /proc output (tests/support/bundlegen.py), each then edited the way a broken or
hostile host would: a clean run passes, the edited one fails with the named rule and a reason
that says which number is impossible and against what bound. The issue's hostile bundles go
through the real `bench ingest` into a SQLite database made by the migrations and are stored
rejected. (`--nominal-gb -1/inf/nan` is refused at the command line before anything is stored:
tests/unit/test_float_options.py::test_ingest_refuses_a_hostile_nominal_gb_and_stores_nothing.)
"""

from __future__ import annotations

import re

import pytest

from bench.judge import retention
from bench.judge.bundle import load, read_dir
from bench.judge.measured import metrics, served_fraction
from bench.judge.rules_plausible import (DEVICE_CEILING_BPS, MAX_ITERATION_NS,
                                         MEMORY_CEILING_BPS)

INT63 = (1 << 63) - 1


def _records(p):
    return [r for r in p["agent.jsonl"] if not r.get("summary")]


def _summary(p):
    return p["agent.jsonl"][-1]


def _every_wall(ns):
    def edit(p):
        for r in _records(p):
            r["wall_ns"] = ns
    return edit


def _bytes_without_totals(p):
    """The issue's third hostile bundle: every record says 2^56 bytes, the summary 0."""
    for r in _records(p):
        r["bytes"] = 1 << 56
    _summary(p)["pass_bytes"] = [0, 0]


def _pass_bytes_off(p):
    _summary(p)["pass_bytes"][1] += 4096


def _slowed_consistently(p):
    """Every wall 20 times longer, the summary's pass walls with them: the agent's story
    agrees with itself but not with the runner's clock (status.json, timeline.csv)."""
    for r in _records(p):
        r["wall_ns"] *= 20
    sm = _summary(p)
    sm["pass_wall_ns"] = [sum(r["wall_ns"] for r in _records(p) if r["pass"] == q) + 50_000
                          for q in (0, 1)]


def _device(name):
    """The pool device renamed (host.json and every diskstats snapshot): the captured vda
    counters become an NVMe drive's, which no page cache of another machine serves."""
    def edit(p):
        p["host.json"]["pool_device"].update(name=name, leaves=[name])
        for snap in p["snapshots"].values():
            if "proc_diskstats" in snap:
                snap["proc_diskstats"] = re.sub(r"\bvda\b", name, snap["proc_diskstats"])
    return edit


def _device_read(extra_bytes, name=None):
    """The measured pass's device reads raised by extra_bytes (pass1-end and post)."""
    def edit(p):
        dev = name or "vda"
        if name:
            _device(name)(p)
        for phase in ("pass1-end", "post"):
            snap = p["snapshots"][phase]
            snap["proc_diskstats"] = re.sub(
                rf"^(\s*\d+\s+\d+\s+{dev}\s+\d+\s+\d+\s+)(\d+)",
                lambda m: m[1] + str(int(m[2]) + extra_bytes // 512), snap["proc_diskstats"],
                flags=re.M)
    return edit


# rule -> (cell, edit, a phrase of the reason); each edit fails that rule and no other
FAULTS = {
    "numbers_possible": ("64Mi-cgroup-mglru", lambda p: _summary(p).update(expert_bytes=0),
                         "expert_bytes 0 is not positive"),
    "totals_agree": ("64Mi-cgroup-mglru", _pass_bytes_off, "the summary's pass_bytes is"),
    "walls_within_spans": ("64Mi-cgroup-mglru", _slowed_consistently,
                           "longer than the run's span in status.json"),
    "throughput_possible": ("64Mi-cgroup-mglru", _every_wall(1), "above the memory ceiling"),
}


@pytest.mark.parametrize("cell", ["64Mi-cgroup-mglru", "64Mi-balloon-mglru",
                                  "64Mi-cgroup-mglru-pinned", "64Mi-none-mglru",
                                  "e2e-prose-admit"])
def test_a_clean_run_passes_the_plausibility_rules(bundles, cell):
    b = load(read_dir(bundles("r1", cell)))
    got = {v.rule: v for v in retention.evaluate(b) if v.rule in FAULTS}
    kind = retention.run_kind(b)
    assert set(got) == {r.name for r in retention.RULES if r.name in FAULTS and kind in r.kinds}
    assert all(v.passed for v in got.values()), got


@pytest.mark.parametrize("rule", sorted(FAULTS))
def test_an_edited_run_fails_its_plausibility_rule_alone(bundles, rule):
    cell, edit, says = FAULTS[rule]
    b = load(read_dir(bundles("r1", cell, edit=edit)))
    failed = {v.rule: v.reason for v in retention.evaluate(b) if not v.passed}
    assert set(failed) == {rule}, failed
    assert says in failed[rule], failed[rule]


@pytest.mark.parametrize("edit, says", [
    (_every_wall(INT63), "wall 9223372036.855 s is longer than a day"),
    (_bytes_without_totals, "is more than 1 PB in one iteration"),
    (lambda p: _summary(p).update(pass_wall_ns=[8 * 86_400 * 10**9] * 2),
     "wall 691200.000 s is longer than a week"),
    (_every_wall(MAX_ITERATION_NS + 1), "wall 86400.000 s is longer than a day"),
])
def test_numbers_possible_refuses_what_is_out_of_its_stated_limits(bundles, edit, says):
    b = load(read_dir(bundles("r1", edit=edit)))
    v = {v.rule: v for v in retention.evaluate(b)}["numbers_possible"]
    assert not v.passed and says in v.reason, v.reason
    assert v.version == 3


@pytest.mark.parametrize("edit, says", [
    (lambda p: _summary(p)["pass_reads"].__setitem__(0, 5), "pass 0: the summary's pass_reads "
                                                            "is 5, its records sum to 1152"),
    (lambda p: _summary(p).__setitem__("pass_wall_ns", [1000, 1000]),
     "pass 0: the summary's pass wall 1000 ns is shorter than its iterations' walls"),
    (lambda p: _summary(p)["pass_wall_ns"].__setitem__(1, 30 * 10**9),
     "exceeds its iterations' walls"),
    (lambda p: _summary(p).pop("pass_bytes"), "the agent summary has no pass_bytes"),
])
def test_totals_agree_compares_every_pass_total_with_its_records(bundles, edit, says):
    b = load(read_dir(bundles("r1", edit=edit)))
    v = {v.rule: v for v in retention.evaluate(b)}["totals_agree"]
    assert not v.passed and says in v.reason, v.reason


def test_walls_within_spans_reads_the_history_and_the_timeline(bundles):
    """A pass longer than the whole run: the run's span in status.json says so first; with
    the history stretched to fit, the timeline (the runner's samples) still does."""
    def long_pass(p):
        _summary(p)["pass_wall_ns"][0] = 3600 * 10**9
    b = load(read_dir(bundles("r1", edit=long_pass)))
    v = {v.rule: v for v in retention.evaluate(b)}["walls_within_spans"]
    assert not v.passed and "pass 0 took 3600.000 s, longer than the run's span" in v.reason

    def history_fits(p):
        _slowed_consistently(p)
        walls = _summary(p)["pass_wall_ns"]
        hist = {h["phase"]: h for h in p["status.json"]["history"]}
        base = hist["warmup"]["mono_ns"]
        hist["measuring"]["mono_ns"] = base + walls[0] + 10**6
        for i, ph in enumerate(("collecting", "done")):
            hist[ph]["mono_ns"] = base + sum(walls) + (i + 1) * 10**7
    b = load(read_dir(bundles("r2", edit=history_fits)))
    v = {v.rule: v for v in retention.evaluate(b)}["walls_within_spans"]
    assert not v.passed and "the timeline's span" in v.reason, v.reason


def test_walls_within_spans_judges_an_engine_run_by_the_runs_span(bundles):
    def engine_slow(p):
        e = p["engine.json"]
        e.update(wall_s=600.0, end_mono_ns=e["start_mono_ns"] + 600 * 10**9)
    b = load(read_dir(bundles("e1", "e2e-prose-admit", edit=engine_slow)))
    failed = {v.rule: v.reason for v in retention.evaluate(b) if not v.passed}
    assert "walls_within_spans" in failed, failed
    assert "the engine took 600.000 s, longer than the run's span" in \
        failed["walls_within_spans"]


def test_throughput_names_the_bound_it_used(bundles):
    """The same extra device reads (1 TB in the measured pass, about 1.6 TB/s): within the
    memory ceiling on vda (a virtual disk: the hypervisor's page cache may serve it), above
    the generic device ceiling once the device is an NVMe drive with no measured bandwidth,
    and above 4 x a measured bandwidth passed in the context."""
    extra = 10**12
    on_vda = load(read_dir(bundles("r1", edit=_device_read(extra))))
    v = {v.rule: v for v in retention.evaluate(on_vda)}["throughput_possible"]
    assert v.passed and "the memory ceiling 10 TB/s: vda may be served" in v.reason, v.reason
    nvme = load(read_dir(bundles("r2", edit=_device_read(extra, "nvme0n1"))))
    v = {v.rule: v for v in retention.evaluate(nvme)}["throughput_possible"]
    assert not v.passed and "above the generic device ceiling 250 GB/s: no bandwidth measured " \
                            "for nvme0n1" in v.reason, v.reason
    plain = load(read_dir(bundles("r3", edit=_device("nvme0n1"))))
    ctx = {"device_bandwidth": {"bytes_per_s": 1e6, "device": "nvme0n1",
                                "measured_at": "2026-12-01T00:00:00+00:00", "id": 1}}
    v = {v.rule: v for v in retention.evaluate(plain, ctx)}["throughput_possible"]
    assert not v.passed and "above 4 x the 0.001 GB/s `bench hosts bandwidth` measured on " \
                            "nvme0n1" in v.reason, v.reason
    v = {v.rule: v for v in retention.evaluate(plain)}["throughput_possible"]
    assert v.passed and "generic device ceiling" in v.reason
    assert DEVICE_CEILING_BPS < extra / 0.7 < MEMORY_CEILING_BPS


def test_ingest_bounds_device_throughput_by_the_hosts_stored_bandwidth(store, bundles):
    """A measurement `bench hosts bandwidth` stored for this host and device becomes the bound
    at ingest and at recheck; a measurement of another device does not."""
    from bench.store.bandwidth import store_bandwidth
    from bench.store.ingest import ingest_bundle, recheck
    from bench.store.queries import list_runs
    res = ingest_bundle(store, bundles("r1", edit=_device("nvme0n1")))
    assert res["retained"], res

    def measured(device, cold_bytes_per_s):
        return {"host": "fixture-a", "boot_id": "b" * 32, "cmdline": "ro", "device": device,
                "mem_total_bytes": 1 << 30, "mglru": None, "pool_dir": "/var/tmp/pool",
                "fingerprint": {"digest": "f" * 16}, "threads": 2, "bytes_per_pass": 10**9,
                "cold": {"seconds": 10**9 / cold_bytes_per_s, "device_bytes": 10**9},
                "warm": {"seconds": 0.1, "device_bytes": 0}}
    store_bandwidth(store, measured("sdz", 1e6))            # another device: no bound
    assert recheck(store) == []
    store_bandwidth(store, measured("nvme0n1", 1e6))        # 1 MB/s: the run read faster
    changes = recheck(store)
    assert [(c["rule"], c["new"]["passed"]) for c in changes] == [("throughput_possible", False)]
    assert "`bench hosts bandwidth` measured on nvme0n1" in changes[0]["reason"]
    assert list_runs(store, rejected=True)[0]["failed"] == ["throughput_possible"]
    res = ingest_bundle(store, bundles("r2", edit=_device("nvme0n1")))
    assert res["failed"] == ["throughput_possible"]


def test_served_fraction_stays_in_0_1_by_construction():
    assert served_fraction(0, 100) == 1.0
    assert served_fraction(25, 100) == 0.75
    assert served_fraction(100, 100) == 0.0
    assert served_fraction(10**18, 1) == 0.0           # amplification: every byte from the device
    assert served_fraction(-1, 100) is None             # a counter went backwards: no figure
    assert served_fraction(5, 0) is None
    for dev in (0, 1, 3, 7, 2**53 + 1, 2**60):
        for logical in (1, 3, 2**53 - 1, 2**53 + 1, 2**61 - 1):
            assert 0.0 <= served_fraction(dev, logical) <= 1.0


def test_amplification_serves_nothing_and_shows_in_the_device_bytes(bundles):
    """Device bytes above the logical bytes (readahead of a larger block than the reads):
    retained, served 0, the excess seen in device bytes per iteration above logical."""
    logical = 2 * (192 << 20)
    b = load(read_dir(bundles("r1", edit=_device_read(4 * logical))))
    assert retention.retained(retention.evaluate(b))
    m = metrics(b)
    assert m["served_fraction"] == 0.0
    assert m["device_bytes_per_iteration"] > m["logical_bytes_per_iteration"]


# the hostile bundles, through `bench ingest` ---------------------------------------------

HOSTILE = {
    "every-wall-1ns": (_every_wall(1), {"throughput_possible"}),
    "every-wall-int63": (_every_wall(INT63), {"numbers_possible", "walls_within_spans",
                                               "totals_agree"}),
    "bytes-2^56-summary-0": (_bytes_without_totals, {"numbers_possible", "totals_agree",
                                                     "throughput_possible"}),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_bundle_is_stored_rejected_by_bench_ingest(tmp_path, capsys, name):
    from bench.cli.app import main
    from bench.store.db import open_store
    from bench.store.queries import list_runs
    from tests.support.bundlegen import make_bundle
    edit, rules = HOSTILE[name]
    bundle = make_bundle(tmp_path / "bundles", "r-hostile-1", "64Mi-cgroup-mglru", edit=edit,
                         campaign=None)
    db = tmp_path / "results.db"
    assert main(["ingest", str(bundle), "--db", str(db)]) == 0
    capsys.readouterr()
    store = open_store(str(db), write=False)
    try:
        (run,) = list_runs(store)
    finally:
        store.close()
    assert run["retained"] is False
    assert set(run["failed"]) == rules, run["failed"]
    for v in run["verdicts"]:
        if v["rule"] in rules:
            assert v["reason"] and not v["passed"]


def test_throughput_bounds_an_engine_runs_device_reads_over_its_span(bundles):
    """An engine run's device bytes (pre -> post) over the run's span in status.json: 1 PB in
    about 12 s is above the generic ceiling of an NVMe drive with no measured bandwidth."""
    def edit(p):
        _device("nvme0n1")(p)
        snap = p["snapshots"]["post"]
        snap["proc_diskstats"] = re.sub(
            r"^(\s*\d+\s+\d+\s+nvme0n1\s+\d+\s+\d+\s+)(\d+)",
            lambda m: m[1] + str(int(m[2]) + 10**15 // 512), snap["proc_diskstats"], flags=re.M)
    clean = load(read_dir(bundles("e1", "e2e-prose-admit", edit=_device("nvme0n1"))))
    v = {v.rule: v for v in retention.evaluate(clean)}["throughput_possible"]
    assert v.passed and "generic device ceiling" in v.reason, v.reason
    b = load(read_dir(bundles("e2", "e2e-prose-admit", edit=edit)))
    failed = {v.rule: v.reason for v in retention.evaluate(b) if not v.passed}
    assert set(failed) == {"throughput_possible"}, failed
    assert "above the generic device ceiling 250 GB/s" in failed["throughput_possible"]
