"""The scheduler: a pure function on fake fleets. Properties (hypothesis): every run exactly once,
reboots = the lower bound, same seed same plan, different seeds usually differ, host
constraints honoured, repetitions interleaved within a boot group. Plus the golden dry-run."""

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.cli import main
from bench.errors import InputError
from bench.matrix.expand import BootConfig, Candidate, RunRequest
from bench.matrix.schedule import HostState, reboot_lower_bound, schedule
from tests.support.facts import DEBIAN, fixture_facts, gh200_facts, write_facts

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).resolve().parent / "golden"
REGEN = os.environ.get("BENCH_REGEN_GOLDEN") == "1"
G = 1 << 30

BOOTS = [BootConfig(), BootConfig(102 * G), BootConfig(348 * G), BootConfig(None, "off"),
         BootConfig(102 * G, "on")]


@st.composite
def fleets(draw):
    n_hosts = draw(st.integers(1, 4))
    hosts = [HostState(f"h{i}", current=draw(st.sampled_from(BOOTS[:2] + [BOOTS[3]])),
                       default_mglru=draw(st.sampled_from([None, "on", "off"])))
             for i in range(n_hosts)]
    names = [h.name for h in hosts]
    requests = []
    for u in range(draw(st.integers(0, 12))):
        placement_one = draw(st.booleans())
        reps = draw(st.integers(1, 3))
        boot = draw(st.sampled_from(BOOTS))
        cell = f"{u + 1}g-cgroup-mglru"
        if placement_one:
            hs = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
            cands = tuple(Candidate(h, cell, boot) for h in sorted(hs))
            requests += [RunRequest(f"p{u}", f"p{u}", r, cands, u) for r in range(reps)]
        else:
            for h in draw(st.lists(st.sampled_from(names), min_size=1, unique=True)):
                requests += [RunRequest(f"p{u}@{h}", f"p{u}", r, (Candidate(h, cell, boot),), u)
                             for r in range(reps)]
    return hosts, requests


FLEET = settings(max_examples=150, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow])


@FLEET
@given(fleets(), st.integers(0, 2**31), st.booleans(), st.booleans())
def test_plan_properties(fleet, seed, randomize, interleave):
    hosts, requests = fleet
    plan = schedule(requests, hosts, seed, randomize=randomize, interleave=interleave,
                    campaign="c", run_seconds=10, reboot_seconds=100)
    runs = plan.runs
    # every run exactly once: each request maps to one scheduled run on one of its candidates
    assert len(runs) == len(requests)
    got = sorted((r.point, r.rep, r.cell) for r in runs)
    assert got == sorted((q.point, q.rep, q.candidates[0].cell) for q in requests)
    by_unit_host = {}
    for q in requests:
        allowed = {c.host for c in q.candidates}
        matches = [r for r in runs if r.point == q.point and r.rep == q.rep
                   and r.host in allowed]
        assert matches, "constraint violated or run lost"
    # repetitions of one unit on one host; 'each' units on their host
    for r in runs:
        by_unit_host.setdefault(r.point, set()).add(r.host)
    for q in requests:
        if len(q.candidates) > 1:
            assert len(by_unit_host[q.point]) == 1
    hmap = {h.name: h for h in hosts}
    ids = [r.run_id for r in runs]
    assert len(set(ids)) == len(ids)
    for hp in plan.hosts:
        h = hmap[hp.host]
        assert [r.position for r in hp.runs] == list(range(1, len(hp.runs) + 1))
        # reboots equal the lower bound (distinct boots, minus one if the current one is among them)
        assert hp.reboots == reboot_lower_bound([r.boot for r in hp.runs], h) == hp.lower_bound
        assert hp.reboots == sum(r.reboot_before for r in hp.runs)
        # each boot config forms one contiguous group
        seq = [r.boot for r in hp.runs]
        groups = [b for i, b in enumerate(seq) if i == 0 or seq[i - 1] != b]
        assert len(groups) == len(set(seq))
        if interleave:
            for i, a in enumerate(hp.runs):
                for b in hp.runs[i + 1:]:
                    if a.boot == b.boot:
                        assert a.rep <= b.rep
        assert hp.estimate_s == pytest.approx(10 * len(hp.runs) + 100 * hp.reboots)
    # same seed, same plan
    again = schedule(requests, hosts, seed, randomize=randomize, interleave=interleave,
                     campaign="c", run_seconds=10, reboot_seconds=100)
    assert again.as_dict() == plan.as_dict()


def _fleet(n_cells=12, reps=3):
    hosts = [HostState("a"), HostState("b")]
    reqs = []
    for u in range(n_cells):
        for h in ("a", "b"):
            c = Candidate(h, f"{u + 1}g-balloon-mglru", BootConfig())
            reqs += [RunRequest(f"p{u}@{h}", f"p{u}", r, (c,), u) for r in range(reps)]
    return hosts, reqs


def test_different_seeds_usually_differ_and_hosts_are_counterbalanced():
    hosts, reqs = _fleet()
    orders = {tuple(r.cell for r in schedule(reqs, hosts, s).hosts[0].runs) for s in range(20)}
    assert len(orders) >= 19
    plan = schedule(reqs, hosts, 1)
    assert [r.cell for r in plan.hosts[0].runs] != [r.cell for r in plan.hosts[1].runs]


def test_not_randomized_keeps_matrix_order_and_back_to_back_reps():
    hosts, reqs = _fleet(3, 2)
    plan = schedule(reqs, hosts[:1] + [HostState("b")], 5, randomize=False, interleave=False)
    assert [(r.cell, r.rep) for r in plan.hosts[0].runs] == [
        ("1g-balloon-mglru", 0), ("1g-balloon-mglru", 1), ("2g-balloon-mglru", 0),
        ("2g-balloon-mglru", 1), ("3g-balloon-mglru", 0), ("3g-balloon-mglru", 1)]


def test_flexible_cells_balance_load():
    hosts = [HostState("a"), HostState("b"), HostState("c")]
    reqs = []
    for u in range(9):
        cands = tuple(Candidate(h, f"{u + 1}g-cgroup-mglru", BootConfig()) for h in "abc")
        reqs += [RunRequest(f"p{u}", f"p{u}", r, cands, u) for r in range(2)]
    plan = schedule(reqs, hosts, 3)
    assert [len(h.runs) for h in plan.hosts] == [6, 6, 6]


def test_flexible_cells_avoid_extra_reboots():
    hosts = [HostState("a"), HostState("b")]
    mem = BootConfig(102 * G)
    reqs = [RunRequest("x@a", "x", 0, (Candidate("a", "93g-memboot-mglru", mem),), 0),
            RunRequest("y", "y", 0, (Candidate("a", "94g-memboot-mglru", mem),
                                     Candidate("b", "94g-memboot-mglru", mem)), 1)]
    reqs += [RunRequest(f"z{i}@b", f"z{i}", 0, (Candidate("b", f"{i + 1}g-cgroup-mglru",
                                                          BootConfig()),), 2 + i)
             for i in range(3)]
    # a: 660 s (one reboot + one run), b: 180 s. y on b would cost b a reboot (840 s > 720 s)
    plan = schedule(reqs, hosts, 0, run_seconds=60, reboot_seconds=600)
    assert plan.reboots == 1 and len(plan.hosts[0].runs) == 2


def test_current_boot_goes_first_and_costs_nothing():
    h = HostState("a", current=BootConfig(102 * G))
    reqs = [RunRequest(f"u{i}", f"u{i}", 0, (Candidate("a", f"{i + 1}g-cgroup-mglru", b),), i)
            for i, b in enumerate([BootConfig(), BootConfig(102 * G), BootConfig(348 * G)])]
    plan = schedule(reqs, [h], 11)
    assert plan.hosts[0].boots[0] == BootConfig(102 * G) and plan.reboots == 2
    # an explicit bench.lru_gen equal to the kernel's default costs no reboot either
    h2 = HostState("a", default_mglru="on")
    reqs2 = [RunRequest("u", "u", 0, (Candidate("a", "1g-cgroup-mglru", BootConfig(None, "on")),))]
    assert schedule(reqs2, [h2], 0).reboots == 0


def test_bad_inputs():
    hosts, reqs = _fleet(1, 1)
    with pytest.raises(InputError, match="not among the scheduled hosts"):
        schedule(reqs, hosts[:1], 0)
    with pytest.raises(InputError, match="seed"):
        schedule(reqs, hosts, "x")
    with pytest.raises(Exception, match="may not be rebooted"):
        schedule([RunRequest("u", "u", 0, (Candidate("a", "1g-memboot-mglru",
                                                     BootConfig(10 * G)),))],
                 [HostState("a", rebootable=False)], 0)


# golden dry-run --------------------------------------------------------------------------------

def _small_lab(tmp_path):
    d = tmp_path / "hosts"
    d.mkdir()
    for n in ("lab-a", "lab-b"):
        (d / f"{n}.toml").write_text(
            f'name = "{n}"\naddress = "10.0.0.{len(n)}"\ntransport = "ssh"\n[tags]\nlab = "vm"\n'
            '[memory]\ntotal = "3Gi"\nfloor = "1Gi"\n[reboot]\nallowed = true\nmethod = "kexec"\n')
    return d


CASES = {
    "schedule-reclaim-gh200-seed7.txt": lambda tmp: ["--matrix", "reclaim", "--hosts",
                                                     "gh200-a,gh200-b", "--hosts-dir",
                                                     str(ROOT / "hosts"), "--seed", "7",
                                                     "--facts", gh200_facts(tmp)],
    "schedule-smoke-lab-seed3.txt": lambda tmp: [
        "--matrix", "smoke", "--hosts-dir", str(_small_lab(tmp)), "--seed", "3", "--facts",
        str(write_facts(tmp / "facts.json", {n: fixture_facts(DEBIAN)
                                             for n in ("lab-a", "lab-b")}))],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_dry_run_golden(name, tmp_path, capsys):
    """Regenerate with BENCH_REGEN_GOLDEN=1 (then review the diff)."""
    # a database that does not exist: every estimate modelled, whatever $BENCH_DB holds
    rc = main(["schedule", *CASES[name](tmp_path), "--dry-run", "--db",
               str(tmp_path / "absent.db")])
    out = capsys.readouterr()
    assert rc == 0, out.err
    path = GOLDEN / name
    if REGEN:
        path.write_text(out.out)
    assert path.exists(), f"missing {path}: run with BENCH_REGEN_GOLDEN=1"
    assert out.out == path.read_text(), f"dry-run plan changed; if intended, regenerate {name}"


def test_dry_run_json(capsys, tmp_path):
    args = ["schedule", "--matrix", "reclaim", "--hosts", "gh200-a,gh200-b", "--hosts-dir",
            str(ROOT / "hosts"), "--seed", "7", "--facts", gh200_facts(tmp_path)]
    assert main(args + ["--dry-run", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["seed"] == 7 and d["runs"] == 66 and d["reboots"] == 4
    assert [h["reboots"] for h in d["hosts"]] == [2, 2]
    assert d["hosts"][0]["runs"][0]["run_id"] == "reclaim-s7-gh200-a-001"
