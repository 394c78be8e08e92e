"""Retention rules (docs/design.md): a run's numbers count only if every rule passes.

Each rule is a pure function of a loaded bundle and a context ({"campaign_fingerprint": dict or
None, "device_bandwidth": the host's measured cold bandwidth of the pool device or None})
returning (passed, reason); it has a name and a version, and registers with `@rule`
(bench.judge.rulebook). Bump a rule's version whenever
its logic changes: `bench retention recheck` re-evaluates stored runs under the current
versions and reports what changed. A rule that does not apply passes and says why.

Rules apply to replay-agent runs, to end-to-end engine runs (docs/engine.md), or to both
(`kinds`); a rule is not evaluated on a run of a kind it does not cover (no verdict), so
agent-only rules never reject an engine run for lacking agent data, nor the engine gates
(engine_exit_ok, engine_backend, engine_output_nondegenerate, engine_load_reported) an agent
run, and agent runs keep exactly the verdicts they had.
"""

from __future__ import annotations

import re

from bench.errors import InputError
from bench.hosts.bootplan import memtotal_range
from bench.hosts.procfs import cmdline_param, parse_cmdline, parse_status, status_bytes
from bench.judge.bundle import Bundle
from bench.judge.hintcheck import check_hints
from bench.judge.counters import find
from bench.judge.measured import (delta, engine_facts, fingerprint, fingerprint_diff,
                                  measured_records, mglru_state, snap)
from bench.judge.rulebook import KINDS, RULES, Rule, Verdict, rule  # noqa: F401 - KINDS and Rule
# are re-exported: callers and tests name them through retention, as before the registry moved
from bench.units import format_size, parse_kernel_size

MiB = 1 << 20
VMLCK_TOLERANCE = 0.99          # the arena's VmLck must reach 99% of arena_bytes
# a balloon's VmLck is round_up(request, page) exactly (native/balloon.c mlocks one mapping of
# that size and fails below it): it may differ from the request by this fraction or one page of
# the largest size Linux uses (64 KiB), whichever is larger, either way
BALLOON_VMLCK_MATCH = 0.001
BALLOON_VMLCK_PAGE = 64 << 10
WALL_FRACTION = 0.95            # memory.current must reach 95% of the wall
DROP_RESIDUE_BYTES = 512 * MiB  # page cache left after drop_caches, beyond Shmem
KMSG_BAD = re.compile(r"I/O error|blk_update_request|critical medium error|Buffer I/O|"
                      r"Out of memory|oom-kill|invoked oom-killer|Killed process|"
                      r"EXT4-fs error|XFS .*error|nvme.*(timeout|reset)", re.IGNORECASE)
# a /dev/kmsg record: "priority,sequence,microseconds since boot,flags[,...];message"
KMSG_RECORD = re.compile(r"^\d+,\d+,(\d+),[^;]*;(.*)$", re.DOTALL)


def run_kind(b: Bundle) -> str:
    return "engine" if b.is_engine else "agent"


def evaluate(b: Bundle, ctx: dict | None = None) -> list[Verdict]:
    ctx = ctx or {}
    out = []
    kind = run_kind(b)
    for r in RULES:
        if kind not in r.kinds:
            continue
        try:
            ok, reason = r.check(b, ctx)
        except (KeyError, TypeError, ValueError, ZeroDivisionError, AttributeError) as exc:
            # a failed run's partial bundle lacks what most rules read: runner_completed
            # carries its reason, the others say they could not look
            ok, reason = False, f"could not evaluate: {type(exc).__name__}: {exc}"
        out.append(Verdict(r.name, r.version, bool(ok), reason))
    return out


def retained(verdicts: list[Verdict]) -> bool:
    return all(v.passed for v in verdicts)


def _vmlck(text: str | None) -> int | None:
    return None if text is None else status_bytes(parse_status(text), "VmLck")


def _balloon_vmlck(b: Bundle, phase: str) -> int | None:
    s = b.snapshots.get(phase, {})
    pid = (b.balloon or {}).get("pid") or b.capacity.get("pid")
    return _vmlck(s.get("balloon_status") or s.get(f"proc_{pid}_status"))


def _mb(n: int | None) -> str:
    return "absent" if n is None else f"{n / MiB:.0f} MiB"


@rule("runner_completed", 1)
def runner_completed(b, ctx):
    """The host-side runner went through its whole protocol (status done, ok). A run it
    stopped (a balloon that never got ready, a killed agent, a wall it could not set) leaves a
    partial bundle that is stored and rejected here with the runner's reason, never retried as
    if the infrastructure had failed."""
    if b.completed:
        return True, "runner finished: done, ok"
    before = [h.get("phase") for h in b.status.get("history") or [] if h.get("phase") !=
              b.status.get("phase")]
    return False, (f"runner ended {b.status.get('phase')!r}"
                   + (f" after phase {before[-1]}" if before else "")
                   + f": {b.status.get('reason') or 'no reason given'}")


@rule("vmlck_held", 2, kinds=("agent",))
def vmlck_held(b, ctx):
    """The balloon's VmLck equals what it was asked to lock (capacity.json requested_bytes)
    within BALLOON_VMLCK_MATCH or a 64 KiB page, on both sides, at loop entry and at the end;
    the pinned arena's requested VmLck reached after preload and held at the end. v1 only
    bounded the balloon from below (99% of the request): a balloon locking far more than asked
    passed."""
    notes = []
    if b.spec.get("mechanism") == "balloon":
        want = b.capacity.get("requested_bytes")
        if not want or want <= 0:
            return False, "balloon run without requested_bytes in capacity.json"
        slack = max(BALLOON_VMLCK_PAGE, int(BALLOON_VMLCK_MATCH * want))
        for phase in (b.loop_entry, "post"):
            got = _balloon_vmlck(b, phase)
            if got is None or abs(got - want) > slack:
                return False, (f"balloon VmLck {_mb(got)} at {phase}, requested {_mb(want)} "
                               f"(allowed +-{slack >> 10} KiB)")
        notes.append(f"balloon VmLck {_mb(want)} as requested at loop entry and end")
    arena = int(b.summary.get("arena_bytes") or 0)
    if b.spec.get("mode") in ("pinned", "hybrid") or arena:
        if not arena:
            return False, f"{b.spec.get('mode')} run with no arena_bytes in the agent summary"
        for what, got in (("after preload", b.summary.get("vmlck_bytes")),
                          ("at the end", b.summary.get("vmlck_end_bytes"))):
            if got is None or got < VMLCK_TOLERANCE * arena:
                return False, f"arena VmLck {_mb(got)} {what}, arena {_mb(arena)}"
        notes.append(f"arena VmLck >= {_mb(arena)} after preload and at the end")
    return True, "; ".join(notes) or "no balloon and no arena: nothing locked to check"


@rule("no_oom", 1)
def no_oom(b, ctx):
    """No OOM: cgroup memory.events oom/oom_kill (v2) or memory.oom_control oom_kill (v1) and
    the system's vmstat oom_kill unchanged over the run."""
    for source, key in (("cgroup", "memory.events.oom"), ("cgroup", "memory.events.oom_kill"),
                        ("cgroup", "memory.oom_control.oom_kill"), ("vmstat", "oom_kill")):
        d = delta(b, "run", source, key)
        if d:
            return False, f"{key} rose by {d} during the run"
    if snap(b, "post").get(("cgroup", "memory.oom_control.under_oom")):
        return False, "the cgroup was under_oom at the end"
    if delta(b, "run", "vmstat", "oom_kill") is None:
        return False, "vmstat oom_kill missing from the pre/post snapshots"
    return True, "no OOM event in the cgroup or the system"


@rule("alive_throughout", 3)
def alive_throughout(b, ctx):
    """The cgroup scope and the balloon stayed alive from warm-up to the end. v2: the
    runner's own end state is runner_completed's (v1 also checked it here). v3: an engine
    run under a capacity (no passes): the scope's files at `post` and in every timeline
    sample, the balloon alive when the engine started and at the end."""
    mech = b.spec.get("mechanism")
    if "engine" in b.spec:
        return _alive_engine(b, mech)
    if mech == "cgroup":
        for phase in ("pass0-start", b.loop_entry, b.measured_end):
            s = b.snapshots.get(phase, {})
            if find(s, "memory.stat") is None or any(k.endswith(".err") and "memory." in k
                                                     for k in s):
                return False, f"the scope's memory files were unreadable at {phase}"
        if any(r["memory_current"] is None for r in b.timeline):
            return False, "memory.current missing from the timeline (scope gone?)"
    if mech == "balloon":
        bal = b.balloon or {}
        if not (bal.get("alive_at_loop_entry") and bal.get("alive_at_end")):
            return False, (f"balloon alive at loop entry {bal.get('alive_at_loop_entry')}, at "
                           f"end {bal.get('alive_at_end')} (signal {bal.get('signal')})")
    return True, {"cgroup": "scope alive at every snapshot and timeline sample",
                  "balloon": "balloon alive at loop entry and end"}.get(mech, "runner done")


def _alive_engine(b, mech: str | None) -> tuple[bool, str]:
    if mech == "cgroup":
        s = b.snapshots.get("post", {})
        if find(s, "memory.stat") is None or any(k.endswith(".err") and "memory." in k
                                                 for k in s):
            return False, "the scope's memory files were unreadable at post"
        if not b.timeline or any(r["memory_current"] is None for r in b.timeline):
            return False, "memory.current missing from the timeline (scope gone?)"
        return True, "scope alive at post and in every timeline sample"
    if mech == "balloon":
        bal = b.balloon or {}
        if not (bal.get("alive_at_engine_start") and bal.get("alive_at_end")):
            return False, (f"balloon alive at the engine's start "
                           f"{bal.get('alive_at_engine_start')}, at end {bal.get('alive_at_end')}"
                           f" (signal {bal.get('signal')})")
        return True, "balloon alive at the engine's start and at the end"
    return True, "runner done"


@rule("mglru_as_requested", 1, kinds=("agent",))
def mglru_as_requested(b, ctx):
    """MGLRU main bit as the cell asks (mglru on, classic off) at loop entry and at the end."""
    want = b.spec.get("reclaim") == "mglru"
    for phase in (b.loop_entry, "post"):
        state = mglru_state(b, phase)
        if state is None and want:
            return False, f"lru_gen/enabled absent at {phase} but the cell asks for MGLRU"
        if state is not None and state != want:
            return False, f"MGLRU {'on' if state else 'off'} at {phase}, cell asks " \
                          f"{'on' if want else 'off'}"
    return True, f"MGLRU {'on' if want else 'off'} at loop entry and end"


@rule("boot_matches", 3)
def boot_matches(b, ctx):
    """Same boot throughout (and the new one when the controller rebooted), mem= as expected,
    MemTotal in range for memboot cells. mem= values are kernel text (memparse: K/M/G/T are
    binary there; bench writes exact bytes) and compare as bytes (version 2; version 1
    compared the text). The MemTotal range is the reboot gate's, for the host's architecture
    (bench.hosts.bootplan.memtotal_range: version 3): version 2's [0.8 x, 1 x] rejected the
    twins' proven aarch64 boots, which keep up to 29% of a small mem= out of MemTotal."""
    exp = b.spec.get("expect_boot") or {}
    ids = {p: (b.snapshots.get(p, {}).get("proc_sys_kernel_random_boot_id") or "").strip()
           for p in ("pre", "post")}
    host_id = b.host.get("boot_id")
    if len({ids["pre"], ids["post"], host_id}) != 1:
        return False, f"boot_id changed: host.json {host_id}, pre {ids['pre']}, post {ids['post']}"
    if exp.get("boot_id") and exp["boot_id"] != host_id:
        return False, f"boot_id {host_id} is not the expected new boot {exp['boot_id']}"
    mem = cmdline_param(parse_cmdline(b.host.get("cmdline", "")), "mem")
    want = exp.get("mem") or None
    if _mem_key(want) != _mem_key(mem):
        return False, f"mem= on the cmdline is {mem!r}, expected {want!r}"
    total = b.host.get("mem_total_bytes")
    cap = _mem_bytes(mem)
    if b.spec.get("mechanism") == "memboot":
        if not cap:
            return False, f"memboot cell without a usable mem= on the cmdline ({mem!r})"
        arch = str(b.host.get("arch") or "")
        try:
            lo, hi = memtotal_range(cap, arch)
        except InputError as e:
            return False, f"memboot MemTotal not judged: {e.message}"
        if not isinstance(total, int) or not lo <= total <= hi:
            return False, (f"MemTotal {total} outside [{lo}, {hi}], the range mem={mem} "
                           f"gives on {arch}")
    shown = mem or "none"
    if cap is not None and format_size(cap) != mem:
        shown += f" ({format_size(cap)})"
    return True, f"boot {host_id[:8] if host_id else '?'} throughout, mem={shown}"


def _mem_bytes(mem: str | None) -> int | None:
    """A mem= value as the kernel reads it; None for none or an unreadable value."""
    if not mem:
        return None
    try:
        return parse_kernel_size(mem, "mem=")
    except InputError:
        return None


def _mem_key(mem: str | None) -> int | str | None:
    """What two mem= values are compared by: their bytes, else (unreadable) their text."""
    b = _mem_bytes(mem)
    return mem if b is None else b


@rule("caches_dropped", 1)
def caches_dropped(b, ctx):
    """Caches really dropped before warm-up: Cached after drop_caches, less Shmem, is small."""
    after = b.drop.get("cached_after_bytes")
    if after is None:
        return False, "drop.json has no cached_after_bytes"
    shmem = snap(b, "pre").get(("meminfo", "Shmem"), 0)
    residue = after - shmem
    if residue > DROP_RESIDUE_BYTES:
        return False, f"{_mb(residue)} of page cache left after drop_caches (beyond Shmem)"
    return True, f"{_mb(max(residue, 0))} left after drop_caches (beyond Shmem)"


@rule("no_swap", 1)
def no_swap(b, ctx):
    """No swap activity: pswpin and pswpout unchanged over the run."""
    for key in ("pswpin", "pswpout"):
        d = delta(b, "run", "vmstat", key)
        if d is None:
            return False, f"vmstat {key} missing from the pre/post snapshots"
        if d:
            return False, f"{key} rose by {d} pages during the run"
    return True, "no pages swapped in or out"


@rule("measured_pass_complete", 1, kinds=("agent",))
def measured_pass_complete(b, ctx):
    """The measured pass completed every iteration of the plan, without agent errors."""
    want = b.summary.get("iterations")
    recs = measured_records(b)
    got = [r["iter"] for r in recs]
    if not want or got != list(range(want)):
        return False, f"measured pass has {len(got)} of {want} iterations"
    if b.summary.get("ok") is not True or b.summary.get("errors"):
        return False, (f"agent reports ok={b.summary.get('ok')}, errors="
                       f"{b.summary.get('errors')}: {b.summary.get('reason')}")
    if b.summary.get("passes_done", b.passes) < b.passes:
        return False, f"agent did {b.summary.get('passes_done')} of {b.passes} passes"
    return True, f"all {want} iterations measured"


@rule("timeline_reaches_wall", 1, kinds=("agent",))
def timeline_reaches_wall(b, ctx):
    """Cgroup cells below the pool size: memory.current reaches the wall while measuring."""
    if b.spec.get("mechanism") != "cgroup":
        return True, "not a cgroup cell"
    if b.spec.get("capacity_bytes", 0) >= b.spec.get("pool_bytes", 0):
        return True, "capacity not below the pool size: no wall to reach"
    wall = b.capacity.get("limit_read_back") or b.capacity.get("limit_bytes")
    peak = max((r["memory_current"] for r in b.timeline
                if r["phase"] == "measuring" and r["memory_current"] is not None), default=None)
    if not wall:
        return False, "capacity.json has no limit read back"
    if peak is None or peak < WALL_FRACTION * wall:
        return False, f"memory.current peaked at {_mb(peak)} while measuring, wall {_mb(wall)}"
    return True, f"memory.current reached {_mb(peak)} of the {_mb(wall)} wall"


def kmsg_text(line: str) -> str:
    """A kernel log line as dmesg shows it: "[seconds] message" for a /dev/kmsg record,
    other lines (dmesg --raw) as they are."""
    m = KMSG_RECORD.match(line.strip())
    if not m:
        return line.strip()
    usec = int(m.group(1))
    return f"[{usec // 10**6}.{usec % 10**6:06d}] {m.group(2)}"


@rule("kernel_log_clean", 1)
def kernel_log_clean(b, ctx):
    """No I/O error or OOM line among the kernel log lines of the run."""
    for line in b.kmsg:
        if KMSG_BAD.search(line):
            return False, f"kernel log: {kmsg_text(line)[:160]}"
    return True, f"{len(b.kmsg)} kernel log lines, none an I/O error or OOM"


@rule("preload_outside", 1, kinds=("agent",))
def preload_outside(b, ctx):
    """Pinned/hybrid: the arena was preloaded and locked before loop entry, so the measured
    interval holds no preload."""
    arena = int(b.summary.get("arena_bytes") or 0)
    if b.spec.get("mode") not in ("pinned", "hybrid") and not arena:
        return True, "no arena: nothing preloaded"
    if b.passes < 2:
        return False, "a single pass cannot separate preload from measurement"
    got = _vmlck(b.snapshots.get(b.loop_entry, {}).get("proc_self_status"))
    if got is None or got < VMLCK_TOLERANCE * arena:
        return False, f"agent VmLck {_mb(got)} at loop entry, arena {_mb(arena)}: preload not " \
                      "finished when the clock started"
    return True, f"arena of {_mb(arena)} locked before loop entry " \
                 f"(preload {_mb(b.summary.get('preload_bytes'))} excluded)"


@rule("fingerprint_matches", 3)
def fingerprint_matches(b, ctx):
    """The run's fingerprint (bench.judge.measured.fingerprint: kernel release, cmdline less
    mem=, lru_gen and panic= in any order, agent hash, controller version, and the host's
    page-cache settings) matches the campaign's reference for this host; the reason names
    every field that differs. v3: v2 read the kernel from a key the runner never wrote (runs
    on two kernels both passed) and had no settings. v2: v1 compared the command line in
    order, and a memboot reboot (which rewrites it) rejected every run after it."""
    want = ctx.get("campaign_fingerprint")
    if not b.spec.get("campaign"):
        return True, "not part of a campaign"
    if not want:
        return True, "first run of the campaign on this host: its fingerprint is the reference"
    got = fingerprint(b)
    diff = fingerprint_diff(got, want)
    if diff:
        return False, ("differs from the campaign's reference on this host (this run vs "
                       f"reference {want.get('digest')}): " + "; ".join(diff))
    return True, f"fingerprint {got['digest']} matches the campaign"


@rule("hint_provenance", 2, kinds=("agent",))
def hint_provenance(b, ctx):
    """A prefetch run carries the one provenance record its producer wrote (source,
    hint/plan/trace sha256, recall of that plan on that trace: bench.matrix.hintplans), the
    record is about the plans replayed, the cell's label agrees with the plan (a pilot run
    carrying the oracle's hints is rejected), and the plans the runner dumped into the bundle
    hash to the spec and give the same record again (bench.judge.hintcheck). v2: v1 read a
    "kind" no producer wrote and never checked a recall against a plan."""
    return check_hints(b.spec, b.files)


# impossible numbers and the contract ------------------------------------------------------------

@rule("bundle_contract", 1)
def bundle_contract(b, ctx):
    """The bundle validates against the bundle contract (docs/bundle.md, `bench schema
    bundle`). Ingest refuses a bundle that does not, so a run fails this rule only when `bench
    retention recheck` finds that its stored files no longer validate (a run stored before the
    contract): it is then rejected with the first problem (`contract_verdict`)."""
    return True, "every part validates against the bundle contract"


def contract_verdict(reason: str) -> Verdict:
    """bundle_contract's verdict on a stored bundle that no longer loads."""
    r = next(x for x in RULES if x.name == "bundle_contract")
    return Verdict(r.name, r.version, False, reason.splitlines()[0][:500])


# numbers_possible (v2) lives in bench.judge.rules_plausible with the other plausibility rules


@rule("passes_agree", 1, kinds=("agent",))
def passes_agree(b, ctx):
    """One pass count: the spec's agent.passes is the agent summary's passes; it did at most
    that many (passes_done); records exist for every pass done and for no pass beyond the
    spec's; the summary's per-pass lists have one entry per pass done."""
    sm = b.summary
    if not sm:
        return True, "no agent summary: the run stopped (runner_completed judges it)"
    want, done = b.passes, sm.get("passes_done")
    if sm.get("passes") != want:
        return False, f"the spec asks {want} passes, the agent summary says {sm.get('passes')}"
    if done is None or done > want:
        return False, f"the agent summary says {done} passes done of {want}"
    seen = {r["pass"] for r in b.records}
    beyond = sorted(p for p in seen if p >= want)
    if beyond:
        return False, f"records of pass {beyond[0]}, beyond the spec's {want} passes"
    missing = [p for p in range(done) if p not in seen]
    if missing:
        return False, f"no record of pass {missing[0]}, the summary says {done} done"
    for key in ("pass_wall_ns", "pass_bytes", "pass_reads"):
        if key in sm and len(sm[key]) != done:
            return False, f"the summary's {key} has {len(sm[key])} entries for {done} passes"
    return True, f"{want} passes in the spec, the summary and the records"


@rule("iterations_complete", 1, kinds=("agent",))
def iterations_complete(b, ctx):
    """Every pass the agent did holds each iteration of the plan exactly once: 0..N-1, none
    missing, none twice, none beyond, N the summary's iterations (and the spec's
    plan_iterations when the spec records it)."""
    n, plan_n = b.summary.get("iterations"), b.spec.get("plan_iterations")
    if not b.summary:
        return True, "no agent summary: the run stopped (runner_completed judges it)"
    if n is None or (plan_n is not None and n != plan_n):
        return False, f"the agent replayed {n} iterations per pass, the plan has {plan_n}"
    per: dict[int, list[int]] = {}
    for r in b.records:
        per.setdefault(r["pass"], []).append(r["iter"])
    for p, its in sorted(per.items()):
        its.sort()
        if its == list(range(n)):
            continue
        twice = next((i for i, j in zip(its, its[1:]) if i == j), None)
        if twice is not None:
            return False, f"pass {p}: iteration {twice} recorded twice"
        if its and its[-1] >= n:
            return False, f"pass {p}: iteration {its[-1]} beyond the plan's {n}"
        gone = next(i for i in range(n) if i >= len(its) or its[i] != i)
        return False, f"pass {p}: iteration {gone} missing ({len(its)} of {n})"
    return True, f"{len(per)} passes of {n} iterations each, none missing or twice"


# end-to-end engine runs (docs/engine.md) ---------------------------------------------------------

def _engine_facts(b: Bundle) -> dict:
    """engine_facts of the run an engine rule judges: evaluate gives these rules engine runs
    only, whose facts are never None (else a TypeError, as indexing None raised before)."""
    f = engine_facts(b)
    if f is None:
        raise TypeError(f"run {b.run_id} is not an engine run")
    return f


@rule("engine_exit_ok", 1, kinds=("engine",))
def engine_exit_ok(b, ctx):
    """Engine runs: the engine started and exited 0 on its own (no signal, no timeout, not
    stopped)."""
    e, f = b.engine or {}, _engine_facts(b)
    if not e:
        return False, ("the engine never ran (no engine.json): runner "
                       f"{b.status.get('phase')}: {b.status.get('reason') or 'no reason given'}")
    if e.get("start_error"):
        return False, f"the engine did not start: {e['start_error']}"
    if f["timed_out"]:
        return False, f"the engine ran past its timeout_s {e.get('timeout_s')} and was stopped"
    if e.get("stopped"):
        return False, "the engine was stopped on request before it finished"
    if f["signal"]:
        return False, f"the engine was killed by signal {f['signal']}"
    if f["exit_code"] != 0:
        tail = b.text("engine.stderr").strip().splitlines()[-1:] or ["(no stderr)"]
        return False, f"the engine exited {f['exit_code']}: {tail[0][:160]}"
    if f["wall_s"] is None:
        return False, "engine.json has no wall time"
    return True, f"exited 0 after {f['wall_s']:.3f} s"


@rule("engine_backend", 1, kinds=("engine",))
def engine_backend(b, ctx):
    """Engine runs: the expected backend string appears in the engine's output (stdout or
    stderr), so the run used the backend the comparison is about."""
    f, want = _engine_facts(b), b.spec["engine"]["backend"]
    if not f["backend_found"]:
        hint = [ln.strip() for ln in (b.text("engine.stdout") + "\n" + b.text("engine.stderr"))
                .splitlines() if "backend" in ln.lower()][:1]
        return False, f"backend {want!r} not in the engine's output" + (
            f" (it printed: {hint[0][:120]})" if hint else "")
    return True, f"backend line: {f['backend_line'][:160]}"


@rule("engine_output_nondegenerate", 1, kinds=("engine",))
def engine_output_nondegenerate(b, ctx):
    """Engine runs: output token IDs found, at least min_tokens of them, not ending in a
    cycle of period <= 4 over half the output (bench.judge.engine_gates.degenerate); the hash is
    recorded."""
    f = _engine_facts(b)
    if f["degenerate"]:
        return False, f["degenerate"]
    return True, f"{f['tokens']} tokens, output sha256 {f['output_sha256'][:16]}"


@rule("engine_load_reported", 1, kinds=("engine",))
def engine_load_reported(b, ctx):
    """Engine runs: the engine reported its cold model load, within [0, wall time], so the
    steady-decode time (wall - load) is defined."""
    f = _engine_facts(b)
    if f["load_s"] is None:
        return False, (f"no cold-load time matches /{b.spec['engine']['load_regex']}/ in the "
                       "engine's output")
    if f["wall_s"] is not None and not 0 <= f["load_s"] <= f["wall_s"]:
        return False, f"cold load {f['load_s']:.3f} s is outside [0, wall {f['wall_s']:.3f} s]"
    return True, f"cold load {f['load_s']:.3f} s" + (
        "" if f["steady_s"] is None else f", steady decode {f['steady_s']:.3f} s")


# the newer rule families live in their own modules; importing them registers their rules
from bench.judge import rules_plausible, rules_memory  # noqa: E402, F401, I001 - imported last so
# that their rules follow these in every table; the import is what registers them


def rule_table() -> list[dict]:
    return [{"rule": r.name, "version": r.version, "doc": r.doc, "kinds": list(r.kinds)}
            for r in RULES]


