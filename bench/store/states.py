"""The run state machine: the one definition of a run's states and legal transitions, used by
the executor (bench.execute), the store (every state change goes through
bench.store.campaigns.transition, which refuses an illegal one) and the views. Pure.

It lives in the store, not in the executor (docs/design.md puts it with campaigns), because the
store is the one place a state is written: the check runs in the same transaction that reads
the old state, so two writers cannot both pass it (README, Layout).

A campaign run is created `planned`; a run ingested outside any campaign is created
`ingested`. Each state is written BEFORE the action it names:

    planned -> [booting -> ] boot_verified -> deployed -> running -> collected -> ingested
        -> validated | rejected
    any unfinished state -> failed (infrastructure; retried) | pending (host quarantined)
    failed, pending -> whatever the resume redoes (from the top, or re-attached by run id)
    planned, booting, boot_verified, deployed, failed, pending -> planned (handed to another
        host before it started)
"""

from __future__ import annotations

from bench.errors import BenchError

STATES = ("planned", "booting", "boot_verified", "deployed", "running", "collected",
          "ingested", "validated", "rejected", "failed", "pending")
TERMINAL = ("validated", "rejected")
INITIAL = ("planned", "ingested")
# not started on its host: a resume redoes these from the top (every step is idempotent)
NOT_STARTED = ("planned", "booting", "boot_verified", "deployed")
# where an interrupted run goes again: reboot or not, then deploy (or a hand-over: planned)
_REDO = ("planned", "booting", "boot_verified", "failed", "pending")
_AFTER_STOP = ("planned", "booting", "boot_verified", "deployed", "running", "collected",
               "ingested", "failed", "pending")

TRANSITIONS: dict[str, tuple[str, ...]] = {
    "planned": _REDO,
    "booting": _REDO,
    "boot_verified": ("deployed",) + _REDO,
    "deployed": ("running",) + _REDO,
    "running": ("collected", "ingested", "failed", "pending"),
    "collected": ("ingested", "validated", "rejected", "failed"),
    "ingested": ("validated", "rejected", "failed"),
    "failed": _AFTER_STOP,
    "pending": _AFTER_STOP,
    "validated": (),
    "rejected": (),
}


# A campaign's own state (the campaigns row; no machine checks its moves, the executor and the
# CLI's interruption write it): planned (created), running (a controller drives it), then
# done (nothing left to do), incomplete (runs left: failed past their retries, parked
# pending), stopped (the controller stopped after its current runs: its lock lost, the
# controller's disk), interrupted (SIGINT or SIGTERM ended the controller; its runs are where
# a crash leaves them). Every state but done is unfinished: `bench resume` has work there.
CAMPAIGN_STATES = ("planned", "running", "done", "incomplete", "stopped", "interrupted")
CAMPAIGN_FINISHED = ("done",)


class IllegalTransition(BenchError):
    """A state change the run state machine does not allow (a bug or a second writer)."""


def legal(old: str, new: str) -> bool:
    return new in TRANSITIONS.get(old, ())


def check_state(state: str) -> None:
    if state not in STATES:
        raise IllegalTransition(f"unknown run state {state!r}",
                                hint=f"valid: {', '.join(STATES)}")


def check_transition(run_id: str, old: str, new: str) -> None:
    """Raise IllegalTransition unless a run may go from `old` to `new`."""
    check_state(new)
    if not legal(old, new):
        allowed = ", ".join(TRANSITIONS.get(old, ())) or "none (it is final)"
        raise IllegalTransition(f"run {run_id}: {old} -> {new} is not a legal transition",
                                hint=f"from {old} a run may go to: {allowed}")
