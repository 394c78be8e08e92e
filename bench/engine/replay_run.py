"""The agent's replay of the engine's own trace, run and measured like an engine run (issue 25,
item 5).

`bench engine prepare` (before the page cache is dropped, outside the measurement) writes,
for one model, prompt and token count, into `MODEL.replay/` beside the model:

    {key}.trace.jsonl   the trace, as `bench engine trace` writes it (greedy decode)
    {key}.plan          the replay plan, as `bench plan TRACE -o PLAN --from-gguf MODEL` does
    {key}.json          the record: model identity, prompt sha256, tokens, the decode's output
                        and the plan's facts, with the trace's and plan's sha256 (written last:
                        a prepare killed half way leaves files no record vouches for)
    pool/               the pool over the model file itself (bench.engine.gguf_pool)

`key` names the model's bytes (gguf_pool.model_identity), the prompt and the token count, so
a changed model or another prompt finds nothing prepared. `bench engine run --load replay`
then runs the native agent over that plan and pool and prints what `engine run` prints; it
needs neither llama.cpp nor the decode: the replay reads the pages the decode read, so its
output is the traced decode's.

`page_cache_split` says how much of a model file is in the page cache, experts and the rest,
after any run (mincore over a fresh mapping: nothing is faulted in)."""

from __future__ import annotations

import ctypes
import hashlib
import io
import json
import mmap
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.engine.gguf_pool import RANGES_NAME, model_identity, ranges_blob, write_gguf_pool
from bench.errors import BenchError, InputError
from bench.paths import write_replacing

MAX_PROMPT_FILE = 64 << 10
RECORD_FORMAT = 1
KEY_HEX = 16
AGENT_STDOUT_TAIL = 1 << 20     # the summary is the last line; per-iteration records precede it
AGENT_STDERR_TAIL = 4096
MAX_RECORD = 1 << 20            # 4096 output token ids and the facts: well under
MAX_RANGES = 4 << 20            # the ranges file of the largest shape model make allows
MINCORE_WINDOW = 1 << 30        # map at most this much at once: a mincore vector of 256 KiB


def read_prompt_file(path: Path) -> str:
    """The prompt as `engine run --prompt-file` reads it: at most 64 KiB, UTF-8 (invalid bytes
    replaced), stripped."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_PROMPT_FILE + 1)
    except OSError as exc:
        raise InputError(f"--prompt-file {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_PROMPT_FILE:
        raise InputError(f"--prompt-file {path}: larger than {MAX_PROMPT_FILE} bytes")
    return raw.decode("utf-8", "replace").strip()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def replay_key(identity: dict, prompt: str, tokens: int) -> str:
    """The first 16 hex of sha256 over canonical JSON of the model's identity, the prompt's
    sha256 and the token count: what names one prepared replay."""
    canon = json.dumps({"model": identity, "prompt_sha256": _sha256(prompt.encode()),
                        "tokens": tokens}, sort_keys=True, separators=(",", ":"))
    return _sha256(canon.encode())[:KEY_HEX]


@dataclass(frozen=True)
class Prepared:
    """Where one prepared replay's files lie."""

    directory: Path
    key: str

    @property
    def trace(self) -> Path:
        return self.directory / f"{self.key}.trace.jsonl"

    @property
    def plan(self) -> Path:
        return self.directory / f"{self.key}.plan"

    @property
    def record(self) -> Path:
        return self.directory / f"{self.key}.json"

    @property
    def pool(self) -> Path:
        return self.directory / "pool"


def replay_dir(model: Path) -> Path:
    """MODEL.replay, beside the model (the path as given: the plan's provenance names it)."""
    return model.with_name(model.name + ".replay")


def prepared_for(model: Path, prompt: str, tokens: int) -> tuple[Prepared, dict]:
    """Where this model, prompt and token count's replay lies, and the model's identity."""
    if not model.is_file():
        raise InputError(f"{model}: no such model file")
    try:
        identity = model_identity(model)
    except OSError as exc:
        raise InputError(f"{model}: cannot read it: {exc.strerror or exc}") from None
    return Prepared(replay_dir(model), replay_key(identity, prompt, tokens)), identity


def _file_sha(path: Path) -> str | None:
    try:
        with path.open("rb") as f:         # in chunks: a trace of 4096 tokens is large
            return hashlib.file_digest(f, "sha256").hexdigest()
    except OSError:
        return None


def _read_json(path: Path) -> dict | None:
    """A small JSON object of bench's (a record, pool.json), or None when it is missing,
    larger than one can be, or not a JSON object."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_RECORD + 1)
        got = json.loads(raw) if len(raw) <= MAX_RECORD else None
    except (OSError, ValueError):
        return None
    return got if isinstance(got, dict) else None


def _read_record(p: Prepared) -> dict | None:
    return _read_json(p.record)


def valid_record(p: Prepared, identity: dict, prompt: str, tokens: int) -> dict | None:
    """The record when it vouches for this model, prompt and tokens and the trace and plan
    are the files it hashed; else None."""
    rec = _read_record(p)
    if rec is None or rec.get("format") != RECORD_FORMAT:
        return None
    want = {"key": p.key, "model_identity": identity,
            "prompt_sha256": _sha256(prompt.encode()), "tokens": tokens}
    if any(rec.get(k) != v for k, v in want.items()):
        return None
    if not isinstance(rec.get("output_tokens"), list) or len(rec["output_tokens"]) != tokens:
        return None
    if _file_sha(p.trace) != rec.get("trace_sha256") or _file_sha(p.plan) != rec.get(
            "plan_sha256"):
        return None
    return rec


def pool_matches(pool: Path, model: Path, identity: dict, facts: dict | None = None) -> bool:
    """A whole pool over this model's current bytes: pool.json names the file and its
    identity, and (given the facts) its ranges are what the model's tensors give."""
    m = _read_json(pool / "pool.json")
    try:
        with (pool / RANGES_NAME).open("rb") as f:
            ranges = f.read(MAX_RANGES + 1)      # 64 x 256 experts x 3 x 16 B: 768 KiB
    except OSError:
        return False
    if m is None or len(ranges) > MAX_RANGES or m.get("complete") is not True \
            or m.get("kind") != "gguf":
        return False
    if m.get("file") != str(model.resolve()) or m.get("model") != identity:
        return False
    if m.get("ranges_sha256") != _sha256(ranges):
        return False
    return facts is None or m["ranges_sha256"] == _sha256(ranges_blob(facts))


def _write_text(path: Path, text: str) -> None:
    try:
        write_replacing(path, lambda f: f.write(text.encode("utf-8")))
    except OSError as exc:
        raise InputError(f"{path}: cannot write it: {exc.strerror or exc}") from None


def _trace(model: Path, prompt: str, tokens: int, threads: int, out: Path) -> Any:
    """Decode and write the trace exactly as `bench engine trace` does; the Decoded."""
    from bench.engine.llama_run import decode
    from bench.engine.trace_out import TOPK, check_complete, header_for, write_trace
    header = header_for(model)
    dec = decode(model, prompt, tokens, prefixes=(TOPK,), threads=threads)
    check_complete(dec, header["layers"])
    buf = io.StringIO()
    write_trace(dec, header, buf)
    _write_text(out, buf.getvalue())
    return dec


def _plan(trace: Path, plan: Path, model: Path, facts: dict) -> Any:
    """The plan `bench plan TRACE -o PLAN --from-gguf MODEL` writes, from the same pieces (a
    test compares the bytes); the Plan."""
    from bench.engine.gguf_pool import plan_over_gguf
    from bench.plan.planfile import plan_from_trace, trace_meta, write_plan
    from bench.trace.dryrun import parse_traces
    (t,) = parse_traces([trace])
    p = plan_over_gguf(plan_from_trace(t, facts["expert_bytes"], trace_meta(t)), facts, model)
    write_plan(plan, p)
    return p


def _make_trace_and_plan(model: Path, prompt: str, tokens: int, threads: int,
                         p: Prepared, identity: dict, facts: dict) -> dict:
    dec = _trace(model, prompt, tokens, threads, p.trace)
    plan = _plan(p.trace, p.plan, model, facts)
    rec = {"format": RECORD_FORMAT, "key": p.key, "model": str(model),
           "model_identity": identity, "prompt_sha256": _sha256(prompt.encode()),
           "tokens": tokens, "prompt_tokens": len(dec.prompt_tokens),
           "output_tokens": dec.output_tokens, "output_sha256": dec.output_hash,
           "trace": p.trace.name, "trace_sha256": _file_sha(p.trace),
           "plan": p.plan.name, "plan_sha256": _file_sha(p.plan),
           "reads": plan.reads, "distinct_experts": len(plan.distinct_experts()),
           "logical_bytes": plan.logical_bytes, "expert_bytes": plan.expert_bytes}
    # last: the record is what says the trace and plan beside it are whole
    _write_text(p.record, json.dumps(rec, sort_keys=True) + "\n")
    return rec


def check_request(prompt: str, tokens: int) -> None:
    """What prepare refuses before any work (the decode would refuse it later)."""
    from bench.engine.llama_run import MAX_DECODE_TOKENS
    if not prompt:
        raise InputError("--prompt-file: the prompt is empty (after stripping)")
    if not 1 <= tokens <= MAX_DECODE_TOKENS:
        raise InputError(f"--tokens {tokens}: must be in [1, {MAX_DECODE_TOKENS}]")


def prepare_replay(model: Path, prompt: str, tokens: int, threads: int = 1) -> dict:
    """Make (or keep, when already there and valid) the trace, plan, record and pool of this
    model, prompt and token count in MODEL.replay/. Returns what was done: `trace` and `pool`
    are "kept" or "made", with the record's facts and the paths."""
    from bench.engine.gguf_read import model_facts
    check_request(prompt, tokens)
    p, identity = prepared_for(model, prompt, tokens)
    facts = model_facts(model)
    try:
        p.directory.mkdir(exist_ok=True)
    except OSError as exc:
        raise InputError(f"{p.directory}: cannot create it: {exc.strerror or exc}") from None
    rec = valid_record(p, identity, prompt, tokens)
    trace_state = "kept" if rec is not None else "made"
    if rec is None:
        rec = _make_trace_and_plan(model, prompt, tokens, threads, p, identity, facts)
    pool_state = "kept" if pool_matches(p.pool, model, identity, facts) else "made"
    if pool_state == "made":
        write_gguf_pool(model, p.pool, facts)
    return {**{k: rec[k] for k in ("key", "tokens", "output_tokens", "output_sha256", "reads",
                                   "distinct_experts", "logical_bytes")},
            "model": str(model), "directory": str(p.directory), "trace": str(p.trace),
            "plan": str(p.plan), "record": str(p.record), "pool": str(p.pool),
            "trace_state": trace_state, "pool_state": pool_state}


def load_prepared(model: Path, prompt: str, tokens: int, prompt_file: Path) -> tuple[Prepared,
                                                                                    dict]:
    """The prepared replay of this model, prompt and tokens and its record, or one line
    whose fix is the prepare command (nothing prepared, the model changed since, or a
    prepare that did not finish)."""
    p, identity = prepared_for(model, prompt, tokens)
    fix = (f"run bench engine prepare {model} --prompt-file {prompt_file} --tokens {tokens} "
           "first (it makes the trace, plan and pool the replay reads)")
    rec = valid_record(p, identity, prompt, tokens)
    if rec is None and not p.record.exists():     # a changed model is another key: here
        raise InputError(f"{model}: no replay prepared for its current bytes, this prompt "
                         f"and {tokens} tokens (key {p.key} in {p.directory})", hint=fix)
    if rec is None:
        raise InputError(f"{model}: the replay prepared as {p.key} in {p.directory} is "
                         "incomplete or stale (its trace or plan is not the one recorded)",
                         hint=fix)
    if not pool_matches(p.pool, model, identity):
        raise InputError(f"{p.pool}: no pool over the model's current bytes", hint=fix)
    return p, rec


@dataclass(frozen=True)
class AgentRun:
    """The agent's exit status, its summary (None when it wrote none), the tail of its
    stderr and when it was started (time.perf_counter)."""

    rc: int
    summary: dict | None
    stderr_tail: str
    spawned_at: float


def _tail(f: Any, limit: int) -> bytes:
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - limit))
    return f.read(limit)


def _summary(out: bytes) -> dict | None:
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if not lines:
        return None
    try:
        s = json.loads(lines[-1])
    except ValueError:
        return None
    return s if isinstance(s, dict) and s.get("summary") is True else None


def run_agent(agent: Path, p: Prepared) -> AgentRun:
    """`bench-agent replay` of the plan over the pool, one pass, one thread, page cache (no
    shell). Its output goes to unnamed temporary files, so a long run cannot fill a pipe,
    and only their tails are read."""
    if not agent.is_file() or not os.access(agent, os.X_OK):
        raise InputError(f"--agent {agent}: not an executable file",
                         hint="build it: make -C native (bench-agent)")
    argv = [str(agent), "replay", "--pool", str(p.pool), "--plan", str(p.plan),
            "--passes", "1", "--threads", "1", "--mode", "pagecache"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        spawned = time.perf_counter()
        try:
            rc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                check=False).returncode
        except OSError as exc:
            raise InputError(f"--agent {agent}: cannot run it: {exc.strerror or exc}") from None
        summary = _summary(_tail(out, AGENT_STDOUT_TAIL))
        tail = _tail(err, AGENT_STDERR_TAIL).decode("utf-8", "replace")
    return AgentRun(rc, summary, tail, spawned)


def agent_failure(run: AgentRun) -> BenchError:
    """One line for a failed replay: the agent's exit status and its reason."""
    reason = (run.summary or {}).get("reason")
    if not reason:
        lines = [ln for ln in run.stderr_tail.splitlines() if ln.strip()]
        reason = lines[-1][:300] if lines else "no reason given"
    if run.rc == 0:
        return BenchError(f"bench-agent replay: no summary line ({reason})")
    return BenchError(f"bench-agent replay failed (exit {run.rc}): {reason}")


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_int64]       # off_t: 64 bits on LP64 Linux
    libc.mincore.restype = ctypes.c_int
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.restype = ctypes.c_int
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


_MAP_FAILED = ctypes.c_void_p(-1).value


def _mincore_window(libc: ctypes.CDLL, fd: int, off: int, length: int, page: int) -> bytes:
    addr = libc.mmap(None, length, mmap.PROT_READ, mmap.MAP_PRIVATE, fd, off)
    if addr in (None, _MAP_FAILED):
        raise OSError(ctypes.get_errno(), "mmap: " + os.strerror(ctypes.get_errno()))
    try:
        vec = (ctypes.c_ubyte * ((length + page - 1) // page))()
        if libc.mincore(addr, length, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore: " + os.strerror(ctypes.get_errno()))
        return bytes(vec)
    finally:
        libc.munmap(addr, length)


def resident_pages(path: Path) -> np.ndarray:
    """One bool per page of the file: in the page cache now. A fresh private read-only
    mapping, never touched, so mincore reports the page cache and faults nothing in. Linux
    reports page-cache state to the file's owner, a writer or root only (since 5.0; anyone
    else sees only pages mapped into this process: none), which the engine's host has."""
    page = mmap.PAGESIZE
    libc = _libc()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(f"{path}: cannot open it: {exc.strerror or exc}") from None
    try:
        size = os.fstat(fd).st_size
        parts = [_mincore_window(libc, fd, off, min(MINCORE_WINDOW, size - off), page)
                 for off in range(0, size, MINCORE_WINDOW)]
    except OSError as exc:
        raise InputError(f"{path}: cannot see its pages: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    vec = np.frombuffer(b"".join(parts), dtype=np.uint8)
    return (vec & 1).astype(bool)


def expert_bytes_per_page(facts: dict, n_pages: int, page: int) -> np.ndarray:
    """Per page of the file, how many of its bytes belong to expert tensors (they do not
    overlap). Counted in bytes, not pages: on a 64 KiB-page host (arm64, the GH200s) a page
    may hold the end of one expert tensor and the start of a dense one, and a split in whole
    pages would count more expert bytes than the model has."""
    out = np.zeros(n_pages, dtype=np.int64)
    for t in facts["expert_tensors"].values():
        a, b = t["offset"], t["offset"] + t["bytes"]
        first, last = a // page, (b - 1) // page
        if t["bytes"] <= 0 or first >= n_pages:
            continue
        if first == last:
            out[first] += b - a
            continue
        out[first] += (first + 1) * page - a
        out[first + 1:min(last, n_pages)] += page
        if last < n_pages:
            out[last] += b - last * page
    return out


def split_pages(resident: np.ndarray, facts: dict, page: int = mmap.PAGESIZE) -> dict:
    """The file's bytes in resident pages (the last page only up to the file's end), in
    expert tensors and the rest; beside them the file's expert bytes and the rest. Each part
    is at most the file's, which numbers_possible holds the engine's line to."""
    n = len(resident)
    in_page = np.full(n, page, dtype=np.int64)
    if n:
        in_page[-1] = facts["bytes"] - (n - 1) * page
    experts = expert_bytes_per_page(facts, n, page)
    in_experts = int(experts[resident].sum())
    rest = int(in_page[resident].sum()) - in_experts
    expert_bytes = sum(t["bytes"] for t in facts["expert_tensors"].values())
    return {"page_size": page, "resident_bytes": in_experts + rest,
            "experts_resident_bytes": in_experts, "rest_resident_bytes": rest,
            "file_bytes": facts["bytes"], "experts_bytes": expert_bytes,
            "rest_bytes": facts["bytes"] - expert_bytes}


def page_cache_split(model: Path, facts: dict | None = None) -> dict:
    """The model file's bytes in the page cache now, split into expert tensors and the rest
    (split_pages), from mincore (resident_pages); `facts` read from the model when not given,
    after mincore: the split is then the run's, not this read's (gguf's reader maps and
    touches more than the header)."""
    from bench.engine.gguf_read import model_facts
    resident = resident_pages(model)
    return split_pages(resident, facts if facts is not None else model_facts(model))


def split_line(split: dict) -> str:
    return (f"page cache after decode: experts {split['experts_resident_bytes']} B, the rest "
            f"{split['rest_resident_bytes']} B (model: experts {split['experts_bytes']} B, "
            f"the rest {split['rest_bytes']} B)")
