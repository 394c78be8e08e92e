"""One host's worker in a campaign: it owns the host's session (transport and patience,
bench.execute.hostrun.HostSession), what it knows of the host (current boot, whether this
campaign rebooted it, the agent/plan/pool readiness checked in this boot) and runs that host's
runs one at a time through their states. What crosses hosts (run rows, attempts, state
changes, hand-overs, quarantine) belongs to the coordinator (bench.execute.campaign.executor),
which the worker reaches through the `Coordinator` protocol.

Wherever the host's patience runs out (at the worker's start, re-attaching to a run, after a
step lost the host, waiting for a run), the worker climbs the recovery ladder
(bench.execute.campaign.ladder) before it quarantines: a host that answers again goes on, a
recovered one has lost what ran there (a run it held is stored failed with the ladder's
steps, `interrupted`), and a quarantine's reason (and its run's) carries the steps."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol, TypeVar

from bench.errors import BenchError, CommandTimeout, HostError, InputError, SafetyError, Unreachable
from bench.execute.campaign.engine_runs import spec_for
from bench.execute.campaign.preflight import run_spec
from bench.execute.campaign.ladder import (GO_ON, RECOVERED, STALL_FLOOR_S, Ladder,
                                           LadderResult, StallWatch, Step, Wedged, permits,
                                           verdict)
from bench.execute.campaign.record import Settings, boot_key, resume_action
from bench.execute.collect import bundle_path, collect, ingest
from bench.execute.hostrun import (ClaimLost, HostSession, Quarantined, runner_status,
                                   start_run, wait_run)
from bench.execute.staging import ensure_file, ensure_hints, ensure_pool
from bench.hosts.bootplan import parse_mem
from bench.hosts.deploy import deploy
from bench.hosts.inventory import Host
from bench.hosts.lock import Borrowed, HostClaim, HostLock, release_quietly, take_for
from bench.hosts.procfs import cmdline_param, parse_cmdline
from bench.hosts.bootplan import Observation
from bench.hosts.reboot import observe, reboot_host, restore_host
from bench.hosts.transport import Transport
from bench.matrix.cells import parse_cell
from bench.matrix.runspec import RunOptions
from bench.plan.planinfo import PlanInfo
from bench.store.rows import JournalRow, RunRow
from bench.units import format_size

T = TypeVar("T")


class Recovered(HostError):
    """The host's patience ran out and the recovery ladder rebooted or power-cycled it (the new
    boot proven): whatever ran there is gone. `res` is the climb."""

    def __init__(self, host: str, message: str, res: LadderResult):
        super().__init__(host, message)
        self.res = res


def bare(host: str, message: str) -> str:
    """A HostError's message without its `host: ` prefix (to wrap it in another)."""
    return message.removeprefix(f"{host}: ")


class Coordinator(Protocol):
    """What a worker needs of the executor (bench.execute.campaign.executor.Executor)."""
    cid: str
    rec: dict
    s: Settings
    rows: dict[str, RunRow]
    attempts: dict[str, int]
    plan: PlanInfo | None
    plan_path: Path | None
    hint_plans: dict[str, PlanInfo]

    def plan_for(self, cell: str) -> PlanInfo: ...

    def set_state(self, rid: str, state: str, message: str = "", data: dict | None = None,
                  *, spec: dict | None = None) -> None: ...

    def park(self, rid: str) -> None: ...

    def is_parked(self, rid: str) -> bool: ...

    def journal(self, kind: str, message: str, data: dict | None = None) -> None: ...

    def journal_rows(self, kinds: tuple[str, ...]) -> list[JournalRow]: ...

    def live(self, rid: str, status: dict) -> None: ...

    def run_options(self, rid: str) -> RunOptions: ...

    def boot_of(self, rid: str) -> dict: ...

    def interrupted(self, rid: str, message: str, steps: list[dict]) -> None: ...


class Worker:
    def __init__(self, ex: Coordinator, host: Host,
                 transport_for: Callable[[Host], Transport]):
        self.ex = ex
        self.host = host
        self.name = host.name
        self.session = HostSession(host, transport_for,
                                   reconnect_timeout_s=ex.s.reconnect_timeout_s)
        self.current_boot: tuple = (None, None)     # (mem bytes, lru_gen) of the running boot
        self.rebooted = False
        self.quarantined: str | None = None
        self.ready: tuple | None = None     # (boot_id, plan sha256) once agent/plan/pool checked
        self.facts: dict | None = None      # the last run preflight's facts (boot-fixed reused)
        self._ingests: dict[str, Future] = {}   # run id -> its ingest (ingest: off the path)
        self._ingest_lock = threading.Lock()
        self._ingest_pool: ThreadPoolExecutor | None = None
        self.seen: Observation | None = None    # the last proven boot (the ladder's reference)
        self.full_memtotal: int | None = None   # MemTotal seen without mem=
        self.default_lru: int | None = None     # MGLRU mask seen in a default boot
        self.stall: StallWatch | None = None    # the run being waited for (the ladder's clock)
        # the campaign's hold on the host from the worker's start to its end (bench.hosts.lock)
        self.claim = HostClaim(host, transport_for, ex.cid)

    # the host -----------------------------------------------------------------------------
    def probe_boot(self, t: Transport) -> tuple:
        """(mem bytes, lru_gen) the host is booted with, from /proc/cmdline."""
        args = parse_cmdline(t.run(["cat", "/proc/cmdline"], timeout=30).stdout.strip())
        mem = cmdline_param(args, "mem")
        lru = cmdline_param(args, "bench.lru_gen")
        return (parse_mem(mem) if mem else None, lru or None)

    def patiently(self, what: str, fn: Callable[[Transport], T], rid: str | None = None) -> T:
        """fn with the session's patience (one journal warning when the host first goes), then
        the recovery ladder for the host (and `rid`, the run it may hold). Returns fn's value,
        at once or, when the ladder's look found the host answering again, from one more try.
        Raises Recovered when the ladder rebooted or power-cycled the host, Quarantined (its
        reason and `ladder` with the ladder's steps) when the ladder failed."""
        ladder = permits(self.host)
        then = (", then the recovery ladder" if ladder.reboot or ladder.power_cycle else "")
        try:
            return self.session.call(what, fn, on_lost=lambda exc: self.ex.journal(
                "warning", f"{self.name}: unreachable {what} ({exc.message}); retrying for up "
                f"to {self.session.limit:.0f}s{then}"))
        except Quarantined as q:
            res = self.climb(rid, q, wedge_ok=False)
            steps = [s.as_dict() for s in res.steps]
            why = bare(self.name, q.message)
            v = verdict(res.symptom, res.ok)
            if v == RECOVERED:
                raise Recovered(self.name, f"{why}; host recovered by the ladder: "
                                f"{res.summary}", res) from None
            if v == GO_ON:
                try:
                    return fn(self.session.transport)
                except (Unreachable, CommandTimeout) as exc:
                    raise Quarantined(self.name, f"{why}; recovery ladder: {res.summary}; "
                                      f"then {bare(self.name, exc.message)}", q.hint,
                                      ladder=steps) from None
            raise Quarantined(self.name, f"{why}; recovery ladder: {res.summary}", q.hint,
                              ladder=steps) from None

    def start(self) -> None:
        """Learn the current boot; a host that is down (or rebooting) gets the same patience
        as one lost mid-run, then the recovery ladder (Quarantined when that fails too; a
        recovered host's proven boot is remembered by the climb)."""
        try:
            self.remember(self.patiently("at the start of its worker", observe))
        except Recovered:
            pass

    def remember(self, obs: Observation) -> None:
        """A boot seen (at the start, proven by a reboot or by the recovery ladder)."""
        self.seen = obs
        mem = cmdline_param(obs.args, "mem")
        lru = cmdline_param(obs.args, "bench.lru_gen")
        self.current_boot = (parse_mem(mem) if mem else None, lru or None)
        if mem is None:
            self.full_memtotal = obs.memtotal
        if mem is None and lru is None and obs.lru_mask is not None:
            self.default_lru = obs.lru_mask

    # one run ------------------------------------------------------------------------------
    def do_run(self, rid: str) -> None:
        """Take one run as far as it goes: raises Quarantined when the host is lost (the run
        parked `pending`), SafetyError/InputError as they are; other errors count as a failed
        attempt of the run."""
        row = self.ex.rows[rid]
        act = resume_action(row.state, bool(row.spec), self.ex.attempts.get(rid, 0),
                            self.ex.s.retries)
        try:
            if act == "ingest":
                return self.ingest(rid)
            if act == "redo":
                self.boot(rid)
                self.deploy_and_start(rid, None)
            elif not self.reattach(rid, row):
                return                  # interrupted by the recovery ladder: stored failed
            if self.wait_or_recover(rid) and self.ex.s.ingest:
                self.ingest(rid)
        except Quarantined as exc:
            if not self.ex.is_parked(rid):
                self.ex.set_state(rid, "pending", f"host quarantined while running: "
                                  f"{exc.message}; `bench resume` re-attaches",
                                  {"quarantine": True, **({"ladder": exc.ladder}
                                                          if exc.ladder else {})})
                self.ex.park(rid)
            raise
        except (SafetyError, InputError):
            raise
        except (Unreachable, CommandTimeout) as exc:
            self.lost(rid, exc)          # raises Quarantined if the host stays away
            raise

    def reattach(self, rid: str, row: RunRow) -> bool:
        """A run that may be on the host: ask the runner (an unreachable host is waited for,
        then goes up the recovery ladder, then is quarantined, never a failed attempt); start
        it from the stored spec if the host never got it. True: wait for it. False: the ladder
        rebooted or power-cycled the host and the run, which it held unfinished, is stored
        failed with the ladder's steps (a run that had ended before is collected as usual)."""
        try:
            st = self.patiently(f"while re-attaching to {rid}",
                                lambda t: runner_status(t, self.host, rid), rid)
        except Recovered as rec:
            st = runner_status(self.session.transport, self.host, rid)  # the new boot's view
            if st is not None and st.get("phase") != "done":
                self.ex.interrupted(rid, bare(self.name, rec.message),
                                    [s.as_dict() for s in rec.res.steps])
                return False
        if st is None:
            self.deploy_and_start(rid, row.spec)
        elif row.state != "running":
            self.ex.set_state(rid, "running", "re-attached after " + row.state)
        return True

    def lost(self, rid: str, exc: BenchError) -> None:
        """A step outside the wait (deploy, start, collect) lost the host: is it gone? Back in
        time: return (the step counts as a failed attempt); gone: the recovery ladder
        (bench.execute.campaign.ladder) power-cycles it where the inventory allows, and a
        recovered host raises the step's error with the ladder's steps (a failed attempt: the
        retry starts, or collects, again); else the run is
        parked `pending` (its spec kept when it has one, so `bench resume` re-attaches) and
        Quarantined raised, instead of every later run of the host burning its retries on a
        dead host."""
        try:
            self.current_boot = self.patiently(f"after {rid} lost it ({exc.message})",
                                               self.probe_boot, rid)
        except Recovered as rec:    # the caller counts the failed attempt, with the steps
            raise HostError(self.name, f"{bare(self.name, exc.message)}; host recovered by "
                            f"the ladder: {rec.res.summary}") from exc
        except Quarantined as q:
            started = bool(self.ex.rows[rid].spec)
            self.ex.set_state(rid, "pending", f"host quarantined: {q.message}; `bench resume` "
                              + ("re-attaches" if started else "redoes it"),
                              {"quarantine": True, "ladder": q.ladder})
            self.ex.park(rid)
            raise
        except BenchError:
            return      # it answers, if badly: the caller counts the failed attempt

    # the recovery ladder ------------------------------------------------------------------
    def wait_or_recover(self, rid: str) -> bool:
        """wait_collect; a run stuck on its host (gone past its patience, its status not
        advancing for as long, or past the run timeout) goes up the recovery ladder. True:
        collected. False: the host was recovered and the run stored failed with the ladder's
        steps. Raises Quarantined (with the steps) when the ladder fails, and the original
        error when the run turns out not to be stuck (the ordinary paths decide). The stall
        clock runs only for a host the ladder may reboot or power-cycle (elsewhere a slow run
        is waited for up to the run timeout, as before the ladder)."""
        p = permits(self.host)
        self.stall = (StallWatch(max(self.session.limit, 3 * self.ex.s.chunk_s, STALL_FLOOR_S))
                      if p.reboot or p.power_cycle else None)
        try:
            self.wait_collect(rid)
            return True
        except (Quarantined, Wedged, CommandTimeout) as exc:
            stuck: BenchError = exc
        finally:
            self.stall = None
        res = self.climb(rid, stuck)
        v = verdict(res.symptom, res.ok)
        if v == GO_ON:
            raise stuck
        steps = [s.as_dict() for s in res.steps]
        why = bare(self.name, stuck.message)
        if v != RECOVERED:
            raise Quarantined(self.name, f"{why}; recovery ladder: {res.summary}",
                              ladder=steps)
        self.ex.interrupted(rid, f"{why}; host recovered by the ladder: {res.summary}", steps)
        return False

    def on_status(self, rid: str, st: dict) -> None:
        """The runner's status after a wait chunk: the live view, and the stall clock."""
        self.ex.live(rid, st)
        if self.stall is not None and self.stall.wedged(st, time.monotonic()):
            raise Wedged(self.name, f"{rid}: the runner's status has not advanced for "
                         f"{self.stall.limit_s:.0f}s (phase {st.get('phase')}, progress "
                         f"{st.get('progress')})")

    def climb(self, rid: str | None, why: BenchError, wedge_ok: bool = True) -> LadderResult:
        """One climb of the ladder for this host (and rid, the run it may hold), each rung
        journaled as it ends; a recovered host's boot is remembered (the next run reboots into
        its boot config if it needs one) and everything checked in the old boot forgotten."""
        self.ex.journal("warning", f"{self.name}: {rid or 'host'} stuck ({why.message}); "
                        "recovery ladder", {"host": self.name, "run_id": rid, "ladder": "start"})

        def step(s: Step) -> None:
            self.ex.journal("warning", f"{self.name}: recovery ladder: {s.line()}",
                            {"host": self.name, "run_id": rid, "ladder": s.as_dict()})
        self.session.drop()
        self.ready = None
        res = Ladder(self.host, self.session, rid, self.seen, self.full_memtotal, step,
                     default_lru=self.default_lru).climb(wedge_ok)
        if res.ok and res.after is not None:
            self.remember(res.after)
        return res

    def boot(self, rid: str) -> None:
        """Reboot into the run's boot config unless the host already runs it (proven by the
        gate of bench.hosts.reboot); a failed proof quarantines the host."""
        boot = self.ex.boot_of(rid)
        if boot.get("label") == "current":      # `bench run`: the boot the host runs
            self.ex.set_state(rid, "boot_verified", "bench run: the host's current boot")
            return
        want = boot_key(boot)
        cur_mem, cur_lru = self.current_boot
        if want[0] == cur_mem and (want[1] is None or want[1] == cur_lru):
            self.ex.set_state(rid, "boot_verified", "current boot matches"
                              if boot.get("label") in (None, "default")
                              else f"already booted {boot.get('label')}")
            return
        if want[1] is not None:
            # bench.lru_gen= is applied by the boot unit the deploy installs: on the host first
            deploy(self.session.transport, self.host)
        self.ex.set_state(rid, "booting", f"reboot into {boot.get('label')}",
                          {"boot": boot, "current": list(self.current_boot)})
        self.session.drop()
        self.ready = None
        t0 = time.monotonic()
        try:
            with self.boot_lock(f"reboot for {rid}"):
                res = reboot_host(self.session.transport, self.host,
                                  format_size(want[0]) if want[0] else None, want[1],
                                  lambda e: None)
        finally:
            self.session.drop()        # the next step talks to the new boot
        secs = round(time.monotonic() - t0, 1)
        self.ex.journal("reboot", f"{self.name}: reboot into {boot.get('label')}: "
                        f"{res.verdict} ({res.reason}) in {secs}s",
                        {"host": self.name, "seconds": secs, "ok": res.ok, "boot": boot})
        if not res.ok:
            self.ex.set_state(rid, "pending", f"reboot failed, host quarantined: {res.reason}")
            self.ex.park(rid)
            raise Quarantined(self.name, f"proven reboot failed: {res.reason}")
        self.rebooted = True
        self.current_boot = want
        self.seen = res.after
        boot_id = res.after.boot_id if res.after else None
        self.ex.set_state(rid, "boot_verified", f"booted {boot.get('label')} "
                          f"(boot_id {boot_id})", {"boot_id": boot_id})

    @contextmanager
    def boot_lock(self, what: str) -> Iterator[None]:
        """The host lock for a reboot: the campaign's claim, made sure of, once no run is in
        progress there (another controller's or campaign's: waited for up to host_lock_wait_s,
        then HostLocked or RunInProgress naming it); re-taken after the boot."""
        lock = take_for(self.session.transport, self.host,
                        f"{what} (campaign {self.ex.cid})", wait_s=self.ex.s.host_lock_wait_s,
                        claim=self.claim)
        try:
            yield
        finally:
            release_quietly(lock)

    def host_lock(self, t: Transport, rid: str) -> HostLock | Borrowed:
        """The controller's host lock for a run's set-up: the campaign's claim, re-taken if its
        holder is gone (waited for up to host_lock_wait_s: a killed controller's holder goes
        away with its connection)."""
        self.claim.ensure(t, self.ex.s.host_lock_wait_s)
        return Borrowed(self.claim)

    def deploy_and_start(self, rid: str, spec: dict | None) -> dict:
        """Spec (unless re-starting a stored one), then under the host lock: agent, plan and
        pool (skipped when checked in this boot: any failure or reboot forgets it, and the
        agent still checks the pool it reads), the deployed and running states, the runner.
        Engine runs ship no plan or pool (docs/engine.md)."""
        ex, h = self.ex, self.host
        engine = bool(ex.rec.get("engine"))
        t = self.session.transport
        try:
            boot_id = None
            if spec is None and engine:
                spec = spec_for(ex.rec, rid, ex.rows[rid].cell, h)
            elif spec is None:
                assert ex.plan is not None
                pf = run_spec(h, parse_cell(ex.rows[rid].cell), ex.plan_for(ex.rows[rid].cell),
                              rid, ex.run_options(rid), t, known=self.facts)
                spec, boot_id, self.facts = pf.spec, pf.facts.get("boot_id"), pf.facts
            # checked in this boot: the claim is checked by the start command itself
            claim = self.claim.alive_args() if self.staged(boot_id, engine) else None
            lock = self.host_lock(t, rid) if claim is None else Borrowed(self.claim)
            try:
                staged = self.stage(t, boot_id, engine)
                if ex.rows[rid].state != "running":
                    ex.set_state(rid, "deployed", "runner ready (engine run: no plan, no pool "
                                 "shipped)" if engine else "agent, plan and pool ready", staged)
                    ex.set_state(rid, "running", "starting the runner", spec=spec)
                try:
                    start_run(t, h, spec, claim)
                except ClaimLost:       # re-taken (or HostLocked naming who holds it)
                    self.host_lock(t, rid)
                    start_run(t, h, spec)
            finally:
                lock.release()
        except BenchError:
            self.session.drop()        # start the next attempt on a new connection
            raise
        return spec

    def staged(self, boot_id: str | None, engine: bool) -> bool:
        """Agent, plan and pool already checked in this boot (stage does nothing)."""
        return (not engine and boot_id is not None and self.ex.plan is not None
                and self.ready == (boot_id, self.ex.plan.sha256))

    def stage(self, t: Transport, boot_id: str | None, engine: bool) -> dict:
        """Agent, plan and pool made sure of; what each step found (the `deployed` state's
        data: deploy current|deployed, plan present|uploaded, the pool's check)."""
        ex, h = self.ex, self.host
        if engine:
            return {"deploy": deploy(t, h)["status"]}
        assert ex.plan is not None and ex.plan_path is not None
        key = (boot_id, ex.plan.sha256)
        if boot_id is not None and self.ready == key:
            return {"staged": "checked in this boot"}
        done = {"deploy": deploy(t, h)["status"]}
        done["plan"] = ensure_file(t, ex.plan_path, f"{h.work_dir}/{ex.plan.remote_path}",
                                   ex.plan.sha256)
        for hinted in ex.hint_plans.values():       # every hint plan of the campaign
            ensure_hints(t, h, hinted, ex.plan_path)
        done["pool"] = ensure_pool(t, h, ex.plan.geometry)
        if boot_id is not None:
            self.ready = key
        return done

    def wait_collect(self, rid: str) -> None:
        log: list[dict] = []
        self.session.events = log
        st = wait_run(self.session, rid, timeout_s=self.ex.s.run_timeout_s,
                      chunk_s=self.ex.s.chunk_s, on_status=lambda st: self.on_status(rid, st))
        lost = [e for e in log if e["event"] == "lost"]
        if lost:        # one warning per outage, not one per reconnect attempt
            self.ex.journal("warning", f"{self.name}: {rid}: connection lost "
                            + (f"{len(lost)} times " if len(lost) > 1 else "")
                            + f"from {lost[0]['t'][11:19]} to {lost[-1]['t'][11:19]} (last: "
                            f"{lost[-1].get('error')}); re-attached")
        try:
            c = collect(self.session.transport, self.host, rid, self.data_dir)
        except BenchError:
            self.session.drop()
            raise
        self.ex.set_state(rid, "collected", f"bundle {c['status']}",
                          {"bundle": c["bundle"], "runner_ok": st.get("ok"),
                           "runner_reason": st.get("reason"), "events": log,
                           "reconnects": sum(e["event"] == "reattached" for e in log)})

    @property
    def data_dir(self) -> Path:
        assert self.ex.s.data_dir is not None
        return Path(self.ex.s.data_dir)

    def ingest(self, rid: str) -> None:
        """Ingest off the host's critical path: the run stays `collected` (so a controller
        killed meanwhile ingests it on resume) and is counted (validated/rejected) only when
        its ingest ends, in the worker's ingest thread, while the host starts its next run.
        A run whose ingest is already under way is waited for here instead, and what that
        ingest raised is raised here, for this run (the executor picks such runs last:
        `ingesting`)."""
        with self._ingest_lock:
            fut = self._ingests.pop(rid, None)
            if fut is None:
                for done in [r for r, f in self._ingests.items() if f.done()]:
                    self._ingests.pop(done)
                if self._ingest_pool is None:
                    self._ingest_pool = ThreadPoolExecutor(1, f"ingest-{self.name}")
                self._ingests[rid] = self._ingest_pool.submit(self.ingest_now, rid)
                return
        fut.result()

    def ingesting(self, rid: str) -> bool:
        """True while rid's ingest is queued or running (or ended, not yet waited for)."""
        with self._ingest_lock:
            return rid in self._ingests

    def drain_ingests(self) -> None:
        """Wait for the ingests still queued or running (the worker's end)."""
        if self._ingest_pool is not None:
            self._ingest_pool.shutdown(wait=True)
            self._ingest_pool = None
        with self._ingest_lock:
            left, self._ingests = self._ingests, {}
        for rid, fut in left.items():   # a stopped or quarantined worker: resume ingests it
            exc = fut.exception()
            if exc is not None:
                self.ex.journal("warning", f"{self.name}: {rid}: ingest failed ("
                                f"{exc.message if isinstance(exc, BenchError) else exc!r}); "
                                "the run stays collected, `bench resume` ingests it")

    def ingest_now(self, rid: str) -> None:
        b = bundle_path(self.data_dir, self.name, rid)
        if not b.is_dir():
            raise HostError(self.name, f"{rid}: collected but {b} is missing; collecting again")
        res = ingest(self.ex.s.db_url, b, self.ex.plan_path)
        if res.get("retained"):
            self.ex.set_state(rid, "validated", "retained", {"verdict": "retained",
                                                             "ingest": res})
        else:
            failed = res.get("failed") or []
            self.ex.set_state(rid, "rejected", "rejected by " + (", ".join(failed) or
                                                                 "retention"),
                              {"verdict": "rejected", "failed": failed, "ingest": res})

    # the end ------------------------------------------------------------------------------
    def restore(self) -> None:
        """Boot the host's default command line again if this campaign rebooted it."""
        rebooted = self.rebooted or any(
            j.get("host") == self.name and j.get("ok")
            for j in self.ex.journal_rows(("reboot",)))
        if not rebooted or self.current_boot == (None, None):
            return
        self.session.drop()
        try:
            with self.boot_lock("restore"):
                res = restore_host(self.session.transport, self.host, lambda e: None)
        except BenchError as exc:
            self.ex.journal("warning", f"{self.name}: restore to the default boot failed: "
                            f"{exc.message}")
            return
        finally:
            self.session.drop()
        self.ex.journal("reboot", f"{self.name}: restored the default boot: {res.verdict} "
                        f"({res.reason})", {"host": self.name, "restore": True, "ok": res.ok})
        if res.ok:
            self.current_boot = (None, None)
