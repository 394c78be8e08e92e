"""Run specs (docs/bundle.md): the read-only validation that turns a spec into the settings a
run uses (`cfg`), reading cell names and sizes with grammar.py (the grammar the controller
imports too). Every refusal is a SpecError with one clear line."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from typing import Any

from . import grammar
from .errors import SpecError
from .files import meminfo, read_text, sha256_file

RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
NOCACHE = ("direct", "dontneed", "dontcache")
DEFAULT_HEADROOM = 6 << 30
CELL_FIELDS = ("capacity_bytes", "mechanism", "reclaim", "mode", "prefetch", "delivery")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def valid_run_id(rid: object) -> bool:
    return isinstance(rid, str) and bool(RUN_ID.fullmatch(rid)) and rid not in (".", "..")


def parse_kernel_size(text: object) -> int | None:
    """A size as the kernel's memparse reads it (mem= on the command line): K/M/G/T binary;
    None when it is not one."""
    try:
        return grammar.parse_kernel_size(str(text))
    except grammar.GrammarError:
        return None


def _cell_fields(name: object) -> dict[str, Any]:
    """The grammar's fields of a cell name as a spec carries them (`prefetch` the hint plan
    label or none); a refusal is a SpecError naming the valid choices."""
    try:
        f = grammar.parse_cell(name)
    except grammar.GrammarError as e:
        raise SpecError(f"{e.message} ({e.hint})" if e.hint else e.message) from None
    hints = f.pop("hints")
    return dict(f, prefetch=hints or "none")


def parse_cell(name: object) -> dict[str, Any]:
    """Replay cell name -> fields (grammar.py): case-insensitive, the canonical spelling but
    for case; an engine cell name is refused."""
    cell = _cell_fields(name)
    cell.pop("policy")
    if cell.pop("prompt") is not None:
        raise SpecError(f"cell {name!r} is an engine cell; this spec has no engine section")
    return cell


def parse_engine_cell(name: object) -> dict[str, Any]:
    """Engine cell name -> fields with its prompt and policy (grammar.py); a replay cell name
    is refused."""
    cell = _cell_fields(name)
    if cell["prompt"] is None:
        raise SpecError(f"bad engine cell name {name!r}: want e2e-{{prompt}}-"
                        f"{{{'|'.join(grammar.POLICY_MODES)}}}")
    return cell


def resolve(work_dir: str, path: object) -> str:
    if not isinstance(path, str) or not path:
        raise SpecError(f"path {path!r} is not a non-empty string")
    if "\0" in path or ".." in path.split("/"):
        raise SpecError(f"path {path!r} must not contain '..'")
    return os.path.normpath(path if path.startswith("/") else os.path.join(work_dir, path))


def _int(spec: dict[str, Any], key: str, lo: int | None = None, hi: int | None = None,
         default: int | None = None, required: bool = False) -> Any:
    v = spec.get(key, default)
    if v is None and not required:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or (lo is not None and v < lo) \
            or (hi is not None and v > hi):
        raise SpecError(f"spec {key} = {v!r} is not an integer in [{lo}, {hi}]")
    return v


def _check_cell_fields(spec: dict[str, Any], cell: dict[str, Any]) -> None:
    for key in CELL_FIELDS:
        if spec.get(key) != cell[key]:
            raise SpecError(f"spec {key} = {spec.get(key)!r} does not match cell "
                            f"{spec['cell']!r} (which says {cell[key]!r})")


def _expect_boot(spec: dict[str, Any]) -> dict[str, Any]:
    eb = spec.get("expect_boot") or {}
    if not isinstance(eb, dict):
        raise SpecError("spec expect_boot is not an object")
    return eb


def validate_spec(spec: object, work_dir: str) -> dict[str, Any]:
    """Check the spec against itself and the host (read-only). Returns the resolved
    settings the run uses. Raises SpecError with one clear line."""
    if not isinstance(spec, dict):
        raise SpecError("spec is not a JSON object")
    if spec.get("format") != 1:
        raise SpecError(f"spec format {spec.get('format')!r} is not 1")
    rid = spec.get("run_id")
    if not valid_run_id(rid):
        raise SpecError(f"run_id {rid!r} must be 1-64 of A-Z a-z 0-9 . _ - (and not . or ..)")
    assert isinstance(rid, str)
    if "engine" in spec:
        return validate_engine_spec(spec, work_dir, rid)
    cell = parse_cell(spec.get("cell"))
    _check_cell_fields(spec, cell)
    mem_total = meminfo()["MemTotal"]
    if cell["capacity_bytes"] > mem_total:
        raise SpecError(f"capacity {cell['capacity_bytes']} bytes is above this host's MemTotal "
                        f"{mem_total} bytes")
    r = {"run_id": rid, "cell": spec["cell"], **cell}
    _check_inputs(r, spec, work_dir, cell)
    _check_agent(r, spec, work_dir, cell)
    _check_settings(r, spec, cell)
    return r


def _check_inputs(r: dict[str, Any], spec: dict[str, Any], work_dir: str,
                  cell: dict[str, Any]) -> None:
    """The pool (its pool.json), the plan and the hint plan, with their digests."""
    r["pool"] = resolve(work_dir, spec.get("pool"))
    try:
        pj = json.loads(read_text(os.path.join(r["pool"], "pool.json")))
        r["pool_geometry"] = [int(pj["layers"]), int(pj["experts_per_layer"]),
                              int(pj["expert_bytes"])]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SpecError(f"pool {r['pool']}: no usable pool.json ({e})") from None
    r["plan"] = resolve(work_dir, spec.get("plan"))
    if not os.path.isfile(r["plan"]):
        raise SpecError(f"plan {r['plan']} does not exist")
    if spec.get("plan_sha256") and sha256_file(r["plan"]) != spec["plan_sha256"]:
        raise SpecError(f"plan {r['plan']} does not match plan_sha256")
    r["hints"] = None
    if cell["prefetch"] != "none":
        r["hints"] = resolve(work_dir, spec.get("hints"))
        if not os.path.isfile(r["hints"]):
            raise SpecError(f"hint plan {r['hints']} does not exist")
        if spec.get("hints_sha256") and sha256_file(r["hints"]) != spec["hints_sha256"]:
            raise SpecError(f"hint plan {r['hints']} does not match hints_sha256")
    elif spec.get("hints") is not None:
        raise SpecError("spec has hints but the cell has no prefetch")


def _check_agent(r: dict[str, Any], spec: dict[str, Any], work_dir: str,
                 cell: dict[str, Any]) -> None:
    """The agent binary (its `version` answer) and its replay settings."""
    agent = spec.get("agent")
    if not isinstance(agent, dict):
        raise SpecError("spec agent is not an object")
    r["agent"] = resolve(work_dir, agent.get("path"))
    if not os.access(r["agent"], os.X_OK):
        raise SpecError(f"agent {r['agent']} is not an executable file")
    try:
        ver = json.loads(subprocess.run([r["agent"], "version"], capture_output=True,
                                        text=True, timeout=30).stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired) as e:
        raise SpecError(f"agent {r['agent']} version failed: {e}") from None
    r["agent_version"] = ver
    if agent.get("source_sha256") and ver.get("source_sha256") != agent["source_sha256"]:
        raise SpecError(f"agent source_sha256 {ver.get('source_sha256')} is not the spec's "
                        f"{agent['source_sha256']}")
    r["threads"] = _int(agent, "threads", 1, 4096, default=8)
    r["passes"] = _int(agent, "passes", 1, 1000, default=2)
    r["arena_bytes"] = _int(agent, "arena_bytes", 0, default=0)
    if cell["mode"] in ("pinned", "hybrid") and not r["arena_bytes"]:
        raise SpecError(f"mode {cell['mode']} needs agent.arena_bytes > 0")
    if cell["mode"] not in ("pinned", "hybrid") and r["arena_bytes"]:
        raise SpecError(f"agent.arena_bytes is set but mode {cell['mode']} has no arena")
    r["nocache"] = agent.get("nocache")
    if (cell["mode"] == "nocache") != (r["nocache"] is not None) or \
            (r["nocache"] is not None and r["nocache"] not in NOCACHE):
        raise SpecError(f"agent.nocache {r['nocache']!r}: mode nocache needs one of "
                        f"{', '.join(NOCACHE)}, other modes null")
    r["freq"] = resolve(work_dir, agent["freq"]) if agent.get("freq") else None
    if r["freq"] and not os.path.isfile(r["freq"]):
        raise SpecError(f"frequency file {r['freq']} does not exist")


def _check_settings(r: dict[str, Any], spec: dict[str, Any], cell: dict[str, Any]) -> None:
    """Limits, timeouts and the boot expectations."""
    r["headroom"] = _int(spec, "cgroup_headroom_bytes", 0, default=DEFAULT_HEADROOM)
    r["interval_ms"] = _int(spec, "timeline_interval_ms", 10, 60000, default=100)
    r["lock_timeout_s"] = _int(spec, "host_lock_timeout_s", 0, default=600)
    r["agent_timeout_s"] = _int(spec, "agent_timeout_s", 1)
    r["balloon_max_bytes"] = _int(spec, "balloon_max_bytes", 0)
    eb = _expect_boot(spec)
    r["expect_boot"] = eb
    if cell["mechanism"] == "memboot":
        if not eb.get("mem") or parse_kernel_size(eb["mem"]) is None:
            raise SpecError("a memboot cell needs expect_boot.mem, the mem= on the kernel "
                            "command line (e.g. \"102000000000\")")
    if eb.get("lru_gen") not in (None, "on", "off"):
        raise SpecError(f"expect_boot.lru_gen {eb.get('lru_gen')!r} is not on, off or null")
    if not isinstance(spec.get("mglru_runtime_toggle", False), bool):
        raise SpecError("spec mglru_runtime_toggle is not a boolean")
    r["toggle"] = spec.get("mglru_runtime_toggle", False)


def validate_engine_spec(spec: dict[str, Any], work_dir: str, rid: str) -> dict[str, Any]:
    """The engine section of a spec (docs/engine.md), checked read-only like validate_spec."""
    cell = parse_engine_cell(spec.get("cell"))
    _check_cell_fields(spec, cell)
    e = spec.get("engine")
    if not isinstance(e, dict):
        raise SpecError("spec engine is not an object")
    for key in ("prompt", "policy"):
        if e.get(key) != cell[key]:
            raise SpecError(f"engine.{key} = {e.get(key)!r} does not match cell {spec['cell']!r}")
    argv, env, cwd = _engine_command(e)
    exe = _engine_executable(argv, env, cwd, work_dir)
    prepare, prepare_exe = e.get("prepare_argv"), None
    if prepare is not None:
        if not isinstance(prepare, list) or not prepare or not all(
                isinstance(a, str) and "\0" not in a for a in prepare) or not prepare[0]:
            raise SpecError("engine.prepare_argv must be a non-empty list of strings "
                            "(no shell is used)")
        prepare_exe = _engine_executable(prepare, env, cwd, work_dir)
    timeout = _int(e, "timeout_s", 1, required=True)
    _check_engine_texts(e, cwd, work_dir)
    pool = spec.get("pool")
    pool = resolve(work_dir, pool) if pool else None
    device_of = pool if pool and os.path.isdir(pool) else (cwd or os.path.dirname(exe))
    eb = _expect_boot(spec)
    return {"run_id": rid, "cell": spec["cell"], **cell,
            "engine": {"argv": list(argv), "env": dict(env), "cwd": cwd, "exe": exe,
                       "timeout_s": timeout, "device_of": device_of, "prepare": prepare,
                       "prepare_exe": prepare_exe, "pool_dir": pool},
            "pool": device_of, "agent_version": {}, "expect_boot": eb,
            "interval_ms": _int(spec, "timeline_interval_ms", 10, 60000, default=100),
            "lock_timeout_s": _int(spec, "host_lock_timeout_s", 0, default=600),
            "headroom": _int(spec, "cgroup_headroom_bytes", 0, default=0),
            "balloon_max_bytes": _int(spec, "balloon_max_bytes", 0),
            "agent": _balloon_agent(cell["mechanism"], work_dir), "agent_timeout_s": None,
            "toggle": False, "passes": 0}


AGENT_PATH = "native/bench-agent"      # where deploy puts it (bench.matrix.runspec)


def _balloon_agent(mechanism: str, work_dir: str) -> str | None:
    """The agent whose `balloon` subcommand a balloon engine cell runs (deployed with the
    runner), None for other cells."""
    if mechanism != "balloon":
        return None
    agent = resolve(work_dir, AGENT_PATH)
    if not os.access(agent, os.X_OK):
        raise SpecError(f"a balloon engine cell needs the agent at {agent} (bench hosts "
                        "deploy)")
    return agent


def _engine_command(e: dict[str, Any]) -> tuple[list[str], dict[str, str], str | None]:
    """engine.argv (no shell), engine.env additions and engine.cwd."""
    argv = e.get("argv")
    if not isinstance(argv, list) or not argv or not all(
            isinstance(a, str) and "\0" not in a for a in argv) or not argv[0]:
        raise SpecError("engine.argv must be a non-empty list of strings (no shell is used)")
    env = e.get("env") or {}
    if not isinstance(env, dict) or not all(
            isinstance(k, str) and ENV_NAME.fullmatch(k) and isinstance(v, str) and "\0" not in v
            for k, v in env.items()):
        raise SpecError("engine.env must map variable names to strings")
    cwd = e.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd.startswith("/")
                            or not os.path.isdir(cwd)):
        raise SpecError(f"engine.cwd {cwd!r} is not an existing absolute directory")
    return argv, env, cwd


def _engine_executable(argv: list[str], env: dict[str, str], cwd: str | None,
                       work_dir: str) -> str:
    """argv[0] as the file that will run: PATH lookup (with the env additions) for a bare
    name, relative to cwd (else work_dir) for a relative path."""
    exe = argv[0]
    if "/" not in exe:
        exe = shutil.which(exe, path={**os.environ, **env}.get("PATH")) or exe
    elif not exe.startswith("/"):
        exe = os.path.join(cwd or work_dir, exe)
    if not os.path.isfile(exe) or not os.access(exe, os.X_OK):
        raise SpecError(f"engine {argv[0]!r} is not an executable file on this host "
                        "(configure engine.command in the matrix)")
    return exe


def _check_engine_texts(e: dict[str, Any], cwd: str | None, work_dir: str) -> None:
    pf = e.get("prompt_file")
    if pf is not None:
        if not isinstance(pf, str) or not pf:
            raise SpecError(f"engine.prompt_file {pf!r} is not a path")
        if not os.path.isfile(pf if pf.startswith("/") else os.path.join(cwd or work_dir, pf)):
            raise SpecError(f"engine.prompt_file {pf} does not exist on this host")
    for key in ("backend", "tokens_regex", "load_regex"):
        if not isinstance(e.get(key), str) or not e[key]:
            raise SpecError(f"engine.{key} must be a non-empty string")
