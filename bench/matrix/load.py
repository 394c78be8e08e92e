"""Matrices: a named set of cells with repetitions, ordering rules and host constraints (TOML).
Loading and validation here; expansion onto hosts in bench.matrix.expand.

Pure except for reading the file. `load_matrix(ref)` takes a shipped name (bench/data/matrices/
NAME.toml: capacity, reclaim, equal-memory, prefetch, admission, smoke) or a path to a user file,
and validates every key: a missing or unknown key, a wrong type, a value outside its allowed set
or a broken cross-field rule is a problem naming the file, the dotted key and the allowed
values, and every problem of a file is reported at once (a MatrixFileError, one problem a line;
the models: MatrixFile here, its tables in bench.matrix.matrix_schema; `bench schema matrix` prints
the JSON Schema editors validate and complete with). bench.matrix.expand turns a matrix, for a
set of inventory hosts, into run requests for `bench.matrix.schedule.schedule` plus the cells it
had to skip on some host, each with its reason (never silently dropped).

Schema: the models below and in bench.matrix.matrix_schema (every key with its doc; `bench
schema matrix` prints them as JSON Schema); the shipped files are commented examples. Sizes are
K/M/G/T decimal as the paper writes capacities (64G = 64 x 10^9 bytes), Ki/Mi/Gi/Ti binary.

Capacities: absolute (`64G` = 64 x 10^9 bytes as the paper writes C, `64Gi` binary; exact
bytes, canonical text), relative to the pool (`0.044pool`: that fraction of the workload's pool
bytes) or to the host's memory (`0.5mem`: of its inventory memory.total), rounded down to a
whole decimal MB; they resolve per host in bench.matrix.expand. Cell names in [[cells.extra]]
are read in any case.

Scales: a `[scale.NAME]` table re-sizes the same matrix for smaller hosts (`bench schedule
--scale lab`): `capacities = { "64G" = "0.133mem", ... }` maps every absolute capacity the
matrix writes (in cells.capacities, exclude and extra, cell names included) to the one used at
that scale, and `repetitions`, `memboot_overhead`, `mglru_at_boot`, `description` and the
tables `workload`, `protocol`, `estimate`, `order`, `hosts` override what they name;
`balloon_overhead` boots each balloon cell's host with the mem= at which it locks the paper's
share of the host (bench.matrix.balloon_host). The scaled
matrix is validated as a whole, like any other; an absolute capacity without a mapping is an
error, so a scale never runs a production-sized cell by accident.

End-to-end engine matrices (bench.matrix.engine_cells, docs/engine.md) carry an `[engine]` table
instead of `[cells]` (and neither `repetitions` nor a required `[workload]`): one cell per prompt
and policy (e2e-prose-admit, e2e-prose-nocache, ...), engine.pairs pairs per prompt. Both cells of a
prompt share one unit (so a pair stays on one host) and each request carries `pair` = (prompt,
policy): the scheduler keeps the two runs of a pair adjacent, in the balanced order.
"""

from __future__ import annotations

import copy
import itertools
import re
import tomllib
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Callable, Iterator

from pydantic import AfterValidator, Field, create_model
from pydantic.fields import FieldInfo

from bench.errors import InputError
from bench.matrix.balloon_host import balloon_boots
from bench.matrix.cells import ENGINE_RECLAIM, Cell, Reclaim, parse_cell
from bench.matrix.engine_cells import LOCAL_ONLY, EngineConfig, EngineTable, config_of
from bench.matrix.excludes import apply_excludes
from bench.matrix.limits import CELLS_TEXT, RUNS_TEXT, Repetitions, cells_problem, runs_problem
from bench.matrix.matrix_schema import DEFAULT_CGROUP_HEADROOM as DEFAULT_CGROUP_HEADROOM
from bench.matrix.matrix_schema import AXES, DEFAULT_MEMBOOT_OVERHEAD, NAME_RE
from bench.matrix.matrix_schema import PLACEMENTS as PLACEMENTS
from bench.matrix.matrix_schema import PRESET_GEOMETRY, PRESET_POOLS, PRODUCT
from bench.matrix.matrix_schema import RELATIVE_CAPACITY as _REL
from bench.matrix.matrix_schema import (SYNTH_GEOMETRY, CapacityText, Cells, Estimate, Extra,
                                        HostsTable, Order, Problem, Protocol, SchemaError,
                                        Size, Table, View, Workload, bad, collect, doc, matches,
                                        parse_capacity)
from bench.units import MB, format_size


class MatrixError(InputError):
    """A matrix file that does not validate; names the file, the key and the allowed values."""


# the matrix ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Capacity:
    text: str
    kind: str           # abs | pool | mem
    value: float        # bytes (abs) or fraction

    def resolve(self, pool_bytes: int | None, mem_total: int | None) -> tuple[int | None, str]:
        """Bytes: an absolute capacity exactly, a relative one rounded down to a whole decimal
        MB (so its cell name stays short and exact: 0.133mem of 1536Mi -> 214M); or (None,
        why not)."""
        if self.kind == "abs":
            return int(self.value), ""
        if self.kind == "pool":
            if pool_bytes is None:
                return None, "pool size unknown (set workload.pool)"
            raw = self.value * pool_bytes
        else:
            if mem_total is None:
                return None, f"{self.text} needs the host's memory.total in its inventory file"
            raw = self.value * mem_total
        b = int(raw) // MB * MB
        if b <= 0:
            return None, f"{self.text} resolves to less than 1M (10^6 bytes)"
        return b, ""


@dataclass(frozen=True)
class Point:
    capacity: Capacity
    mechanism: str
    reclaim: str
    mode: str = "pagecache"
    prefetch: str = "none"
    tags: tuple | None = None        # ((tag, (values...)), ...) override, None: the matrix's
    placement: str | None = None
    repetitions: int | None = None
    engine: str | None = None        # an engine cell's name (e2e-prose-admit)

    @property
    def key(self) -> str:
        if self.engine is not None:
            return self.engine
        parts = [self.capacity.text, self.mechanism, self.reclaim]
        if self.mode != "pagecache":
            parts.append(self.mode)
        if self.prefetch != "none":
            parts.append(self.prefetch)
        return "-".join(parts)

    def cell(self, capacity_bytes: int) -> Cell:
        if self.engine is not None:
            return parse_cell(self.engine)
        hints = delivery = None
        if self.prefetch != "none":
            hints, delivery = self.prefetch.rsplit("-", 1)
        return Cell(capacity_bytes, self.mechanism, self.reclaim, self.mode, hints, delivery)


@dataclass(frozen=True)
class Matrix:
    name: str
    description: str
    source: str
    workload: dict
    repetitions: int
    randomize: bool
    interleave: bool
    tags: tuple | None               # None: any host
    placement: str
    memboot_overhead: int
    mglru_at_boot: bool
    run_seconds: float
    reboot_seconds: float
    points: tuple[Point, ...]
    reference: str = ""
    protocol: dict = field(default_factory=dict)    # cgroup_headroom, balloon_max (bytes)
    scale: str | None = None                        # the [scale.NAME] applied, if any
    scales: tuple[str, ...] = ()                    # the scales the file offers
    engine: EngineConfig | None = None              # end-to-end engine matrices
    # a scaled matrix: the paper's capacity -> the scale's (canonical texts), the memory the
    # scale is sized for, and the unscaled workload (bench.matrix.regime compares the two)
    capacity_map: tuple[tuple[str, str], ...] = ()
    scale_memory: int | None = None
    balloon_overhead: int | None = None             # bench.matrix.balloon_host: the lab's own
    balloon_boots: tuple[tuple[str, int], ...] = ()  # use, and lab C -> the mem= it boots
    full_workload: dict = field(default_factory=dict)

    @property
    def pool_bytes(self) -> int | None:
        return workload_pool_bytes(self.workload)

    def as_dict(self) -> dict:
        return {
            "name": self.name, "description": self.description, "reference": self.reference,
            "source": self.source, "workload": dict(self.workload), "pool_bytes": self.pool_bytes,
            "scale": self.scale, "scales": list(self.scales),
            "protocol": {k: (None if v is None else format_size(v))
                         for k, v in self.protocol.items()},
            "repetitions": self.repetitions,
            "order": {"randomize": self.randomize, "interleave_reps": self.interleave},
            "hosts": {"tags": _tags_json(self.tags), "placement": self.placement},
            "memboot_overhead": format_size(self.memboot_overhead),
            "balloon_boots": {c: format_size(mem) for c, mem in self.balloon_boots},
            "mglru_at_boot": self.mglru_at_boot,
            "estimate": {"run_seconds": self.run_seconds, "reboot_seconds": self.reboot_seconds},
            "points": [{"point": p.key, "capacity": p.capacity.text, "mechanism": p.mechanism,
                        "reclaim": p.reclaim, "mode": p.mode, "prefetch": p.prefetch,
                        "repetitions": p.repetitions or self.repetitions,
                        "placement": p.placement or self.placement,
                        "tags": _tags_json(p.tags if p.tags is not None else self.tags)}
                       for p in self.points],
        } | ({"engine": self.engine.as_dict(), "engine_local_only":
              LOCAL_ONLY if self.engine.local_only else None} if self.engine else {})


def _tags_json(tags: tuple | None) -> str | dict:
    """Host tags as a matrix file writes them: "any", or { tag = [values] }."""
    return "any" if tags is None else {k: list(v) for k, v in tags}


def workload_pool_bytes(workload: dict) -> int | None:
    """The pool of a workload: its `pool` key, else the (re-sized) synth preset's geometry."""
    if workload.get("pool") is not None:
        return workload["pool"]
    geo = PRESET_GEOMETRY.get(workload.get("trace", ""))
    if geo is None:
        return None
    layers = workload.get("layers") or geo[0]
    experts = workload.get("experts") or geo[1]
    return layers * experts * (workload.get("expert_bytes") or geo[2])



# scales -------------------------------------------------------------------------------------------

def _absolute(text: str) -> str:
    if parse_capacity(text)[1] != "abs":
        raise bad("only absolute capacities are mapped",
                  hint="relative ones (pool, mem) already scale with the host")
    return text


def _optional(f: FieldInfo) -> Any:
    """The type of a field (its constraints kept) or None."""
    tp: Any = Annotated[(f.annotation, *f.metadata)] if f.metadata else f.annotation
    return tp | None


def _partial(model: type[Table], text: str) -> type[Table]:
    """`model` with every key optional and no cross-field rule: a [scale.NAME] override."""
    fields: dict[str, Any] = {name: (_optional(f), Field(None, description=f.description))
                              for name, f in model.model_fields.items()}
    return create_model(f"{model.__name__}Override", __base__=Table, __doc__=text, **fields)


if TYPE_CHECKING:
    # built by create_model at run time (below); to a type checker they are Tables
    WorkloadOverride = Table
    ProtocolOverride = Table
    EstimateOverride = Table
    OrderOverride = Table
    HostsOverride = Table
else:
    WorkloadOverride, ProtocolOverride, EstimateOverride, OrderOverride, HostsOverride = (
        _partial(m, f"Keys of [{k}] a scale overrides.") for m, k in (
            (Workload, "workload"), (Protocol, "protocol"), (Estimate, "estimate"),
            (Order, "order"), (HostsTable, "hosts")))


class Scale(Table):
    """[scale.NAME]: the same matrix re-sized for smaller hosts (bench schedule --scale NAME):
    every absolute capacity mapped, the tables named here override the matrix's."""
    description: str | None = doc("replaces the matrix's description", None)
    repetitions: Repetitions | None = doc("replaces the matrix's repetitions", None)
    memboot_overhead: Size | None = doc("replaces the matrix's memboot_overhead", None)
    mglru_at_boot: bool | None = doc("replaces the matrix's mglru_at_boot (hosts whose boots "
                                     "set MGLRU)", None)
    capacities: dict[Annotated[CapacityText, AfterValidator(_absolute)], CapacityText] = doc(
        'every absolute capacity the matrix writes -> the one at this scale, e.g. { "64G" = '
        '"0.133mem" }', {})
    workload: WorkloadOverride | None = doc(
        "keys of [workload] to override (a new trace drops the re-sizing and the pool)", None)
    protocol: ProtocolOverride | None = doc("keys of [protocol] to override", None)
    estimate: EstimateOverride | None = doc("keys of [estimate] to override", None)
    order: OrderOverride | None = doc("keys of [order] to override", None)
    hosts: HostsOverride | None = doc("keys of [hosts] to override", None)
    memory: Size | None = doc("the host memory this scale is sized for: resolves its relative "
                              "capacities for the regime check (bench matrix show --scale)", None)
    balloon_overhead: Size | None = doc(
        "what the host keeps for itself (mem= less MemAvailable as a balloon is sized): each "
        "balloon cell boots the host with the mem= at which it locks the paper's share", None)
    reclaims: dict[Reclaim, Reclaim] = doc(
        'reclaim settings replaced in every cell, e.g. { mglru = "classic" } for a lab whose '
        "kernel has no MGLRU, where the matrix compares something else (modes, hints)", {})


def apply_scale(data: dict, scale: str, source: str) -> dict:
    """The matrix document with its [scale.NAME] applied (see the module doc); pure. The
    scale's problems (its table, each absolute capacity it has no mapping for) all at once."""
    scales = data.get("scale")
    if not isinstance(scales, dict) or scale not in scales:
        have = ", ".join(sorted(scales)) if isinstance(scales, dict) and scales else "none"
        raise MatrixError(f"{source}: has no scale {scale!r}", f"its scales: {have}")
    sc, problems = collect(Scale, scales[scale], source=source, prefix=("scale", scale))
    if problems:
        raise MatrixFileError(problems)
    return _scaled(data, scale, source, sc)


def _scaled(data: dict, scale: str, source: str, sc: Scale) -> dict:
    """apply_scale with the scale's table already validated (`sc`)."""
    raw = data["scale"][scale]
    mapping = {int(parse_capacity(k)[2]): v for k, v in sc.capacities.items()}
    missing: list[Problem] = []

    def scaled(text: Any, where: str) -> Any:
        if not isinstance(text, str) or _REL.match(text):
            return text
        try:
            b = int(parse_capacity(text)[2])
        except InputError:
            return text                 # not a capacity: the scaled matrix's validation says so
        if b not in mapping:
            missing.append(Problem(("scale", scale, "capacities"), f"has no entry for {text} "
                                   f"(used at {where})", hint=f'map it, e.g. "{text}" = "0.1mem"',
                                   source=source))
            return text
        return mapping[b]
    out = copy.deepcopy({k: v for k, v in data.items() if k != "scale"})
    _scale_cells(out.get("cells"), scaled)
    if missing:
        raise MatrixFileError(missing)
    _map_reclaims(out.get("cells"), {str(k): str(v) for k, v in sc.reclaims.items()})
    for k in Scale.model_fields:
        if k in ("capacities", "reclaims", "memory", "balloon_overhead") or k not in raw:
            continue
        if not isinstance(raw[k], dict):
            out[k] = raw[k]             # description, repetitions, memboot_overhead, ...
            continue
        got = out.get(k)
        base = got if isinstance(got, dict) else {}
        if k == "workload" and "trace" in raw[k] and raw[k]["trace"] != base.get("trace"):
            base = {kk: vv for kk, vv in base.items() if kk not in SYNTH_GEOMETRY + ("pool",)}
        out[k] = {**base, **raw[k]}
    return out


def _scale_cells(cells: Any, scaled: Callable[[Any, str], Any]) -> None:
    """Every absolute capacity of [cells] (cell names included) through `scaled`, in place."""
    if not isinstance(cells, dict):
        return
    if isinstance(cells.get("capacities"), list):
        cells["capacities"] = [scaled(x, f"cells.capacities[{i}]")
                               for i, x in enumerate(cells["capacities"])]
    for key in ("exclude", "extra"):
        items = cells.get(key)
        for i, x in enumerate(items if isinstance(items, list) else []):
            if not isinstance(x, dict):
                continue
            if "capacity" in x:
                x["capacity"] = scaled(x["capacity"], f"cells.{key}[{i}].capacity")
            if key == "extra" and isinstance(x.get("cell"), str):
                try:
                    cell = parse_cell(x["cell"])
                except InputError:
                    continue            # the scaled matrix's validation names it
                del x["cell"]
                x.update(capacity=scaled(format_size(cell.capacity_bytes),
                                         f"cells.extra[{i}].cell"),
                         mechanism=cell.mechanism, reclaim=cell.reclaim, mode=cell.mode,
                         prefetch=cell.prefetch)


def _map_reclaims(cells: Any, mapping: dict[str, str]) -> None:
    """A scale's `reclaims` applied to [cells] in place (after _scale_cells made every extra
    and exclude entry a table with its own `reclaim`)."""
    if not mapping or not isinstance(cells, dict):
        return
    if isinstance(cells.get("reclaims"), list):
        cells["reclaims"] = list(dict.fromkeys(mapping.get(r, r) for r in cells["reclaims"]))
    for key in ("exclude", "extra"):
        items = cells.get(key)
        for x in items if isinstance(items, list) else []:
            if isinstance(x, dict) and x.get("reclaim") in mapping:
                x["reclaim"] = mapping[x["reclaim"]]


# validation ---------------------------------------------------------------------------------------

class MatrixFileError(SchemaError, MatrixError):
    """A matrix file with one or more problems, each on its own line (`problems` keeps them)."""


class MatrixFile(Table):
    """A bench matrix (bench/data/matrices/NAME.toml or a user file): cells, repetitions,
    order and host constraints; an end-to-end matrix has [engine] instead of [cells]."""
    name: Annotated[str, matches(NAME_RE, "is not a valid matrix name", "use 1-32 of a-z, 0-9 "
                                 "and '-' (it becomes part of run ids)")] = doc(
        "a-z, 0-9, '-'; equals the file stem for shipped matrices",
        json_schema_extra={"pattern": NAME_RE.pattern})
    description: str = doc("one line: what the matrix measures")
    reference: str = doc("where in the paper (free text)", "")
    repetitions: Repetitions | None = doc("runs per cell and host (required unless [engine]); "
                                          + RUNS_TEXT, None)
    memboot_overhead: Size = doc("mem= of a memboot cell is C + this", DEFAULT_MEMBOOT_OVERHEAD,
                                 shown="9G")
    mglru_at_boot: bool = doc("MGLRU set by a boot (bench.lru_gen=), not at run time", False)
    workload: Workload | None = doc("what every run replays (required unless [engine])", None)
    order: Order = doc("the order of the runs", default_factory=Order.model_construct)
    hosts: HostsTable = doc("which hosts run the cells", default_factory=HostsTable.model_construct)
    estimate: Estimate = doc("duration estimates", default_factory=Estimate.model_construct)
    protocol: Protocol = doc("measurement protocol", default_factory=Protocol.model_construct)
    cells: Cells | None = doc(f"the cells (required unless [engine]): {CELLS_TEXT}", None)
    scale: dict[str, Scale] = doc("[scale.NAME] re-sizings (bench schedule --scale NAME)", {})
    engine: EngineTable | None = doc("an end-to-end engine matrix (docs/engine.md)", None)

    @staticmethod
    def rules(v: View, ctx: dict) -> Iterator[Problem]:
        if v.given("engine"):
            for k in ("repetitions", "cells"):
                if v.given(k):
                    yield Problem((k,), "not allowed in an engine matrix", hint="engine.pairs "
                                  "sets the pairs per prompt, engine.prompts the cells")
            if v.ok("mglru_at_boot") and v.mglru_at_boot:
                yield Problem(("mglru_at_boot",), "an engine matrix leaves reclaim as the host "
                              "runs it")
            if v.ok("engine", "protocol") and v.engine and v.protocol.balloon_max is None \
                    and any(x.endswith("-balloon") for x in v.engine.capacities):
                yield Problem(("engine", "capacities"), "a balloon arm needs [protocol] "
                              "balloon_max, the most it may lock", hint='e.g. balloon_max = "2G"')
            return
        for k, hint in (("repetitions", None), ("workload", "a table with trace, domain, batch"),
                        ("cells", "a table with capacities, mechanisms, ...")):
            if not v.given(k):
                yield Problem((k,), "missing (required)", hint=hint)
        if v.ok("workload") and v.workload is not None:
            trace = v.workload.trace
            if trace not in PRESET_POOLS and not re.search(r"[/.]", trace):
                yield Problem(("workload", "trace"), f"{trace!r} is neither a synth preset nor "
                              "a file path", tuple(PRESET_POOLS),
                              hint="or a path to a JSONL trace (it has a / or a .)")


def parse_matrix(data: dict, source: str) -> Matrix:
    """Validate one parsed TOML document (`source` names it in messages); every problem of it
    at once, as a MatrixFileError."""
    return _parse(data, source)[1]


def _parse(data: dict, source: str) -> tuple[MatrixFile, Matrix]:
    m, problems = collect(MatrixFile, data, source=source, rules=(_cell_rules,))
    if problems:
        raise MatrixFileError(problems)
    # an engine loads its own model (model_construct: the defaults, no validator to build)
    w = m.workload or Workload.model_construct(trace="engine")
    workload = {k: getattr(w, k) for k in Workload.model_fields
                if k not in SYNTH_GEOMETRY or k in w.model_fields_set}
    engine, reps = None, m.repetitions
    if m.engine is not None:
        engine = config_of(m.engine)
        points, reps = _engine_points(engine), engine.pairs
    else:
        points = _points(m.cells)[0]
    too_many = runs_problem([p.repetitions for p in points], reps, engine is not None)
    if too_many is not None:        # before any run is made of them (bench.matrix.limits)
        raise MatrixFileError([Problem(**too_many, source=source)])
    return m, Matrix(
        name=m.name, description=m.description, source=source, workload=workload,
        repetitions=reps, randomize=m.order.randomize, interleave=m.order.interleave_reps,
        tags=m.hosts.tags, placement=m.hosts.placement, memboot_overhead=m.memboot_overhead,
        mglru_at_boot=m.mglru_at_boot, run_seconds=float(m.estimate.run_seconds),
        reboot_seconds=float(m.estimate.reboot_seconds), points=tuple(points),
        reference=m.reference, protocol={k: getattr(m.protocol, k) for k in Protocol.model_fields},
        scales=tuple(sorted(m.scale)), engine=engine)


def _capacity(text: str) -> Capacity:
    return Capacity(*parse_capacity(text))


def _extra_point(x: Extra) -> Point:
    if x.cell is not None:
        cell = parse_cell(x.cell)
        axes = (Capacity(format_size(cell.capacity_bytes), "abs", cell.capacity_bytes),
                cell.mechanism, cell.reclaim, cell.mode, cell.prefetch)
    else:
        # Extra._cell_or_axes: without a cell name, capacity, mechanism and reclaim are given
        assert x.capacity is not None and x.mechanism is not None and x.reclaim is not None
        axes = (_capacity(x.capacity), x.mechanism, x.reclaim, x.mode or "pagecache",
                x.prefetch or "none")
    return Point(*axes, tags=x.tags, placement=x.placement, repetitions=x.repetitions)


def _points(cells: Cells) -> tuple[list[Point], list[Problem]]:
    """The product minus the excludes, plus the extras; and each exclude that matches no cell
    of the product (checked only against a complete product: Cells.rules names a partial one)."""
    if cells.capacities is None or cells.mechanisms is None or cells.reclaims is None:
        return [_extra_point(x) for x in cells.extra], []
    points = [Point(*t) for t in itertools.product(
        [_capacity(c) for c in cells.capacities], cells.mechanisms, cells.reclaims, cells.modes,
        cells.prefetch)]
    wants = [{k: getattr(x, k) for k in AXES if k in x.model_fields_set} for x in cells.exclude]
    points, unused = apply_excludes(points, wants, lambda p, k: (
        p.capacity.text if k == "capacity" else getattr(p, k)))
    problems = [Problem(("cells", "exclude", i), f"matches no cell of the product: {wants[i]}",
                        hint="check the spelling against cells.capacities, mechanisms, ...")
                for i in unused]
    return points + [_extra_point(x) for x in cells.extra], problems


def _cell_rules(v: View, ctx: dict) -> Iterator[Problem]:
    """The rules over the cells a (replay) matrix expands to: excludes that exclude nothing, no
    cell at all, a cell twice, a pool-relative capacity without a pool size."""
    if v.given("engine") or not v.ok("cells") or v.cells is None:
        return
    if (too_many := cells_problem(v.cells)) is not None:     # before the product is made
        yield Problem(**too_many)
        return
    points, problems = _points(v.cells)
    yield from problems
    partial = bool(v.cells.model_fields_set & set(PRODUCT)) and not all(
        getattr(v.cells, k) is not None for k in PRODUCT)         # Cells.rules names it
    if not points and not partial:
        yield Problem(("cells",), "the matrix has no cell",
                      hint="give capacities, mechanisms and reclaims, or [[cells.extra]] entries")
    seen: set[str] = set()
    for p in points:
        if p.key in seen:
            yield Problem(("cells",), f"cell {p.key} is listed twice (product, extra)")
        seen.add(p.key)
    w = v.workload if v.ok("workload") else None
    if w is not None and w.pool is None and w.trace not in PRESET_POOLS:
        for p in points:
            if p.capacity.kind == "pool":
                yield Problem(("workload", "pool"), f"missing: capacity {p.capacity.text} is "
                              "relative to the pool and the trace is a file",
                              hint='give the pool size, e.g. pool = "1447G" (the K3 pool, 1.45 TB)')
                break


def _engine_points(eng: EngineConfig) -> list[Point]:
    """The cells of an engine matrix: per prompt and arm the admit and the nocache cell."""
    return [Point(Capacity(format_size(c.capacity_bytes), "abs", c.capacity_bytes), c.mechanism,
                  ENGINE_RECLAIM, c.mode, repetitions=eng.pairs, engine=c.name)
            for c in eng.cells()]


# loading ------------------------------------------------------------------------------------------

def _shipped():
    return resources.files("bench").joinpath("data", "matrices")


def shipped_names() -> list[str]:
    d = _shipped()
    return sorted(p.name[:-5] for p in d.iterdir() if p.name.endswith(".toml"))


def load_matrix(ref: str | Path, scale: str | None = None) -> Matrix:
    """A shipped matrix by name, or a matrix file by path; with `scale`, its [scale.NAME]
    applied (the result is validated like any matrix)."""
    ref_s = str(ref)
    names = shipped_names()
    if ref_s in names:
        f = _shipped().joinpath(f"{ref_s}.toml")
        source, text = f"matrix {ref_s} (bench/data/matrices/{ref_s}.toml)", f.read_text()
    else:
        p = Path(ref_s)
        if not p.is_file():
            raise MatrixError(f"no matrix {ref_s!r}: neither a shipped name nor a file",
                              f"shipped matrices: {', '.join(names)}; or give a path to a TOML "
                              "file")
        try:
            text = p.read_text()
        except OSError as exc:
            raise MatrixError(f"{p}: cannot read: {exc.strerror}") from None
        source = str(p)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError(f"{source}: not valid TOML: {exc}") from None
    doc, m = _parse(data, source)
    # the name and every scale validate whenever the matrix is loaded, all problems at once
    problems = [Problem(("name",), f"{m.name!r} differs from the file name", source=source)
                ] if ref_s in names and m.name != ref_s else []
    scaled = {}
    for name in m.scales:
        try:
            scaled[name] = parse_matrix(_scaled(data, name, source, doc.scale[name]),
                                        f"{source} at scale {name}")
        except SchemaError as exc:
            problems += exc.problems
    if problems:
        raise MatrixFileError(problems)
    if scale is None:
        return m
    if scale not in scaled:
        apply_scale(data, scale, source)        # raises: no such scale, naming the ones there are
    sc = doc.scale[scale]
    cmap = tuple((parse_capacity(k)[0], parse_capacity(v)[0]) for k, v in sc.capacities.items())
    boots = () if sc.balloon_overhead is None else _balloon_boots(scaled[scale], cmap, sc)
    return replace(scaled[scale], scale=scale, scales=m.scales, scale_memory=sc.memory,
                   full_workload=dict(m.workload), capacity_map=cmap, balloon_boots=boots,
                   balloon_overhead=sc.balloon_overhead)


def _balloon_boots(m: Matrix, cmap: tuple, sc: Scale) -> tuple[tuple[str, int], ...]:
    try:
        return balloon_boots(cmap, {p.capacity.text for p in m.points
                                    if p.mechanism == "balloon"}, int(sc.balloon_overhead or 0))
    except ValueError as exc:
        raise MatrixError(f"{m.source}: {exc}") from None


def list_matrices() -> list[dict]:
    out = []
    for n in shipped_names():
        m = load_matrix(n)
        out.append({"name": m.name, "description": m.description, "reference": m.reference,
                    "points": len(m.points), "repetitions": m.repetitions,
                    "hosts": m.as_dict()["hosts"]})
    return out
