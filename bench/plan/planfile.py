"""Binary replay plans and hint plans (magic BPLN), the files the C agent reads.

The byte layout is specified in docs/formats.md; this module is its reference implementation
(write and read, with the same validation the agent applies). A plan holds the iterations of a
parsed trace: per iteration its kind and accepted tokens, per router pass its layer and the
distinct experts read, in issue order.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.errors import FormatError
from bench.trace.parse import BATCH, ITERATION_KINDS, Iteration, Pass, Trace

MAGIC = b"BPLN"
VERSION = 1
REPLAY, HINT = "replay", "hint"
_KIND_CODE = {REPLAY: 0, HINT: 1}
_HEADER = struct.Struct("<4sHHIIQIIQII")  # 48 bytes
_ITER = np.dtype([("first_pass", "<u4"), ("n_passes", "<u2"), ("kind", "u1"), ("tokens", "u1")])
_PASS = np.dtype([("layer", "<u4"), ("n_reads", "<u4"), ("first_read", "<u8")])
_ITER_KIND_CODE = {k: i for i, k in enumerate(ITERATION_KINDS)}


@dataclass(frozen=True)
class Plan:
    kind: str
    layers: int
    experts_per_layer: int
    expert_bytes: int
    iterations: tuple[Iteration, ...]
    meta: dict = field(default_factory=dict)

    @property
    def passes(self) -> int:
        return sum(len(it.passes) for it in self.iterations)

    @property
    def reads(self) -> int:
        return sum(it.reads for it in self.iterations)

    @property
    def logical_bytes(self) -> int:
        """Bytes one replay of the plan reads: every read is one whole expert."""
        return self.reads * self.expert_bytes

    def distinct_experts(self) -> set[tuple[int, int]]:
        return {(p.layer, e) for it in self.iterations for p in it.passes for e in p.experts}


def plan_from_trace(trace: Trace, expert_bytes: int | None = None,
                    meta: dict | None = None) -> Plan:
    size = expert_bytes if expert_bytes is not None else trace.model.expert_bytes
    if not size or size <= 0:
        raise FormatError("the plan needs the expert size: the trace header has no "
                          "expert_bytes", hint="pass --expert-bytes S")
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
    """Write atomically (temp file + rename) so a crash never leaves half a plan; returns size."""
    data = encode(plan)
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(p)
    return len(data)


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
        raise FormatError(f"{source}: unknown plan kind code {kind}")
    off = _HEADER.size + meta_len
    off += -off % 8
    expected = off + n_it * _ITER.itemsize + n_pass * _PASS.itemsize + n_read * 4
    if len(data) != expected:
        raise FormatError(f"{source}: plan size {len(data)} bytes, header implies {expected}")
    try:
        meta = json.loads(data[_HEADER.size:_HEADER.size + meta_len] or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise FormatError(f"{source}: plan metadata is not JSON ({exc})") from None
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


def read_plan(path: str | Path) -> Plan:
    p = Path(path)
    try:
        return decode(p.read_bytes(), str(p))
    except FileNotFoundError:
        raise FormatError(f"{p}: no such plan file") from None


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
    prov = dict(hint_plan.meta.get("provenance", {}))
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
