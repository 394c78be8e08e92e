"""The executor's run state machine, pure: what a resuming controller does with a run in each
state, and which transitions the executor may make."""

import pytest

from bench.execute.campaign import (STATES, TERMINAL, TRANSITIONS, can_transition, plan_record,
                                    resume_action, Settings)
from bench.errors import InputError


@pytest.mark.parametrize("state, has_spec, attempts, want", [
    ("validated", True, 0, "skip"),
    ("rejected", True, 0, "skip"),
    ("collected", True, 0, "ingest"),
    ("ingested", True, 0, "ingest"),          # killed between ingest and the verdict
    ("running", True, 0, "reattach"),
    ("running", False, 0, "reattach"),        # killed right after writing `running`
    ("planned", False, 0, "redo"),
    ("booting", False, 0, "redo"),            # reboot again only if the boot still differs
    ("boot_verified", False, 0, "redo"),
    ("deployed", False, 0, "redo"),           # deploy/plan/pool are idempotent
    ("pending", False, 0, "redo"),            # its host was quarantined; try again
    ("pending", True, 0, "reattach"),         # quarantined mid-run: it may have finished
    ("failed", False, 1, "redo"),
    ("failed", True, 2, "reattach"),
    ("failed", False, 3, "give-up"),          # 1 + 2 retries spent
    ("failed", True, 3, "give-up"),
])
def test_resume_action(state, has_spec, attempts, want):
    assert resume_action(state, has_spec, attempts, retries=2) == want


def test_retries_bound_is_configurable():
    assert resume_action("failed", False, 1, retries=0) == "give-up"
    assert resume_action("failed", False, 5, retries=5) == "redo"


def test_unknown_state_is_an_error():
    with pytest.raises(InputError):
        resume_action("exploded", False)


def test_every_state_has_transitions_and_terminal_states_are_final():
    for s in STATES:
        assert s in TRANSITIONS
    for s in TERMINAL:
        assert TRANSITIONS[s] == ()
        assert resume_action(s, True) == "skip"


def test_forward_path_and_failures():
    path = ["planned", "booting", "boot_verified", "deployed", "running", "collected",
            "validated"]
    for a, b in zip(path, path[1:]):
        assert can_transition(a, b), (a, b)
    assert can_transition("planned", "boot_verified")      # no reboot needed
    assert can_transition("collected", "rejected")
    for s in ("planned", "booting", "boot_verified", "deployed", "running", "collected"):
        assert can_transition(s, "failed")
    assert not can_transition("validated", "running")
    assert not can_transition("planned", "running")         # never start before deploy
    assert not can_transition("running", "validated")       # never judge before collecting
    assert not can_transition("planned", "collected")


def test_resume_never_restarts_a_started_run_from_the_top():
    # anything holding a spec (the runner may have it) is re-attached, never redone
    for s in STATES:
        if s in TERMINAL:
            continue
        a = resume_action(s, True, 0)
        assert a in ("reattach", "ingest"), (s, a)


def test_plan_record_keeps_candidates_for_hand_over():
    from types import SimpleNamespace as NS
    from bench.matrix.expand import BootConfig, Candidate, RunRequest
    from bench.matrix.schedule import HostState, schedule
    cands = (Candidate("a", "1g-none-classic", BootConfig()),
             Candidate("b", "2g-none-classic", BootConfig()))
    reqs = [RunRequest("p", "1x", r, cands) for r in range(2)] + \
        [RunRequest("q@a", "q", 0, (Candidate("a", "4g-none-classic", BootConfig()),))]
    plan = schedule(reqs, [HostState("a"), HostState("b")], 1, campaign="c")
    m = NS(name="m", workload={"trace": "tiny"})
    rec = plan_record(plan, NS(requests=reqs), m, ["a", "b"], Settings(), "m")
    assert rec["order"] == [r.run_id for r in plan.runs]
    for rid, r in rec["runs"].items():
        if r["point"] == "1x":
            assert r["placement"] == "one" and {c["host"] for c in r["candidates"]} == {"a", "b"}
        else:
            assert r["placement"] == "each" and [c["host"] for c in r["candidates"]] == ["a"]


def test_run_options_take_the_matrixs_protocol_unless_settings_override(tmp_path):
    """The cgroup headroom and balloon cap travel matrix -> campaign record -> run options (a
    lab-scale wall of C + 16M, not C + 6G); explicit settings win."""
    from bench.cli.campaign import build_plan
    from bench.execute.campaign import Executor, create
    from bench.hosts.inventory import load_inventory
    from bench.store.campaign_exec import run_rows
    from bench.store.db import open_store
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    (hosts / "lab-a.toml").write_text(
        'name = "lab-a"\naddress = "127.0.0.1"\ntransport = "ssh"\n[tags]\nmachine = "A"\n'
        '[memory]\ntotal = "1536M"\nfloor = "512M"\n[reboot]\nallowed = true\nmethod = "kexec"\n')
    plan, exp, m = build_plan("reclaim", ["lab-a"], hosts, 3, "c1", scale="lab")
    store = open_store(f"sqlite:///{tmp_path / 'b.db'}")
    try:
        cid = create(store, plan, exp, m, ["lab-a"], Settings(), "reclaim")
        inv = load_inventory(hosts)
        for over, headroom in (({}, 16 << 20), ({"cgroup_headroom_bytes": 64 << 20}, 64 << 20)):
            ex = Executor(store, cid, Settings(**over), inventory=inv)
            ex.rows = {r["run_id"]: r for r in run_rows(store, cid)}
            rid = next(r for r, v in ex.rows.items() if "cgroup" in v["cell"])
            assert ex._options("lab-a", rid).cgroup_headroom_bytes == headroom
            assert ex.rec["scale"] == "lab"
    finally:
        store.close()
