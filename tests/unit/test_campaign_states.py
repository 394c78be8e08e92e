"""The run state machine, pure: what a resuming controller does with a run in each state and
which moves are refused. (That the executor and the store go through it is tested on real
parts: tests/local/store/test_ingest.py, tests/local/execute/.)"""

import pytest

from bench.errors import InputError
from bench.execute.campaign.record import Settings, campaign_record, resume_action
from bench.store.states import (INITIAL, STATES, TERMINAL, TRANSITIONS, IllegalTransition,
                                check_transition)


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


def test_every_state_is_reachable_and_terminal_states_are_final():
    """Each state but the initial ones is the target of some legal move, and nothing leaves a
    terminal state (so a judged run can never be re-run or re-judged by the executor)."""
    targets = {b for a in STATES for b in TRANSITIONS[a]}
    assert set(STATES) - set(INITIAL) <= targets
    for s in TERMINAL:
        assert resume_action(s, True) == "skip"
        for new in STATES:
            with pytest.raises(IllegalTransition):
                check_transition("r", s, new)


@pytest.mark.parametrize("old, new", [
    ("planned", "running"),       # never start before deploy
    ("running", "validated"),     # never judge before collecting
    ("planned", "collected"),
    ("deployed", "collected"),
    ("collected", "running"),     # a collected bundle is never run again
    ("validated", "planned"),     # nor a judged run handed over
])
def test_illegal_moves_are_refused_with_the_legal_ones_named(old, new):
    with pytest.raises(IllegalTransition) as e:
        check_transition("r7", old, new)
    assert f"r7: {old} -> {new}" in e.value.message
    assert e.value.hint.startswith(f"from {old} a run may go to")


def test_unknown_states_are_refused():
    with pytest.raises(IllegalTransition, match="unknown run state"):
        check_transition("r", "planned", "exploded")


def test_resume_never_restarts_a_started_run_from_the_top():
    # anything holding a spec (the runner may have it) is re-attached, never redone
    for s in STATES:
        if s in TERMINAL:
            continue
        a = resume_action(s, True, 0)
        assert a in ("reattach", "ingest"), (s, a)


def test_campaign_record_keeps_candidates_for_hand_over():
    from types import SimpleNamespace as NS

    from bench.matrix.expand import BootConfig, Candidate, RunRequest
    from bench.matrix.schedule import HostState, schedule
    cands = (Candidate("a", "1g-none-classic", BootConfig()),
             Candidate("b", "2g-none-classic", BootConfig()))
    reqs = [RunRequest("p", "1x", r, cands) for r in range(2)] + \
        [RunRequest("q@a", "q", 0, (Candidate("a", "4g-none-classic", BootConfig()),))]
    plan = schedule(reqs, [HostState("a"), HostState("b")], 1, campaign="c")
    m = NS(name="m", workload={"trace": "tiny"}, scale=None, protocol={}, engine=None)
    rec = campaign_record(plan, NS(requests=reqs, skipped=[], skipped_runs=0), m, ["a", "b"], Settings(), "m")
    assert rec["order"] == [r.run_id for r in plan.runs]
    for rid, r in rec["runs"].items():
        if r["point"] == "1x":
            assert r["placement"] == "one" and {c["host"] for c in r["candidates"]} == {"a", "b"}
        else:
            assert r["placement"] == "each" and [c["host"] for c in r["candidates"]] == ["a"]
