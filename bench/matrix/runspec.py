"""Run specs (docs/bundle.md `spec.json`): built and checked on the controller, before any host
is touched. Pure: data in, a spec dict (or a typed error naming the fix) out.

`build_spec(cell, host, plan, run_id=..., facts=..., options=...)` combines a Cell, the host's
inventory entry, what the controller knows of the plan (`PlanInfo`), the host's probed facts
(bench.hosts.facts; optional, but the checks that need them are skipped without them) and the run
options. It refuses, with InputError (bad input) or SafetyError (a request that would be unsafe
or cannot be honoured by that host):

- a cell name that does not parse (shell metacharacters included), a bad run id;
- a capacity above the host's memory (probed MemTotal, else inventory memory.total);
- a memboot cell without `expect_boot.mem`, a `mem=` below the host's floor or above its
  memory, a `mem=` on a cell that is neither memboot nor balloon;
- an MGLRU cell on a kernel without /sys/kernel/mm/lru_gen, a cgroup cell on a host without a
  memory cgroup backend;
- a prefetch cell without a hint plan, a plan/hint geometry that differs, fewer than 2 passes.

Choices written down here: pinned mode gets an arena of C, hybrid C/2 (docs/design.md); nocache uses
`direct` unless told; the plan lives on the host at `plans/<sha256>.bin` (content addressed,
relative to work_dir), hints at `plans/<sha256>.hints.bin`, the agent at `native/bench-agent`;
the pool at `<pool_dir>/<L>x<E>x<S>-s0` (bench.plan.pool.pool_path: one pool per shape and
seed, as bench.execute.staging.ensure_pool makes it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bench.errors import InputError, SafetyError
from bench.matrix.cells import Cell, parse_cell
from bench.plan.planinfo import PlanInfo
from bench.plan.pool import pool_path
from bench.units import format_size, parse_kernel_size
from bench.version import controller_version as current_controller_version

RUN_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
AGENT_PATH = "native/bench-agent"
NOCACHE = ("direct", "dontneed", "dontcache")
DEFAULT_HEADROOM = 6 << 30


@dataclass(frozen=True)
class RunOptions:
    threads: int = 8
    passes: int = 2
    campaign: str | None = None
    position: int = 0
    repetition: int = 0
    mem: str | None = None              # expect_boot.mem: the mem= the host was booted with,
    #                                     as the kernel command line has it (bench writes exact
    #                                     bytes; memparse reads K/M/G/T there as binary)
    boot_id: str | None = None          # expect_boot.boot_id (after a reboot for this run)
    lru_gen: str | None = None          # expect_boot.lru_gen: on | off | None
    mglru_runtime_toggle: bool = True
    nocache: str = "direct"
    timeline_interval_ms: int = 100
    cgroup_headroom_bytes: int = DEFAULT_HEADROOM
    host_lock_timeout_s: int | None = None
    agent_timeout_s: int | None = None
    balloon_max_bytes: int | None = None
    source_sha256: str | None = None    # the agent build the controller expects
    # this controller's version (bench.version: package version + source digest)
    controller_version: str = field(default_factory=current_controller_version)
    created: str = "1970-01-01T00:00:00Z"
    extra: dict = field(default_factory=dict)


def check_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id) or run_id in (".", ".."):
        raise InputError(f"bad run id {run_id!r}",
                         hint="a run id is 1-64 of A-Z, a-z, 0-9, '.', '_' and '-' "
                              "(and not . or ..): it becomes a directory name")
    return run_id


def host_memory(host, facts: dict | None) -> int | None:
    """The host's memory in bytes: probed MemTotal first, else the inventory's memory.total."""
    if facts and facts.get("mem_total_bytes"):
        return int(facts["mem_total_bytes"])
    return host.mem_total


def check_cell_on_host(cell: Cell, host, facts: dict | None, options: RunOptions) -> None:
    """Refuse a cell this host cannot run (SafetyError / InputError with the fix)."""
    # a memboot cell's capacity is the mem= it boots with; MemTotal under mem= is a little
    # below it, so the installed memory (inventory) is the bound there
    mem = host.mem_total if cell.mechanism == "memboot" else host_memory(host, facts)
    if mem is not None and cell.capacity_bytes > mem:
        raise SafetyError(
            f"{host.name}: capacity {format_size(cell.capacity_bytes)} ({cell.capacity_bytes} B) "
            f"is above the host's memory ({mem} B)",
            hint=f"choose a capacity at most {format_size(mem)} for {host.name} (or write it as "
                 "a fraction of the pool in a matrix)")
    if options.mem is not None:
        m = parse_kernel_size(options.mem, "mem=")
        shown = f"mem={options.mem}" + ("" if format_size(m) == options.mem
                                        else f" ({format_size(m)})")
        if cell.mechanism not in ("memboot", "balloon"):
            raise InputError(f"{shown} is given but cell {cell.name} is neither a memboot nor "
                             "a balloon cell", hint="only memboot cells and the balloons of a "
                             "scale that sizes their host boot with mem=; drop the option")
        if host.mem_floor is not None and m < host.mem_floor:
            raise SafetyError(f"{host.name}: {shown} is below the host's floor "
                              f"{format_size(host.mem_floor)} (inventory memory.floor)",
                              hint=f"use mem={format_size(host.mem_floor)} or more, or lower "
                                   f"memory.floor in {host.source or 'the inventory'} if that "
                                   "is really safe")
        if host.mem_total is not None and m > host.mem_total:
            raise SafetyError(f"{host.name}: {shown} is above the host's memory "
                              f"({format_size(host.mem_total)}, inventory memory.total)",
                              hint="choose a mem= below the installed memory")
        if cell.capacity_bytes > m:
            raise SafetyError(f"cell {cell.name}: capacity is above {shown}",
                              hint="a cell's capacity is its mem= value or less")
    if cell.mechanism == "memboot" and options.mem is None:
        raise InputError(f"cell {cell.name} is a memboot cell but no expect_boot mem= is given",
                         hint="boot the host with mem=C first (bench reboots it for memboot "
                              "cells) and pass the mem= it booted with")
    if facts is not None:
        if cell.reclaim == "mglru" and "mglru" in facts and facts["mglru"] is None:
            raise InputError(f"{host.name}: cell {cell.name} asks for MGLRU but the kernel "
                             f"{facts.get('kernel') or ''} has no /sys/kernel/mm/lru_gen",
                             hint="run the classic variant of the cell on this host, or boot a "
                                  "kernel built with CONFIG_LRU_GEN")
        backend = (facts.get("cgroup") or {}).get("backend")
        if cell.mechanism == "cgroup" and backend == "none":
            raise InputError(f"{host.name}: cell {cell.name} needs a memory cgroup but the host "
                             "has none mounted",
                             hint="mount cgroup v2 (or a v1 memory hierarchy), or use a balloon "
                                  "or none cell on this host")


def _workload_section(plan: PlanInfo) -> dict:
    """What the run replays: the trace, and where the plan says so its domain, its accepted
    tokens (seconds per accepted token) and its fixed set (bench.plan.workload)."""
    w = {"trace": plan.trace, "trace_sha256": plan.trace_sha256, "batch": plan.batch}
    for key in ("domain", "accepted_tokens", "fixed_set_bytes"):
        if getattr(plan, key) is not None:
            w[key] = getattr(plan, key)
    return w


def build_spec(cell: Cell | str, host, plan: PlanInfo, *, run_id: str,
               facts: dict | None = None, options: RunOptions = RunOptions()) -> dict:
    """The spec.json of one run (docs/bundle.md), checked against the host."""
    if isinstance(cell, str):
        cell = parse_cell(cell)
    if cell.is_engine:
        raise InputError(f"{cell.name} is an end-to-end engine cell: it runs the engine of an "
                         "engine matrix, not the replay agent",
                         hint="bench schedule --matrix end-to-end (docs/engine.md)")
    check_run_id(run_id)
    _check_plan_and_options(plan, options)
    check_cell_on_host(cell, host, facts, options)
    hints = _hints_path(cell, plan)
    spec = {
        "format": 1, "run_id": run_id,
        "campaign": options.campaign, "position": options.position,
        "repetition": options.repetition,
        "host": host.name, "cell": cell.name, "capacity_bytes": cell.capacity_bytes,
        "mechanism": cell.mechanism, "reclaim": cell.reclaim, "mode": cell.mode,
        "prefetch": cell.hints or "none", "delivery": cell.delivery,
        "workload": _workload_section(plan),
        "plan": plan.remote_path, "plan_sha256": plan.sha256, "plan_iterations": plan.iterations,
        "hints": hints, "hints_sha256": plan.hints_sha256 if hints else None,
        "hints_provenance": plan.hints_provenance if hints else None,
        "pool": pool_path(host.pool_dir, plan.geometry), "pool_bytes": plan.pool_bytes,
        "agent": _agent_section(cell, options),
        "cgroup_headroom_bytes": options.cgroup_headroom_bytes,
        "expect_boot": {"boot_id": options.boot_id, "mem": options.mem,
                        "lru_gen": options.lru_gen},
        "mglru_runtime_toggle": options.mglru_runtime_toggle,
        "timeline_interval_ms": options.timeline_interval_ms,
        "controller_version": options.controller_version,
        "created": options.created,
    }
    for key in ("host_lock_timeout_s", "agent_timeout_s", "balloon_max_bytes"):
        v = getattr(options, key)
        if v is not None:
            spec[key] = v
    spec.update(options.extra)
    return spec


def _check_plan_and_options(plan: PlanInfo, options: RunOptions) -> None:
    for name in ("sha256", "trace_sha256", "hints_sha256"):
        v = getattr(plan, name)
        if v is not None and not SHA256.fullmatch(v):
            raise InputError(f"plan {name} {v!r} is not a sha256 hex digest")
    for name in ("layers", "experts_per_layer", "expert_bytes", "iterations"):
        if getattr(plan, name) <= 0:
            raise InputError(f"plan {name} must be positive, got {getattr(plan, name)}")
    if not 2 <= options.passes <= 1000:
        raise InputError(f"passes must be 2..1000 (warm-up + measured), got {options.passes}",
                         hint="pass --passes 2 (one warm-up pass, one measured pass) or more")
    if not 1 <= options.threads <= 1024:
        raise InputError(f"threads must be 1..1024, got {options.threads}",
                         hint="pass --threads 8 (the engine's reader threads)")
    if options.lru_gen not in (None, "on", "off"):
        raise InputError(f"expect_boot lru_gen {options.lru_gen!r} must be on, off or none")


def _hints_path(cell: Cell, plan: PlanInfo) -> str | None:
    """Where the hint plan is on the host: a prefetch cell needs one, no other cell takes one."""
    if cell.hints is not None:
        if not plan.hints_sha256:
            raise InputError(f"cell {cell.name} prefetches {cell.hints} hints but no hint plan "
                             "was made", hint="build the plan with a hint plan (bench plan "
                                              "--hints oracle|previous-token|FILE)")
        return plan.hints_remote_path
    if plan.hints_sha256:
        raise InputError(f"cell {cell.name} has no prefetch but a hint plan was given",
                         hint="drop the hint plan or name a prefetch cell (...-oracle-advice)")
    return None


def _agent_section(cell: Cell, options: RunOptions) -> dict:
    """The spec's agent section: pinned mode gets an arena of C, hybrid C/2."""
    arena = {"pinned": cell.capacity_bytes, "hybrid": cell.capacity_bytes // 2}.get(cell.mode, 0)
    nocache = None
    if cell.mode == "nocache":
        if options.nocache not in NOCACHE:
            raise InputError(f"nocache method {options.nocache!r}",
                             hint=f"one of {', '.join(NOCACHE)}")
        nocache = options.nocache
    return {"path": AGENT_PATH, "source_sha256": options.source_sha256,
            "threads": options.threads, "passes": options.passes, "arena_bytes": arena,
            "nocache": nocache, "freq": None}
