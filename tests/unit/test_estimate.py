"""Honest estimates (bench.matrix.estimate): the plan's run and reboot times are measured where
earlier runs of the same cell on the same host (and the host's reboots) were, modelled
otherwise, and say which; reboots are counted only where the plan boots a host into a boot it
is not in; the live ETA (bench.execute.progress.fold, on rows as the store returns them)
counts only the reboots still planned and says so when none is left."""

from __future__ import annotations

import pytest

from bench.execute.progress import fold
from bench.matrix.estimate import Estimate, Estimates, sources
from bench.matrix.expand import BootConfig, Candidate, RunRequest
from bench.matrix.schedule import HostState, schedule
from bench.results import campaign_views, plan_views
from bench.store.rows import CampaignRow, JournalRow, RunRow

G = 1 << 30
# the demo's four cells on the local host, at its matrix's 20 s per run and 120 s per reboot
DEMO_CELLS = ("412M-balloon-classic", "412M-none-classic", "256M-cgroup-classic",
              "192M-cgroup-classic")


def demo_requests() -> list[RunRequest]:
    return [RunRequest(c, c, 0, (Candidate("local", c, BootConfig()),), i)
            for i, c in enumerate(DEMO_CELLS)]


def test_measured_is_the_median_of_its_host_and_cell_else_modelled():
    e = Estimates(20.0, 120.0, runs={("local", "a"): [4.0, 3.0, 9.0], ("other", "b"): [1.0]},
                  reboots={"local": [50.0, 70.0]})
    assert e.run("local", "a") == Estimate(4.0, 3)
    assert e.run("local", "a").source == "measured n=3"
    assert e.run("local", "b") == Estimate(20.0) and e.run("local", "b").source == "modelled"
    assert e.reboot("local") == Estimate(60.0, 2) and e.reboot("other") == Estimate(120.0)
    # nonsense measurements (a clock step back, nothing) count for nothing
    assert Estimates(20.0, 1.0, runs={("h", "c"): [-3.0, 0.0]}).run("h", "c") == Estimate(20.0)


def test_sources_say_what_a_sum_rests_on():
    assert sources([Estimate(1.0, 2), Estimate(2.0, 5)]) == "measured (n=2..5)"
    assert sources([Estimate(1.0, 3)] * 2) == "measured (n=3)"
    assert sources([Estimate(1.0), Estimate(1.0)]) == "modelled"
    assert sources([Estimate(1.0, 2), Estimate(1.0)]) == "1 measured (n=2), 1 modelled"
    assert sources([]) == "none"


def test_the_demo_plan_comes_from_its_earlier_runs_and_counts_no_reboot():
    """The demo's plan said 80 s (4 x the modelled 20 s) for runs measured at 4 s each; with
    them measured it says 16 s, measured, and no reboot on a host it never reboots."""
    hosts = [HostState("local", rebootable=False)]
    before = schedule(demo_requests(), hosts, 1, run_seconds=20, reboot_seconds=120)
    assert (before.estimate_s, before.reboots) == (80.0, 0)
    earlier = {("local", c): [4.0, 4.2, 3.8] for c in DEMO_CELLS}
    plan = schedule(demo_requests(), hosts, 1, run_seconds=20, reboot_seconds=120,
                    measured=Estimates(20, 120, earlier, {}))
    assert plan.estimate_s == pytest.approx(16.0) and plan.reboots == 0
    d = plan.as_dict()
    assert d["estimates"]["runs"] == "measured (n=3)" and d["estimates"]["reboots"] == "none"
    assert {r["estimate_source"] for r in d["hosts"][0]["runs"]} == {"measured n=3"}
    assert d["hosts"][0]["reboot_estimate"] == "no reboot"
    text = plan_views.estimates_text(d["estimates"])
    assert text == "runs measured (n=3); no reboot" and "reboot" not in text.replace(
        "no reboot", "")


def test_a_rebooting_plan_counts_the_hosts_measured_reboot():
    hosts = [HostState("h", current=BootConfig())]
    reqs = [RunRequest("c@h", "c", 0, (Candidate("h", "64G-memboot-mglru", BootConfig(70 * G)),),
                       0)]
    plan = schedule(reqs, hosts, 1, run_seconds=10, reboot_seconds=600,
                    measured=Estimates(0, 0, {}, {"h": [90.0, 110.0]}))
    assert plan.reboots == 1 and plan.estimate_s == 10 + 100
    h = plan.as_dict()["hosts"][0]
    assert (h["reboot_estimate_s"], h["reboot_estimate"]) == (100.0, "measured n=2")
    assert plan.as_dict()["estimates"]["reboots"] == "measured (n=2)"


T0 = "2026-12-06T05:00:00+00:00"


def _t(s: float) -> str:
    """An ISO time s seconds after T0 (s < 3600)."""
    return f"2026-12-06T05:{int(s) // 60:02d}:{s % 60:06.3f}+00:00"


def _campaign(reboot_before: list[bool], estimate_n: int = 0):
    runs = [RunRow(f"c-local-{i:03d}", "local", c, "planned", i + 1, 0, ref=i + 1)
            for i, c in enumerate(DEMO_CELLS)]
    rec = {"hosts": ["local"], "estimates": {"run_seconds": 20, "reboot_seconds": 120,
                                             "reboots_by_host": {"local": {"seconds": 120,
                                                                           "n": 0}}},
           "runs": {r.run_id: {"boot": {"label": "default"}, "reboot_before": rb,
                               "estimate_s": 4.0 if estimate_n else 20.0,
                               "estimate_n": estimate_n}
                    for r, rb in zip(runs, reboot_before)}}
    journal = [JournalRow(1, T0, "plan", "plan", rec)]
    return CampaignRow("c", "demo", 1, "running"), runs, journal


def _advance(runs, journal, i: int, start: float, end: float) -> None:
    """Run i through the state machine from `start` to its verdict at `end`."""
    r = runs[i]
    for t, a, b in ((start, "planned", "boot_verified"), (start, "boot_verified", "deployed"),
                    (start, "deployed", "running"), (end, "running", "collected"),
                    (end, "collected", "validated")):
        journal.append(JournalRow(len(journal) + 1, _t(t), "state", f"{r.run_id}: {a} -> {b}",
                                  {"from": a, "to": b}, r.ref))
    runs[i] = RunRow(r.run_id, r.host, r.cell, "validated", r.position, 0, ref=r.ref)


def test_live_eta_on_a_host_that_never_reboots_shows_no_reboot():
    camp, runs, journal = _campaign([False] * 4)
    p = fold(camp, runs, journal, None, now=0).as_dict()
    assert p["reboots_left"] == 0 and p["eta_s"] == 80.0 and p["run_source"] == "modelled"
    line = campaign_views.eta_basis(p)
    assert line == "run ~0m 20s modelled, no reboot left" and "reboot ~" not in line
    # two runs done in 4 s each: the rest is estimated from them, measured
    _advance(runs, journal, 0, 0.0, 4.0)
    _advance(runs, journal, 1, 4.0, 8.0)
    p = fold(camp, runs, journal, None, now=8.0).as_dict()
    # the other two cells, not measured yet: this campaign's runs of any cell, measured
    assert p["eta_s"] == 2 * 4.0 and p["run_source"] == "measured (n=2)"
    assert p["reboots_left"] == 0


def test_live_eta_uses_the_plans_measured_estimates_and_its_planned_reboots():
    camp, runs, journal = _campaign([False, False, True, False], estimate_n=3)
    p = fold(camp, runs, journal, None, now=0).as_dict()
    assert p["eta_s"] == 4 * 4.0 + 120.0 and p["reboots_left"] == 1
    assert p["run_source"] == "measured (n=3)" and p["reboot_source"] == "modelled"
    assert campaign_views.eta_basis(p) == ("run ~0m 04s measured (n=3), 1 reboot ~2m 00s "
                                              "modelled")
