"""The run bundle's contract (docs/bundle.md) as typed, bounded models: what the host runner
writes, what the test generator (tests/support/bundlegen.py) writes and what ingest validates
before it derives anything (bench.judge.bundle_check runs them). `bench schema bundle` prints
their JSON Schema (`BundleParts`).

Bounds are what bench can produce: passes 2..1000 and threads 1..1024 (bench.matrix.runspec),
byte counts 0..2**56, monotonic times 0..2**63 ns, run ids and host names as bench spells
them, string lengths bounded (the store's columns: host 128, path 512, boot id 64 ...).

Unknown keys: the controller's spec.json, the runner's status.json, manifest.json, drop.json,
mglru.json, agent iteration records and timeline rows are closed (an unknown key is refused);
host.json, capacity.json, balloon.json, engine.json, runner.json and the agent summary are open
(diagnostic keys the runner or agent add over time, and host settings, are kept), their known
keys typed, everything in them bounded by the strict JSON reader (bench.judge.bundle_files).

Signs: the agent writes an iteration's wall_ns as a signed integer and the runner an engine's
wall_s as a float, so a negative or zero time types and is stored, then rejected by the
`numbers_possible` retention rule; counters written unsigned (bytes, reads, pass, iter) cannot
be negative here. A JSON number that is not finite cannot be written at all.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Iterator, Literal, Optional, Union

import annotated_types as at
from pydantic import AfterValidator, ConfigDict, Field
from typing_extensions import NotRequired, TypedDict

from bench.errors import BenchError
from bench.hosts.inventory_schema import NAME_RE
from bench.matrix.cells import DELIVERIES, MECHANISMS, MODES, ENGINE_RECLAIM, RECLAIMS, parse_cell
from bench.matrix.runspec import NOCACHE
from bench.matrix.matrix_schema import Documented, Problem, Table, View, bad, doc, matches

MAX_BYTES = 1 << 56
INT32 = (1 << 31) - 1
INT63 = (1 << 63) - 1
MAX_PASSES = 1000
MAX_THREADS = 1024
MAX_LIST = 4096             # argv, env, history ...: a list or map in a document (bar the manifest)
MAX_FILES = 100_000         # the default cap on files (bench.judge.bundle_files.Caps)
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
RUN_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
CAMPAIGN_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
LABEL_RE = re.compile(r"^[a-z0-9_]{1,32}$")
MASK_RE = re.compile(r"^0x[0-9a-fA-F]{1,8}$")
PHASES = ("accepted", "locked", "cleaned", "caches_dropped", "mglru_set", "capacity_applied",
          "warmup", "measuring", "collecting", "done", "failed")
Phase = Literal["accepted", "locked", "cleaned", "caches_dropped", "mglru_set",
                "capacity_applied", "warmup", "measuring", "collecting", "done", "failed"]


def _run_id(v: str) -> str:
    if not RUN_ID_RE.fullmatch(v) or v in (".", ".."):
        raise bad(f"{v[:80]!r} is not a run id",
                  hint="a run id is 1-64 of A-Z, a-z, 0-9, '.', '_' and '-' (not . or ..)")
    return v


def _rel_path(v: str) -> str:
    parts = v.split("/")
    if not v or len(v) > 512 or v.startswith("/") or any(p in ("", ".", "..") for p in parts) \
            or any(ord(c) < 32 or c in "\\\x7f" for c in v):
        raise bad(f"{v[:80]!r} is not a relative path inside the bundle",
                  hint="a/b/c, at most 512 characters, no '..', no leading '/'")
    return v


def _spec_path(v: str) -> str:
    if not v or "\0" in v or ".." in v.split("/"):
        raise bad(f"{v[:80]!r} must be a non-empty path without '..'")
    return v


def _mem(v: str) -> str:
    if not re.fullmatch(r"[0-9]{1,15}(\.[0-9]{1,6})?([KMGTkmgt]i?)?[Bb]?", v):
        raise bad(f"{v[:40]!r} is not a mem= size", hint="e.g. 93G")
    return v


def _regex(group: str) -> AfterValidator:
    """A regex the engine gates run: it compiles, with one group or the group `group`."""
    def check(v: str) -> str:
        try:
            rx = re.compile(v, re.MULTILINE)
        except re.error as exc:
            raise bad(f"not a valid regular expression: {exc}") from None
        if group not in rx.groupindex and rx.groups != 1:
            raise bad(f"needs one capturing group or (?P<{group}>...), has {rx.groups}")
        return v
    return AfterValidator(check)


def _cell(v: str) -> str:
    try:
        parse_cell(v)
    except BenchError as exc:
        raise bad(f"{v[:100]!r}: {exc.message}") from None
    return v


# bounded strings: at most 64, 256, 4096, 65536 characters; an argv element as the kernel takes it
T64 = Annotated[str, at.MaxLen(64)]
T256 = Annotated[str, at.MaxLen(256)]
T4K = Annotated[str, at.MaxLen(4096)]
T64K = Annotated[str, at.MaxLen(65536)]
Arg = Annotated[str, at.MaxLen(131072)]
Sha256 = Annotated[str, matches(SHA256_RE, "is not a sha256 (64 lower-case hex digits)",
                                "64 lower-case hex digits"), Documented(pattern=SHA256_RE.pattern)]
RunId = Annotated[str, AfterValidator(_run_id), Documented(pattern=RUN_ID_RE.pattern)]
CampaignId = Annotated[str, matches(CAMPAIGN_RE, "is not a campaign id", "1-64 of A-Z, a-z, "
                                    "0-9, '.', '_' and '-'"),
                       Documented(pattern=CAMPAIGN_RE.pattern)]
HostName = Annotated[str, matches(NAME_RE, "is not a host name", "as in hosts/NAME.toml"),
                     Documented(pattern=NAME_RE.pattern)]
Label = Annotated[str, matches(LABEL_RE, "is not a label", "1-32 of a-z, 0-9 and _"),
                  Documented(pattern=LABEL_RE.pattern)]
Mask = Annotated[str, matches(MASK_RE, "is not an lru_gen mask", "like 0x0007"),
                 Documented(pattern=MASK_RE.pattern)]
RelPath = Annotated[str, AfterValidator(_rel_path)]
SpecPath = Annotated[str, at.MaxLen(4096), AfterValidator(_spec_path)]
Bytes = Annotated[int, at.Ge(0), at.Le(MAX_BYTES)]
Count = Annotated[int, at.Ge(0), at.Le(INT32)]
Big = Annotated[int, at.Ge(0), at.Le(INT63)]             # a u64 counter the store keeps
Ns = Annotated[int, at.Ge(0), at.Le(INT63)]              # CLOCK_MONOTONIC, ns
SignedNs = Annotated[int, at.Ge(-INT63), at.Le(INT63)]   # a signed duration (checked by rules)
Seconds = Annotated[float, at.Ge(-1e9), at.Le(1e9)]      # a float duration (checked by rules)
Pid = Annotated[int, at.Ge(0), at.Le(1 << 22)]
ExitCode = Annotated[int, at.Ge(-255), at.Le(255)]
Signal = Annotated[int, at.Ge(0), at.Le(128)]
Stamp = T64                                         # RFC 3339 wall clock
Line = T4K
Argv = Annotated[list[Arg], at.MaxLen(MAX_LIST)]
Env = Annotated[dict[T256, Arg], at.MaxLen(MAX_LIST)]
Json = Any                                               # bounded by the strict JSON reader


class Closed(Table):
    """A JSON object of the bundle whose every key is known (an unknown key is refused)."""
    model_config = ConfigDict(allow_inf_nan=False)


class Open(Table):
    """A JSON object that may carry more keys than these (kept as written, bounded)."""
    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


# spec.json --------------------------------------------------------------------------------------

class WorkloadSpec(Closed):
    """What the run replays (a trace) or decodes (an engine prompt)."""
    trace: Optional[T4K] = doc("the trace's file name (replay runs)", None)
    trace_sha256: Optional[Sha256] = doc("sha256 of the trace", None)
    batch: Optional[Annotated[int, at.Ge(1), at.Le(4096)]] = doc("sequences decoded together",
                                                                  None)
    domain: Optional[T64] = doc("the prompt domain the trace stands for", None)
    accepted_tokens: Optional[Annotated[int, at.Ge(0), at.Le(1 << 40)]] = doc(
        "accepted tokens of one replay of the plan (seconds per accepted token)", None)
    fixed_set_bytes: Optional[Annotated[int, at.Ge(1), at.Le(1 << 50)]] = doc(
        "a fixed-set plan (the admission experiment): bytes of the set each pass reads", None)
    engine: Optional[bool] = doc("an engine run (docs/engine.md)", None)
    prompt: Optional[Label] = doc("engine runs: the prompt label", None)
    n_tokens: Optional[Annotated[int, at.Ge(1), at.Le(1 << 20)]] = doc("engine runs: tokens",
                                                                        None)


class AgentSpec(Closed):
    """How the replay agent runs."""
    path: SpecPath = doc("the agent binary (relative to work_dir, or absolute)")
    source_sha256: Optional[Sha256] = doc("the agent build the controller expects", None)
    threads: Annotated[int, at.Ge(1), at.Le(MAX_THREADS)] = doc("reader threads")
    passes: Annotated[int, at.Ge(2), at.Le(MAX_PASSES)] = doc("warm-up pass(es) + measured pass")
    arena_bytes: Bytes = doc("pinned arena (pinned: C, hybrid: C/2, else 0)", 0)
    nocache: Optional[Literal["direct", "dontneed", "dontcache"]] = doc(
        "nocache mode's method", None)
    freq: Optional[SpecPath] = doc("frequency table of the pinned arena", None)


class ExpectBoot(Closed):
    """The boot the controller expects the run to find."""
    boot_id: Optional[T64] = doc("set after a reboot for this run", None)
    mem: Optional[Annotated[str, AfterValidator(_mem)]] = doc("mem= of a memboot cell", None)
    lru_gen: Optional[Literal["on", "off"]] = doc("MGLRU asked at boot", None)


class EnginePair(Closed):
    index: Count = doc("the pair's index")
    order: Literal["admit-first", "nocache-first"] = doc("which policy ran first")
    position: Annotated[int, at.Ge(0), at.Le(2)] = doc(
        "0: first of the pair, 1: second, 2: the replay after it")
    seed: Annotated[int, at.Ge(-INT63), at.Le(INT63)] = doc("the shuffle's seed")


class EngineSpec(Closed):
    """The engine section of an end-to-end run (docs/engine.md)."""
    argv: Argv = doc("the engine's argv (no shell)")
    env: Env = doc("environment additions", {})
    cwd: Optional[T4K] = doc("working directory", None)
    timeout_s: Annotated[int, at.Ge(1), at.Le(1 << 31)] = doc("seconds before it is stopped")
    prompt: Label = doc("the prompt label")
    prompt_file: Optional[T4K] = doc("the prompt's file", None)
    policy: Literal["admit", "nocache", "replay"] = doc(
        "page-cache admission, the nocache reader, or the agent replaying the engine's trace")
    policy_args: Optional[Argv] = doc("the policy's arguments in argv (what tells the engine "
                                      "which reader: shown beside the results)", None)
    n_tokens: Annotated[int, at.Ge(1), at.Le(1 << 20)] = doc("tokens to decode")
    min_tokens: Annotated[int, at.Ge(0), at.Le(1 << 20)] = doc("fewer is degenerate")
    backend: T4K = doc("the backend string the engine must print")
    tokens_regex: Annotated[T4K, _regex("tokens")] = doc("regex of the output token ids")
    load_regex: Annotated[T4K, _regex("seconds")] = doc("regex of the cold-load seconds")
    config_sha256: Optional[Sha256] = doc("identity of the engine configuration", None)
    pair: Optional[EnginePair] = doc("the run's place in its balanced pair", None)
    prepare_argv: Optional[Argv] = doc("run before the caches are dropped (no shell)", None)


class Spec(Closed):
    """spec.json: the run as the controller asked for it (written before the runner starts)."""
    format: Literal[1] = doc("format version")
    run_id: RunId = doc("the run id (also the bundle's directory name)")
    campaign: Optional[CampaignId] = doc("the campaign (null: a run outside any)", None)
    position: Optional[Count] = doc("place in the campaign's order", None)
    repetition: Optional[Count] = doc("repetition (engine runs: the pair index)", None)
    host: HostName = doc("the inventory host the run is for")
    cell: Annotated[str, at.MaxLen(96), AfterValidator(_cell)] = doc("the cell name")
    capacity_bytes: Bytes = doc("C in bytes (engine cells: 0)")
    mechanism: Literal["cgroup", "balloon", "memboot", "none"] = doc("capacity mechanism")
    reclaim: Literal["mglru", "classic", "host"] = doc("reclaim (engine cells: host)")
    mode: Literal["pagecache", "pinned", "hybrid", "nocache", "random"] = doc("replay mode")
    prefetch: T64 = doc("none or the hint plan's label", "none")
    delivery: Optional[Literal["advice", "block"]] = doc("hint delivery", None)
    workload: WorkloadSpec = doc("the workload")
    plan: Optional[SpecPath] = doc("the plan on the host (replay runs)", None)
    plan_sha256: Optional[Sha256] = doc("sha256 of the plan: the controller's plan store key",
                                        None)
    plan_iterations: Optional[Annotated[int, at.Ge(1), at.Le(INT32)]] = doc(
        "iterations of the plan (checked against every pass)", None)
    hints: Optional[SpecPath] = doc("the hint plan on the host", None)
    hints_sha256: Optional[Sha256] = doc("sha256 of the hint plan", None)
    hints_provenance: Optional[dict[T64, Json]] = doc("oracle or predictor, and how", None)
    pool: Optional[SpecPath] = doc("the pool directory on the host", None)
    pool_bytes: Optional[Bytes] = doc("bytes of the pool", None)
    agent: Optional[AgentSpec] = doc("the replay agent (replay runs)", None)
    engine: Optional[EngineSpec] = doc("the engine (end-to-end runs)", None)
    cgroup_headroom_bytes: Optional[Bytes] = doc("memory.max = C + this (6 GiB if absent)", None)
    expect_boot: ExpectBoot = doc("the boot the run expects")
    mglru_runtime_toggle: Optional[bool] = doc("MGLRU may be toggled at run time", None)
    timeline_interval_ms: Optional[Annotated[int, at.Ge(10), at.Le(60000)]] = doc(
        "timeline sampling interval", None)
    controller_version: Optional[T64] = doc("the controller's version", None)
    created: Optional[Stamp] = doc("when the controller wrote it (RFC 3339)", None)
    host_lock_timeout_s: Optional[Annotated[int, at.Ge(0), at.Le(1 << 31)]] = doc(
        "seconds to wait for the host lock (600)", None)
    agent_timeout_s: Optional[Annotated[int, at.Ge(1), at.Le(1 << 31)]] = doc(
        "seconds before the agent is stopped (none)", None)
    balloon_max_bytes: Optional[Bytes] = doc("cap on what a balloon may lock", None)

    @staticmethod
    def rules(v: View, ctx: dict) -> Iterator[Problem]:
        if v.ok("agent", "engine"):
            if v.agent is None and v.engine is None:
                yield Problem(("agent",), "missing (required: a replay run has an agent "
                              "section, an engine run an engine section)")
            if v.agent is not None and v.engine is not None:
                yield Problem(("engine",), "a spec has an agent or an engine section, not both")
        if v.ok("cell", "capacity_bytes", "mechanism", "reclaim", "mode"):
            c = parse_cell(v.cell)
            for key in ("capacity_bytes", "mechanism", "reclaim", "mode"):
                if getattr(v, key) != getattr(c, key):
                    yield Problem((key,), f"{getattr(v, key)!r} contradicts the cell {v.cell}")
        if v.ok("mechanism", "expect_boot") and v.mechanism == "memboot" \
                and v.expect_boot.mem is None:
            yield Problem(("expect_boot", "mem"), "missing (required by a memboot cell)")


# status.json, manifest.json ----------------------------------------------------------------------

class HistoryEntry(Closed):
    phase: Phase = doc("the phase entered")
    t: Stamp = doc("wall clock (RFC 3339)")
    mono_ns: Ns = doc("CLOCK_MONOTONIC of the host")
    reason: Optional[Line] = doc("why a run failed", None)


class Status(Closed):
    """status.json: the runner's phase (done or failed once the bundle is sealed)."""
    run_id: RunId = doc("the run id")
    phase: Phase = doc("the phase")
    pid: Optional[Pid] = doc("the runner's pid", None)
    updated: Stamp = doc("last change (RFC 3339)")
    history: Annotated[list[HistoryEntry], at.MaxLen(1000)] = doc("every phase entered")
    ok: Optional[bool] = doc("done: true, failed: false", None)
    reason: Optional[Line] = doc("failed: the one-line reason", None)
    children: Optional[dict[Literal["agent", "balloon", "engine"], Optional[Pid]]] = doc(
        "pids of the agent, balloon or engine", None)


class FileEntry(Closed):
    bytes: Bytes = doc("size")
    sha256: Sha256 = doc("sha256 of the content")


class Manifest(Closed):
    """manifest.json: written last; every other file with its size and sha256."""
    run_id: RunId = doc("the run id")
    complete: bool = doc("true once the runner sealed the bundle")
    files: dict[RelPath, FileEntry] = doc(f"relative path -> size and sha256 (at most "
                                          f"{MAX_FILES} files by default)")


# what the runner saw --------------------------------------------------------------------------

class PoolDevice(Open):
    name: Optional[T64] = doc("the block device holding the pool", None)
    leaves: Annotated[list[T64], at.MaxLen(256)] = doc("devices under dm/md", [])
    note: Optional[Line] = None
    loop_backing_file: Optional[T4K] = None


class Host(Open):
    """host.json: the host at `pre` (open: host settings may be added)."""
    hostname: Optional[T256] = doc("the host's own name", None)
    kernel_release: Optional[T256] = doc("uname -r", None)
    kernel: Optional[T256] = doc("uname -r (older bundles)", None)
    arch: Optional[T64] = doc("uname -m", None)
    page_size: Optional[Annotated[int, at.Ge(1), at.Le(1 << 30)]] = doc("bytes", None)
    cmdline: Optional[T64K] = doc("/proc/cmdline", None)
    boot_id: Optional[T64] = doc("/proc/sys/kernel/random/boot_id", None)
    mem_total_bytes: Optional[Bytes] = doc("MemTotal", None)
    swap_total_bytes: Optional[Bytes] = doc("SwapTotal", None)
    mglru: Optional[Mask] = doc("lru_gen/enabled, null when absent", None)
    cgroup_backend: Optional[Literal["v1", "v2", "none"]] = doc("memory cgroup backend", None)
    systemd_pid1: Optional[bool] = None
    agent_source_sha256: Optional[Sha256] = doc("the agent build on the host", None)
    pool_device: Optional[PoolDevice] = doc("the pool's block device", None)


class Drop(Closed):
    """drop.json: Cached around sync; echo 3 > drop_caches."""
    cached_before_bytes: Bytes = doc("Cached before")
    cached_after_bytes: Bytes = doc("Cached after")
    t: Optional[Stamp] = None
    sync_and_drop_ns: Optional[Ns] = None


class Mglru(Closed):
    """mglru.json: the MGLRU state asked and seen."""
    requested: Optional[Literal["on", "off"]] = doc("null: recorded, not changed", None)
    method: Optional[Literal["boot", "runtime", "unchanged", "absent"]] = None
    pre: Optional[Mask] = None
    after_set: Optional[Mask] = None
    post: Optional[Mask] = None


class Capacity(Open):
    """capacity.json: what the kernel shows of the capacity mechanism."""
    mechanism: Literal["cgroup", "balloon", "memboot", "none"] = doc("as the spec")
    capacity_bytes: Optional[Bytes] = None
    backend: Optional[Literal["v1", "v2", "none"]] = None
    path: Optional[T4K] = None
    headroom_bytes: Optional[Bytes] = None
    limit_bytes: Optional[Bytes] = None
    limit_read_back: Optional[Big] = None
    swap_limit_read_back: Optional[Annotated[int, at.Ge(-1), at.Le(INT63)]] = None
    swap_total_bytes: Optional[Bytes] = None
    mem_available_before: Optional[Bytes] = None
    requested_bytes: Optional[Annotated[int, at.Ge(-MAX_BYTES), at.Le(MAX_BYTES)]] = doc(
        "balloon bytes asked (negative when MemAvailable was already below C: refused)", None)
    pid: Optional[Pid] = None
    vmlck_bytes: Optional[Bytes] = None
    mem_total_bytes: Optional[Bytes] = None


class Balloon(Open):
    """balloon.json: the balloon's life."""
    pid: Optional[Pid] = None
    alive_at_loop_entry: Optional[bool] = None
    alive_at_end: Optional[bool] = None
    exit_code: Optional[ExitCode] = None
    signal: Optional[Signal] = None


class EngineRecord(Open):
    """engine.json: the runner's record of the engine."""
    argv: Optional[Argv] = None
    executable: Optional[T4K] = None
    executable_sha256: Optional[Sha256] = None
    pid: Optional[Pid] = None
    exit_code: Optional[ExitCode] = None
    signal: Optional[Signal] = None
    timed_out: Optional[bool] = None
    stopped: Optional[bool] = None
    start_mono_ns: Optional[Ns] = None
    end_mono_ns: Optional[Ns] = None
    wall_s: Optional[Seconds] = doc("end - start on the monotonic clock", None)
    start_error: Optional[Line] = None


class RunnerRecord(Open):
    """runner.json: the runner's own record."""
    runner_version: Optional[T64] = None
    runner_sha256: Optional[Sha256] = None
    pid: Optional[Pid] = None


# agent.jsonl, timeline.csv ------------------------------------------------------------------------

# one agent record: a replay pass's iteration (the functional form: `pass` is a keyword)
Record = TypedDict("Record", {
    "pass": Annotated[int, at.Ge(0), at.Le(MAX_PASSES - 1)],
    "iter": Count, "wall_ns": SignedNs, "bytes": Bytes, "reads": Count,
    "arena_hits": NotRequired[Count], "cached": NotRequired[Count],
    "cached_bytes": NotRequired[Bytes]})
Record.__pydantic_config__ = ConfigDict(extra="forbid", strict=True)  # type: ignore[attr-defined]  # pydantic reads it


class Hints(Open):
    submitted: Optional[Big] = None
    overwritten: Optional[Big] = None
    completed: Optional[Big] = None
    left: Optional[Big] = None


PassList = Annotated[list[Big], at.MaxLen(MAX_PASSES)]


class Summary(Open):
    """The agent's last line: its summary."""
    summary: Literal[True] = doc("marks the summary line")
    version: Optional[T64] = None
    source_sha256: Optional[Sha256] = None
    mode: Optional[Literal["pagecache", "pinned", "hybrid", "nocache", "random"]] = None
    threads: Optional[Annotated[int, at.Ge(1), at.Le(4096)]] = None
    passes: Optional[Annotated[int, at.Ge(1), at.Le(MAX_PASSES)]] = None
    passes_done: Optional[Annotated[int, at.Ge(0), at.Le(MAX_PASSES)]] = None
    iterations: Optional[Count] = None
    expert_bytes: Optional[Bytes] = None
    arena_bytes: Optional[Bytes] = None
    preload_bytes: Optional[Bytes] = None
    preload_wall_ns: Optional[SignedNs] = None
    vmlck_bytes: Optional[Bytes] = None
    vmlck_end_bytes: Optional[Bytes] = None
    hints: Optional[Hints] = None
    pass_wall_ns: Optional[PassList] = None
    pass_bytes: Optional[PassList] = None
    pass_reads: Optional[PassList] = None
    # the prefetcher's counters of each pass alone (agents since per-pass hint counters; the
    # results take the measured pass, `hints` is the whole run's total)
    pass_hints_submitted: Optional[PassList] = None
    pass_hints_overwritten: Optional[PassList] = None
    pass_hints_completed: Optional[PassList] = None
    pass_hints_left: Optional[PassList] = None
    errors: Optional[Big] = None
    ok: Optional[bool] = None
    reason: Optional[Line] = None


TimelineRow = TypedDict("TimelineRow", {
    "mono_ns": Ns, "phase": Literal["warmup", "measuring"],
    "memory_current": Optional[Bytes], "cached": Optional[Bytes],
    "mem_available": Optional[Bytes]})
TimelineRow.__pydantic_config__ = ConfigDict(extra="forbid", strict=True)  # type: ignore[attr-defined]  # pydantic reads it


DOCUMENTS: dict[str, type[Table]] = {
    "spec.json": Spec, "status.json": Status, "manifest.json": Manifest, "host.json": Host,
    "drop.json": Drop, "mglru.json": Mglru, "capacity.json": Capacity, "balloon.json": Balloon,
    "engine.json": EngineRecord, "runner.json": RunnerRecord}


class BundleParts(Table):
    """A run bundle (docs/bundle.md): its JSON parts by file name; agent.jsonl is records then
    one summary, timeline.csv rows as objects. Raw text (snapshots, kmsg.txt, logs, engine
    output) is not JSON: only the caps bound it."""
    spec: Spec = Field(alias="spec.json")
    status: Status = Field(alias="status.json")
    manifest: Manifest = Field(alias="manifest.json")
    host: Optional[Host] = Field(None, alias="host.json")
    drop: Optional[Drop] = Field(None, alias="drop.json")
    mglru: Optional[Mglru] = Field(None, alias="mglru.json")
    capacity: Optional[Capacity] = Field(None, alias="capacity.json")
    balloon: Optional[Balloon] = Field(None, alias="balloon.json")
    engine: Optional[EngineRecord] = Field(None, alias="engine.json")
    runner: Optional[RunnerRecord] = Field(None, alias="runner.json")
    agent: Optional[list[Union[Record, Summary]]] = Field(None, alias="agent.jsonl", description=(
        "one JSON object a line: the iteration records, then the summary"))
    timeline: Optional[list[TimelineRow]] = Field(None, alias="timeline.csv", description=(
        "CSV with the header mono_ns,phase,memory_current,cached,mem_available; an empty "
        "field is null"))


# the allowed values come from the cell grammar: a test keeps these Literals in step
ALLOWED = {"mechanism": MECHANISMS, "reclaim": RECLAIMS + (ENGINE_RECLAIM,), "mode": MODES,
           "delivery": DELIVERIES, "nocache": NOCACHE}
