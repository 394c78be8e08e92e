"""Assemble complete run bundles (docs/bundle.md) from the real /proc and cgroup-v1 captures
in tests/fixtures/bundles/captured/ (made by capture.sh on this machine: a real 192 MiB read,
twice, inside a real 96 MiB memory cgroup) plus agent.jsonl records in the agent's format.

The test host is scaled down: pool 192 MiB on vda, capacities like 64M, cgroup wall = C + 32M.
lru_gen/enabled is written by the generator (this kernel has no MGLRU). `edit(parts)` may
change any part before the manifest is written, which is how tests inject one fault.

Engine cells (e2e-{prompt}-{admit|nocache}) get an engine bundle instead (docs/engine.md): the
spec built by bench.matrix.engine_cells.build_spec from ENGINE (a fixture config), the captured
pre/post snapshots, engine.json with `wall_s`, and engine.stdout in the fixture engine's format with
`load_s` and a token sequence derived from the prompt alone (so a pair's hashes match).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path

from bench.hosts.procfs import parse_meminfo
from bench.matrix.cells import parse_cell
from tests.support import paths

CAPTURED = paths.FIXTURES / "bundles" / "captured"
POOL_BYTES = 192 << 20
HEADROOM = 32 << 20
ITERATIONS = 12
AGENT_SHA = "a" * 64


def _status(run_id: str, phases, mono: dict[str, int]) -> dict:
    """status.json as the runner writes it: each phase with the host's CLOCK_MONOTONIC time
    (`mono`: the phase's time; phases before the first timed one come 20 ms apart before it,
    the others 20 ms after the previous one)."""
    first = next(i for i, ph in enumerate(phases) if ph in mono)
    t, hist = mono[phases[first]] - 20_000_000 * first, []
    for ph in phases:
        t = mono.get(ph, t)
        hist.append({"phase": ph, "t": "2026-11-29T19:00:00Z", "mono_ns": t})
        t += 20_000_000
    return {"run_id": run_id, "phase": "done", "pid": 4241, "ok": True, "reason": None,
            "updated": "2026-11-29T19:05:00Z", "history": hist}


def _timeline_lines() -> tuple[str, list[list[str]], int]:
    lines = (CAPTURED / "timeline.csv").read_text().splitlines()
    rows = [ln.split(",") for ln in lines[1:]]
    return lines[0], rows, int(rows[0][0])


def _retimed(header: str, rows: list[list[str]], spans: dict[str, tuple[int, int]]) -> str:
    """The captured timeline's samples, each phase's spread evenly over that phase's span of
    the generated run (the captured run's own clock does not match the generated walls)."""
    out = [header]
    for phase, (a, z) in spans.items():
        mine = [r for r in rows if r[1] == phase]
        for i, r in enumerate(mine):
            t = a + (z - a) * i // max(len(mine) - 1, 1)
            out.append(",".join([str(t)] + r[1:]))
    return "\n".join(out) + "\n"


def _host(host: str, pre: dict, mem: dict, *, lru, agent_sha, expect_boot: dict) -> dict:
    """host.json with the keys the runner writes (hostrunner.probes.host_fingerprint; a test
    compares them with a real runner bundle's): the captured kernel, boot and settings."""
    return {"hostname": host, "kernel_release": (CAPTURED / "uname_r").read_text().strip(),
            "arch": "x86_64", "page_size": 4096, "cmdline": pre["proc_cmdline"].strip(),
            "boot_id": pre["proc_sys_kernel_random_boot_id"].strip(),
            "mem_total_bytes": mem["MemTotal"], "swap_total_bytes": mem["SwapTotal"],
            "mglru": lru, "cgroup_backend": "v1", "cgroup_mount": "/sys/fs/cgroup/memory",
            "systemd_pid1": False, "pid1_comm": "init", "systemd": False,
            "run_systemd_system": False, "capacity_path": "cgroupfs", "python": "3.11.2",
            "agent_version": "1" if agent_sha else None, "agent_source_sha256": agent_sha,
            "pool_device": {"name": "vda", "major:minor": "254:0", "leaves": ["vda"]},
            "settings": json.loads((CAPTURED / "settings.json").read_text()),
            "expect_boot": dict(expect_boot)}


def _captured_snapshots() -> dict[str, dict[str, str]]:
    out = {}
    for d in sorted((CAPTURED / "snapshots").iterdir()):
        out[d.name] = {f.name: f.read_text() for f in sorted(d.iterdir())}
    return out


def _with_vmlck(status_text: str, nbytes: int) -> str:
    return re.sub(r"^VmLck:.*$", f"VmLck:\t{nbytes // 1024:>8} kB", status_text, flags=re.M)


def _with_locked(meminfo_text: str, nbytes: int) -> str:
    """The captured meminfo with `nbytes` more of mlocked anonymous memory, as the kernel shows
    a balloon or an arena: Mlocked, Unevictable and AnonPages up by it, MemFree and MemAvailable
    down by it (locked pages are neither free nor reclaimable). The capture's own MemAvailable
    already holds its warm pass's page cache, so a balloon of MemAvailable - C leaves about C."""
    delta = {"Mlocked": nbytes, "Unevictable": nbytes, "AnonPages": nbytes,
             "MemFree": -nbytes, "MemAvailable": -nbytes}

    def shift(m: re.Match) -> str:
        kb = max(int(m[2]) + delta[m[1]] // 1024, 0)
        return f"{m[1] + ':':<16}{kb:>8} kB"     # the kernel's "%-16s%8lu kB"
    return re.sub(r"^(" + "|".join(re.escape(k) for k in delta) + r"):\s+(\d+) kB$", shift,
                  meminfo_text, flags=re.M)


def _within_wall(snaps: dict[str, dict[str, str]], timeline: str, wall: int) -> str:
    """The capture's cgroup (C = 64 MiB + 32 MiB of headroom) moved to this cell's wall: the limit
    files read it back and no usage exceeds it (the kernel never charges past memory.max), in
    the snapshots the runner takes once the wall exists and in the timeline. Returns the
    timeline."""
    for name, phase in snaps.items():
        if name == "pre":
            continue
        for f in ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"):
            phase[f] = f"{wall}\n"
        for f in ("memory.usage_in_bytes", "memory.max_usage_in_bytes"):
            phase[f] = f"{min(int(phase[f]), wall)}\n"
    lines = timeline.splitlines()
    return "\n".join([lines[0]] + [re.sub(r"^([^,]*,[^,]*),(\d+),",
                                          lambda m: f"{m[1]},{min(int(m[2]), wall)},", ln)
                                   for ln in lines[1:]]) + "\n"


ENGINE = {
    "command": ["/opt/engine/decode", "--prompt-file", "{prompt_file}", "--n", "{n_tokens}",
                "{policy_args}"],
    "backend": "MoE backend: fixture-pread", "n_tokens": 20, "pairs": 3,
    "tokens_regex": "^output token ids: (?P<tokens>.*)$",
    "load_regex": "^cold load: (?P<seconds>[0-9.]+) s",
    "policies": {"admit": {"args": ["--policy", "admit"]},
                 "nocache": {"args": ["--policy", "nocache"]}},
    "prompts": {"prose": "/opt/prompts/prose.txt", "code": "/opt/prompts/code.txt",
                "chat": "/opt/prompts/chat.txt"},
}


def engine_tokens(prompt: str, n: int = 20) -> list[int]:
    return [int(hashlib.sha256(f"{prompt}:{i}".encode()).hexdigest()[:6], 16) % 32000
            for i in range(n)]


def engine_parts_for(run_id: str, cell: str, *, campaign: str | None = "c1", position: int = 0,
                     repetition: int = 0, host: str = "fixture-a", wall_s: float = 12.0,
                     load_s: float = 2.0, seed: int = 0, **_ignored) -> dict:
    from types import SimpleNamespace

    from bench.matrix import engine_cells
    c = parse_cell(cell)
    cfg = engine_cells.parse_engine(ENGINE, "bundlegen")
    first = engine_cells.pair_orders(repetition + 1, seed, c.prompt)[repetition][0]
    h = SimpleNamespace(name=host, pool_dir="/var/tmp/pool", work_dir="/var/lib/bench")
    spec = engine_cells.build_spec(c, h, cfg, run_id=run_id, pair_index=repetition, first=first,
                             seed=seed, campaign=campaign, position=position,
                             created="2026-11-29T19:00:00Z", controller_version="0.1.0")
    snaps = _captured_snapshots()
    snaps = {"pre": snaps["pre"], "post": snaps["post"]}
    pre = snaps["pre"]
    mem = parse_meminfo(pre["proc_meminfo"])
    phases = ["accepted", "locked", "cleaned", "caches_dropped", "mglru_set",
              "capacity_applied", "measuring", "collecting", "done"]
    start = 1_000_000_000_000
    header, rows, _ = _timeline_lines()
    timeline = _retimed(header, [[r[0], "measuring", ""] + r[3:] for r in rows],
                        {"measuring": (start, start + int(wall_s * 1e9))})
    toks = engine_tokens(c.prompt, cfg.n_tokens)
    stdout = (f"MoE backend: fixture-pread ({c.policy})\ncold load: {load_s:.6f} s\n"
              f"output token ids: {', '.join(map(str, toks))}\n"
              f"decode: {len(toks)} tokens in {wall_s - load_s:.6f} s\n")
    return {
        "spec.json": spec,
        "status.json": _status(run_id, phases, {"measuring": start - 1_000_000,
                                                "collecting": start + int(wall_s * 1e9)
                                                + 10_000_000}),
        "host.json": _host(host, pre, mem, lru=None, agent_sha=None,
                           expect_boot=spec["expect_boot"]),
        "drop.json": json.loads((CAPTURED / "drop.json").read_text()),
        "mglru.json": {"requested": None, "method": "absent", "pre": None, "after_set": None,
                       "post": None},
        "capacity.json": {"mechanism": "none", "capacity_bytes": 0},
        "engine.json": {"argv": spec["engine"]["argv"], "cwd": None, "env": {},
                        "executable": "/opt/engine/decode", "executable_sha256": "e" * 64,
                        "timeout_s": cfg.timeout_s, "device_of": "/var/tmp/pool", "pid": 4300,
                        "exit_code": 0, "signal": None, "timed_out": False, "stopped": False,
                        "exit_seen_by": "pidfd", "start_mono_ns": start,
                        "end_mono_ns": start + int(wall_s * 1e9), "wall_s": wall_s},
        "engine.stdout": stdout,
        "engine.stderr": "",
        "timeline.csv": timeline,
        "kmsg.txt": "",
        "snapshots": snaps,
    }


def fixture_plan():
    """A small replay plan from the canonical parser (2 layers x 8 experts, 12 iterations)."""
    from bench.plan.planfile import plan_from_trace
    from bench.trace.parse import parse_lines
    rng = random.Random(5)
    lines = [json.dumps({"model": "fixture", "k": 2, "experts_per_layer": 8, "layers": 2,
                         "expert_bytes": 4096})]
    for step in range(12):
        for layer in range(2):
            lines.append(json.dumps({"step": step, "layer": layer,
                                     "experts": rng.sample(range(8), 2)}))
    return plan_from_trace(parse_lines(lines, "fixture.jsonl"), meta={"source": "fixture"})


def fixture_plan_sha256() -> str:
    """Every generated run replays the fixture plan (one campaign, one plan: the prefetch
    cells' dumped plan.bin hashes to the same plan_sha256 as the other cells')."""
    global _PLAN_SHA
    if _PLAN_SHA is None:
        from bench.plan.planfile import encode
        _PLAN_SHA = hashlib.sha256(encode(fixture_plan())).hexdigest()
    return _PLAN_SHA


_PLAN_SHA: str | None = None


def _with_hint_plans(parts: dict, label: str, provenance: dict | None) -> None:
    """What the real producer and runner put in a prefetch run: the hint plan of the label
    (bench.matrix.hintplans), its provenance record in the spec, plan.bin and hints.bin dumped
    into the bundle. `provenance` replaces the record (a test of a bad one)."""
    from bench.matrix.hintplans import BUILTIN, make_hints, provenance as record
    from bench.plan.planfile import encode
    plan = fixture_plan()
    hints = make_hints(plan, label if label in BUILTIN else "pilot")
    pdata, hdata = encode(plan), encode(hints)
    spec = parts["spec.json"]
    assert spec["plan_sha256"] == hashlib.sha256(pdata).hexdigest()
    spec["hints_sha256"] = hashlib.sha256(hdata).hexdigest()
    spec["hints_provenance"] = provenance or record(
        plan, hints, hints_sha256=spec["hints_sha256"], plan_sha256=spec["plan_sha256"],
        trace_sha256=spec["workload"]["trace_sha256"])
    parts["plan.bin"], parts["hints.bin"] = pdata, hdata


def parts_for(run_id: str, cell: str, *, campaign: str | None = "c1", position: int = 0,
              repetition: int = 0, host: str = "fixture-a", speed: float = 1.0,
              seed: int = 0, prefetch_provenance: dict | None = None, **engine_kw) -> dict:
    c = parse_cell(cell)
    if c.is_engine:
        return engine_parts_for(run_id, cell, campaign=campaign, position=position,
                                repetition=repetition, host=host, seed=seed, **engine_kw)
    snaps = _captured_snapshots()
    pre = snaps["pre"]
    mem = parse_meminfo(pre["proc_meminfo"])
    lru = "0x0007" if c.reclaim == "mglru" else "0x0000"
    for phase in snaps.values():
        phase["sys_kernel_mm_lru_gen_enabled"] = lru + "\n"
    balloon_bytes = max(mem["MemAvailable"] - c.capacity_bytes, 0)
    arena = c.capacity_bytes if c.mode == "pinned" else c.capacity_bytes // 2 \
        if c.mode == "hybrid" else 0
    for name, phase in snaps.items():
        locked = 0
        if c.mechanism == "balloon" and name != "pre":
            phase["balloon_status"] = _with_vmlck(pre["proc_self_status"], balloon_bytes)
            locked += balloon_bytes
        if arena and name.startswith("pass1"):
            phase["proc_self_status"] = _with_vmlck(phase["proc_self_status"], arena)
            locked += arena
        if locked:
            phase["proc_meminfo"] = _with_locked(phase["proc_meminfo"], locked)
    hints = None if c.hints is None else "hints/h.bin"
    spec = {
        "format": 1, "run_id": run_id, "campaign": campaign, "position": position,
        "repetition": repetition, "host": host, "cell": c.name,
        "capacity_bytes": c.capacity_bytes, "mechanism": c.mechanism, "reclaim": c.reclaim,
        "mode": c.mode, "prefetch": c.hints or "none", "delivery": c.delivery,
        "workload": {"trace": "prose.jsonl", "trace_sha256": "b" * 64, "batch": 1},
        "plan": "plans/prose.bin", "plan_sha256": fixture_plan_sha256(), "hints": hints,
        "hints_sha256": None if hints is None else "d" * 64,
        "hints_provenance": None,
        "pool": "/var/tmp/pool", "pool_bytes": POOL_BYTES,
        "agent": {"path": "bench-agent", "source_sha256": AGENT_SHA, "threads": 2,
                  "passes": 2, "arena_bytes": arena, "nocache": None, "freq": None},
        "cgroup_headroom_bytes": HEADROOM,
        "expect_boot": {"boot_id": None, "mem": None, "lru_gen": "on" if lru != "0x0000" else "off"},
        "mglru_runtime_toggle": True, "timeline_interval_ms": 20,
        "controller_version": "0.1.0", "created": "2026-11-29T19:00:00Z"}
    rng = random.Random(seed)
    per_iter = 2 * POOL_BYTES // ITERATIONS
    records = [{"pass": p, "iter": i, "wall_ns": int(speed * rng.uniform(0.9, 1.1) * 5e7),
                "bytes": per_iter, "reads": 96} for p in (0, 1) for i in range(ITERATIONS)]
    # the run's clock (the host's CLOCK_MONOTONIC, from the captured timeline's first sample):
    # the agent starts, each pass takes its iterations' walls plus 50 us of bookkeeping, the
    # runner sees the measuring phase 5 ms into the measured pass (its next sample)
    pass_wall = [sum(r["wall_ns"] for r in records if r["pass"] == p) + 50_000 for p in (0, 1)]
    header, rows, t0 = _timeline_lines()
    start0 = t0 + 20_000_000
    start1 = start0 + pass_wall[0] + 2_000_000
    end1 = start1 + pass_wall[1]
    mono = {"warmup": t0, "measuring": start1 + 5_000_000, "collecting": end1 + 20_000_000}
    summary = {"summary": True, "version": "1", "source_sha256": AGENT_SHA, "mode": c.mode,
               "threads": 2, "passes": 2, "passes_done": 2, "iterations": ITERATIONS,
               "pass_wall_ns": pass_wall, "pass_bytes": [per_iter * ITERATIONS] * 2,
               "pass_reads": [96 * ITERATIONS] * 2,
               "arena_bytes": arena, "preload_bytes": arena, "vmlck_bytes": arena,
               "vmlck_end_bytes": arena, "prefetch": c.delivery or "none",
               "hints": {"submitted": 10, "overwritten": 0, "completed": 10, "left": 0}
               if hints else {}, "errors": 0, "ok": True, "reason": None}
    phases = ["accepted", "locked", "cleaned", "caches_dropped", "mglru_set",
              "capacity_applied", "warmup", "measuring", "collecting", "done"]
    timeline = _retimed(header, rows, {"warmup": (t0, mono["measuring"] - 1_000_000),
                                       "measuring": (mono["measuring"], end1)})
    wall = (c.capacity_bytes + HEADROOM) // 4096 * 4096       # as the kernel reads it back
    if c.mechanism == "cgroup":
        timeline = _within_wall(snaps, timeline, wall)
    else:
        lines = timeline.splitlines()
        timeline = "\n".join([lines[0]] + [re.sub(r"^([^,]*,[^,]*),[^,]*,", r"\1,,", ln)
                                           for ln in lines[1:]]) + "\n"
    capacity = {"mechanism": c.mechanism}
    if c.mechanism == "cgroup":
        capacity.update(capacity_bytes=c.capacity_bytes, backend="v1",
                        path="/sys/fs/cgroup/memory/bench-fixture", headroom_bytes=HEADROOM,
                        limit_bytes=c.capacity_bytes + HEADROOM,
                        limit_read_back=wall,
                        swap_limit_read_back=None)
    elif c.mechanism == "balloon":
        # as hostrunner.capacity.launch_balloon and wait_balloon_ready record it
        capacity.update(capacity_bytes=c.capacity_bytes,
                        mem_available_before=mem["MemAvailable"],
                        requested_bytes=balloon_bytes, pid=4242, vmlck_bytes=balloon_bytes,
                        vmlck_verified=True,
                        ready={"ready": True, "pid": 4242, "bytes": balloon_bytes,
                               "vmlck_bytes": balloon_bytes,
                               "mem_available_after": mem["MemAvailable"] - balloon_bytes,
                               "page_size": 4096, "ok": True})
    parts = {
        "spec.json": spec,
        "status.json": _status(run_id, phases, mono),
        "host.json": _host(host, pre, mem, lru=lru, agent_sha=AGENT_SHA,
                           expect_boot=spec["expect_boot"]),
        "drop.json": json.loads((CAPTURED / "drop.json").read_text()),
        "mglru.json": {"requested": "on" if c.reclaim == "mglru" else "off",
                       "method": "runtime", "pre": lru, "after_set": lru, "post": lru},
        "capacity.json": capacity,
        "agent.jsonl": records + [summary],
        "agent.stderr": "",
        "timeline.csv": timeline,
        "kmsg.txt": "",
        "snapshots": snaps,
    }
    if hints is not None:
        _with_hint_plans(parts, c.hints, prefetch_provenance)
    if c.mechanism == "balloon":
        parts["balloon.json"] = {"pid": 4242, "alive_at_loop_entry": True, "alive_at_end": True,
                                 "exit_code": 0, "signal": None}
        parts["balloon.jsonl"] = json.dumps(capacity["ready"]) + "\n"
    return parts


def ensure_campaigns(store, *ids: str) -> None:
    """The campaign rows generated bundles name (c1 by default): ingest never creates a
    campaign, the executor (or this) does."""
    from bench.store import campaigns
    for cid in ids:
        if campaigns.campaign_row(store, cid) is None:
            campaigns.create_campaign(store, cid)


def write_bundle(dest: Path, parts: dict, *, manifest: bool = True) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    files: dict[str, bytes] = {}
    for name, value in parts.items():
        if name == "snapshots":
            for phase, snap in value.items():
                for fname, text in snap.items():
                    files[f"snapshots/{phase}/{fname}"] = text.encode()
        elif name == "agent.jsonl":
            files[name] = "".join(json.dumps(r) + "\n" for r in value).encode()
        elif isinstance(value, (dict, list)):
            files[name] = json.dumps(value, indent=1).encode()
        else:
            files[name] = value.encode() if isinstance(value, str) else value
    for rel, data in files.items():
        p = dest / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    if manifest:
        m = {"run_id": parts["spec.json"]["run_id"], "complete": True,
             "files": {rel: {"bytes": len(d), "sha256": hashlib.sha256(d).hexdigest()}
                       for rel, d in sorted(files.items())}}
        (dest / "manifest.json").write_text(json.dumps(m, indent=1))
    return dest


def make_bundle(root: Path, run_id: str, cell: str, edit=None, **kw) -> Path:
    parts = parts_for(run_id, cell, **kw)
    if edit is not None:
        edit(parts)
    return write_bundle(Path(root) / run_id, parts)
