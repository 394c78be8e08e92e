"""Binary replay plans and hint plans (magic BPLN), the files the C agent reads.

The byte layout is specified in docs/formats.md; this module is its reference implementation
(write and read, with the same validation the agent applies). A plan holds the iterations of a
parsed trace: per iteration its kind and accepted tokens, per router pass its layer and the
distinct experts read, in issue order.

A plan file is untrusted input: it must be a regular file; its header's shape (layers,
experts per layer, expert bytes) is held to the trace parser's bounds
(bench.trace.parse.LIMITS) and its counts must add up to the file's size (read from the file
system before the body is read), so no header claim sizes an allocation; its metadata is
JSON by the trace reader's strict rules and must be an object. Every refusal is a
FormatError naming the file and the field.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.errors import BenchError, FormatError, InputError, TraceError
from bench.trace.parse import (BATCH, ITERATION_KINDS, BigInt, Iteration, Iterations, Pass,
                               Trace, check_shape, loads_line)

MAGIC = b"BPLN"
VERSION = 1
REPLAY, HINT = "replay", "hint"
_KIND_CODE = {REPLAY: 0, HINT: 1}
_HEADER = struct.Struct("<4sHHIIQIIQII")  # 48 bytes
_ITER = np.dtype([("first_pass", "<u4"), ("n_passes", "<u2"), ("kind", "u1"), ("tokens", "u1")])
_PASS = np.dtype([("layer", "<u4"), ("n_reads", "<u4"), ("first_read", "<u8")])
_ITER_KIND_CODE = {k: i for i, k in enumerate(ITERATION_KINDS)}


@dataclass(frozen=True)
class Plan(Iterations):
    kind: str
    layers: int
    experts_per_layer: int
    expert_bytes: int
    iterations: tuple[Iteration, ...]
    meta: dict = field(default_factory=dict)

    @property
    def logical_bytes(self) -> int:
        """Bytes one replay of the plan reads: every read is one whole expert."""
        return self.reads * self.expert_bytes

    def distinct_experts(self) -> set[tuple[int, int]]:
        return {(p.layer, e) for it in self.iterations for p in it.passes for e in p.experts}


def _shape(source: str, layers: int, experts_per_layer: int, expert_bytes: int) -> None:
    """The trace parser's bounds on a plan's shape, as a FormatError naming the field."""
    try:
        check_shape(source, None, layers=layers, experts_per_layer=experts_per_layer,
                    expert_bytes=expert_bytes)
    except TraceError as exc:
        raise FormatError(exc.message.replace(": key ", ": header field ", 1)) from None


def trace_meta(trace: Trace) -> dict:
    """A plan's provenance of one parsed trace, as `bench plan` writes it: its source, model
    and accepted tokens, and the dry-run iterations excluded where there were any (only then:
    a clean trace's plan keeps its bytes)."""
    meta = {"source": trace.source, "model": trace.model.as_dict(),
            "accepted_tokens": trace.accepted_tokens}
    if trace.dry_run:
        meta["dry_run_iterations_excluded"] = len(trace.dry_run)
    return meta


def plan_from_trace(trace: Trace, expert_bytes: int | None = None,
                    meta: dict | None = None) -> Plan:
    size = expert_bytes if expert_bytes is not None else trace.model.expert_bytes
    if not size or size <= 0:
        raise FormatError("the plan needs the expert size: the trace header has no "
                          "expert_bytes", hint="pass --expert-bytes S")
    _shape(trace.source, trace.layer_count(), trace.expert_count(), size)
    return Plan(REPLAY, trace.layer_count(), trace.expert_count(), size, trace.iterations,
                dict(meta or {}))


def encode(plan: Plan) -> bytes:
    if plan.kind not in _KIND_CODE:
        raise FormatError(f"unknown plan kind {plan.kind!r}")
    its = plan.iterations
    n_passes = plan.passes
    n_reads = plan.reads
    meta = json.dumps(plan.meta, sort_keys=True, separators=(",", ":")).encode()
    iters = np.zeros(len(its), _ITER)
    passes = np.zeros(n_passes, _PASS)
    reads = np.zeros(n_reads, "<u4")
    pi = ri = 0
    for i, it in enumerate(its):
        if len(it.passes) > 0xFFFF or it.tokens > 0xFF:
            raise FormatError(f"iteration {i} too large for the plan format")
        iters[i] = (pi, len(it.passes), _ITER_KIND_CODE[it.kind], it.tokens)
        for p in it.passes:
            if not 0 <= p.layer < plan.layers:
                raise FormatError(f"iteration {i}: layer {p.layer} outside [0, {plan.layers})")
            m = len(p.experts)
            passes[pi] = (p.layer, m, ri)
            reads[ri:ri + m] = p.experts
            pi += 1
            ri += m
    if n_reads and int(reads.max()) >= plan.experts_per_layer:
        raise FormatError(f"expert {int(reads.max())} outside [0, {plan.experts_per_layer})")
    head = _HEADER.pack(MAGIC, VERSION, _KIND_CODE[plan.kind], plan.layers,
                        plan.experts_per_layer, plan.expert_bytes, len(its), n_passes, n_reads,
                        len(meta), 0)
    pad = b"\0" * (-(len(head) + len(meta)) % 8)
    return b"".join([head, meta, pad, iters.tobytes(), passes.tobytes(), reads.tobytes()])


def write_plan(path: str | Path, plan: Plan) -> int:
    """Write atomically (temp file + rename) so a crash never leaves half a plan; returns size.
    A directory that does not exist is an InputError naming it, never created; any other
    failure to write (a full disk) a BenchError naming the file, the temp file removed."""
    data = encode(plan)
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(p)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise write_error(p, exc) from None
    return len(data)


def write_error(path: Path, exc: OSError) -> BenchError:
    """A failed write of a file bench makes, naming it: a missing or unusable directory is bad
    input (exit 2), anything else (a full disk, an I/O error) a failure (exit 1)."""
    parent = path.parent
    if not parent.is_dir():
        what = "does not exist" if not parent.exists() else "is not a directory"
        return InputError(f"{path}: directory {parent} {what}",
                          hint=f"create it first (mkdir -p {parent}) or write elsewhere")
    if path.is_dir():
        return InputError(f"{path}: is a directory", hint="give a file name")
    reason = exc.strerror or str(exc)
    if isinstance(exc, PermissionError):
        return InputError(f"{path}: cannot write ({reason})")
    return BenchError(f"{path}: cannot write ({reason})",
                      hint="free space on that file system, or write elsewhere")


def decode(data: bytes, source: str = "<plan>") -> Plan:
    if len(data) < _HEADER.size:
        raise FormatError(f"{source}: truncated plan ({len(data)} bytes, header needs "
                          f"{_HEADER.size})")
    (magic, version, kind, layers, epl, ebytes, n_it, n_pass, n_read, meta_len,
     _reserved) = _HEADER.unpack_from(data)
    if magic != MAGIC:
        raise FormatError(f"{source}: not a plan (magic {magic!r}, expected {MAGIC!r})")
    if version != VERSION:
        raise FormatError(f"{source}: plan version {version}, this bench reads {VERSION}")
    kinds = {v: k for k, v in _KIND_CODE.items()}
    if kind not in kinds:
        raise FormatError(f"{source}: header field kind: unknown plan kind code {kind}")
    _shape(source, layers, epl, ebytes)
    expected = _implied_size(data[:_HEADER.size])
    if len(data) != expected:
        raise FormatError(f"{source}: plan size {len(data)} bytes, header implies {expected}")
    meta = _meta(data[_HEADER.size:_HEADER.size + meta_len], source)
    off = _HEADER.size + meta_len
    off += -off % 8
    iters = np.frombuffer(data, _ITER, n_it, off)
    off += n_it * _ITER.itemsize
    passes = np.frombuffer(data, _PASS, n_pass, off)
    off += n_pass * _PASS.itemsize
    reads = np.frombuffer(data, "<u4", n_read, off)
    if n_pass and (int(passes["layer"].max()) >= layers):
        raise FormatError(f"{source}: a pass names layer {int(passes['layer'].max())} >= {layers}")
    if n_read and int(reads.max()) >= epl:
        raise FormatError(f"{source}: a read names expert {int(reads.max())} >= {epl}")
    iterations = []
    next_pass = next_read = 0
    for i, (first_pass, np_, kcode, tokens) in enumerate(iters.tolist()):
        if first_pass != next_pass or kcode >= len(ITERATION_KINDS):
            raise FormatError(f"{source}: iteration {i} is not contiguous or has a bad kind")
        plist: list[Pass] = []
        for layer, nr, first_read in passes[first_pass:first_pass + np_].tolist():
            if first_read != next_read:
                raise FormatError(f"{source}: pass {len(plist) + first_pass} is not contiguous")
            plist.append(Pass(layer, tuple(reads[first_read:first_read + nr].tolist())))
            next_read += nr
        next_pass += np_
        iterations.append(Iteration(i, ITERATION_KINDS[kcode], tokens, tuple(plist)))
    if next_pass != n_pass or next_read != n_read:
        raise FormatError(f"{source}: iteration and pass tables do not cover the plan")
    return Plan(kinds[kind], layers, epl, ebytes, tuple(iterations), meta)


def _implied_size(head: bytes) -> int:
    """The file size a plan header's counts imply (no allocation made from them)."""
    (*_, n_it, n_pass, n_read, meta_len, _reserved) = _HEADER.unpack_from(head)
    off = _HEADER.size + meta_len
    off += -off % 8
    return off + n_it * _ITER.itemsize + n_pass * _PASS.itemsize + n_read * 4


def _meta(raw: bytes, source: str) -> dict:
    """The plan's metadata: a JSON object by the trace reader's strict rules."""
    try:
        meta = loads_line(raw.decode("utf-8") or "{}", source, None)
    except UnicodeDecodeError:
        raise FormatError(f"{source}: plan metadata is not UTF-8") from None
    except TraceError as exc:
        raise FormatError(f"{source}: plan metadata: {exc.message.split(': ', 1)[1]}") from None
    if not isinstance(meta, dict):
        raise FormatError(f"{source}: plan metadata must be a JSON object, got "
                          f"{type(meta).__name__}")
    stack: list[tuple[str, object]] = [("", meta)]
    while stack:                    # iterative: json already bounded the depth
        key, v = stack.pop()
        if isinstance(v, BigInt):
            raise FormatError(f"{source}: plan metadata key {key!r}: {v!r}")
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        stack.extend((f"{key}.{k}" if key else str(k), x) for k, x in items)
    return meta


def read_plan(path: str | Path) -> Plan:
    """Read and decode a plan file: a regular file whose size its header's counts imply,
    checked before the body is read."""
    p = Path(path)
    try:
        with p.open("rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise FormatError(f"{p}: not a regular file (a plan is a BPLN file)")
            head = fh.read(_HEADER.size)
            if len(head) == _HEADER.size and head[:4] == MAGIC \
                    and _implied_size(head) != st.st_size:
                raise FormatError(f"{p}: plan size {st.st_size} bytes, header implies "
                                  f"{_implied_size(head)}")
            data = head + fh.read()
    except FileNotFoundError:
        raise FormatError(f"{p}: no such plan file") from None
    except IsADirectoryError:
        raise FormatError(f"{p}: not a regular file (a plan is a BPLN file)") from None
    except OSError as exc:
        raise FormatError(f"{p}: cannot read the plan ({exc.strerror or exc})") from None
    return decode(data, str(p))


# Hint plans -----------------------------------------------------------------------------------

def _shaped_like(plan: Plan, hints_per_pass: Sequence[Pass]) -> tuple[Iteration, ...]:
    out, j = [], 0
    for it in plan.iterations:
        n = len(it.passes)
        out.append(Iteration(it.index, it.kind, it.tokens, tuple(hints_per_pass[j:j + n])))
        j += n
    return tuple(out)


def oracle_hints(plan: Plan) -> Plan:
    """Hint pass j = the experts of replay pass j+1 (the one-pass upper bound); the last is
    empty."""
    flat = [p for it in plan.iterations for p in it.passes]
    hints = [Pass(nxt.layer, nxt.experts) for nxt in flat[1:]]
    if flat:
        hints.append(Pass(flat[-1].layer, ()))
    meta = {"provenance": {"source": "oracle"}}
    return Plan(HINT, plan.layers, plan.experts_per_layer, plan.expert_bytes,
                _shaped_like(plan, hints), meta)


def previous_token_hints(plan: Plan) -> Plan:
    """The model-blind baseline: when pass j starts, hint what the next pass's layer read the
    last time it was routed (previous-token recurrence); nothing before a layer was seen."""
    flat = [p for it in plan.iterations for p in it.passes]
    last: dict[int, tuple[int, ...]] = {}
    hints = []
    for j, p in enumerate(flat):
        last[p.layer] = p.experts
        if j + 1 < len(flat):
            target = flat[j + 1].layer
            hints.append(Pass(target, last.get(target, ())))
        else:
            hints.append(Pass(p.layer, ()))
    meta = {"provenance": {"source": "previous-token"}}
    return Plan(HINT, plan.layers, plan.experts_per_layer, plan.expert_bytes,
                _shaped_like(plan, hints), meta)


def hints_from_file(plan: Plan, hint_plan: Plan, source: str, run: str | None = None) -> Plan:
    """A recorded prediction plan (a hint plan file): checked against the replay plan's shape,
    relabelled with where it came from."""
    if hint_plan.kind != HINT:
        raise FormatError(f"{source}: not a hint plan (kind {hint_plan.kind})")
    shape = [len(it.passes) for it in plan.iterations]
    if [len(it.passes) for it in hint_plan.iterations] != shape:
        raise FormatError(f"{source}: hint plan shape does not match the replay plan "
                          f"({hint_plan.passes} vs {plan.passes} passes)")
    for it in hint_plan.iterations:
        for p in it.passes:
            if p.layer >= plan.layers or (p.experts and max(p.experts) >= plan.experts_per_layer):
                raise FormatError(f"{source}: iteration {it.index}: a hint names layer {p.layer}"
                                  f" expert {max(p.experts, default=0)}, outside the replay "
                                  f"plan's {plan.layers} layers x {plan.experts_per_layer} experts")
    prov = hint_plan.meta.get("provenance", {})
    if not isinstance(prov, dict):
        raise FormatError(f"{source}: plan metadata key 'provenance': must be a JSON object")
    prov = dict(prov)
    if prov.get("source") not in (None, "file"):     # what made it, kept (pitfall 8)
        prov["origin"] = prov["source"]
    prov.update({"source": "file", "file": source})
    if run:
        prov["run"] = run
    meta = dict(hint_plan.meta, provenance=prov)
    return Plan(HINT, plan.layers, plan.experts_per_layer, plan.expert_bytes,
                hint_plan.iterations, meta)


def frequency_table(plan: Plan) -> dict[tuple[int, int], int]:
    """Reads per (layer, expert) over one replay of the plan: the pinned arena's oracle table."""
    counts: dict[tuple[int, int], int] = {}
    for it in plan.iterations:
        for p in it.passes:
            for e in p.experts:
                counts[(p.layer, e)] = counts.get((p.layer, e), 0) + 1
    return counts


__all__ = ["Plan", "plan_from_trace", "encode", "decode", "write_plan", "read_plan",
           "oracle_hints", "previous_token_hints", "hints_from_file", "frequency_table",
           "REPLAY", "HINT", "BATCH"]
