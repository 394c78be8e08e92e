"""The campaign executor: a scheduled campaign run on its hosts, journaled in the store so that a
killed controller, a dropped connection or a host that never returns loses nothing and repeats
nothing.

One worker per host (bench.execute.campaign.worker), one run at a time per host, hosts in
parallel. Every state of a run (bench.store.states) is written, with a journal entry, BEFORE
the action it names; the store refuses an illegal move.

- booting: a proven reboot into the run's boot config is about to start, only when it differs
  from the host's current boot. boot_verified: the host runs the right boot. deployed: agent
  current, plan uploaded, pool complete (under the controller's host lock). running: the spec
  is stored with this state, then the host-side runner is started (it never runs a run id
  twice). collected: the bundle is on the controller, verified. ingested / validated /
  rejected: stored, then the retention verdict.
- Infrastructure failures (SSH, deploy, collect, a host-side error before the bundle) are
  retried `retries` times (default 2), each attempt journaled; a run that fails host-side but
  leaves a bundle is ingested and judged (rejected), never retried. A deterministic input
  error (bench.execute.campaign.record.deterministic: the run's cell refused on its host by
  the preflight, the runner refusing its spec) is never retried: the run goes straight to
  `failed` with the reason, and stays there on `bench resume`.
- The end: the campaign's state (done: nothing left to do) and its counts of validated,
  rejected, failed and skipped runs (`CampaignResult.summary`, also the campaign's journal
  line).
- Quarantine: a host unreachable longer than its reconnect timeout (wherever it is lost: at the
  start of its worker, while waiting, re-attaching, or in any other step) or a failed proven
  reboot. The host's worker stops; its not-yet-started runs placed `one` are handed to another
  eligible live host (as that host's cell); the others become `pending` with the reason. A run
  in flight there becomes `pending` with its spec kept: `bench resume` re-attaches to it.
- Before quarantine, the recovery ladder (bench.execute.campaign.ladder): a run stuck on its
  host (gone past its patience, wedged, past the run timeout) gets an SSH reboot and/or a power
  cycle where the inventory allows them; a recovered host goes on, the run is `failed` with
  the ladder's steps (`interrupted`).
- At the end, every host this campaign rebooted is restored to its default boot.

Resume (bench.execute.campaign.record.resume_action): finished runs are skipped; collected or
ingested ones are ingested again (idempotent) and judged; a run holding a spec is re-attached
by run id (started from the stored spec if its host never got it); the rest are redone from the
top, every step being idempotent.

Locks: one controller per campaign (bench.store.controller_lock, a heartbeat row); each host
claimed by the campaign (bench.hosts.lock.HostClaim: the host lock, held from its worker's
start to its end, re-taken after each reboot or power cycle, released when the worker ends or
the host is quarantined), so `bench hosts reboot|restore|mglru`, `bench run` or another
campaign cannot slip in between its runs: they are refused naming the campaign and its
controller (a second campaign waits host_lock_wait_s for the host, then quarantines it naming
the owner); the runner's own run lock during the run.

Progress is reported as data: the journal (folded by bench.execute.progress for the views) and,
in-process, `Event`s passed to `on_event`."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.errors import BenchError, HostError, InputError, SafetyError
from bench.execute.collect import ControllerDiskError
from bench.execute.campaign.ladder import clip
from bench.execute.campaign.record import (FINAL, Settings, attempts_of, deterministic,
                                           ensure_runs, load_record, outcome, outcome_line,
                                           recorded_plans, resume_action)
from bench.execute.campaign.worker import Worker
from bench.execute.hostrun import Quarantined, SpecRefused
from bench.hosts.inventory import Host, load_inventory
from bench.hosts.lock import HostLocked
from bench.hosts.ssh import transport_for as ssh_transport_for
from bench.hosts.transport import Transport
from bench.matrix.cells import parse_cell
from bench.matrix.hintplans import campaign_hint_plans
from bench.matrix.runspec import RunOptions
from bench.paths import default_data_dir
from bench.plan.planinfo import PlanInfo
from bench.plan.prepared import workload_plan
from bench.store.campaigns import (journal, journal_rows, reassign, run_rows, set_campaign_state,
                                   set_live, transition)
from bench.store.controller_lock import (acquire_lock, heartbeat, lock_wait_hint, owner_info,
                                         release_lock)
from bench.store.db import Store
from bench.store.rows import JournalRow, RunRow
from bench.store.states import NOT_STARTED, TERMINAL, IllegalTransition
from bench.units import kernel_size


@dataclass(frozen=True)
class Event:
    """Something the executor did, as data (the CLI decides how to show it)."""
    kind: str               # state | warning | quarantine | reboot | handover | ...
    message: str
    run_id: str | None = None
    t: float = field(default_factory=time.time)

    def line(self) -> str:
        return self.message


@dataclass
class CampaignResult:
    campaign: str
    state: str                                  # done | incomplete | stopped
    runs: list[RunRow]
    quarantined: dict[str, str]
    counts: dict[str, int] = field(default_factory=dict)   # record.outcome
    summary: str = ""                                       # record.outcome_line and what is left


def _first(*values: Any) -> Any:
    """The first value that is not None (a 0 headroom or balloon cap is a value)."""
    return next((v for v in values if v is not None), None)


class Executor:
    def __init__(self, store: Store, campaign_id: str, settings: Settings | None = None, *,
                 transport_for: Callable[[Host], Transport] | None = None,
                 inventory: dict[str, Host] | None = None,
                 on_event: Callable[[Event], None] | None = None, record: dict | None = None):
        self.store = store
        self.cid = campaign_id
        # record: the one `bench run` just journaled (its runs only; load_record has all)
        self.rec = record if record is not None else load_record(store, campaign_id)
        self.s = settings or Settings()
        inv = inventory if inventory is not None else load_inventory(self.s.hosts_dir)
        for h in self.rec["hosts"]:     # a campaign host whose file is broken: that file's error
            broken = getattr(inv, "broken", {})
            if h not in inv and h in broken:
                raise broken[h]
        missing = [h for h in self.rec["hosts"] if h not in inv]
        if missing:
            raise InputError(f"campaign {campaign_id}: host(s) {', '.join(missing)} not in the "
                             "inventory", "pass --hosts-dir pointing at the campaign's inventory")
        make = transport_for or ssh_transport_for
        self.workers = {h: Worker(self, inv[h], make) for h in self.rec["hosts"]}
        self.on_event = on_event or (lambda ev: None)
        self.cv = threading.Condition()     # guards rows, parked, busy
        self.rows: dict[str, RunRow] = {}
        self.attempts: dict[str, int] = {}
        self.parked: set[str] = set()       # parked pending in this session: not retried here
        self.busy: set[str] = set()
        self.plan: PlanInfo | None = None
        self.plan_path: Path | None = None
        self.hint_plans: dict[str, PlanInfo] = {}    # hint label -> the plan with its hints
        self._stop = threading.Event()
        self.worker_errors: list[str] = []      # a host worker that died (the store failing)

    # what workers call ---------------------------------------------------------------------
    def plan_for(self, cell: str) -> PlanInfo:
        """The plan a run of `cell` ships: the workload's, with its label's hint plan."""
        assert self.plan is not None
        label = parse_cell(cell).hints
        return self.plan if label is None else self.hint_plans[label]

    def set_state(self, rid: str, state: str, message: str = "", data: dict | None = None, *,
                  spec: dict | None = None) -> None:
        transition(self.store, rid, state, message, data, spec=spec)
        with self.cv:
            self.rows[rid].state = state
            if spec is not None:
                self.rows[rid].spec = spec
        self.on_event(Event("state", f"{rid}: -> {state}" + (f" ({message})" if message
                                                               else ""), rid))

    def park(self, rid: str) -> None:
        with self.cv:
            self.parked.add(rid)

    def is_parked(self, rid: str) -> bool:
        with self.cv:
            return rid in self.parked

    def journal(self, kind: str, message: str, data: dict | None = None) -> None:
        journal(self.store, kind, message, campaign_id=self.cid, data=data)
        self.on_event(Event(kind, message))

    def journal_rows(self, kinds: tuple[str, ...]) -> list[JournalRow]:
        return journal_rows(self.store, self.cid, kinds=kinds)

    def live(self, rid: str, st: dict) -> None:
        """Keep the run's live row (runner phase, pass, iteration) for the views; a busy
        database only delays it to the next chunk."""
        try:
            set_live(self.store, rid, {"phase": st.get("phase"), **(st.get("progress") or {})})
        except Exception:  # noqa: BLE001 - progress is for display only
            pass

    def boot_of(self, rid: str) -> dict:
        """The run's boot config on the host it is placed on now."""
        r = self.rows[rid]
        for c in self.rec["runs"][rid]["candidates"]:
            if c["host"] == r.host:
                return c["boot"]
        return self.rec["runs"][rid]["boot"]

    def run_options(self, rid: str) -> RunOptions:
        """The run options of a run: the campaign's settings over the matrix's protocol."""
        row = self.rows[rid]
        if self.rec.get("options"):       # `bench run`: the options it was given
            return replace(RunOptions(**self.rec["options"]), campaign=self.cid,
                           position=row.position, repetition=row.repetition)
        boot = self.boot_of(rid)
        mem = boot.get("mem_bytes")
        cell = parse_cell(row.cell)
        proto = self.rec.get("protocol") or {}
        headroom = _first(self.s.cgroup_headroom_bytes, proto.get("cgroup_headroom"))
        extra: dict[str, Any] = ({} if headroom is None
                                 else {"cgroup_headroom_bytes": int(headroom)})
        return RunOptions(threads=self.s.threads, **extra,
                          balloon_max_bytes=_first(self.s.balloon_max_bytes,
                                                   proto.get("balloon_max")),
                          passes=int(self.rec["workload"].get("passes") or self.s.passes),
                          campaign=self.cid, position=row.position, repetition=row.repetition,
                          # expect_boot.mem: the kernel text the reboot wrote (exact bytes)
                          mem=kernel_size(mem) if mem and cell.mechanism in (
                              "memboot", "balloon") else None,
                          lru_gen=boot.get("lru_gen"))

    def fail(self, rid: str, exc: BaseException) -> None:
        """An infrastructure failure: attempt n of 1 + retries, journaled."""
        host = self.rows[rid].host
        self.workers[host].ready = None     # check everything again next time
        n = self.attempts.get(rid, 0) + 1
        self.attempts[rid] = n
        msg = exc.message if isinstance(exc, BenchError) else str(exc)
        last = n > self.s.retries
        try:
            self.set_state(rid, "failed", f"attempt {n}/{1 + self.s.retries}: {msg}"
                           + ("" if last else "; will retry"),
                           {"attempt": n, "final": last, "error": type(exc).__name__,
                            "hint": getattr(exc, "hint", None)})
        except IllegalTransition as refused:
            self._overruled(host, rid, refused)
            return
        if not last:
            time.sleep(self.s.retry_pause_s)

    def controller_disk(self, host: str, rid: str, exc: ControllerDiskError) -> None:
        """The controller's own disk failed a write (full, read-only): neither the run's fault
        nor the host's, and the next runs would meet it too. No attempt is spent: the run stays
        as it is (its host keeps the bundle), the campaign stops after the current runs, and
        `bench resume` collects it once there is room."""
        self.workers[host].ready = None
        self.journal("warning", f"{host}: {rid}: {exc.message}; stopping the campaign after "
                     f"the current runs ({exc.hint})", {"run_id": rid, "controller_disk": True})
        self._stop.set()

    def refuse(self, rid: str, exc: BenchError) -> None:
        """A deterministic input error: the run fails at once with the reason and is never
        retried (its attempts are FINAL, here and for `bench resume`)."""
        host = self.rows[rid].host
        self.workers[host].ready = None
        n = self.attempts.get(rid, 0) + 1
        self.attempts[rid] = FINAL
        try:
            self.set_state(rid, "failed", f"not retried (its input is refused): {exc.message}",
                           {"attempt": n, "final": True, "deterministic": True,
                            "error": type(exc).__name__, "hint": exc.hint})
        except IllegalTransition as refused:
            self._overruled(host, rid, refused)

    def interrupted(self, rid: str, message: str, steps: list[dict]) -> None:
        """A run its host's recovery ladder interrupted (bench.execute.campaign.ladder): the
        host was rebooted or power-cycled under it, so the run fails with the ladder's steps
        in its reason and is not retried in this session (its run id is spent on that host:
        the runner never runs an id twice); the host goes on with its other runs."""
        host = self.rows[rid].host
        w = self.workers[host]
        w.ready = None
        w.claim.refresh(w.session.transport)    # its holder went with the boot the ladder ended
        n = self.attempts.get(rid, 0) + 1
        self.attempts[rid] = max(n, self.s.retries + 1)
        try:
            self.set_state(rid, "failed", f"attempt {n}/{1 + self.s.retries}, not retried: "
                           f"interrupted by the recovery ladder: {message}",
                           {"attempt": n, "final": True, "interrupted": True, "ladder": steps,
                            "error": "Interrupted"})
        except IllegalTransition as refused:
            self._overruled(host, rid, refused)

    def _overruled(self, host: str, rid: str, exc: IllegalTransition) -> None:
        """The store refused a move of this run: another writer (a second controller, a
        `bench ingest` by hand) moved it. The store has the last word: the run is left as it
        is there and this executor carries on from that state."""
        self.journal("warning", f"{host}: {exc.message}; the run is left as the store has "
                                "it")
        fresh = {r.run_id: r for r in run_rows(self.store, self.cid)}.get(rid)
        if fresh is not None:
            with self.cv:
                self.rows[rid] = fresh

    # the main loop -------------------------------------------------------------------------
    def run(self) -> CampaignResult:
        me = owner_info(f"bench campaign {self.cid}")
        holder = acquire_lock(self.store, self.cid, me, self.s.lock_stale_s)
        if holder is not None:
            raise HostError("controller", f"campaign {self.cid} is driven by pid "
                            f"{holder.get('pid')} on {holder.get('host')} (heartbeat "
                            f"{holder.get('age_s')}s ago by the database clock)",
                            "`bench watch` it; " + lock_wait_hint(holder, self.s.lock_stale_s))
        hb_stop = threading.Event()
        hb = threading.Thread(target=self._beat, args=(me, hb_stop), daemon=True,
                              name="heartbeat")
        hb.start()
        try:
            ensure_runs(self.store, self.cid, self.rec)
            self.rows = {r.run_id: r for r in run_rows(self.store, self.cid)}
            self.attempts = attempts_of(self.store, self.cid)
            self.s.data_dir = self.s.data_dir or default_data_dir()
            if self.rec.get("plans"):           # `bench run`: the plans it made
                self.plan, self.plan_path, self.hint_plans = recorded_plans(self.rec["plans"])
            elif not self.rec.get("engine"):     # engine runs ship no plan (docs/engine.md)
                self.plan, self.plan_path = workload_plan(self.rec["workload"],
                                                          self.s.data_dir)
                self.hint_plans = campaign_hint_plans(
                    self.plan, self.plan_path, [r.cell for r in self.rows.values()],
                    self.rec["workload"].get("hints"), self.s.data_dir)
            set_campaign_state(self.store, self.cid, "running", f"controller pid {me['pid']}")
            self.busy = set(self.workers)
            threads = [threading.Thread(target=self._work, args=(w,), name=f"host-{h}",
                                        daemon=True) for h, w in self.workers.items()]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if self.worker_errors:
                raise BenchError(f"campaign {self.cid} stopped: a host worker failed: "
                                 f"{self.worker_errors[0]}",
                                 f"`bench resume {self.cid}` carries on where it stopped")
            return self._finish()
        finally:
            hb_stop.set()
            release_lock(self.store, self.cid, me)

    def _beat(self, me: dict, stop: threading.Event) -> None:
        renewed = time.monotonic()
        while not stop.wait(self.s.heartbeat_s):
            try:
                if not heartbeat(self.store, self.cid, me):
                    self.on_event(Event("warning", "controller lock lost: stopping after the "
                                                   "current runs"))
                    self._stop.set()
                    return
                renewed = time.monotonic()
            except Exception as exc:  # noqa: BLE001 - a busy database is retried next beat
                # past the lease another controller may take the campaign: stop, as if lost
                if time.monotonic() - renewed > self.s.lock_stale_s:
                    self.on_event(Event("warning", f"controller lock not renewed for "
                                        f"{self.s.lock_stale_s:.0f}s ({clip(str(exc), 160)}): "
                                        f"stopping after the current runs"))
                    self._stop.set()
                    return

    def _finish(self) -> CampaignResult:
        rows = run_rows(self.store, self.cid)
        left = [r for r in rows if resume_action(
            r.state, bool(r.spec), self.attempts.get(r.run_id, 0),
            self.s.retries) not in ("skip", "give-up")]
        state = "done" if not left else ("stopped" if self._stop.is_set() else "incomplete")
        gone = {r.run_id for r in left}
        counts = outcome([r.state for r in rows if r.run_id not in gone],
                         refused=sum(1 for r in rows if r.state == "failed"
                                     and self.attempts.get(r.run_id, 0) >= FINAL),
                         skipped_runs=int(self.rec.get("skipped_runs") or 0), left=len(left))
        msg = outcome_line(counts) + (
            ": " + ", ".join(f"{r.run_id} ({r.state})" for r in left[:6])
            + (", ..." if len(left) > 6 else "") if left else "")
        set_campaign_state(self.store, self.cid, state, msg)
        return CampaignResult(self.cid, state, rows,
                              {h: w.quarantined for h, w in self.workers.items()
                               if w.quarantined}, counts, msg)

    def _work(self, w: Worker) -> None:
        """A host's worker thread. Should it die (its error handling itself failing: a
        database that stays locked), the campaign stops after the current runs instead of
        waiting forever on a worker that is gone; `bench resume` carries on."""
        try:
            self._drive(w)
        except Exception as exc:  # noqa: BLE001 - a dead worker must not hang the others
            self.worker_errors.append(f"{w.name}: {exc!r}"[:500])
            self._stop.set()
        finally:
            with self.cv:
                self.busy.discard(w.name)
                self.cv.notify_all()

    def _drive(self, w: Worker) -> None:
        """A host's runs until none is left (or it is quarantined), the host claimed by this
        campaign for as long (bench.hosts.lock.HostClaim)."""
        try:
            self._claim(w)
            while not self._stop.is_set() and not w.quarantined:
                rid = self._next(w.name)
                if rid is None:
                    with self.cv:
                        self.busy.discard(w.name)
                        if not self.busy:       # nobody left who could hand a run over
                            self.cv.notify_all()
                            break
                        self.cv.wait(1.0)
                    continue
                with self.cv:
                    self.busy.add(w.name)
                self._one(w, rid)
            with self.cv:
                self.busy.discard(w.name)
                self.cv.notify_all()
            w.drain_ingests()
            if not w.quarantined and not self._stop.is_set():
                w.restore()
        finally:
            w.claim.release()
            w.session.close()

    def _claim(self, w: Worker) -> None:
        """The worker's start: the host's current boot, then the host lock for the campaign
        (another controller's hold waited for up to host_lock_wait_s). A host that stays away
        or stays held by another controller is quarantined naming why."""
        try:
            w.start()
            w.claim.take(self.s.host_lock_wait_s)
        except Quarantined as exc:
            self.quarantine(w.name, exc.message, None)
        except HostLocked as exc:
            self.quarantine(w.name, f"not claimed for campaign {self.cid}: {exc.message}", None)
        except BenchError as exc:
            self.quarantine(w.name, f"unreachable at start: {exc.message}", None)

    def _one(self, w: Worker, rid: str) -> None:
        try:
            w.do_run(rid)
        except IllegalTransition as exc:
            self._overruled(w.name, rid, exc)
        except Quarantined as exc:
            self.quarantine(w.name, exc.message, rid)
        except (SafetyError, InputError, SpecRefused) as exc:
            self.journal("warning", f"{w.name}: {rid}: {exc.message}")
            if deterministic(exc):
                self.refuse(rid, exc)
            else:
                self.fail(rid, exc)
        except ControllerDiskError as exc:
            self.controller_disk(w.name, rid, exc)
        except BenchError as exc:
            self.fail(rid, exc)
        except Exception as exc:  # noqa: BLE001 - never let a worker die silently
            self.journal("warning", f"{w.name}: {rid}: executor error {exc!r}")
            self.fail(rid, exc)

    def _next(self, host: str) -> str | None:
        """The host's next run to work on (position order; re-attachments first)."""
        with self.cv:
            acts = []
            for r in self.rows.values():
                if r.host != host or (r.state == "pending" and r.run_id in self.parked):
                    continue
                a = resume_action(r.state, bool(r.spec), self.attempts.get(r.run_id, 0),
                                  self.s.retries)
                if a == "ingest" and not self.s.ingest:
                    continue            # `bench run --no-ingest`: left collected
                if a not in ("skip", "give-up"):       # an ingest under way: last, waited for
                    acts.append((2 if self.workers[host].ingesting(r.run_id) else
                                 0 if a in ("reattach", "ingest") else 1, r.position, r.run_id))
            return min(acts)[2] if acts else None

    # quarantine and hand-over -------------------------------------------------------------
    def quarantine(self, host: str, reason: str, rid: str | None) -> None:
        """Stop the host's worker; park the runs started there (`bench resume` re-attaches),
        hand its unstarted runs to another eligible host or park them with the reason."""
        w = self.workers[host]
        w.quarantined = reason
        w.claim.release()       # the campaign no longer uses the host
        self.journal("quarantine", f"{host} quarantined: {reason}", {"host": host,
                                                                     "reason": reason})
        with self.cv:
            held = [r for r in self.rows.values() if r.host == host and r.spec
                    and r.state in ("running", "failed") and self._action(r) == "reattach"]
            todo = [r for r in self.rows.values() if r.host == host and not r.spec
                    and r.state in NOT_STARTED + ("pending", "failed")
                    and self._action(r) == "redo"]
        for r in held:
            self.set_state(r.run_id, "pending", f"{host} quarantined ({reason}); started there: "
                           "`bench resume` re-attaches", {"quarantine": True})
            self.park(r.run_id)
        for r in todo:
            self._hand_over(host, reason, r)

    def _action(self, r: RunRow) -> str:
        return resume_action(r.state, bool(r.spec), self.attempts.get(r.run_id, 0),
                             self.s.retries)

    def _hand_over(self, host: str, reason: str, r: RunRow) -> None:
        cands = [c for c in self.rec["runs"][r.run_id]["candidates"]
                 if c["host"] != host and c["host"] in self.workers
                 and not self.workers[c["host"]].quarantined]
        if not cands:
            if r.state != "pending":
                self.set_state(r.run_id, "pending", f"{host} quarantined ({reason}); no other "
                               "eligible host (placement each)", {"quarantine": True})
            self.park(r.run_id)
            return
        with self.cv:
            load = {c["host"]: sum(1 for x in self.rows.values() if x.host == c["host"]
                                   and x.state not in TERMINAL) for c in cands}
        c = min(cands, key=lambda c: (load[c["host"]], c["host"]))
        reassign(self.store, r.run_id, c["host"], c["cell"], f"{host} quarantined: {reason}")
        with self.cv:
            r.host, r.cell, r.state, r.spec = c["host"], c["cell"], "planned", None
            self.cv.notify_all()
        self.on_event(Event("handover", f"{r.run_id}: handed over to {c['host']} as "
                                        f"{c['cell']}", r.run_id))
