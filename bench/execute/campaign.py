"""The campaign executor: a scheduled plan (bench.matrix.schedule) run on its hosts, journaled in the
store so that a killed controller, a dropped connection or a host that never returns loses
nothing and repeats nothing.

One worker thread per host, one run at a time per host, hosts in parallel. A run moves through
these states, each written to the database (with a journal entry) BEFORE the action it names:

    planned -> [booting -> ] boot_verified -> deployed -> running -> collected -> validated
                                                                               \\-> rejected
    any non-terminal state -> failed (infrastructure; attempt n of 1 + retries)
    planned -> pending (its host was quarantined and no other host may take it; with the reason)

- booting: a proven reboot (bench.hosts.reboot.reboot_host) into the run's boot config is about to
  start; only when it differs from the host's current boot. boot_verified: the host runs the
  right boot (gate passed, or no reboot needed). deployed: agent current, plan uploaded, pool
  complete (under the controller's host lock). running: the spec is stored with this state,
  then the host-side runner is started (it never runs a run id twice). collected: the bundle is
  on the controller, verified; next is ingest. validated / rejected: the retention verdict.
- Infrastructure failures (SSH, deploy, collect, a host-side error before the bundle) are
  retried `retries` times (default 2), each attempt journaled; a run that fails host-side but
  leaves a bundle is ingested and judged by retention (rejected), never retried.
- Quarantine: a host unreachable longer than the reconnect timeout (Settings.
  reconnect_timeout_s, default its reboot.up_timeout) or a failed proven reboot. The same
  patience applies wherever the host is lost: waiting for a run (runctl.wait_run raises
  Quarantined), at the start of a worker, while re-attaching to a run, and in any other step
  (deploy, start, collect), which then probes the host before counting a failed attempt. The
  host's worker stops; its not-yet-started runs of cells placed `one` are handed to another
  eligible live host (as that host's resolved cell); the others become `pending` with the
  reason. The run in flight, and any other run started there, becomes `pending` with its spec
  kept: a later `bench resume` re-attaches to it by run id.
- At the end, every host this campaign rebooted is restored to its default boot.

Resume (`resume_action`, pure): validated/rejected and exhausted failures are skipped;
collected (or ingested) is ingested again (idempotent) and judged; a run holding a spec
(running, or pending/failed after its start) is re-attached by run id (`runner.py status`:
an unknown id is started from the stored spec, byte-identical, so the runner accepts it once);
planned/booting/boot_verified/deployed (and pending, failed with attempts left, without a spec)
are redone from the top: every step is idempotent (reboot only if the boot differs, deploy only
if stale, plan/pool only if missing).

Controller lock: bench.store.campaign_exec (one row per campaign with owner pid, host and a
heartbeat; stale after `lock_stale_s`, or at once when its pid on this machine is gone). The
hosts are additionally protected by runctl's host lock (bench.hosts.lock) during set-up and by the
runner's own lock during the run."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from bench.errors import BenchError, HostError, InputError, SafetyError

STATES = ("planned", "booting", "boot_verified", "deployed", "running", "collected",
          "validated", "rejected", "failed", "pending")
TERMINAL = ("validated", "rejected")
# the transitions the executor makes (from -> allowed next states)
_REDO = ("booting", "boot_verified", "failed", "pending")   # redone from the top on resume
TRANSITIONS = {
    "planned": _REDO,
    "booting": _REDO,
    "boot_verified": ("deployed",) + _REDO,
    "deployed": ("running",) + _REDO,
    "running": ("collected", "failed", "pending"),
    "collected": ("validated", "rejected", "failed"),
    "ingested": ("validated", "rejected"),
    "failed": ("booting", "boot_verified", "running", "collected", "failed", "pending"),
    "pending": ("booting", "boot_verified", "running", "collected", "failed", "pending"),
    "validated": (),
    "rejected": (),
}


def can_transition(old: str, new: str) -> bool:
    return new in TRANSITIONS.get(old, ())


def resume_action(state: str, has_spec: bool, attempts: int = 0, retries: int = 2) -> str:
    """What a (resuming) executor does with a run in `state`: 'skip' (finished), 'give-up'
    (failed with no attempt left), 'ingest' (bundle collected: ingest and judge), 'reattach'
    (started on its host: status/wait by run id, start from the stored spec if unknown there),
    'redo' (not started: from the top, idempotent steps)."""
    if state in TERMINAL:
        return "skip"
    if state == "failed" and attempts > retries:
        return "give-up"
    if state in ("collected", "ingested"):
        return "ingest"
    if state not in STATES and state != "ingested":
        raise InputError(f"unknown run state {state!r}")
    if state == "running" or has_spec:      # the runner may hold it: never from the top
        return "reattach"
    if state in ("planned", "booting", "boot_verified", "deployed", "pending", "failed"):
        return "redo"
    raise InputError(f"unknown run state {state!r}")


# settings and the campaign record --------------------------------------------------------------

@dataclass
class Settings:
    threads: int = 8
    passes: int = 2
    retries: int = 2
    data_dir: Path | None = None
    db_url: str | None = None
    hosts_dir: Path | None = None
    reconnect_timeout_s: float | None = None
    chunk_s: float = 10.0           # how often the live view hears from a running host
    run_timeout_s: float = 6 * 3600.0
    lock_stale_s: float = 60.0
    heartbeat_s: float = 5.0
    host_lock_wait_s: float = 120.0
    retry_pause_s: float = 2.0
    cgroup_headroom_bytes: int | None = None   # None: the matrix's protocol.cgroup_headroom
    balloon_max_bytes: int | None = None       # None: the matrix's protocol.balloon_max

    def as_dict(self) -> dict:
        return {k: (str(v) if isinstance(v, Path) else v) for k, v in self.__dict__.items()
                if k not in ("db_url",)}


def _boot_key(b: dict | None) -> tuple:
    b = b or {}
    return (b.get("mem_bytes"), b.get("lru_gen"))


def plan_record(plan, expansion, matrix, host_names: list[str], settings: Settings,
                matrix_ref: str) -> dict:
    """What the journal keeps of a scheduled campaign: enough to resume without the matrix
    file (per run: host, cell, boot, estimate, the candidates for a hand-over)."""
    cands = {}
    for req in expansion.requests:
        for c in req.candidates:
            cands[(req.point, req.rep, c.host)] = req
    runs = {}
    for r in plan.runs:
        req = cands.get((r.point, r.rep, r.host))
        cl = [{"host": c.host, "cell": c.cell, "boot": c.boot.as_dict()}
              for c in (req.candidates if req else ())]
        runs[r.run_id] = {"host": r.host, "cell": r.cell, "point": r.point, "rep": r.rep,
                          "position": r.position, "boot": r.boot.as_dict(),
                          "estimate_s": r.estimate_s, "candidates": cl,
                          "placement": "one" if len(cl) > 1 else "each"}
        if getattr(r, "pair", None):      # engine runs: their place in a balanced pair
            runs[r.run_id]["pair"] = r.pair
    return {"campaign": plan.campaign, "seed": plan.seed, "matrix": matrix.name,
            "matrix_ref": matrix_ref, "scale": getattr(matrix, "scale", None),
            "protocol": dict(getattr(matrix, "protocol", None) or {}),
            "workload": dict(matrix.workload), "hosts": host_names,
            "estimates": {"run_seconds": plan.run_seconds, "reboot_seconds": plan.reboot_seconds},
            "settings": settings.as_dict(), "runs": runs,
            "order": [r.run_id for r in plan.runs]} | (
                {"engine": matrix.engine.as_dict()} if getattr(matrix, "engine", None) else {})


def create(store, plan, expansion, matrix, host_names: list[str], settings: Settings,
           matrix_ref: str) -> str:
    """Create the campaign in the store: campaign row, the plan in the journal, planned runs."""
    from bench.store.campaigns import create_campaign, journal
    from bench.store.campaign_exec import campaign_row, journal_rows
    from bench.store.db import StoreError
    rec = plan_record(plan, expansion, matrix, host_names, settings, matrix_ref)
    if campaign_row(store, plan.campaign) is not None:
        if journal_rows(store, plan.campaign, kinds=("plan",)):
            raise StoreError(f"campaign {plan.campaign} exists",
                             hint=f"`bench resume {plan.campaign}`, or pick another --campaign")
        # a controller killed between creating the row and writing the plan: finish creating
    else:
        create_campaign(store, plan.campaign, matrix=matrix.name,
                        workload=dict(matrix.workload), seed=plan.seed)
    journal(store, "plan", f"plan: {len(rec['runs'])} runs on {', '.join(host_names)}, "
            f"{plan.reboots} reboots, estimate {plan.estimate_s:.0f}s",
            campaign_id=plan.campaign, data=rec)
    ensure_runs(store, plan.campaign, rec)
    return plan.campaign


def ensure_runs(store, campaign_id: str, rec: dict) -> None:
    """Add the plan's runs that are not in the store yet (a controller killed mid-create)."""
    from bench.store.campaign_exec import run_rows
    from bench.store.campaigns import add_run
    have = {r["run_id"] for r in run_rows(store, campaign_id)}
    for rid in rec["order"]:
        if rid not in have:
            r = rec["runs"][rid]
            add_run(store, campaign_id, rid, host=r["host"], cell=r["cell"],
                    position=r["position"], repetition=r["rep"])


def load_record(store, campaign_id: str) -> dict:
    from bench.store.campaign_exec import journal_rows
    rows = journal_rows(store, campaign_id, kinds=("plan",))
    if not rows:
        from bench.store.db import StoreError
        raise StoreError(f"campaign {campaign_id} has no plan in its journal",
                         hint="it was not created by `bench schedule`")
    return rows[0]["data"]


def attempts_of(store, campaign_id: str) -> dict[str, int]:
    """Infrastructure failures per run (journal entries into `failed`), by run_id."""
    from bench.store.campaign_exec import journal_rows, run_rows
    by_ref = {r["ref"]: r["run_id"] for r in run_rows(store, campaign_id)}
    out: dict[str, int] = {}
    for j in journal_rows(store, campaign_id, kinds=("state",)):
        d = j.get("data") or {}
        if d.get("to") == "failed" and j["run_ref"] in by_ref:
            rid = by_ref[j["run_ref"]]
            out[rid] = out.get(rid, 0) + 1
    return out


# plan (the replay plan file) -----------------------------------------------------------------

def workload_plan(workload: dict, data_dir: Path):
    """(PlanInfo, path) of the campaign's workload: a synth preset is generated
    deterministically into <data_dir>/traces/, a file is used as is."""
    from bench.execute.hostrun import plan_from_trace_file
    from bench.trace.synth import PRESETS, generate, preset
    trace = str(workload.get("trace"))
    if trace in PRESETS:
        d = Path(data_dir) / "traces"
        d.mkdir(parents=True, exist_ok=True)
        dom = workload.get("domain")
        kw = {"domain": int(dom)} if isinstance(dom, int) or (isinstance(dom, str)
                                                              and dom.isdigit()) else {}
        name = trace + (f"-d{kw['domain']}" if kw else "")
        for key, field_, tag in (("layers", "layers", "l"), ("experts", "experts_per_layer", "e"),
                                 ("expert_bytes", "expert_bytes", "b"), ("tokens", "tokens", "t")):
            if workload.get(key):      # a re-sized preset (a matrix scale): its own file
                kw[field_] = int(workload[key])
                name += f"-{tag}{kw[field_]}"
        path = d / f"{name}.jsonl"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_text("\n".join(generate(preset(trace, **kw))) + "\n")
            tmp.replace(path)
    else:
        path = Path(trace).expanduser()
    return plan_from_trace_file(path, data_dir=data_dir)


# the executor ------------------------------------------------------------------------------------

class HostQuarantined(HostError):
    pass


@dataclass
class HostView:
    """What a worker shares with the views (in-process) and the journal."""
    name: str
    phase: str = "idle"
    run_id: str | None = None
    cell: str | None = None
    since: float = field(default_factory=time.time)
    quarantined: str | None = None
    rebooted: bool = False
    current_boot: tuple = (None, None)


class Executor:
    def __init__(self, store, campaign_id: str, settings: Settings | None = None, *,
                 transport_for: Callable | None = None, inventory: dict | None = None,
                 log: Callable[[str], None] | None = None):
        from bench.hosts.inventory import load_inventory
        self.store = store
        self.cid = campaign_id
        self.rec = load_record(store, campaign_id)
        s = settings or Settings()
        self.s = s
        if transport_for is None:
            from bench.hosts.ssh import transport_for
        self.transport_for = transport_for
        inv = inventory if inventory is not None else load_inventory(s.hosts_dir)
        missing = [h for h in self.rec["hosts"] if h not in inv]
        if missing:
            raise InputError(f"campaign {campaign_id}: host(s) {', '.join(missing)} not in the "
                             "inventory", "pass --hosts-dir pointing at the campaign's inventory")
        self.hosts = {h: inv[h] for h in self.rec["hosts"]}
        self.views = {h: HostView(h) for h in self.hosts}
        self.cv = threading.Condition()
        self.busy: set[str] = set()
        self.log = log or (lambda m: None)
        self.rows: dict[str, dict] = {}
        self.attempts: dict[str, int] = {}
        self.plan = None
        self.plan_path = None
        self._stop = threading.Event()
        self._tp: dict = {}     # host -> its transport, kept for the campaign (see _t)
        self._ready: dict = {}  # host -> (boot_id, plan sha256) once agent, plan, pool checked

    # connections ---------------------------------------------------------------------------
    def _t(self, host: str):
        """The host's transport, one per host for the whole campaign: a new SSH handshake per
        step cost about a second per run. It reconnects by itself after a drop (a reboot, a
        restarted sshd); only the host's own worker thread uses it."""
        t = self._tp.get(host)
        if t is None:
            t = self._tp[host] = self.transport_for(self.hosts[host])
        return t

    def _fresh(self, host: str):
        self._drop(host)
        return self._t(host)

    def _drop(self, host: str) -> None:
        t = self._tp.pop(host, None)
        if t is not None:
            try:
                t.close()
            except Exception:  # noqa: BLE001 - closing a dead connection
                pass

    # bookkeeping ---------------------------------------------------------------------------
    def _set(self, rid: str, state: str, message: str = "", data: dict | None = None, **kw):
        from bench.store.campaign_exec import transition
        transition(self.store, rid, state, message, data, **kw)
        with self.cv:
            self.rows[rid]["state"] = state
            if kw.get("spec") is not None:
                self.rows[rid]["spec"] = kw["spec"]
            if kw.get("clear_spec"):
                self.rows[rid]["spec"] = None
        self.log(f"{rid}: -> {state}" + (f" ({message})" if message else ""))

    def _journal(self, kind: str, message: str, data: dict | None = None):
        from bench.store.campaigns import journal
        journal(self.store, kind, message, campaign_id=self.cid, data=data)
        self.log(message)

    def _boot_of(self, rid: str) -> dict:
        r = self.rows[rid]
        for c in self.rec["runs"][rid]["candidates"]:
            if c["host"] == r["host"]:
                return c["boot"]
        return self.rec["runs"][rid]["boot"]

    def _next(self, host: str) -> str | None:
        """The host's next run to work on (position order; re-attachments first)."""
        with self.cv:
            mine = [r for r in self.rows.values() if r["host"] == host]
            acts = []
            for r in mine:
                a = resume_action(r["state"], bool(r.get("spec")),
                                  self.attempts.get(r["run_id"], 0), self.s.retries)
                if a in ("skip", "give-up"):
                    continue
                if r["state"] == "pending" and r.get("_pending_now"):
                    continue
                acts.append((0 if a in ("reattach", "ingest") else 1, r["position"] or 0,
                             r["run_id"]))
            return min(acts)[2] if acts else None

    # the main loop -------------------------------------------------------------------------
    def run(self) -> dict:
        from bench.store.campaign_exec import (acquire_lock, heartbeat, owner_info, release_lock,
                                               run_rows)
        from bench.store.campaigns import set_campaign_state
        from bench.execute.hostrun import default_data_dir
        me = owner_info(f"bench campaign {self.cid}")
        holder = acquire_lock(self.store, self.cid, me, self.s.lock_stale_s)
        if holder is not None:
            raise HostError("controller", f"campaign {self.cid} is driven by pid "
                            f"{holder.get('pid')} on {holder.get('host')} (heartbeat "
                            f"{time.time() - float(holder.get('heartbeat') or 0):.0f}s ago)",
                            "`bench watch` it, or wait until its lock goes stale "
                            f"({self.s.lock_stale_s:.0f}s without heartbeat)")
        hb_stop = threading.Event()

        def beat():
            while not hb_stop.wait(self.s.heartbeat_s):
                try:
                    if not heartbeat(self.store, self.cid, me):
                        self.log("controller lock lost: stopping after the current runs")
                        self._stop.set()
                except Exception:  # noqa: BLE001 - a busy database is retried next beat
                    pass
        hb = threading.Thread(target=beat, daemon=True, name="heartbeat")
        hb.start()
        try:
            ensure_runs(self.store, self.cid, self.rec)
            self.rows = {r["run_id"]: r for r in run_rows(self.store, self.cid)}
            self.attempts = attempts_of(self.store, self.cid)
            self.s.data_dir = Path(self.s.data_dir or default_data_dir())
            if not self.rec.get("engine"):     # engine runs ship no plan (bench.execute.engine_runs)
                self.plan, self.plan_path = workload_plan(self.rec["workload"], self.s.data_dir)
            set_campaign_state(self.store, self.cid, "running", f"controller pid {me['pid']}")
            self.busy = set(self.hosts)
            threads = [threading.Thread(target=self._worker, args=(h,), name=f"host-{h}",
                                        daemon=True) for h in self.hosts]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            rows = run_rows(self.store, self.cid)
            left = [r for r in rows if resume_action(
                r["state"], bool(r.get("spec")), self.attempts.get(r["run_id"], 0),
                self.s.retries) not in ("skip", "give-up")]
            state = "done" if not left else ("stopped" if self._stop.is_set() else "incomplete")
            msg = f"{len(rows) - len(left)}/{len(rows)} runs finished" + (
                f"; {len(left)} left: " + ", ".join(f"{r['run_id']} ({r['state']})"
                                                     for r in left[:6]) if left else "")
            set_campaign_state(self.store, self.cid, state, msg)
            return {"campaign": self.cid, "state": state, "runs": rows,
                    "quarantined": {h: v.quarantined for h, v in self.views.items()
                                    if v.quarantined}}
        finally:
            hb_stop.set()
            release_lock(self.store, self.cid, me)

    def _worker(self, host: str) -> None:
        from bench.execute.hostrun import Quarantined
        hv = self.views[host]
        h = self.hosts[host]
        try:
            # a host that is down (or rebooting) when the worker starts gets the same patience
            # as one lost mid-run; an error other than unreachable quarantines it at once
            hv.current_boot = self._patient(host, "at the start of its worker",
                                            lambda: self._probe_boot(h))
        except Quarantined as exc:
            self._quarantine(host, exc.message, None)
        except BenchError as exc:
            self._quarantine(host, f"unreachable at start: {exc.message}", None)
        while not self._stop.is_set() and not hv.quarantined:
            rid = self._next(host)
            if rid is None:
                with self.cv:
                    self.busy.discard(host)
                    if not self.busy:       # nobody left who could hand a run over
                        self.cv.notify_all()
                        break
                    self.cv.wait(1.0)
                continue
            with self.cv:
                self.busy.add(host)
            try:
                self._one(host, rid)
            except HostQuarantined as exc:
                self._quarantine(host, exc.message, rid)
            except Exception as exc:  # noqa: BLE001 - never let a worker die silently
                self._journal("warning", f"{host}: {rid}: executor error {exc!r}")
                self._fail(rid, exc)
            hv.phase, hv.run_id, hv.cell, hv.since = "idle", None, None, time.time()
        with self.cv:
            self.busy.discard(host)
            self.cv.notify_all()
        if not hv.quarantined and not self._stop.is_set():
            self._restore(host)
        self._drop(host)
        hv.phase = "quarantined" if hv.quarantined else "finished"

    def _probe_boot(self, h) -> tuple:
        from bench.hosts.procfs import cmdline_param, parse_cmdline
        from bench.hosts.bootplan import parse_mem
        try:
            cmd = self._t(h.name).run(["cat", "/proc/cmdline"], timeout=30).stdout.strip()
        except BenchError:
            self._drop(h.name)
            raise
        args = parse_cmdline(cmd)
        mem = cmdline_param(args, "mem")
        lru = cmdline_param(args, "bench.lru_gen")
        return (parse_mem(mem) if mem else None, lru or None)

    def _fail(self, rid: str, exc: BaseException) -> None:
        self._ready.pop(self.rows[rid]["host"], None)     # check everything again next time
        n = self.attempts.get(rid, 0) + 1
        self.attempts[rid] = n
        msg = getattr(exc, "message", str(exc))
        last = n > self.s.retries
        self._set(rid, "failed", f"attempt {n}/{1 + self.s.retries}: {msg}"
                  + ("" if last else "; will retry"),
                  {"attempt": n, "final": last, "error": type(exc).__name__})
        if not last:
            time.sleep(self.s.retry_pause_s)

    # one run -------------------------------------------------------------------------------
    def _one(self, host: str, rid: str) -> None:
        from bench.errors import CommandTimeout, Unreachable
        from bench.execute.hostrun import Quarantined
        row = self.rows[rid]
        hv = self.views[host]
        hv.run_id, hv.cell, hv.since = rid, row["cell"], time.time()
        act = resume_action(row["state"], bool(row.get("spec")), self.attempts.get(rid, 0),
                            self.s.retries)
        try:
            if act == "ingest":
                return self._ingest(host, rid)
            if act == "redo":
                self._boot(host, rid)
                spec = self._deploy_and_start(host, rid, None)
            else:
                spec = row["spec"]
                # an unreachable host is waited for, then quarantined (the run stays pending
                # with its spec), as wait_run does: never a failed attempt
                st = self._patient(host, f"while re-attaching to {rid}",
                                   lambda: self._status(host, rid))
                if st is None:      # never reached the host: start it from the stored spec
                    self._deploy_and_start(host, rid, spec)
                elif row["state"] != "running":
                    self._set(rid, "running", "re-attached after " + row["state"])
            self._wait_collect(host, rid)
            self._ingest(host, rid)
        except Quarantined as exc:
            self._set(rid, "pending", f"host quarantined while running: {exc.message}; "
                      "`bench resume` re-attaches", {"quarantine": True})
            self.rows[rid]["_pending_now"] = True
            raise HostQuarantined(host, exc.message) from None
        except (HostQuarantined, SafetyError, InputError):
            raise
        except BenchError as exc:
            if isinstance(exc, (Unreachable, CommandTimeout)):
                self._lost(host, rid, exc)      # raises HostQuarantined if it stays away
            self._fail(rid, exc)

    def _boot(self, host: str, rid: str) -> None:
        from bench.hosts.reboot import reboot_host
        from bench.units import format_size
        hv = self.views[host]
        h = self.hosts[host]
        boot = self._boot_of(rid)
        want = _boot_key(boot)
        cur_mem, cur_lru = hv.current_boot
        same = want[0] == cur_mem and (want[1] is None or want[1] == cur_lru)
        if same:
            self._set(rid, "boot_verified", "current boot matches" if boot.get("label") in
                      (None, "default") else f"already booted {boot.get('label')}")
            return
        hv.phase = "rebooting"
        self._set(rid, "booting", f"reboot into {boot.get('label')}",
                  {"boot": boot, "current": list(hv.current_boot)})
        t = self._fresh(host)
        self._ready.pop(host, None)
        t0 = time.monotonic()
        try:
            res = reboot_host(t, h, format_size(want[0]) if want[0] else None, want[1],
                              lambda e: None)
        finally:
            self._drop(host)        # the next step talks to the new boot
        secs = round(time.monotonic() - t0, 1)
        self._journal("reboot", f"{host}: reboot into {boot.get('label')}: {res.verdict} "
                      f"({res.reason}) in {secs}s", {"host": host, "seconds": secs,
                                                    "ok": res.ok, "boot": boot})
        if not res.ok:
            self._set(rid, "pending", f"reboot failed, host quarantined: {res.reason}")
            raise HostQuarantined(host, f"proven reboot failed: {res.reason}")
        hv.rebooted = True
        hv.current_boot = want
        self._set(rid, "boot_verified", f"booted {boot.get('label')} "
                  f"(boot_id {getattr(res.after, 'boot_id', None)})",
                  {"boot_id": getattr(res.after, "boot_id", None)})

    def _options(self, host: str, rid: str):
        from bench.matrix.cells import parse_cell
        from bench.matrix.runspec import RunOptions
        from bench.units import format_size
        row = self.rows[rid]
        boot = self._boot_of(rid)
        mem = boot.get("mem_bytes")
        cell = parse_cell(row["cell"])
        proto = self.rec.get("protocol") or {}
        headroom = self.s.cgroup_headroom_bytes or proto.get("cgroup_headroom")
        extra = {"cgroup_headroom_bytes": int(headroom)} if headroom else {}
        return RunOptions(threads=self.s.threads, **extra,
                          balloon_max_bytes=self.s.balloon_max_bytes or proto.get("balloon_max"),
                          passes=int(self.rec["workload"].get("passes") or self.s.passes),
                          campaign=self.cid, position=row["position"] or 0,
                          repetition=row["repetition"] or 0,
                          mem=format_size(mem) if mem and cell.mechanism == "memboot" else None,
                          lru_gen=boot.get("lru_gen"))

    def _host_lock(self, t, h, rid):
        from bench.hosts.lock import HostLock, HostLocked
        deadline = time.monotonic() + self.s.host_lock_wait_s
        while True:
            lock = HostLock(t, h, purpose=f"bench campaign {self.cid} run {rid}")
            try:
                lock.acquire()
                return lock
            except HostLocked:
                # a killed controller's holder goes away with its connection
                if time.monotonic() > deadline:
                    raise
                time.sleep(1.0)

    def _deploy_and_start(self, host: str, rid: str, spec: dict | None) -> dict:
        if self.rec.get("engine"):          # end-to-end engine runs: docs/engine.md
            from bench.execute.engine_runs import deploy_and_start
            return deploy_and_start(self, host, rid, spec)
        from bench.matrix.cells import parse_cell
        from bench.hosts.deploy import deploy
        from bench.execute.hostrun import ensure_file, ensure_pool, preflight, start_run
        h = self.hosts[host]
        hv = self.views[host]
        hv.phase = "deploying"
        t = self._t(host)
        try:
            boot_id = None
            if spec is None:
                pf = preflight(h, parse_cell(self.rows[rid]["cell"]), self.plan, rid,
                               self._options(host, rid), t)
                spec = pf["spec"]
                boot_id = (pf.get("facts") or {}).get("boot_id")
            lock = self._host_lock(t, h, rid)
            try:
                # agent, plan and pool were checked in this boot by an earlier run of this
                # campaign: skip the checks (each is a command, on a slow host seconds); any
                # failure or reboot forgets it, and the agent still checks the pool it reads
                key = (boot_id, self.plan.sha256)
                if boot_id is None or self._ready.get(host) != key:
                    deploy(t, h)
                    ensure_file(t, self.plan_path, f"{h.work_dir}/{self.plan.remote_path}",
                                self.plan.sha256)
                    ensure_pool(t, h, self.plan.geometry)
                    if boot_id is not None:
                        self._ready[host] = key
                if self.rows[rid]["state"] != "running":
                    self._set(rid, "deployed", "agent, plan and pool ready")
                    self._set(rid, "running", "starting the runner", spec=spec)
                hv.phase = "running"
                start_run(t, h, spec)
            finally:
                lock.release()
        except BenchError:
            self._drop(host)        # start the next attempt on a new connection
            raise
        return spec

    def _status(self, host: str, rid: str) -> dict | None:
        """The runner's status of a run (None: the host has no such run). An unreachable
        host raises Unreachable (a dropped channel too, as in runctl.wait_run): `_one` retries
        it through `_patient` and quarantines the host, never fails the run over it."""
        from bench.execute.hostrun import _last_json, runner_argv
        from bench.errors import Unreachable
        h = self.hosts[host]
        t = self.transport_for(h)
        try:
            r = t.run(runner_argv(h, "status", rid), timeout=60, check=False)
        finally:
            try:
                t.close()
            except Exception:  # noqa: BLE001 - a dead connection may fail to close
                pass
        if r.rc < 0:
            raise Unreachable(host, "the connection dropped during `runner.py status`")
        st = _last_json(r.stdout) or {}
        if r.rc != 0 and st.get("reason") == "no such run":
            return None
        if not st:
            raise HostError(host, f"runner.py status {rid}: exit {r.rc}: {r.stderr[-300:]}")
        return st

    def _wait_collect(self, host: str, rid: str) -> None:
        from bench.execute.hostrun import collect, wait_run
        h = self.hosts[host]
        hv = self.views[host]
        hv.phase = "running"
        log: list = []
        w = wait_run(h, rid, lambda: self._fresh(host), transport=self._t(host),
                     timeout_s=self.s.run_timeout_s,
                     reconnect_timeout_s=self.s.reconnect_timeout_s, chunk_s=self.s.chunk_s,
                     log=log, on_status=lambda st: self._live(rid, st))
        t = w["transport"]
        lost = [e for e in log if e["event"] == "lost"]
        if lost:        # one warning per outage, not one per reconnect attempt
            self._journal("warning", f"{host}: {rid}: connection lost "
                          + (f"{len(lost)} times " if len(lost) > 1 else "")
                          + f"from {lost[0]['t'][11:19]} to {lost[-1]['t'][11:19]} (last: "
                          f"{lost[-1].get('error')}); re-attached")
        hv.phase = "collecting"
        try:
            c = collect(t, h, rid, self.s.data_dir)
        except BenchError:
            self._drop(host)
            raise
        self._set(rid, "collected", f"bundle {c['status']}",
                  {"bundle": c["bundle"], "runner_ok": w["status"].get("ok"),
                   "runner_reason": w["status"].get("reason")})

    def _live(self, rid: str, st: dict) -> None:
        """Keep the run's live row (runner phase, pass, iteration) for the views; a busy
        database only delays it to the next chunk."""
        from bench.store.campaign_exec import set_live
        prog = st.get("progress") or {}
        try:
            set_live(self.store, rid, {"phase": st.get("phase"), **prog})
        except Exception:  # noqa: BLE001 - progress is for display only
            pass

    def _ingest(self, host: str, rid: str) -> None:
        from bench.execute.hostrun import bundle_path, ingest
        hv = self.views[host]
        hv.phase = "ingesting"
        b = bundle_path(self.s.data_dir, host, rid)
        if not b.is_dir():
            raise HostError(host, f"{rid}: collected but {b} is missing; collecting again")
        res = ingest(self.s.db_url, b, self.plan_path)
        if res.get("retained"):
            self._set(rid, "validated", "retained", {"verdict": "retained"})
        else:
            failed = res.get("failed") or []
            self._set(rid, "rejected", "rejected by " + (", ".join(failed) or "retention"),
                      {"verdict": "rejected", "failed": failed})

    # quarantine and hand-over -------------------------------------------------------------
    def _reconnect_timeout(self, host: str) -> float:
        s = self.s.reconnect_timeout_s
        return float(self.hosts[host].reboot.up_timeout if s is None else s)

    def _patient(self, host: str, what: str, fn: Callable):
        """fn() with the patience runctl.wait_run has with an unreachable host: Unreachable
        and CommandTimeout are retried (a fresh connection each time) until the host has been
        unreachable longer than the reconnect timeout (Settings.reconnect_timeout_s, default
        its reboot.up_timeout: a host may be rebooting), then runctl.Quarantined. Other errors
        (authentication, a changed host key, a failing command) are not retried here."""
        from bench.errors import CommandTimeout, Unreachable
        from bench.execute.hostrun import Quarantined
        limit = self._reconnect_timeout(host)
        t0 = time.monotonic()
        tries = 0
        while True:
            tries += 1
            try:
                return fn()
            except (Unreachable, CommandTimeout) as exc:
                waited = time.monotonic() - t0
                if waited > limit:
                    raise Quarantined(host, f"unreachable for {waited:.0f}s (> {limit:.0f}s, "
                                      f"{tries} tries) {what}; last error: {exc.message}",
                                      "`bench resume` when the host is back") from None
                if tries == 1:
                    self._journal("warning", f"{host}: unreachable {what} ({exc.message}); "
                                  f"retrying for up to {limit:.0f}s")
                time.sleep(min(2.0, max(0.2, limit / 10)))

    def _lost(self, host: str, rid: str, exc: BenchError) -> None:
        """A step outside wait_run (deploy, start, collect, a reboot's SSH) lost the host: is
        it gone? Probed with `_patient`: back in time -> return (the step counts as a failed
        attempt, as any infrastructure error); gone -> the run becomes pending (its spec kept
        when it has one, so `bench resume` re-attaches) and HostQuarantined is raised, instead
        of every later run of the host burning its retries on a dead host."""
        from bench.execute.hostrun import Quarantined
        try:
            self.views[host].current_boot = self._patient(
                host, f"after {rid} lost it ({exc.message})",
                lambda: self._probe_boot(self.hosts[host]))
        except Quarantined as q:
            started = bool(self.rows[rid].get("spec"))
            self._set(rid, "pending", f"host quarantined: {q.message}; `bench resume` "
                      + ("re-attaches" if started else "redoes it"), {"quarantine": True})
            self.rows[rid]["_pending_now"] = True
            raise HostQuarantined(host, q.message) from None
        except BenchError:
            return      # it answers, if badly: the caller counts the failed attempt

    def _quarantine(self, host: str, reason: str, rid: str | None) -> None:
        from bench.store.campaign_exec import reassign
        hv = self.views[host]
        hv.quarantined = reason
        hv.phase = "quarantined"
        self._journal("quarantine", f"{host} quarantined: {reason}", {"host": host,
                                                                     "reason": reason})
        with self.cv:
            # started runs (the runner may hold them, even finished): pending, spec kept, for
            # a later `bench resume` to re-attach by run id; never handed over or restarted
            held = [r for r in self.rows.values() if r["host"] == host and r.get("spec")
                    and r["state"] in ("running", "failed")
                    and resume_action(r["state"], True, self.attempts.get(r["run_id"], 0),
                                      self.s.retries) == "reattach"]
        for r in held:
            self._set(r["run_id"], "pending", f"{host} quarantined ({reason}); started there: "
                      "`bench resume` re-attaches", {"quarantine": True})
            r["_pending_now"] = True
        with self.cv:
            todo = [r for r in self.rows.values() if r["host"] == host and not r.get("spec")
                    and r["state"] in ("planned", "booting", "boot_verified", "deployed",
                                       "pending", "failed")
                    and resume_action(r["state"], False, self.attempts.get(r["run_id"], 0),
                                      self.s.retries) == "redo"]
        for r in todo:
            cands = [c for c in self.rec["runs"][r["run_id"]]["candidates"]
                     if c["host"] != host and c["host"] in self.hosts
                     and not self.views[c["host"]].quarantined]
            if cands:
                load = {c["host"]: sum(1 for x in self.rows.values() if x["host"] == c["host"]
                                       and x["state"] not in TERMINAL) for c in cands}
                c = min(cands, key=lambda c: (load[c["host"]], c["host"]))
                reassign(self.store, r["run_id"], c["host"], c["cell"],
                         f"{host} quarantined: {reason}")
                with self.cv:
                    r.update(host=c["host"], cell=c["cell"], state="planned", spec=None)
                    self.cv.notify_all()
                self.log(f"{r['run_id']}: handed over to {c['host']} as {c['cell']}")
            else:
                if r["state"] != "pending":
                    self._set(r["run_id"], "pending", f"{host} quarantined ({reason}); no other "
                              "eligible host (placement each)", {"quarantine": True})
                r["_pending_now"] = True

    def _restore(self, host: str) -> None:
        """Boot the host's default command line again if this campaign rebooted it."""
        from bench.hosts.reboot import restore_host
        from bench.store.campaign_exec import journal_rows
        hv = self.views[host]
        rebooted = hv.rebooted or any(
            (j.get("data") or {}).get("host") == host and (j.get("data") or {}).get("ok")
            for j in journal_rows(self.store, self.cid, kinds=("reboot",)))
        if not rebooted or hv.current_boot == (None, None):
            return
        hv.phase = "restoring"
        t = self.transport_for(self.hosts[host])
        try:
            res = restore_host(t, self.hosts[host], lambda e: None)
        except BenchError as exc:
            self._journal("warning", f"{host}: restore to the default boot failed: "
                          f"{exc.message}")
            return
        finally:
            try:
                t.close()
            except Exception:  # noqa: BLE001
                pass
        self._journal("reboot", f"{host}: restored the default boot: {res.verdict} "
                      f"({res.reason})", {"host": host, "restore": True, "ok": res.ok})
        if res.ok:
            hv.current_boot = (None, None)


# progress for views (from the store only: `bench watch` never touches a host) -------------------

def progress(store, campaign_id: str) -> dict:
    """A snapshot for the live views: per host phase, current run, elapsed, ETA; overall
    counts; last verdicts; quarantines and warnings. Reads the database only."""
    from bench.store.campaign_exec import campaign_row, journal_rows, lock_holder, run_rows
    from datetime import datetime
    c = campaign_row(store, campaign_id)
    if c is None:
        from bench.store.db import StoreError
        raise StoreError(f"no campaign {campaign_id}", hint="`bench campaigns` lists them")
    rows = run_rows(store, campaign_id)
    js = journal_rows(store, campaign_id)
    rec = next((j["data"] for j in js if j["kind"] == "plan"), {}) or {}
    est = rec.get("estimates") or {}
    by_ref = {r["ref"]: r for r in rows}

    def ts(s):
        return datetime.fromisoformat(s).timestamp() if s else None
    first, last_t, durations, reboots = {}, {}, [], []
    verdicts, warnings, quarantined, live = [], [], {}, {}
    for j in js:
        t = ts(j["t"])
        d = j.get("data") or {}
        if j["kind"] == "state" and j["run_ref"] in by_ref:
            rid = by_ref[j["run_ref"]]["run_id"]
            if d.get("from") in ("planned", "pending", "failed") and rid not in first:
                first[rid] = t
            last_t[rid] = t
            if d.get("to") in TERMINAL:
                if rid in first:
                    durations.append(t - first[rid])
                verdicts.append({"t": j["t"], "run_id": rid, "verdict": d["to"],
                                 "message": j["message"].split(": ", 1)[-1]})
        elif j["kind"] == "reboot" and d.get("seconds"):
            reboots.append(float(d["seconds"]))
        elif j["kind"] == "quarantine":
            quarantined[d.get("host")] = d.get("reason")
        elif j["kind"] == "warning":
            warnings.append({"t": j["t"], "message": j["message"]})
        elif j["kind"] == "handover":
            quarantined.setdefault(d.get("from"), "quarantined")
        elif j["kind"] == "live" and j["run_ref"] in by_ref:
            live[by_ref[j["run_ref"]]["run_id"]] = d
    run_s = (sorted(durations)[len(durations) // 2] if durations
             else float(est.get("run_seconds") or 900))
    reboot_s = (sum(reboots) / len(reboots) if reboots
                else float(est.get("reboot_seconds") or 600))
    now = time.time()
    hosts = []
    for h in rec.get("hosts") or sorted({r["host"] for r in rows}):
        mine = [r for r in rows if r["host"] == h]
        active = [r for r in mine if r["state"] not in TERMINAL + ("planned", "failed",
                                                                    "pending")]
        cur = active[0] if active else None
        left = [r for r in mine if r["state"] not in TERMINAL + ("failed",)]
        boots = {json.dumps((rec.get("runs", {}).get(r["run_id"]) or {}).get("boot"),
                            sort_keys=True) for r in left if r["state"] == "planned"}
        elapsed = now - first[cur["run_id"]] if cur and cur["run_id"] in first else None
        eta = len(left) * run_s - min(elapsed or 0, run_s) + max(0, len(boots) - 1) * reboot_s
        phase = ("quarantined" if h in quarantined else
                 {"booting": "rebooting", "boot_verified": "deploying", "deployed": "starting",
                  "running": "running", "collected": "ingesting"}.get(cur["state"], cur["state"])
                 if cur else ("done" if not left else "waiting"))
        lv = live.get(cur["run_id"], {}) if cur and cur["state"] == "running" else {}
        if lv.get("phase") in ("warmup", "measuring", "collecting"):
            phase = lv["phase"]
        hosts.append({"host": h, "phase": phase, "run_id": cur["run_id"] if cur else None,
                      "pass": lv.get("pass"), "passes": lv.get("passes"),
                      "iteration": lv.get("iteration"), "iterations": lv.get("iterations"),
                      "cell": cur["cell"] if cur else None,
                      "state": cur["state"] if cur else None,
                      "elapsed_s": elapsed, "eta_s": max(0.0, eta) if left else 0.0,
                      "done": sum(1 for r in mine if r["state"] in TERMINAL),
                      "total": len(mine), "quarantined": quarantined.get(h)})
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    return {"campaign": campaign_id, "matrix": c["matrix"], "seed": c["seed"],
            "state": c["state"], "controller": lock_holder(store, campaign_id),
            "total": len(rows), "finished": sum(counts.get(s, 0) for s in TERMINAL),
            "failed": counts.get("failed", 0), "counts": counts, "hosts": hosts,
            "eta_s": max((h["eta_s"] for h in hosts), default=0.0),
            "run_seconds": run_s, "reboot_seconds": reboot_s,
            "verdicts": verdicts[-6:], "warnings": warnings[-5:], "quarantined": quarantined,
            "last_journal_id": js[-1]["id"] if js else 0}
