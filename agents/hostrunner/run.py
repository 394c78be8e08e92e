"""The Run steps of Algorithm 1 (docs/design.md), executed by the detached runner: host lock,
cleanup of leftovers, drop_caches and the `pre` snapshot, MGLRU, capacity, the agent (or an
engine, docs/engine.md) under the supervise loop, collect (`post`, kernel log), teardown, and
the final status and manifest. Every step records into the bundle as it goes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from typing import Any

from . import RUNNER_VERSION
from .bundle import dump_plans, runner_sha256, snapshot, write_manifest
from .capacity import (check_memboot, create_wall, launch_balloon, limit_cgroup,
                       release_balloon, stop_scope, wait_balloon_ready)
from .cleanup import Active, cleanup_leftovers, remove_cgroup
from .errors import RunFailed
from .files import (exit_fields, last_line, meminfo, now_iso, parse_status, proc_status,
                    read_or_none, read_text, sha256_file, snap_name, status_bytes, write_file,
                    write_json)
from .kmsg import KernelLog
from .locks import host_lock
from .probes import CG_CURRENT, CG_FILES, LRU_GEN, SYS_FILES, host_fingerprint, lru_gen_mask
from .progress_file import progress_path
from .supervise import STOPPED, Child, stop, supervise
from .systemd import cgroup_line_in

Popen = subprocess.Popen


class Run:
    def __init__(self, work_dir: str, bundle: str, spec: dict[str, Any],
                 cfg: dict[str, Any]) -> None:
        self.work_dir, self.bundle, self.spec, self.cfg = work_dir, bundle, spec, cfg
        self.run_id: str = cfg["run_id"]
        self.status: dict[str, Any] = json.loads(read_text(os.path.join(bundle, "status.json")))
        self.stop_requested = False
        self.runner: dict[str, Any] = {"runner_version": RUNNER_VERSION,
                                       "runner_sha256": runner_sha256(),
                                       "pid": os.getpid(), "work_dir": work_dir}
        self.active = Active(work_dir, self.run_id)
        self.host_lock_fd: int | None = None
        self.cg: dict[str, str] | None = None           # {"backend", "path", "mount"[, "unit"]}
        self.wall_keeper: Popen[bytes] | None = None     # holds a systemd wall scope open
        self.echo: Any = None                           # the journal, for a unit's phase lines
        self.capacity: dict[str, Any] = {}
        self.balloon: Popen[bytes] | None = None
        self.balloon_info: dict[str, Any] | None = None
        self.child: Popen[bytes] | None = None           # the agent or the engine
        self.child_group = False                         # it leads its own process group
        self.engine_info: dict[str, Any] | None = None
        self.mglru: dict[str, Any] | None = None
        self.kmsg: KernelLog | None = None
        self.pre_taken = False
        self.collected = False

    # status ------------------------------------------------------------------------------
    def phase(self, name: str, **extra: Any) -> None:
        self.status.update(phase=name, pid=os.getpid(), updated=now_iso(), **extra)
        entry = {"phase": name, "t": self.status["updated"], "mono_ns": time.monotonic_ns()}
        if extra.get("reason"):
            entry["reason"] = extra["reason"]
        self.status["history"].append(entry)
        write_json(os.path.join(self.bundle, "status.json"), self.status)
        line = f"{entry['t']} phase {name}" + (f": {extra['reason']}" if extra.get("reason")
                                                else "")
        print(line, flush=True)
        if self.echo is not None:
            try:
                print(line, file=self.echo, flush=True)
            except OSError:
                self.echo = None

    def check_stop(self) -> None:
        if self.stop_requested:
            raise RunFailed(STOPPED)

    def path(self, *p: str) -> str:
        return os.path.join(self.bundle, *p)

    def cg_files(self) -> list[str]:
        if not self.cg:
            return []
        return [os.path.join(self.cg["path"], f) for f in CG_FILES[self.cg["backend"]]
                if os.path.exists(os.path.join(self.cg["path"], f))]

    def snapshot(self, which: str) -> None:
        snapshot(self.bundle, which, self.cg_files(),
                 self.balloon.pid if self.balloon is not None else None)

    # steps -------------------------------------------------------------------------------
    def step_lock(self) -> None:
        self.host_lock_fd, waited = host_lock(self.work_dir, self.run_id,
                                              self.cfg["lock_timeout_s"], self.check_stop)
        self.runner["host_lock_wait_s"] = waited
        self.phase("locked")

    def step_clean_drop(self) -> None:
        self.active.save()
        self.runner["cleanup"] = rep = cleanup_leftovers(self.work_dir, self.run_id)
        if rep["problems"]:
            raise RunFailed("leftovers of an earlier run could not be removed: "
                            + "; ".join(rep["problems"]))
        self.phase("cleaned")
        if self.cfg.get("engine"):
            self.engine_prepare()
        before = meminfo()["Cached"]
        t0 = time.monotonic_ns()
        os.sync()
        write_file("/proc/sys/vm/drop_caches", "3\n")
        after = meminfo()["Cached"]
        write_json(self.path("drop.json"), {"cached_before_bytes": before,
                                            "cached_after_bytes": after, "t": now_iso(),
                                            "sync_and_drop_ns": time.monotonic_ns() - t0})
        write_json(self.path("host.json"), host_fingerprint(self.cfg))
        self.kmsg = KernelLog()
        self.snapshot("pre")
        self.pre_taken = True
        self.phase("caches_dropped")

    def step_mglru(self) -> None:
        requested = "on" if self.cfg["reclaim"] == "mglru" else "off"
        rec = {"requested": requested, "method": None, "pre": lru_gen_mask(), "after_set": None,
               "post": None}
        self.mglru = rec
        write_json(self.path("mglru.json"), rec)
        if rec["pre"] is None:
            rec["method"] = "absent"
            write_json(self.path("mglru.json"), rec)
            if requested == "on":
                raise RunFailed(f"the cell asks mglru but this kernel has no MGLRU "
                                f"({LRU_GEN} missing)")
        else:
            self._set_mglru(rec, requested)
            write_json(self.path("mglru.json"), rec)
        self.phase("mglru_set")

    def _set_mglru(self, rec: dict[str, Any], requested: str) -> None:
        on = bool(int(rec["pre"], 16) & 1)
        if on == (requested == "on"):
            rec["method"] = "boot" if self.cfg["expect_boot"].get("lru_gen") == requested \
                else "unchanged"
            rec["after_set"] = rec["pre"]
        elif not self.cfg["toggle"]:
            rec["method"] = "unchanged"
            write_json(self.path("mglru.json"), rec)
            raise RunFailed(f"MGLRU is {'on' if on else 'off'} ({rec['pre']}), the cell asks "
                            f"{requested} and mglru_runtime_toggle is false")
        else:
            write_file(LRU_GEN, "y\n" if requested == "on" else "n\n")
            rec["method"] = "runtime"
            rec["after_set"] = lru_gen_mask()
            write_json(self.path("mglru.json"), rec)
            if bool(int(rec["after_set"], 16) & 1) != (requested == "on"):
                raise RunFailed(f"wrote MGLRU {requested} but read back {rec['after_set']}")

    def step_capacity(self) -> None:
        mech = self.cfg["mechanism"]
        cap = {"mechanism": mech, "capacity_bytes": self.cfg["capacity_bytes"]}
        self.capacity = cap
        try:
            if mech == "cgroup":
                self.cg, self.wall_keeper = create_wall(cap, self.run_id, self.cfg["headroom"],
                                                        self.active, self.bundle)
                limit_cgroup(cap, self.cg)
            elif mech == "balloon":
                self.start_balloon(cap)
            elif mech == "memboot":
                check_memboot(cap, self.cfg["expect_boot"]["mem"])
        finally:
            write_json(self.path("capacity.json"), cap)
        self.phase("capacity_applied")

    def start_balloon(self, cap: dict[str, Any]) -> None:
        self.balloon = launch_balloon(cap, self.cfg["agent"], self.bundle,
                                      self.cfg["balloon_max_bytes"], self.active)
        self.status["children"] = {"agent": None, "balloon": self.balloon.pid}
        self.balloon_info = {"pid": self.balloon.pid, "alive_at_loop_entry": None,
                             "alive_at_end": None, "exit_code": None, "signal": None}
        wait_balloon_ready(self.balloon, cap, self.bundle, self.check_stop)

    # the agent ---------------------------------------------------------------------------
    def agent_argv(self) -> list[str]:
        c = self.cfg
        argv = [c["agent"], "replay", "--pool", c["pool"], "--plan", c["plan"],
                "--passes", str(c["passes"]), "--threads", str(c["threads"]), "--mode", c["mode"]]
        if c["arena_bytes"]:
            argv += ["--arena-bytes", str(c["arena_bytes"])]
        if c["freq"]:
            argv += ["--freq", c["freq"]]
        if c["nocache"]:
            argv += ["--nocache", c["nocache"]]
        if c["hints"]:
            argv += ["--prefetch", c["delivery"], "--hints", c["hints"]]
        files = list(SYS_FILES) + ["/proc/self/status"]
        if os.path.exists(LRU_GEN):
            files.append(LRU_GEN)
        files += self.cg_files()
        if self.balloon is not None:
            files.append(f"/proc/{self.balloon.pid}/status")
        argv += ["--snapshot-dir", self.path("snapshots")]
        for f in files:
            argv += ["--snapshot-file", f]
        prog = progress_path(self.work_dir, self.run_id)
        os.makedirs(os.path.dirname(prog), exist_ok=True)
        return argv + ["--out", self.path("agent.jsonl"), "--progress", prog]

    def agent_child(self, info: dict[str, Any], mark: str | None) -> Child:
        """The agent as the supervised child: in the cgroup (entered between fork and exec),
        its timeline phase turning to measuring once snapshots/pass{P-2}-end appears."""
        cg = self.cg
        cur_file = os.path.join(cg["path"], CG_CURRENT[cg["backend"]]) if cg else None
        measuring = [mark is None]

        def started(p: Popen[bytes], launched_ns: int) -> None:
            self.child, self.child_group = p, False
            self.active.add_pid("agent", p.pid)
            info["pid"] = p.pid
            info["started_mono_ns"] = time.monotonic_ns()
            self.status["children"] = {"agent": p.pid, "balloon": self.balloon.pid
                                       if self.balloon is not None else None}
            self.phase("warmup" if mark else "measuring")
            info["cgroup"] = (read_or_none(f"/proc/{p.pid}/cgroup") or "").splitlines()
            if cg:
                rel = "/" + os.path.relpath(cg["path"], cg["mount"])
                info["in_cgroup"] = cgroup_line_in(info["cgroup"], rel)

        def row() -> tuple[str, str]:
            if not measuring[0] and mark is not None and os.path.isdir(mark):
                measuring[0] = True
                info["measuring_seen_mono_ns"] = time.monotonic_ns()
                self.phase("measuring")
                if self.balloon is not None and self.balloon_info is not None:
                    self.balloon_info["alive_at_loop_entry_runner"] = self.balloon.poll() is None
            if self.balloon is not None and self.balloon_info is not None \
                    and self.balloon.poll() is not None \
                    and "balloon_died_mono_ns" not in self.balloon_info:
                self.balloon_info["balloon_died_mono_ns"] = time.monotonic_ns()
            cur = (read_or_none(cur_file) or "").strip() if cur_file else ""
            return ("measuring" if measuring[0] else "warmup"), cur
        t = self.cfg["agent_timeout_s"]
        return Child(argv=info["argv"], what="the agent" + (f" in {cg['path']}" if cg else ""),
                     stdout=self.path("agent.stderr"), stderr=self.path("agent.stderr"),
                     append=True, scope_procs=os.path.join(cg["path"], "cgroup.procs")
                     if cg else None, timeout_s=t,
                     timeout_reason=f"agent still running after agent_timeout_s {t}",
                     on_start=started, row=row)

    def step_agent(self) -> None:
        info: dict[str, Any] = {"argv": self.agent_argv(), "pid": None, "exit_code": None,
                                "signal": None}
        self.runner["agent"] = info
        passes = self.cfg["passes"]
        mark = self.path("snapshots", f"pass{passes - 2}-end") if passes >= 2 else None
        o = supervise(self.agent_child(info, mark), self.path("timeline.csv"),
                      self.cfg["interval_ms"] / 1000.0, lambda: self.stop_requested)
        info["ended_mono_ns"] = o.ended_ns
        info["exit_code"], info["signal"] = exit_fields(o.returncode)
        self.runner["timeline_samples"] = o.samples
        if self.balloon is not None:
            self.balloon_loop_entry(self.path("snapshots", f"pass{passes - 1}-start"))
        if o.why:
            raise RunFailed(o.why)
        rc = o.returncode
        if rc != 0:
            summary = self.agent_summary()
            reason = (summary or {}).get("reason") or last_line(self.path("agent.stderr"))
            raise RunFailed(f"agent exited with {'signal ' + str(-rc) if rc < 0 else rc}: "
                            f"{reason}")

    def agent_summary(self) -> dict[str, Any] | None:
        for line in reversed((read_or_none(self.path("agent.jsonl")) or "").splitlines()):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if obj.get("summary"):
                return obj
        return None

    def balloon_loop_entry(self, loop_entry: str) -> None:
        """Alive at loop entry, exactly: the agent's own loop_entry snapshot of the balloon's
        /proc/PID/status (a .err file there = gone)."""
        assert self.balloon is not None and self.balloon_info is not None
        f = os.path.join(loop_entry, snap_name(f"/proc/{self.balloon.pid}/status"))
        if os.path.exists(f):
            st = parse_status(read_text(f))
            alive = st.get("Name") == "bench-agent" and not st.get("State", "").startswith("Z")
            self.balloon_info["alive_at_loop_entry"] = alive
            self.balloon_info["vmlck_at_loop_entry_bytes"] = status_bytes(st, "VmLck")
        elif os.path.exists(f + ".err"):
            self.balloon_info["alive_at_loop_entry"] = False

    # engine runs (docs/engine.md) ----------------------------------------------------------
    def step_engine_mglru(self) -> None:
        """Engine cells leave reclaim as the host runs it: record the MGLRU state only."""
        mask = lru_gen_mask()
        self.mglru = {"requested": None, "method": "unchanged" if mask else "absent",
                      "pre": mask, "after_set": mask, "post": None}
        write_json(self.path("mglru.json"), self.mglru)
        self.phase("mglru_set")

    def engine_prepare(self) -> None:
        """The engine's prepare command (e.g. make its model when missing), before the caches
        are dropped: outside the measurement, what it reads is dropped with the rest. Its own
        session (a timeout or a stop ends its group), output to prepare.log."""
        e = self.cfg["engine"]
        argv = e.get("prepare")
        if not argv:
            return
        rec: dict[str, Any] = {"argv": argv, "exit_code": None, "signal": None,
                               "timed_out": False}
        self.runner["engine_prepare"] = rec
        t0 = time.monotonic()
        with open(self.path("prepare.log"), "ab") as log:
            try:
                p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     cwd=e["cwd"], env={**os.environ, **e["env"]},
                                     start_new_session=True, close_fds=True)
            except OSError as exc:
                raise RunFailed(f"cannot start the engine's prepare {argv[0]}: {exc}") from None
        self.active.add_pid("engine", p.pid, exe=e["prepare_exe"], argv=argv)
        self.child, self.child_group = p, True
        while p.poll() is None:
            if self.stop_requested or time.monotonic() - t0 > e["timeout_s"]:
                rec["timed_out"] = not self.stop_requested
                stop(p, True)
                break
            time.sleep(0.1)
        self.child = None
        rec["wall_s"] = time.monotonic() - t0
        rec["exit_code"], rec["signal"] = exit_fields(p.returncode)
        self.check_stop()
        if rec["timed_out"]:
            raise RunFailed(f"the engine's prepare still running after timeout_s "
                            f"{e['timeout_s']}")
        if p.returncode != 0:
            raise RunFailed(f"the engine's prepare exited with {p.returncode}: "
                            f"{last_line(self.path('prepare.log'))}")
        # a pool_dir the prepare made (a first run on a fresh host) is the run's device now
        if e["pool_dir"] and os.path.isdir(e["pool_dir"]):
            e["device_of"] = self.cfg["pool"] = e["pool_dir"]

    def engine_child(self, info: dict[str, Any]) -> Child:
        """The engine as the supervised child: argv without a shell, cwd, env additions, its
        own session (a timeout stops the whole process group), stdout/stderr kept apart."""
        e, cg = self.cfg["engine"], self.cg
        cur_file = os.path.join(cg["path"], CG_CURRENT[cg["backend"]]) if cg else None

        def started(p: Popen[bytes], launched_ns: int) -> None:
            self.child, self.child_group = p, True
            info["start_mono_ns"] = launched_ns
            self.active.add_pid("engine", p.pid, exe=e["exe"], argv=e["argv"])
            info["pid"] = p.pid
            self.status["children"] = {"engine": p.pid} | (
                {"balloon": self.balloon.pid} if self.balloon is not None else {})
            if self.balloon is not None and self.balloon_info is not None:
                self.balloon_info["alive_at_engine_start"] = self.balloon.poll() is None
            self.phase("measuring")             # written with the engine's pid
            if cg:          # entered between fork and exec (Child.scope_procs): say so
                info["cgroup"] = (read_or_none(f"/proc/{p.pid}/cgroup") or "").splitlines()
                info["in_cgroup"] = cgroup_line_in(
                    info["cgroup"], "/" + os.path.relpath(cg["path"], cg["mount"]))

        def row() -> tuple[str, str]:
            return "measuring", (read_or_none(cur_file) or "").strip() if cur_file else ""

        def start_failed(exc: BaseException, launched_ns: int) -> None:
            info["start_mono_ns"] = launched_ns
            info["start_error"] = str(exc)
        env = dict(os.environ)
        env.update(e["env"])
        # the engine writes where its configuration says, as it did before the runner's
        # umask became 077 (its output files in the bundle are opened by the runner: 0600)
        return Child(argv=e["argv"], what=f"the engine {e['argv'][0]}",
                     stdout=self.path("engine.stdout"), stderr=self.path("engine.stderr"),
                     env=env, cwd=e["cwd"], new_session=True, umask=0o022, row=row,
                     scope_procs=os.path.join(cg["path"], "cgroup.procs") if cg else None,
                     timeout_s=e["timeout_s"],
                     timeout_reason=f"engine still running after its timeout_s {e['timeout_s']}",
                     on_start=started, on_start_error=start_failed)

    def step_engine(self) -> None:
        """The engine instead of the agent; wall time on the monotonic clock (exit seen
        through a pidfd where the kernel has one)."""
        e = self.cfg["engine"]
        info = {"argv": e["argv"], "cwd": e["cwd"], "env": e["env"], "executable": e["exe"],
                "executable_sha256": sha256_file(e["exe"]), "timeout_s": e["timeout_s"],
                "device_of": e["device_of"], "pid": None, "exit_code": None, "signal": None,
                "timed_out": False, "stopped": False, "exit_seen_by": None,
                "start_mono_ns": None, "end_mono_ns": None, "wall_s": None}
        self.engine_info = self.runner["engine"] = info
        o = supervise(self.engine_child(info), self.path("timeline.csv"),
                      self.cfg["interval_ms"] / 1000.0, lambda: self.stop_requested)
        info.update(exit_seen_by=o.exit_seen_by, stopped=o.stopped, timed_out=o.timed_out,
                    end_mono_ns=o.ended_ns)
        info["wall_s"] = (o.ended_ns - info["start_mono_ns"]) / 1e9
        info["exit_code"], info["signal"] = exit_fields(o.returncode)
        self.runner["timeline_samples"] = o.samples
        if o.why:
            raise RunFailed(o.why)
        rc = o.returncode
        if rc != 0:
            raise RunFailed(f"engine exited with {'signal ' + str(-rc) if rc < 0 else rc}: "
                            f"{last_line(self.path('engine.stderr'))}")

    # the end -----------------------------------------------------------------------------
    def step_collect(self) -> None:
        self.phase("collecting")
        self.collect()

    def collect(self) -> None:
        if self.collected:
            return
        self.collected = True
        if self.balloon is not None and self.balloon_info is not None:
            alive = self.balloon.poll() is None
            self.balloon_info["alive_at_end"] = alive
            self.balloon_info["vmlck_end_bytes"] = status_bytes(
                proc_status(self.balloon.pid), "VmLck") if alive else None
        if self.engine_info is not None:
            write_json(self.path("engine.json"), self.engine_info)
        if self.pre_taken:
            self.snapshot("post")
        if self.mglru is not None:
            self.mglru["post"] = lru_gen_mask()
            write_json(self.path("mglru.json"), self.mglru)
        if self.kmsg is not None:
            write_file(self.path("kmsg.txt"), "".join(ln + "\n" for ln in self.kmsg.collect()))
            self.runner["kmsg"] = self.kmsg.info
            self.kmsg = None

    def teardown(self) -> list[str]:
        notes: list[str] = []
        if self.child is not None:
            stop(self.child, self.child_group)
        if self.balloon is not None and self.balloon_info is not None:
            notes += release_balloon(self.balloon, self.balloon_info,
                                     self.capacity.get("requested_bytes", 0))
            write_json(self.path("balloon.json"), self.balloon_info)
        if self.cg and self.wall_keeper is not None:
            notes += stop_scope(self.cg, self.wall_keeper)
        elif self.cg:
            why = remove_cgroup(self.cg["path"])
            if why:
                notes.append(why)
        self.runner["teardown"] = notes
        if not notes:
            self.active.remove()
        return notes

    def steps(self) -> None:
        self.step_lock()
        self.step_clean_drop()
        if self.cfg.get("engine"):
            self.step_engine_mglru()
            self.step_capacity()
            self.step_engine()
        else:
            self.step_mglru()
            self.step_capacity()
            self.step_agent()
        self.step_collect()

    def execute(self) -> None:
        """Every step, then collect and teardown whatever happened, then the final status
        (done or failed with one reason) and the manifest."""
        ok, reason = True, ""
        try:
            self.steps()
        except RunFailed as e:
            ok, reason = False, str(e)
        except Exception as e:  # noqa: BLE001 - any internal error still ends in a bundle
            traceback.print_exc()
            ok, reason = False, f"runner internal error: {type(e).__name__}: {e}"
        try:
            self.collect()
        except Exception as e:  # noqa: BLE001 - the teardown must run whatever collect did
            traceback.print_exc()
            if ok:
                ok, reason = False, f"collect failed: {type(e).__name__}: {e}"
        try:
            notes = self.teardown()
            if notes and ok:
                ok, reason = False, "teardown: " + "; ".join(notes)
        except Exception as e:  # noqa: BLE001 - a failed teardown still ends in a bundle
            traceback.print_exc()
            if ok:
                ok, reason = False, f"teardown failed: {type(e).__name__}: {e}"
        for note in dump_plans(self.bundle, self.cfg):
            print(f"runner: dumping the plans: {note}", file=sys.stderr)
        try:
            write_json(self.path("runner.json"), self.runner)
        except OSError:
            traceback.print_exc()
        if ok:
            self.phase("done", ok=True, reason=None)
        else:
            self.phase("failed", ok=False, reason=reason.replace("\n", " ")[:500])
        sys.stdout.flush()
        sys.stderr.flush()
        write_manifest(self.bundle, self.run_id)
