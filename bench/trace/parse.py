"""The canonical trace parser: router records in, typed engine iterations out.

Everything downstream (locality analysis, simulators, plans, the batch merge, the demand model)
reads traces through `parse_trace`, so there is exactly one place that decides what an
iteration, a token and a read are. The rules are those of docs/design.md:

* A trace is JSONL, one record per router pass of one layer:
  ``{"step": 17, "layer": 3, "experts": [812, 5, ...]}``. An optional first line without
  ``experts`` is the header: ``{"model", "k", "experts_per_layer", "layers", "expert_bytes"}``.
* Iterations are grouped by ``step``; without ``step`` an iteration ends where the layer index
  goes back down.
* Typing, with k the model's top-k:
  - normal: every record has width k and every layer is routed once -> 1 accepted token;
  - spec-accept: every record has width 2k (two positions) -> 2 accepted tokens;
  - spec-fallback: width k and some layer routed twice (a failed speculation, then its
    fallback pass) -> 1 accepted token; both passes are replayed, as issued.
* A clean repeat is the same layer routed again immediately (no step) or a second ascending
  run of layers inside the same step. Anything else (a layer three times, a repeat that is
  not a clean second run, widths mixed inside one iteration, a 2k record repeated) is an error.
* A pass reads the distinct experts of its record in order of first appearance, once each.
* Prefill is excluded: records tagged ``"phase": "prefill"`` (production engine) or carrying
  ``"n_tokens" > 1`` (the llama.cpp eval-callback batch shape) are counted and skipped.
* llama.cpp's scheduler dry-run first pass is excluded and counted (`Trace.dry_run`) when the
  traces are read together: bench.trace.dryrun.parse_traces, what every command reads with.
* A trace is untrusted input: a line is at most MAX_LINE_CHARS characters (read that far and
  no further), an integer at most MAX_INT_DIGITS digits (checked before Python converts it;
  a longer one is kept as a BigInt marker and refused by the key that holds it), NaN and
  Infinity are refused, and a header's sizes are checked against LIMITS before
  anything is sized from them: k, layers, experts_per_layer, their product (the (layer,
  expert) slots analysis and simulators allocate) and expert_bytes. A headerless trace's
  layers and expert ids are held to the same bounds. Every refusal is a TraceError naming
  the file, the line and the key.

The llama.cpp eval-callback shape is also read: one record per token and layer,
``{"token": 12, "name": "ffn_moe_topk-3", "experts": [...]}`` (or ``"layer": 3``), k = 8 unless
a header or ``k`` says otherwise. ``token`` plays the role of ``step``.

This module is pure: it reads lines, never touches hosts, and imports no I/O library.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import numpy as np

from bench.errors import InputError, TraceError

NORMAL, SPEC_ACCEPT, SPEC_FALLBACK, BATCH = "normal", "spec_accept", "spec_fallback", "batch"
ITERATION_KINDS = (NORMAL, SPEC_ACCEPT, SPEC_FALLBACK, BATCH)
TOKENS = {NORMAL: 1, SPEC_ACCEPT: 2, SPEC_FALLBACK: 1}
LLAMA_K = 8
_LLAMA_NAME = re.compile(r"^ffn_moe_topk-(\d{1,9})$")

# What bench reads, far above any model it studies (K3: k 16, 92 layers x 896 experts of
# 17.55 MB) and below what would make a header's claim exhaust memory: every array of the
# analysis and the simulators is at most one entry per (layer, expert) slot.
MAX_LINE_CHARS = 1 << 20
MAX_INT_DIGITS = 20                     # a uint64 has at most 20 digits
MAX_NAME_CHARS = 256
LIMITS = {"k": 1024, "layers": 4096, "experts_per_layer": 1 << 20, "slots": 1 << 24,
          "expert_bytes": 1 << 40}


@dataclass(frozen=True, slots=True)
class Model:
    """Facts about the model a trace came from; any of them may be unknown except k."""

    k: int
    experts_per_layer: int | None = None
    layers: int | None = None
    expert_bytes: int | None = None
    name: str | None = None

    def as_dict(self) -> dict:
        return {"model": self.name, "k": self.k, "experts_per_layer": self.experts_per_layer,
                "layers": self.layers, "expert_bytes": self.expert_bytes}


@dataclass(frozen=True, slots=True)
class Pass:
    """One router pass of one layer: the distinct experts read, in first-appearance order."""

    layer: int
    experts: tuple[int, ...]
    positions: tuple[tuple[int, ...], ...] = ()  # the record's k-wide halves, as routed
    line: int = 0


@dataclass(frozen=True, slots=True)
class Iteration:
    """One engine iteration: its passes in issue order, its type and its accepted tokens."""

    index: int
    kind: str
    tokens: int
    passes: tuple[Pass, ...]
    step: int | None = None
    line: int = 0

    @property
    def reads(self) -> int:
        return sum(len(p.experts) for p in self.passes)


class Iterations:
    """What a trace and the plan made from it both count over their iterations."""
    __slots__ = ()
    iterations: tuple[Iteration, ...]

    @property
    def passes(self) -> int:
        return sum(len(it.passes) for it in self.iterations)

    @property
    def reads(self) -> int:
        return sum(it.reads for it in self.iterations)


@dataclass(frozen=True)
class Trace(Iterations):
    source: str
    model: Model
    iterations: tuple[Iteration, ...]
    prefill_records: int = 0
    meta: dict = field(default_factory=dict)
    dry_run: tuple[Iteration, ...] = ()  # first iterations excluded as a scheduler dry run

    @property
    def accepted_tokens(self) -> int:
        return sum(it.tokens for it in self.iterations)

    def count(self, kind: str) -> int:
        return sum(1 for it in self.iterations if it.kind == kind)

    def layer_count(self) -> int:
        if self.model.layers is not None:
            return self.model.layers
        return 1 + max((p.layer for it in self.iterations for p in it.passes), default=-1)

    def expert_count(self) -> int:
        if self.model.experts_per_layer is not None:
            return self.model.experts_per_layer
        return 1 + max((e for it in self.iterations for p in it.passes for e in p.experts),
                       default=-1)

    def summary(self) -> dict:
        """The figures `bench trace parse --json` prints."""
        return {
            "source": self.source,
            "model": self.model.as_dict(),
            "iterations": len(self.iterations),
            "normal": self.count(NORMAL),
            "spec_accept": self.count(SPEC_ACCEPT),
            "spec_fallback": self.count(SPEC_FALLBACK),
            "batch": self.count(BATCH),
            "accepted_tokens": self.accepted_tokens,
            "passes": self.passes,
            "reads": self.reads,
            "reads_per_iteration": self.reads / len(self.iterations) if self.iterations else 0.0,
            "reads_per_accepted_token": (self.reads / self.accepted_tokens
                                         if self.accepted_tokens else 0.0),
            "prefill_records_excluded": self.prefill_records,
            "dry_run_iterations_excluded": len(self.dry_run),
            "dry_run_reads_excluded": sum(it.reads for it in self.dry_run),
        }


@dataclass(frozen=True, slots=True)
class _Record:
    line: int
    step: int | None
    layer: int
    experts: tuple[int, ...]


def check_shape(path: str, line: int | None, **sizes: int | None) -> None:
    """Refuse sizes beyond LIMITS (k, layers, experts_per_layer, expert_bytes, and the slots
    layers x experts_per_layer), before anything is allocated from them."""
    for key, v in sizes.items():
        if v is not None and not 1 <= v <= LIMITS[key]:
            raise TraceError(path, line, f"key {key!r}: {v} is outside what bench reads "
                             f"[1, {LIMITS[key]}]")
    layers, experts = sizes.get("layers"), sizes.get("experts_per_layer")
    if layers is not None and experts is not None and layers * experts > LIMITS["slots"]:
        raise TraceError(path, line, f"key 'experts_per_layer': {layers} layers x {experts} "
                         f"experts is more than the {LIMITS['slots']} (layer, expert) slots "
                         "bench reads")


def _shown(value: object) -> str:
    """A value for an error message with its JSON type, cut short (a hostile record may hold
    megabytes)."""
    if isinstance(value, BigInt):
        return repr(value)
    kind = {bool: "bool", int: "int", float: "float", str: "str", list: "list",
            dict: "object"}.get(type(value), type(value).__name__)
    text = repr(value)
    return f"{kind} {text if len(text) <= 60 else text[:57] + '...'}"


def _int_field(rec: dict, key: str, path: str, line: int) -> int | None:
    value = rec.get(key)
    if value is None:
        return None
    if isinstance(value, BigInt):
        raise TraceError(path, line, f"key {key!r}: {value!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(path, line, f"{key!r} must be an integer, got {_shown(value)}")
    return value


def _is_header(rec: dict) -> bool:
    return "experts" not in rec and ("k" in rec or "model" in rec)


def _header_model(rec: dict, path: str, line: int, k_override: int | None) -> Model:
    vals = {}
    for key in ("k", "experts_per_layer", "layers", "expert_bytes"):
        v = _int_field(rec, key, path, line)
        if v is not None and v <= 0:
            raise TraceError(path, line, f"header {key!r} must be positive, got {v}")
        vals[key] = v
    check_shape(path, line, **vals)
    k = k_override if k_override is not None else vals["k"]
    if k is None:
        raise TraceError(path, line, "header has no 'k' and none was given",
                         hint="pass --k K (the model's top-k)")
    epl = vals["experts_per_layer"]
    if epl is not None and k > epl:
        raise TraceError(path, line, f"key 'k': top-{k} of {epl} experts per layer")
    name = rec.get("model")
    if name is not None and (not isinstance(name, str) or len(name) > MAX_NAME_CHARS):
        raise TraceError(path, line, f"key 'model': must be a name of at most {MAX_NAME_CHARS} "
                         f"characters, got {_shown(name)}")
    return Model(k=k, experts_per_layer=epl, layers=vals["layers"],
                 expert_bytes=vals["expert_bytes"], name=name)


def _is_prefill(rec: dict) -> bool:
    if rec.get("phase") == "prefill" or rec.get("prefill") is True:
        return True
    n_tokens = rec.get("n_tokens")
    return isinstance(n_tokens, int) and not isinstance(n_tokens, bool) and n_tokens > 1


def _record(rec: dict, path: str, line: int, model: Model) -> _Record:
    layer = _int_field(rec, "layer", path, line)
    if layer is None:
        name = rec.get("name", rec.get("tensor"))
        m = _LLAMA_NAME.fullmatch(name) if isinstance(name, str) else None
        if m is None:
            raise TraceError(path, line, "record has no 'layer' (nor an ffn_moe_topk-N name)")
        layer = int(m.group(1))
    step = _int_field(rec, "step", path, line)
    if step is None:
        step = _int_field(rec, "token", path, line)
    experts = rec.get("experts")
    if not isinstance(experts, list) or not experts:
        raise TraceError(path, line, "'experts' must be a non-empty list of expert ids")
    k = model.k
    if len(experts) not in (k, 2 * k):
        raise TraceError(path, line, f"record width {len(experts)} is neither k={k} nor 2k={2 * k}")
    for e in experts:
        if isinstance(e, BigInt):
            raise TraceError(path, line, f"key 'experts': expert id of {e!r}")
        if isinstance(e, bool) or not isinstance(e, int):
            raise TraceError(path, line, f"expert id {_shown(e)} is not an integer")
    layers = model.layers or LIMITS["layers"]
    if not 0 <= layer < layers:
        raise TraceError(path, line, f"layer {layer} out of range [0, {layers})")
    lo, hi = min(experts), max(experts)
    experts_per_layer = model.experts_per_layer or LIMITS["experts_per_layer"]
    if lo < 0 or hi >= experts_per_layer:
        raise TraceError(path, line, f"expert {lo if lo < 0 else hi} out of range "
                         f"[0, {experts_per_layer})")
    for h in range(len(experts) // k):
        half = experts[h * k:(h + 1) * k]
        if len(set(half)) != k:
            dup = next(e for e in half if half.count(e) > 1)
            where = f" in position {h + 1}" if len(experts) == 2 * k else ""
            raise TraceError(path, line, f"expert {dup} selected twice{where} (top-k is distinct)")
    return _Record(line, step, layer, tuple(experts))


class _Refused(ValueError):
    """A JSON literal bench refuses to convert (raised from json's parse hooks)."""


class BigInt:
    """What stands for an integer literal of more than MAX_INT_DIGITS digits: never converted
    (Python's conversion is quadratic, and refused past 4300 digits), refused by whoever reads
    the key it sits under, naming it."""

    __slots__ = ("digits",)

    def __init__(self, digits: int):
        self.digits = digits

    def __repr__(self) -> str:
        return f"an integer of {self.digits} digits (at most {MAX_INT_DIGITS})"


def _int_literal(text: str) -> int | BigInt:
    digits = len(text) - text.startswith("-")
    return BigInt(digits) if digits > MAX_INT_DIGITS else int(text)


def _constant(text: str) -> float:
    raise _Refused(f"{text} is not a number")


def loads_line(text: str, path: str, line: int | None) -> object:
    """One JSON document of a trace or plan file, refusing what no router record holds
    (integers past int64's 19 digits, NaN, Infinity, nesting past the recursion limit) with a
    TraceError naming file and line; never a traceback."""
    try:
        return json.loads(text, parse_int=_int_literal, parse_constant=_constant)
    except _Refused as exc:
        raise TraceError(path, line, f"bad JSON: {exc}") from None
    except json.JSONDecodeError as exc:
        raise TraceError(path, line, f"bad JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise TraceError(path, line, "bad JSON: nested too deep") from None
    except ValueError as exc:       # what else json's decoder refuses
        raise TraceError(path, line, f"bad JSON: {str(exc)[:120]}") from None


def bounded_lines(fh: IO[str], path: str) -> Iterator[str]:
    """The lines of a text file, none read past MAX_LINE_CHARS characters (a line without end
    is refused at that length, naming its number, instead of filling memory)."""
    lineno = 0
    while line := fh.readline(MAX_LINE_CHARS + 1):
        lineno += 1
        if len(line) > MAX_LINE_CHARS and not line.endswith("\n"):
            raise TraceError(path, lineno, f"line longer than {MAX_LINE_CHARS} characters")
        yield line


def _records(lines: Iterable[str], path: str, k: int | None,
             model_hint: Model | None) -> tuple[Model, list[_Record], int]:
    model = model_hint
    records: list[_Record] = []
    prefill = 0
    llama = False
    for lineno, raw in enumerate(lines, start=1):
        if len(raw) > MAX_LINE_CHARS + 1:
            raise TraceError(path, lineno, f"line longer than {MAX_LINE_CHARS} characters")
        text = raw.strip()
        if not text:
            continue
        rec = loads_line(text, path, lineno)
        if not isinstance(rec, dict):
            raise TraceError(path, lineno, "a record must be a JSON object")
        if _is_header(rec):
            if records or (model is not None and model_hint is None):
                raise TraceError(path, lineno, "header line after the first record")
            model = _header_model(rec, path, lineno, k)
            continue
        if model is None:
            llama = "token" in rec or "name" in rec or "tensor" in rec
            k_eff = k if k is not None else (LLAMA_K if llama else None)
            if k_eff is None:
                raise TraceError(path, lineno, "no header line and no k given",
                                 hint="pass --k K (the model's top-k)")
            model = Model(k=k_eff)
        if _is_prefill(rec):
            prefill += 1
            continue
        records.append(_record(rec, path, lineno, model))
    if model is None:
        raise TraceError(path, None, "no records", hint="is this a router trace (JSONL)?")
    if records and (model.layers is None or model.experts_per_layer is None):
        _check_inferred(model, records, path)
    return model, records, prefill


def _check_inferred(model: Model, records: list[_Record], path: str) -> None:
    """A headerless trace's layers and experts (the largest ids + 1) under the slot bound."""
    top = max(records, key=lambda r: max(r.experts))
    deep = max(records, key=lambda r: r.layer)
    layers = model.layers or deep.layer + 1
    experts = model.experts_per_layer or max(top.experts) + 1
    if layers * experts > LIMITS["slots"]:
        raise TraceError(path, top.line, f"expert {max(top.experts)} with layer {deep.layer} "
                         f"(line {deep.line}): {layers} layers x {experts} experts is more "
                         f"than the {LIMITS['slots']} (layer, expert) slots bench reads",
                         hint="give the trace a header with its real experts_per_layer")


def _group(records: Sequence[_Record], path: str) -> Iterator[list[_Record]]:
    """Split records into iterations: by step when present, else where the layer goes down."""
    group: list[_Record] = []
    for rec in records:
        if group:
            prev = group[-1]
            if rec.step is not None or prev.step is not None:
                if rec.step is None or prev.step is None:
                    raise TraceError(path, rec.line, "records mix with and without 'step'")
                new = rec.step != prev.step
                if rec.step < prev.step:
                    raise TraceError(path, rec.line, f"step {rec.step} after step {prev.step}: "
                                     "steps must not go back")
            else:
                new = rec.layer < prev.layer
            if new:
                yield group
                group = []
        group.append(rec)
    if group:
        yield group


def _type_iteration(group: list[_Record], index: int, model: Model, path: str) -> Iteration:
    k = model.k
    first = group[0]
    widths = {len(r.experts) for r in group}
    if len(widths) > 1:
        odd = next(r for r in group if len(r.experts) != len(first.experts))
        raise TraceError(path, odd.line,
                         f"record width {len(odd.experts)} differs from width "
                         f"{len(first.experts)} earlier in the same iteration (line {first.line})")
    # A clean repeat: dropping every second routing leaves the layers ascending, each once,
    # and the second routings form one contiguous ascending block (a layer re-routed at once,
    # or, inside one step, a re-run of a range of layers).
    seen: dict[int, int] = {}
    firsts: list[_Record] = []
    seconds: list[tuple[int, _Record]] = []
    for pos, rec in enumerate(group):
        seen[rec.layer] = seen.get(rec.layer, 0) + 1
        if seen[rec.layer] > 2:
            raise TraceError(path, rec.line, f"layer {rec.layer} routed {seen[rec.layer]} times in "
                             "one iteration (a pass repeats neither cleanly)")
        if seen[rec.layer] == 1:
            if firsts and rec.layer < firsts[-1].layer:
                raise TraceError(path, rec.line, f"layer {rec.layer} out of order in the iteration "
                                 f"(after layer {firsts[-1].layer})")
            firsts.append(rec)
        else:
            if len(first.experts) == 2 * k:
                raise TraceError(path, rec.line, f"layer {rec.layer} routed twice in a spec-accept "
                                 "iteration (a pass repeats neither cleanly)")
            if seconds and (pos != seconds[-1][0] + 1
                            or rec.layer <= seconds[-1][1].layer):
                raise TraceError(path, rec.line, f"layer {rec.layer} re-routed apart from the "
                                 "other re-routed layers (a pass repeats neither cleanly)")
            seconds.append((pos, rec))
    if len(first.experts) == 2 * k:
        kind = SPEC_ACCEPT
    elif seconds:
        kind = SPEC_FALLBACK
    else:
        kind = NORMAL
    if model.layers is not None and len(seen) != model.layers:
        missing = sorted(set(range(model.layers)) - set(seen))[:5]
        raise TraceError(path, first.line,
                         f"iteration routes {len(seen)} of {model.layers} layers "
                         f"(missing e.g. {missing}); a trace must hold whole iterations")
    passes = []
    for rec in group:
        positions = tuple(rec.experts[h * k:(h + 1) * k] for h in range(len(rec.experts) // k))
        passes.append(Pass(rec.layer, tuple(dict.fromkeys(rec.experts)), positions, rec.line))
    return Iteration(index, kind, TOKENS[kind], tuple(passes), first.step, first.line)


def parse_lines(lines: Iterable[str], source: str = "<trace>", k: int | None = None,
                model: Model | None = None) -> Trace:
    """Parse trace lines. `k` overrides the header's k; `model` supplies facts a headerless
    trace lacks (experts_per_layer, layers, expert_bytes)."""
    if k is not None and not 1 <= k <= LIMITS["k"]:
        raise InputError(f"--k must be in [1, {LIMITS['k']}], got {k}")
    mdl, records, prefill = _records(lines, source, k, model)
    if not records:
        raise TraceError(source, None, "no decode records (only a header or prefill)")
    iterations = tuple(_type_iteration(g, i, mdl, source)
                       for i, g in enumerate(_group(records, source)))
    if mdl.layers is None:
        layer_sets = {frozenset(p.layer for p in it.passes) for it in iterations}
        if len(layer_sets) > 1:
            counts = sorted({len(s) for s in layer_sets})
            bad = next(it for it in iterations
                       if len({p.layer for p in it.passes}) != counts[-1])
            routed = len({p.layer for p in bad.passes})
            raise TraceError(source, bad.line, f"iteration routes {routed}"
                             f" layers where others route {counts[-1]}; a trace must hold whole "
                             "iterations")
    return Trace(source, mdl, iterations, prefill)


def parse_trace(path: str | Path, k: int | None = None, model: Model | None = None) -> Trace:
    p = Path(path)
    try:
        if not p.is_file():     # a directory, a FIFO or a device would never end
            raise InputError(f"{p}: no such trace file" if not p.exists() else
                             f"{p}: not a regular file (a trace is a JSONL file)")
        with p.open("r", encoding="utf-8") as fh:
            return parse_lines(bounded_lines(fh, str(p)), str(p), k, model)
    except UnicodeDecodeError as exc:
        raise TraceError(str(p), None, f"not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot read the trace ({exc.strerror or exc})") from None


def merge(traces: Sequence[Trace]) -> Trace:
    """Batch merge: iteration i of the merged trace serves iteration i of every stream.

    The merge is truncated to the shortest trace. Inside a merged iteration, the r-th routing
    of a layer in every stream becomes one pass reading the union of their experts (stream
    order, first appearance); a stream's fallback re-route therefore stays a separate pass.
    Accepted tokens are those of the iterations inside the window.
    """
    if not traces:
        raise InputError("batch merge needs at least one trace")
    k_set = {t.model.k for t in traces}
    if len(k_set) != 1:
        raise InputError(f"cannot merge traces with different k: {sorted(k_set)}")
    n = min(len(t.iterations) for t in traces)
    merged = []
    for i in range(n):
        slots: dict[tuple[int, int], list[int]] = {}
        for t in traces:
            occurrence: dict[int, int] = {}
            for p in t.iterations[i].passes:
                r = occurrence.get(p.layer, 0)
                occurrence[p.layer] = r + 1
                slots.setdefault((r, p.layer), []).extend(p.experts)
        passes = tuple(Pass(layer, tuple(dict.fromkeys(ex)))
                       for (r, layer), ex in sorted(slots.items()))
        tokens = sum(t.iterations[i].tokens for t in traces)
        merged.append(Iteration(i, BATCH, tokens, passes))
    first = traces[0].model
    return Trace("+".join(t.source for t in traces), first, tuple(merged),
                 sum(t.prefill_records for t in traces),
                 {"batch": len(traces), "truncated_to": n},
                 tuple(it for t in traces for it in t.dry_run))


@dataclass(frozen=True)
class Accesses:
    """A trace flattened to the access stream the simulators and the demand model count:
    one entry per distinct expert of each pass, in issue order."""

    layer: np.ndarray       # int32
    expert: np.ndarray      # int32
    iteration: np.ndarray   # int32, index of the engine iteration
    pass_index: np.ndarray  # int32, global index of the router pass
    experts_per_layer: int
    layers: int

    @property
    def keys(self) -> np.ndarray:
        """Global key of (layer, expert): layer * experts_per_layer + expert (int64)."""
        return self.layer.astype(np.int64) * self.experts_per_layer + self.expert

    def __len__(self) -> int:
        return int(self.layer.shape[0])


def accesses(trace: Trace) -> Accesses:
    n = trace.reads
    layer = np.empty(n, np.int32)
    expert = np.empty(n, np.int32)
    iteration = np.empty(n, np.int32)
    pass_index = np.empty(n, np.int32)
    pos = 0
    pidx = 0
    for it in trace.iterations:
        for p in it.passes:
            m = len(p.experts)
            layer[pos:pos + m] = p.layer
            expert[pos:pos + m] = p.experts
            iteration[pos:pos + m] = it.index
            pass_index[pos:pos + m] = pidx
            pos += m
            pidx += 1
    return Accesses(layer, expert, iteration, pass_index, trace.expert_count(), trace.layer_count())


def first_pass_signature(trace: Trace) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """The coverage of the first iteration (step 0): what `bench trace check` compares."""
    if not trace.iterations:
        return ()
    return tuple(sorted((p.layer, tuple(sorted(p.experts))) for p in trace.iterations[0].passes))


def suspicious_first_passes(traces: Sequence[Trace]) -> list[list[str]]:
    """Groups (of two or more traces) whose first iteration is bit-identical: the mark of a
    synthetic scheduler dry run (llama.cpp) recorded as if it were decode."""
    groups: dict[tuple, list[str]] = {}
    for t in traces:
        groups.setdefault(first_pass_signature(t), []).append(t.source)
    return [srcs for srcs in groups.values() if len(srcs) > 1]

