"""Matrices: a named set of cells with repetitions, ordering rules and host constraints (TOML).
Loading and validation here; expansion onto hosts in bench.matrix.expand.

Pure except for reading the file. `load_matrix(ref)` takes a shipped name (bench/data/matrices/
NAME.toml: capacity, reclaim, equal-memory, prefetch, admission, smoke) or a path to a user file,
and validates every key: a missing or unknown key, a wrong type or a value outside its allowed set
is a MatrixError naming the file, the dotted key and the allowed values. `expand(matrix, hosts)`
turns it, for a set of inventory hosts, into run requests for `bench.matrix.schedule.schedule` plus the
cells it had to skip on some host, each with its reason (never silently dropped).

Schema (see the shipped files for commented examples):

    name = "reclaim"                 # a-z, 0-9, '-'; equals the file stem for shipped matrices
    description = "..."
    reference = "paper §5, Fig. 3"   # optional, free text
    repetitions = 3                  # runs per cell and host (>= 1)
    memboot_overhead = "9G"          # optional: mem= of a memboot cell is C + this (default 9G)
    mglru_at_boot = false            # optional: MGLRU set by a boot (bench.lru_gen=) not at run time
    [workload]  trace = "k3" (synth preset k3|qwen3|dsv3|tiny, or a JSONL path), domain = "prose",
                batch = 1, pool = "1347G" (optional size; needed for `pool` capacities when the
                trace is a file), passes = 2, fixed_set_bytes = N (optional); for a synth
                preset also layers, experts, expert_bytes, tokens (the preset's geometry changed)
    [order]     randomize = true, interleave_reps = true
    [hosts]     tags = "any" | { machine = ["A", "B"] }, placement = "each" | "one"
    [estimate]  run_seconds = 900, reboot_seconds = 600
    [protocol]  cgroup_headroom = "6G" (memory.max = C + this; the paper's Algorithm 1),
                balloon_max = "2G" (optional cap on what a balloon may lock)
    [cells]     capacities = ["64G", "0.044pool", "0.5mem"], mechanisms = [...], reclaims = [...],
                modes = ["pagecache"], prefetch = ["none", "oracle-advice", ...],
                exclude = [{ capacity = "64G", mechanism = "memboot" }, ...]
    [[cells.extra]]  cell = "448G-cgroup-mglru"  (or capacity/mechanism/reclaim/mode/prefetch),
                     optional tags, placement, repetitions

Capacities: absolute (`64G`, binary units as cgroups take them), relative to the pool
(`0.044pool`: that fraction of the workload's pool bytes) or to the host's memory (`0.5mem`: of
its inventory memory.total); they resolve per host in bench.matrix.expand.

Scales: a `[scale.NAME]` table re-sizes the same matrix for smaller hosts (`bench schedule
--scale lab`): `capacities = { "64G" = "0.133mem", ... }` maps every absolute capacity the
matrix writes (in cells.capacities, exclude and extra, cell names included) to the one used at
that scale, and `repetitions`, `memboot_overhead`, `description` and the tables `workload`,
`protocol`, `estimate`, `order`, `hosts` override what they name. The scaled matrix is validated
as a whole, like any other; an absolute capacity without a mapping is an error, so a scale
never runs a production-sized cell by accident.

End-to-end engine matrices (bench.matrix.engine, docs/engine.md) carry an `[engine]` table instead of
`[cells]` (and neither `repetitions` nor a required `[workload]`): one cell per prompt and
policy (e2e-prose-admit, e2e-prose-nocache, ...), engine.pairs pairs per prompt. Both cells of a
prompt share one unit (so a pair stays on one host) and each request carries `pair` = (prompt,
policy): the scheduler keeps the two runs of a pair adjacent, in the balanced order.
"""

from __future__ import annotations

import itertools
import re
import tomllib
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from bench.matrix.cells import (DELIVERIES, ENGINE_RECLAIM, MECHANISMS, MODES, RECLAIMS, Cell,
                                parse_cell)
from bench.matrix.engine import EngineConfig, parse_engine
from bench.errors import InputError
from bench.units import format_size, parse_size
import copy

MIB = 1 << 20
PLACEMENTS = ("each", "one")
PRESET_GEOMETRY = {  # (layers, experts_per_layer, expert_bytes) of bench.trace.synth.PRESETS
    "k3": (92, 896, 17_550_000), "qwen3": (48, 128, 2_864_583),
    "dsv3": (58, 256, 44_040_192), "tiny": (4, 32, 65_536),
}
PRESET_POOLS = {k: a * b * c for k, (a, b, c) in PRESET_GEOMETRY.items()}
DEFAULT_MEMBOOT_OVERHEAD = 9 << 30
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
_REL = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(pool|mem)\s*$")


class MatrixError(InputError):
    """A matrix file that does not validate; names the file, the key and the allowed values."""


# the matrix ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Capacity:
    text: str
    kind: str           # abs | pool | mem
    value: float        # bytes (abs) or fraction

    def resolve(self, pool_bytes: int | None, mem_total: int | None) -> tuple[int | None, str]:
        """Bytes rounded down to a MiB, or (None, why not)."""
        if self.kind == "abs":
            raw = int(self.value)
        elif self.kind == "pool":
            if pool_bytes is None:
                return None, "pool size unknown (set workload.pool)"
            raw = int(self.value * pool_bytes)
        else:
            if mem_total is None:
                return None, f"{self.text} needs the host's memory.total in its inventory file"
            raw = int(self.value * mem_total)
        b = raw // MIB * MIB
        if b <= 0:
            return None, f"{self.text} resolves to less than 1 MiB"
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
            "hosts": {"tags": "any" if self.tags is None else {k: list(v) for k, v in self.tags},
                      "placement": self.placement},
            "memboot_overhead": format_size(self.memboot_overhead),
            "mglru_at_boot": self.mglru_at_boot,
            "estimate": {"run_seconds": self.run_seconds, "reboot_seconds": self.reboot_seconds},
            "points": [{"point": p.key, "capacity": p.capacity.text, "mechanism": p.mechanism,
                        "reclaim": p.reclaim, "mode": p.mode, "prefetch": p.prefetch,
                        "repetitions": p.repetitions or self.repetitions,
                        "placement": p.placement or self.placement,
                        "tags": ("any" if (p.tags if p.tags is not None else self.tags) is None
                                 else {k: list(v) for k, v in (p.tags if p.tags is not None
                                                                else self.tags)})}
                       for p in self.points],
        } | ({"engine": self.engine.as_dict()} if self.engine else {})


def workload_pool_bytes(workload: dict) -> int | None:
    """The pool of a workload: its `pool` key, else the (re-sized) synth preset's geometry."""
    if workload.get("pool") is not None:
        return workload["pool"]
    geo = PRESET_GEOMETRY.get(workload.get("trace"))
    if geo is None:
        return None
    layers = workload.get("layers") or geo[0]
    experts = workload.get("experts") or geo[1]
    return layers * experts * (workload.get("expert_bytes") or geo[2])


# scales -------------------------------------------------------------------------------------------

def apply_scale(data: dict, scale: str, source: str) -> dict:
    """The matrix document with its [scale.NAME] applied (see the module doc); pure."""
    c = _C(source)
    scales = data.get("scale")
    if not isinstance(scales, dict) or scale not in scales:
        have = ", ".join(sorted(scales)) if isinstance(scales, dict) and scales else "none"
        raise MatrixError(f"{source}: has no scale {scale!r}", f"its scales: {have}")
    full = f"scale.{scale}"
    sc = scales[scale]
    if not isinstance(sc, dict):
        raise c.fail(full, "must be a table")
    c.keys(sc, full + ".", SCALE)
    out = copy.deepcopy({k: v for k, v in data.items() if k != "scale"})
    caps = c.get(sc, "capacities", f"{full}.capacities", dict, default={})
    mapping: dict[int, str] = {}
    for k, v in caps.items():
        src = c.capacity(k, f"{full}.capacities.{k}")
        if src.kind != "abs":
            raise c.fail(f"{full}.capacities.{k}", "only absolute capacities are mapped",
                         "relative ones (pool, mem) already scale with the host")
        c.capacity(v, f"{full}.capacities.{k}")       # validates the target
        mapping[int(src.value)] = v

    def scaled(text: Any, where: str) -> Any:
        if not isinstance(text, str) or _REL.match(text):
            return text
        b = c.capacity(text, where).value
        if int(b) not in mapping:
            raise c.fail(f"{full}.capacities", f"has no entry for {text} (used at {where})",
                         f'map it, e.g. "{text}" = "0.1mem"')
        return mapping[int(b)]
    cells = out.get("cells")
    if isinstance(cells, dict):
        if isinstance(cells.get("capacities"), list):
            cells["capacities"] = [scaled(x, f"cells.capacities[{i}]")
                                   for i, x in enumerate(cells["capacities"])]
        for key in ("exclude", "extra"):
            for i, x in enumerate(cells.get(key) or []):
                if not isinstance(x, dict):
                    continue
                if "capacity" in x:
                    x["capacity"] = scaled(x["capacity"], f"cells.{key}[{i}].capacity")
                if key == "extra" and isinstance(x.get("cell"), str):
                    try:
                        cell = parse_cell(x.pop("cell").lower())
                    except InputError as exc:
                        raise c.fail(f"cells.extra[{i}].cell", exc.message, exc.hint) from None
                    x.update(capacity=scaled(format_size(cell.capacity_bytes),
                                             f"cells.extra[{i}].cell"),
                             mechanism=cell.mechanism, reclaim=cell.reclaim, mode=cell.mode,
                             prefetch=cell.prefetch)
    for k in ("description", "repetitions", "memboot_overhead"):
        if k in sc:
            out[k] = sc[k]
    for k in ("workload", "protocol", "estimate", "order", "hosts"):
        if k in sc:
            t = c.get(sc, k, f"{full}.{k}", dict)
            base = out.get(k) if isinstance(out.get(k), dict) else {}
            if k == "workload" and "trace" in t and t["trace"] != base.get("trace"):
                base = {kk: vv for kk, vv in base.items() if kk not in SYNTH_GEOMETRY + ("pool",)}
            out[k] = {**base, **t}
    return out


# validation ---------------------------------------------------------------------------------------

_TYPES = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
          list: "a list", dict: "a table"}
TOP = ("name", "description", "reference", "workload", "repetitions", "order", "hosts", "cells",
       "memboot_overhead", "mglru_at_boot", "estimate", "protocol", "scale", "engine")
SYNTH_GEOMETRY = ("layers", "experts", "expert_bytes", "tokens")
WORKLOAD = ("trace", "domain", "batch", "pool", "passes", "fixed_set_bytes") + SYNTH_GEOMETRY
PROTOCOL = ("cgroup_headroom", "balloon_max")
DEFAULT_CGROUP_HEADROOM = 6 << 30
SCALE = ("description", "repetitions", "memboot_overhead", "capacities", "workload", "protocol",
         "estimate", "order", "hosts")
ORDER = ("randomize", "interleave_reps")
HOSTS = ("tags", "placement")
ESTIMATE = ("run_seconds", "reboot_seconds")
CELLS = ("capacities", "mechanisms", "reclaims", "modes", "prefetch", "exclude", "extra")
AXES = ("capacity", "mechanism", "reclaim", "mode", "prefetch")
EXTRA = ("cell",) + AXES + ("tags", "placement", "repetitions")


class _C:
    def __init__(self, source: str):
        self.source = source

    def fail(self, key: str, msg: str, hint: str | None = None) -> MatrixError:
        return MatrixError(f"{self.source}: key '{key}': {msg}", hint)

    def keys(self, data: dict, prefix: str, allowed: Sequence[str]) -> None:
        for k in data:
            if k not in allowed:
                raise self.fail(prefix + k, "unknown key", "allowed keys: " + ", ".join(allowed))

    def get(self, data: dict, key: str, full: str, kind, required=False, default=None,
            choices: Sequence[str] | None = None):
        if key not in data:
            if required:
                raise self.fail(full, "missing (required)",
                                f"allowed values: {', '.join(choices)}" if choices else None)
            return default
        v = data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if (isinstance(v, bool) and bool not in kinds) or not isinstance(v, kinds):
            raise self.fail(full, f"must be {' or '.join(_TYPES[k] for k in kinds)}, "
                                  f"got {type(v).__name__} {v!r}")
        if choices is not None and v not in choices:
            raise self.fail(full, f"{v!r} is not allowed", f"allowed values: {', '.join(choices)}")
        return v

    def table(self, data: dict, key: str, allowed: Sequence[str]) -> dict:
        t = self.get(data, key, key, dict, default={})
        self.keys(t, key + ".", allowed)
        return t

    def strlist(self, data: dict, key: str, full: str, choices=None, default=None) -> list[str]:
        v = self.get(data, key, full, list, default=default)
        if v is None:
            raise self.fail(full, "missing (required)",
                            f"allowed values: {', '.join(choices)}" if choices else None)
        if not v:
            raise self.fail(full, "must not be empty")
        for i, x in enumerate(v):
            if not isinstance(x, str):
                raise self.fail(f"{full}[{i}]", f"must be a string, got {x!r}")
            if choices is not None and x not in choices:
                raise self.fail(f"{full}[{i}]", f"{x!r} is not allowed",
                                f"allowed values: {', '.join(choices)}")
        if len(set(v)) != len(v):
            raise self.fail(full, "lists a value twice")
        return v

    def size(self, data: dict, key: str, full: str, default=None) -> int | None:
        raw = self.get(data, key, full, (str, int), default=None)
        if raw is None:
            return default
        try:
            return parse_size(raw, full)
        except InputError as exc:
            raise self.fail(full, exc.message, exc.hint) from None

    def capacity(self, text: Any, full: str) -> Capacity:
        if not isinstance(text, str):
            raise self.fail(full, f"must be a string like \"64G\", \"0.044pool\" or \"0.5mem\", "
                                  f"got {text!r}")
        m = _REL.match(text)
        if m:
            frac = float(m.group(1))
            top = 1.0 if m.group(2) == "mem" else 10.0
            if not 0 < frac <= top:
                raise self.fail(full, f"fraction {frac} of {m.group(2)} is out of range",
                                f"allowed: 0 < fraction <= {top:g}")
            return Capacity(text.strip(), m.group(2), frac)
        try:
            b = parse_size(text, full)
        except InputError:
            raise self.fail(full, f"{text!r} is not a capacity",
                            "write an absolute size (64G, 768M; binary units), a fraction of the "
                            "pool (0.044pool) or of the host's memory (0.5mem)") from None
        if b < MIB:
            raise self.fail(full, f"{text!r} is below 1 MiB")
        return Capacity(format_size(b // MIB * MIB), "abs", b // MIB * MIB)

    def prefetch(self, text: str, full: str) -> str:
        if text == "none":
            return text
        hints, _, delivery = text.rpartition("-")
        try:
            Cell(1, "none", "classic", "pagecache", hints or None, delivery or None)
        except InputError as exc:
            raise self.fail(full, f"{text!r}: {exc.message}",
                            "write none or <hints>-<delivery> (oracle-advice, pilot-block ...); "
                            f"deliveries: {', '.join(DELIVERIES)}") from None
        return text

    def tags(self, raw: Any, full: str) -> tuple | None:
        if raw == "any":
            return None
        if not isinstance(raw, dict) or not raw:
            raise self.fail(full, f"must be \"any\" or a table tag = [values], got {raw!r}",
                            'e.g. tags = { machine = ["A", "B"] }')
        out = []
        for k, v in raw.items():
            vals = [v] if isinstance(v, str) else v
            if not isinstance(vals, list) or not vals or not all(isinstance(x, str) for x in vals):
                raise self.fail(f"{full}.{k}", f"must be a string or a list of strings, got {v!r}")
            out.append((k, tuple(vals)))
        return tuple(out)


def parse_matrix(data: dict, source: str) -> Matrix:
    """Validate one parsed TOML document (`source` names it in messages)."""
    c = _C(source)
    c.keys(data, "", TOP)
    name = c.get(data, "name", "name", str, required=True)
    if not NAME_RE.match(name):
        raise c.fail("name", f"{name!r} is not a valid matrix name",
                     "use 1-32 of a-z, 0-9 and '-' (it becomes part of run ids)")
    description = c.get(data, "description", "description", str, required=True)
    reference = c.get(data, "reference", "reference", str, default="")
    is_engine = "engine" in data
    for k in ("repetitions", "cells"):
        if is_engine and k in data:
            raise c.fail(k, "not allowed in an engine matrix",
                         "engine.pairs sets the pairs per prompt, engine.prompts the cells")
    reps = c.get(data, "repetitions", "repetitions", int, required=not is_engine, default=1)
    if reps < 1:
        raise c.fail("repetitions", f"must be at least 1, got {reps}")
    overhead = c.size(data, "memboot_overhead", "memboot_overhead", DEFAULT_MEMBOOT_OVERHEAD)
    mglru_at_boot = c.get(data, "mglru_at_boot", "mglru_at_boot", bool, default=False)

    w = c.table(data, "workload", WORKLOAD)
    if is_engine and "workload" not in data:
        w = {"trace": "engine"}         # the engine loads its own model
    elif "workload" not in data:
        raise c.fail("workload", "missing (required)", "a table with trace, domain, batch")
    trace = c.get(w, "trace", "workload.trace", str, required=True)
    workload = {"trace": trace,
                "domain": c.get(w, "domain", "workload.domain", str, default=None),
                "batch": c.get(w, "batch", "workload.batch", int, default=1),
                "pool": c.size(w, "pool", "workload.pool"),
                "passes": c.get(w, "passes", "workload.passes", int, default=2),
                "fixed_set_bytes": c.get(w, "fixed_set_bytes", "workload.fixed_set_bytes", int,
                                         default=None)}
    for k in SYNTH_GEOMETRY:
        if k not in w:
            continue
        if trace not in PRESET_POOLS:
            raise c.fail(f"workload.{k}", "only a synth preset trace can be re-sized",
                         "drop it, or use a preset: " + ", ".join(PRESET_POOLS))
        v = (c.size(w, k, f"workload.{k}") if k == "expert_bytes"
             else c.get(w, k, f"workload.{k}", int))
        if v < (32 if k == "expert_bytes" else 1):
            raise c.fail(f"workload.{k}", f"too small: {v}")
        workload[k] = v
    if trace not in PRESET_POOLS and not re.search(r"[/.]", trace) and not is_engine:
        raise c.fail("workload.trace", f"{trace!r} is neither a synth preset nor a file path",
                     f"allowed values: {', '.join(PRESET_POOLS)}, or a path to a JSONL trace")
    if workload["batch"] < 1:
        raise c.fail("workload.batch", f"must be at least 1, got {workload['batch']}")
    if workload["passes"] < 2:
        raise c.fail("workload.passes", f"must be at least 2 (warm-up + measured), "
                                        f"got {workload['passes']}")

    o = c.table(data, "order", ORDER)
    randomize = c.get(o, "randomize", "order.randomize", bool, default=True)
    interleave = c.get(o, "interleave_reps", "order.interleave_reps", bool, default=True)

    h = c.table(data, "hosts", HOSTS)
    tags = c.tags(h.get("tags", "any"), "hosts.tags")
    placement = c.get(h, "placement", "hosts.placement", str, default="each", choices=PLACEMENTS)

    e = c.table(data, "estimate", ESTIMATE)
    est = {}
    for k, d in (("run_seconds", 900.0), ("reboot_seconds", 600.0)):
        v = c.get(e, k, f"estimate.{k}", (int, float), default=d)
        if v < 0:
            raise c.fail(f"estimate.{k}", f"must not be negative, got {v}")
        est[k] = float(v)

    pr = c.table(data, "protocol", PROTOCOL)
    protocol = {"cgroup_headroom": c.size(pr, "cgroup_headroom", "protocol.cgroup_headroom",
                                          DEFAULT_CGROUP_HEADROOM),
                "balloon_max": c.size(pr, "balloon_max", "protocol.balloon_max")}
    scales = c.get(data, "scale", "scale", dict, default={})

    cells = c.table(data, "cells", CELLS)
    if "cells" not in data and not is_engine:
        raise c.fail("cells", "missing (required)", "a table with capacities, mechanisms, ...")
    points: list[Point] = []
    if "capacities" in cells or "mechanisms" in cells or "reclaims" in cells:
        caps = [c.capacity(x, f"cells.capacities[{i}]")
                for i, x in enumerate(c.strlist(cells, "capacities", "cells.capacities"))]
        if len({x.text for x in caps}) != len(caps):
            raise c.fail("cells.capacities", "lists the same capacity twice")
        mechs = c.strlist(cells, "mechanisms", "cells.mechanisms", MECHANISMS)
        recl = c.strlist(cells, "reclaims", "cells.reclaims", RECLAIMS)
        modes = c.strlist(cells, "modes", "cells.modes", MODES, default=["pagecache"])
        pref = [c.prefetch(x, f"cells.prefetch[{i}]") for i, x in
                enumerate(c.strlist(cells, "prefetch", "cells.prefetch", default=["none"]))]
        points = [Point(*t) for t in itertools.product(caps, mechs, recl, modes, pref)]
    elif "exclude" in cells:
        raise c.fail("cells.exclude", "without a product (capacities x mechanisms x reclaims)")

    excl = c.get(cells, "exclude", "cells.exclude", list, default=[])
    for i, x in enumerate(excl):
        full = f"cells.exclude[{i}]"
        if not isinstance(x, dict) or not x:
            raise c.fail(full, "must be a non-empty table of axis = value",
                         f"axes: {', '.join(AXES)}")
        c.keys(x, full + ".", AXES)
        want = {}
        for k, v in x.items():
            if not isinstance(v, str):
                raise c.fail(f"{full}.{k}", f"must be a string, got {v!r}")
            want[k] = c.capacity(v, f"{full}.{k}").text if k == "capacity" else v
        keep = [p for p in points if not all(
            (p.capacity.text if k == "capacity" else getattr(p, k)) == v for k, v in want.items())]
        if len(keep) == len(points):
            raise c.fail(full, f"matches no cell of the product: {want}",
                         "check the spelling against cells.capacities, mechanisms, ...")
        points = keep

    extras = c.get(cells, "extra", "cells.extra", list, default=[])
    for i, x in enumerate(extras):
        full = f"cells.extra[{i}]"
        if not isinstance(x, dict):
            raise c.fail(full, "must be a table", f"keys: {', '.join(EXTRA)}")
        c.keys(x, full + ".", EXTRA)
        if "cell" in x:
            if any(k in x for k in AXES):
                raise c.fail(full, "give either cell = NAME or the axes, not both")
            try:
                cell = parse_cell(c.get(x, "cell", f"{full}.cell", str).lower())
            except InputError as exc:
                raise c.fail(f"{full}.cell", exc.message, exc.hint) from None
            axes = {"capacity": Capacity(format_size(cell.capacity_bytes), "abs",
                                         cell.capacity_bytes),
                    "mechanism": cell.mechanism, "reclaim": cell.reclaim, "mode": cell.mode,
                    "prefetch": cell.prefetch}
        else:
            axes = {"capacity": c.capacity(c.get(x, "capacity", f"{full}.capacity", str,
                                                 required=True), f"{full}.capacity"),
                    "mechanism": c.get(x, "mechanism", f"{full}.mechanism", str, required=True,
                                       choices=MECHANISMS),
                    "reclaim": c.get(x, "reclaim", f"{full}.reclaim", str, required=True,
                                     choices=RECLAIMS),
                    "mode": c.get(x, "mode", f"{full}.mode", str, default="pagecache",
                                  choices=MODES),
                    "prefetch": c.prefetch(c.get(x, "prefetch", f"{full}.prefetch", str,
                                                 default="none"), f"{full}.prefetch")}
        r = c.get(x, "repetitions", f"{full}.repetitions", int, default=None)
        if r is not None and r < 1:
            raise c.fail(f"{full}.repetitions", f"must be at least 1, got {r}")
        points.append(Point(**axes,
                            tags=c.tags(x["tags"], f"{full}.tags") if "tags" in x else None,
                            placement=c.get(x, "placement", f"{full}.placement", str,
                                            choices=PLACEMENTS),
                            repetitions=r))
    engine = None
    if is_engine:
        engine, points = _engine_points(c, data, mglru_at_boot)
        reps = engine.pairs
    if not points:
        raise c.fail("cells", "the matrix has no cell",
                     "give capacities, mechanisms and reclaims, or [[cells.extra]] entries")
    seen = {}
    for p in points:
        if p.key in seen:
            raise c.fail("cells", f"cell {p.key} is listed twice (product, extra)")
        seen[p.key] = p
    for p in points:
        if p.capacity.kind == "pool" and workload["pool"] is None and trace not in PRESET_POOLS:
            raise c.fail("workload.pool", f"missing: capacity {p.capacity.text} is relative to "
                                          "the pool and the trace is a file",
                         'give the pool size, e.g. pool = "1347G"')
    return Matrix(name=name, description=description, source=source, workload=workload,
                  repetitions=reps, randomize=randomize, interleave=interleave, tags=tags,
                  placement=placement, memboot_overhead=overhead, mglru_at_boot=mglru_at_boot,
                  run_seconds=est["run_seconds"], reboot_seconds=est["reboot_seconds"],
                  points=tuple(points), reference=reference, protocol=protocol,
                  scales=tuple(sorted(scales)), engine=engine)


def _engine_points(c: _C, data: dict, mglru_at_boot: bool) -> tuple[EngineConfig, list[Point]]:
    """The [engine] table and its cells: per prompt the admit and the nocache cell."""
    if mglru_at_boot:
        raise c.fail("mglru_at_boot", "an engine matrix leaves reclaim as the host runs it")
    try:
        eng = parse_engine(data["engine"], c.source)
    except InputError as exc:
        raise MatrixError(exc.message, exc.hint) from None
    return eng, [Point(Capacity("0", "abs", 0), cell.mechanism, ENGINE_RECLAIM, cell.mode,
                       repetitions=eng.pairs, engine=cell.name) for cell in eng.cells()]


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
                              f"shipped matrices: {', '.join(names)}; or give a path to a TOML file")
        try:
            text = p.read_text()
        except OSError as exc:
            raise MatrixError(f"{p}: cannot read: {exc.strerror}") from None
        source = str(p)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise MatrixError(f"{source}: not valid TOML: {exc}") from None
    m = parse_matrix(data, source)
    if ref_s in names and m.name != ref_s:
        raise MatrixError(f"{source}: key 'name': {m.name!r} differs from the file name")
    # every scale validates whenever the matrix is loaded (an unknown one says which exist)
    scaled = {name: parse_matrix(apply_scale(data, name, source), f"{source} at scale {name}")
              for name in m.scales}
    if scale is None:
        return m
    if scale not in scaled:
        apply_scale(data, scale, source)        # raises: no such scale, naming the ones there are
    return replace(scaled[scale], scale=scale, scales=m.scales)


def list_matrices() -> list[dict]:
    out = []
    for n in shipped_names():
        m = load_matrix(n)
        out.append({"name": m.name, "description": m.description, "reference": m.reference,
                    "points": len(m.points), "repetitions": m.repetitions,
                    "hosts": m.as_dict()["hosts"]})
    return out
