"""The TOML documents bench reads, as pydantic models, and how their problems are reported. Here:
the shared machinery and the tables of a matrix file; the root MatrixFile is in bench.matrix.load
(next to the Matrix it builds), the [engine] table in bench.matrix.engine_cells, the inventory's
host file in bench.hosts.inventory_schema. Every key is spelled once, in a model: the JSON Schema
(`bench schema inventory|matrix|engine`) and the "unknown key" messages come from the models, the
allowed values from the tuples of bench.matrix.cells and bench.hosts.inventory_schema (as Literal
types, so the JSON Schema shows enums).

Validation reports every problem of a document at once:
- pydantic checks the shape, the types (strict: a TOML string is never an integer), the allowed
  values and the per-value rules (sizes through bench.units.parse_size: decimal K/M/G/T as the
  paper writes capacities, binary Ki/Mi/Gi/Ti; capacities, cell names, placeholders...) and
  the limits of bench.matrix.limits, and collects all of them;
- then the cross-field rules (a table's `rules`) run on what did validate (a `View`): a rule
  whose inputs failed is skipped, not reported a second time.
`collect` turns both into `Problem`s in bench's wording (never pydantic's English or URLs);
`SchemaError` renders them one a line, `FILE: key 'dotted.key': problem (allowed values: ...)`,
the first line being the first problem, complete on its own. Pure: no I/O.
"""

import json
import re
import typing
from dataclasses import dataclass, replace
from types import UnionType
from typing import (Annotated, Any, ClassVar, Iterable, Iterator, Literal, Sequence, TypeGuard,
                    Union, get_args, get_origin)

import annotated_types as at
from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, PlainValidator, ValidationError,
                      ValidationInfo, WithJsonSchema, field_validator, model_validator)
from pydantic_core import ErrorDetails, PydanticCustomError

from bench.errors import InputError
from bench.matrix.cells import (DELIVERIES, MECHANISMS, RECLAIMS, Cell, Mechanism, Mode, Reclaim,
                                parse_cell)
from bench.matrix.limits import Repetitions
from bench.units import MB, format_size, parse_size

Placement = Literal["each", "one"]
PLACEMENTS: tuple[str, ...] = get_args(Placement)
PRESET_GEOMETRY = {  # (layers, experts_per_layer, expert_bytes) of bench.trace.synth.PRESETS
    "k3": (92, 896, 17_550_000), "qwen3": (48, 128, 2_864_583),
    "dsv3": (58, 256, 44_040_192), "tiny": (4, 32, 65_536),
}
PRESET_POOLS = {k: a * b * c for k, (a, b, c) in PRESET_GEOMETRY.items()}
DEFAULT_MEMBOOT_OVERHEAD = 9 * 10 ** 9     # 9G: the paper's mem= boot showed 102 GB for C = 93 GB
DEFAULT_CGROUP_HEADROOM = 6 << 30          # 6Gi: Algorithm 1's scope headroom, binary as written
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
RELATIVE_CAPACITY = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(pool|mem)\s*$")
Loc = tuple[str | int, ...]


# problems -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Problem:
    """One problem of one document: where (`loc`, rendered as a dotted key), what, the allowed
    values or keys when there is a set, and how to fix it."""
    loc: Loc
    message: str
    allowed: tuple[str, ...] = ()
    hint: str | None = None
    source: str = ""
    listing: str = "allowed values"

    @property
    def key(self) -> str:
        out = ""
        for part in self.loc:
            out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
        return out

    @property
    def text(self) -> str:
        if not self.allowed:
            return self.message
        listing = f"{self.listing}: {', '.join(self.allowed)}"
        if self.message.endswith(")"):        # "missing (required)" -> "missing (required; ...)"
            return f"{self.message[:-1]}; {listing})"
        return f"{self.message} ({listing})"

    def line(self) -> str:
        where = f"{self.source}: " if self.source else ""
        return f"{where}key '{self.key}': {self.text}" if self.loc else f"{where}{self.text}"

    def as_dict(self) -> dict:
        return {"key": self.key, "problem": self.text, "allowed": list(self.allowed),
                "hint": self.hint}


class SchemaError(InputError):
    """Every problem of a document, one a line (the first line is the first problem, complete
    on its own); `problems` keeps them. Subclassed per document with MatrixError,
    EngineConfigError or InventoryError, so callers catch what they caught before."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = tuple(problems)
        if len(self.problems) == 1:
            hint = self.problems[0].hint
        else:
            hint = "\n".join(f"key '{p.key}': {p.hint}" for p in self.problems if p.hint) or None
        super().__init__("\n".join(p.line() for p in self.problems), hint)


def bad(message: str, *, allowed: Iterable[str] = (), hint: str | None = None,
        at: Loc = ()) -> PydanticCustomError:
    """A validator's complaint in bench's words (`at`: a key below the value checked)."""
    return many([Problem(at, message, tuple(allowed), hint)])


def many(problems: Sequence[Problem]) -> PydanticCustomError:
    """Several complaints of one validator at once (their locs relative to the value)."""
    return PydanticCustomError("bench", "{message}", {"message": problems[0].message,
                                                      "problems": tuple(problems)})


def _got(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


_WHAT = {"int_type": "an integer", "string_type": "a string", "float_type": "a number",
         "bool_type": "true or false", "list_type": "a list", "tuple_type": "a list",
         "dict_type": "a table", "model_type": "a table", "model_attributes_type": "a table"}


def _strip(tp: Any) -> Any:
    """The type under Annotated[...] and Optional[...]."""
    while True:
        origin = get_origin(tp)
        if origin is Annotated:
            tp = get_args(tp)[0]
        elif origin in (Union, UnionType):
            arms = [a for a in get_args(tp) if a is not type(None)]
            if len(arms) != 1:
                return tp
            tp = arms[0]
        else:
            return tp


def _is_model(tp: Any) -> TypeGuard[type[BaseModel]]:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _type_at(root: type[BaseModel], loc: Loc) -> Any:
    """The declared type at a location of a document (None when it cannot be told)."""
    tp: Any = root
    for part in loc:
        tp = _strip(tp)
        if _is_model(tp):
            field = tp.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return None
            tp = field.annotation
        elif get_origin(tp) in (list, tuple) and get_args(tp):
            tp = get_args(tp)[0]
        elif get_origin(tp) is dict and get_args(tp):
            tp = get_args(tp)[1]
        else:
            return None
    return _strip(tp)


def _choices(root: type[BaseModel], loc: Loc) -> tuple[str, ...]:
    tp = _type_at(root, loc)
    return tuple(str(a) for a in get_args(tp)) if get_origin(tp) is Literal else ()


def _translate(err: ErrorDetails, root: type[BaseModel]) -> list[Problem]:
    """One pydantic error in bench's words."""
    loc = tuple(p for p in err["loc"] if p != "[key]")       # a dict key: the key is the loc
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    if kind == "bench":
        return [replace(p, loc=loc + p.loc) for p in ctx["problems"]]
    if kind == "missing":
        model, key = _type_at(root, loc[:-1]), loc[-1]
        field = model.model_fields.get(key) if _is_model(model) and isinstance(key, str) else None
        hint = (f"e.g. {loc[-1]} = {json.dumps(field.examples[0])}"
                if field is not None and field.examples else None)
        return [Problem(loc, "missing (required)", _choices(root, loc), hint)]
    if kind == "extra_forbidden":
        model = _type_at(root, loc[:-1])
        keys = tuple(model.model_fields) if _is_model(model) else ()
        return [Problem(loc, "unknown key", keys, listing="allowed keys")]
    if kind == "literal_error":
        return [Problem(loc, f"{value!r} is not allowed", _choices(root, loc))]
    if kind in _WHAT:
        return [Problem(loc, f"must be {_WHAT[kind]}, got {_got(value)}")]
    if kind == "greater_than_equal":
        low = ctx["ge"]
        return [Problem(loc, "must not be negative, got " + repr(value) if low == 0
                        else f"must be at least {low}, got {value!r}")]
    if kind == "less_than_equal":
        return [Problem(loc, f"must be at most {ctx['le']}, got {value!r}", hint=ctx.get("hint"))]
    if kind in ("too_short", "string_too_short"):
        return [Problem(loc, "must not be empty")]
    return [Problem(loc, f"is not valid ({kind.replace('_', ' ')}), got {_got(value)}")]


# partial documents --------------------------------------------------------------------------------

class _Skip(Exception):
    """A rule read a field that failed validation: the rest of that rule set is skipped."""


class View:
    """The fields of one table that validated, even when the document as a whole failed:
    a rule reads them as attributes; `ok(*names)` says whether all of those validated (or took
    their default); reading one that failed raises _Skip."""

    __slots__ = ("_model", "_raw", "_seen")

    def __init__(self, model: type[BaseModel], raw: dict, seen: dict):
        self._model, self._raw, self._seen = model, raw, seen.get(model, {})

    def given(self, name: str) -> bool:
        return name in self._raw

    def ok(self, *names: str) -> bool:
        return all(n in self._seen or (n not in self._raw
                                       and not self._model.model_fields[n].is_required())
                   for n in names)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._seen:
            return self._seen[name]
        if not self.ok(name):
            raise _Skip(name)
        return self._model.model_fields[name].get_default(call_default_factory=True)


class Rule(typing.Protocol):
    """Cross-field rules over a View (`ctx`: the validation context); a callback protocol, not
    a Callable, so that a staticmethod `rules` of a Table is not taken for a method."""

    def __call__(self, v: View, ctx: dict, /) -> Iterable[Problem]: ...


class Table(BaseModel):
    """A TOML table: an unknown key is an error, and values keep their TOML type (strict)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, defer_build=True)
    # cross-field rules of a table that occurs once per document (see View); run by collect
    rules: ClassVar[Rule | None] = None

    @field_validator("*", mode="after")
    @classmethod
    def _record(cls, value: Any, info: ValidationInfo) -> Any:
        """Keep each field that validated, for the rules of a document that failed elsewhere."""
        if info.context is not None:
            info.context["seen"].setdefault(cls, {})[info.field_name] = value
        return value


def _run_rules(model: type[Table], raw: Any, seen: dict, ctx: dict, loc: Loc) -> list[Problem]:
    """The rules of `model` and of its sub-tables (singletons: not list items or dict values)."""
    if not isinstance(raw, dict):
        return []
    out: list[Problem] = []
    if model.rules is not None:
        try:
            out += [replace(p, loc=loc + p.loc) for p in model.rules(View(model, raw, seen), ctx)]
        except _Skip:
            pass
    for name, field in model.model_fields.items():
        sub = _strip(field.annotation)
        if name in raw and isinstance(sub, type) and issubclass(sub, Table):
            out += _run_rules(sub, raw[name], seen, ctx, loc + (name,))
    return out


def collect(model: type[Table], data: Any, *, source: str, prefix: Loc = (),
            context: dict | None = None, rules: Sequence[Rule] = ()) -> tuple[Any, list[Problem]]:
    """Validate `data` against `model`: (the model or None, every problem found). `prefix`
    places the document in its file (the [engine] table alone: ("engine",)); `rules` are
    more rules over the whole document's View."""
    ctx = {"seen": {}, **(context or {})}
    try:
        obj, problems = model.model_validate(data, context=ctx), []
    except ValidationError as exc:
        obj = None
        problems = [p for e in exc.errors(include_url=False) for p in _translate(e, model)]
    problems += _run_rules(model, data, ctx["seen"], ctx, ())
    if isinstance(data, dict):
        for rule in rules:
            try:
                problems += list(rule(View(model, data, ctx["seen"]), ctx))
            except _Skip:
                pass
    return obj, [replace(p, loc=prefix + p.loc, source=source) for p in problems]


# value types --------------------------------------------------------------------------------------

class Documented:
    """JSON Schema keywords added to a type's schema: for editors only (bench validates)."""

    def __init__(self, **keywords: Any):
        self.keywords = keywords

    def __get_pydantic_json_schema__(self, core: Any, handler: Any) -> dict:
        return {**handler(core), **self.keywords}


def _size(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise bad(f"must be a size (a string like \"64G\" or \"6Gi\", or an integer of bytes), "
                  f"got {_got(value)}")
    try:
        return parse_size(value, "", unit_required=isinstance(value, str))   # "16": no unit
    except InputError as exc:
        raise bad(exc.message.strip(), hint=exc.hint) from None


_SIZE_PATTERN = r"^\s*([0-9]+(\.[0-9]+)?|\.[0-9]+)\s*([KMGTkmgt][iI]?\s*[bB]?|[bB])\s*$"
Size = Annotated[int, PlainValidator(_size), WithJsonSchema({
    "anyOf": [{"type": "string", "pattern": _SIZE_PATTERN}, {"type": "integer", "minimum": 0}],
    "description": "decimal units as the paper writes capacities (64G = 64 x 10^9 bytes, 768M), "
                   "binary Ki/Mi/Gi/Ti (6Gi = 6 x 2^30), bytes (4096B, an integer); any case"})]


def parse_capacity(text: Any) -> tuple[str, str, float]:
    """(text, kind, value) of a capacity: ("64G", "abs", its exact bytes; the text canonical,
    bench.units.format_size), ("0.044pool", "pool", 0.044), ("0.5mem", "mem", 0.5); else an
    InputError."""
    if not isinstance(text, str):
        raise InputError(f"must be a string like \"64G\", \"0.044pool\" or \"0.5mem\", "
                         f"got {_got(text)}")
    m = RELATIVE_CAPACITY.match(text)
    if m:
        frac, top = float(m.group(1)), 1.0 if m.group(2) == "mem" else 10.0
        if not 0 < frac <= top:
            raise InputError(f"fraction {frac} of {m.group(2)} is out of range",
                             f"allowed: 0 < fraction <= {top:g}")
        return text.strip(), m.group(2), frac
    try:
        b = parse_size(text, "capacity", unit_required=True)
    except InputError:
        raise InputError(f"{text!r} is not a capacity",
                         "write an absolute size (64G = 64 x 10^9 bytes, 768M; 64Gi for binary), "
                         "a fraction of the pool (0.044pool) or of the host's memory (0.5mem)"
                         ) from None
    if b < MB:
        raise InputError(f"{text!r} is below 1M (10^6 bytes)")
    return format_size(b), "abs", b


def _capacity(value: Any) -> str:
    try:
        return parse_capacity(value)[0]
    except InputError as exc:
        raise bad(exc.message, hint=exc.hint) from None


CapacityText = Annotated[str, PlainValidator(_capacity), WithJsonSchema({
    "type": "string", "pattern": r"^\s*([0-9]+(\.[0-9]+)?|\.[0-9]+)\s*"
                                 r"(([KMGTkmgt][iI]?)?\s*[bB]?|pool|mem)\s*$",
    "description": "absolute (64G = 64 x 10^9 bytes; 64Gi binary), a fraction of the "
                   "workload's pool (0.044pool) or of the host's memory.total (0.5mem)"})]


def _prefetch(text: str) -> str:
    if text != "none":
        hints, _, delivery = text.rpartition("-")
        try:
            Cell(1, "none", "classic", "pagecache", hints or None, delivery or None)
        except InputError as exc:
            raise bad(f"{text!r}: {exc.message}",
                      hint="write none or <hints>-<delivery> (oracle-advice, pilot-block ...); "
                           f"deliveries: {', '.join(DELIVERIES)}") from None
    return text


Prefetch = Annotated[str, AfterValidator(_prefetch), Documented(
    pattern="^(none|[a-z0-9_]{1,32}-(" + "|".join(DELIVERIES) + "))$")]


def _tags(raw: Any) -> tuple | None:
    if raw == "any":
        return None
    if not isinstance(raw, dict) or not raw:
        raise bad(f"must be \"any\" or a table tag = [values], got {raw!r}",
                  hint='e.g. tags = { machine = ["A", "B"] }')
    out = []
    for k, v in raw.items():
        vals = [v] if isinstance(v, str) else v
        if not isinstance(vals, list) or not vals or not all(isinstance(x, str) for x in vals):
            raise bad(f"must be a string or a list of strings, got {v!r}", at=(k,))
        out.append((k, tuple(vals)))
    return tuple(out)


Tags = Annotated[tuple | None, PlainValidator(_tags), WithJsonSchema({"anyOf": [
    {"type": "string", "enum": ["any"]},
    {"type": "object", "minProperties": 1, "additionalProperties": {"anyOf": [
        {"type": "string"}, {"type": "array", "minItems": 1, "items": {"type": "string"}}]}}]})]


def _distinct(message: str = "lists a value twice") -> AfterValidator:
    def check(values: list) -> list:
        if len(set(values)) != len(values):
            raise bad(message)
        return values
    return AfterValidator(check)


def matches(rx: re.Pattern, message: str, hint: str) -> AfterValidator:
    def check(text: str) -> str:
        if not rx.fullmatch(text):
            raise bad(f"{text!r} {message}", hint=hint)
        return text
    return AfterValidator(check)


def no_nul(text: str) -> str:
    if "\0" in text:
        raise bad("contains a NUL byte")
    return text


def _abspath(text: str) -> str:
    if not text.startswith("/"):
        raise bad(f"must be an absolute path, got {text!r}")
    return text


AbsPath = Annotated[str, AfterValidator(_abspath), Documented(pattern="^/")]
PosInt = Annotated[int, at.Ge(1)]


def doc(text: str, value: Any = ..., shown: Any = None, **kw: Any) -> Any:
    """A field: its description (editors show it), its default and, where the TOML writes the
    default differently ("9G", "any"), that spelling for the JSON Schema."""
    extra = dict(kw.pop("json_schema_extra", None) or {})
    if shown is not None:
        extra["default"] = shown
    if "default_factory" in kw:         # a sub-table: its keys say their defaults
        return Field(description=text, json_schema_extra=extra or None, **kw)
    return Field(value, description=text, json_schema_extra=extra or None, **kw)


# the matrix file (module doc of bench.matrix.load) ------------------------------------------------

def _passes(n: int) -> int:
    if n < 2:
        raise bad(f"must be at least 2 (warm-up + measured), got {n}")
    return n


def _cell_name(text: str) -> str:
    try:
        return parse_cell(text).name
    except InputError as exc:
        raise bad(exc.message, hint=exc.hint) from None


HintLabel = Annotated[str, matches(
    re.compile(r"^[a-z0-9_]{1,32}$"), "is not a hint plan label",
    "a label is 1-32 of a-z, 0-9 and _, as in a cell name (...-mypred-advice)")]


class _WorkloadRun(Table):
    trace: str = doc("a synth preset (" + ", ".join(PRESET_POOLS) + ") or a path to a JSONL "
                     "trace", examples=["k3"])
    domain: str | None = doc("the prompt domain the trace stands for (prose, code ...)", None)
    batch: PosInt = doc("sequences decoded together", 1)
    pool: Size | None = doc("the pool's size; needed for `pool` capacities when the trace is a "
                            "file", None)
    passes: Annotated[int, AfterValidator(_passes)] = doc(
        "passes over the trace: a warm-up and at least one measured", 2,
        json_schema_extra={"minimum": 2})
    fixed_set_bytes: int | None = doc("bytes of the fixed (pinned) set, if there is one", None)
    hints: Annotated[dict[HintLabel, Annotated[str, AfterValidator(no_nul),
                                               at.MaxLen(4096)]],
                     at.MaxLen(64)] | None = doc(
        "named hint plan files for prefetch cells: label -> a hint plan file (bench plan "
        "--hints); oracle and pilot (the previous-token predictor) are built in", None)


class Workload(_WorkloadRun):
    """What every run replays; a synth preset may be re-sized (layers ... tokens)."""
    layers: PosInt | None = doc("re-sized preset: routed layers", None)
    experts: PosInt | None = doc("re-sized preset: experts per layer", None)
    expert_bytes: Annotated[Size, at.Ge(32)] | None = doc("re-sized preset: bytes per expert",
                                                           None)
    tokens: PosInt | None = doc("re-sized preset: tokens of the trace", None)

    @staticmethod
    def rules(v: View, ctx: dict) -> Iterator[Problem]:
        if v.ok("trace") and v.trace not in PRESET_POOLS:
            for k in SYNTH_GEOMETRY:
                if v.given(k):
                    yield Problem((k,), "only a synth preset trace can be re-sized",
                                  hint="drop it, or use a preset: " + ", ".join(PRESET_POOLS))


SYNTH_GEOMETRY = tuple(k for k in Workload.model_fields if k not in _WorkloadRun.model_fields)


class Order(Table):
    """The order of the runs."""
    randomize: bool = doc("shuffle the cells within each round (seeded)", True)
    interleave_reps: bool = doc("repetition 0 of every cell before repetition 1 of any", True)


class HostsTable(Table):
    """Which inventory hosts run the cells."""
    tags: Tags = doc('"any", or tag = value(s) the host must carry: { machine = ["A", "B"] }',
                     None, shown="any")
    placement: Placement = doc("each: every matching host runs every cell; one: any one of "
                               "them", "each")


class Estimate(Table):
    """Duration estimates for the plan (seconds)."""
    run_seconds: Annotated[float, at.Ge(0)] = doc("one run", 900.0)
    reboot_seconds: Annotated[float, at.Ge(0)] = doc("one reboot", 600.0)


class Protocol(Table):
    """The measurement protocol (the paper's Algorithm 1)."""
    cgroup_headroom: Size = doc("memory.max = C + this (Algorithm 1: 6Gi, binary)",
                                DEFAULT_CGROUP_HEADROOM, shown="6Gi")
    balloon_max: Size | None = doc("cap on what a balloon may lock", None)


class _Axes(Table):
    capacity: CapacityText | None = doc("64G (decimal; 64Gi binary), 0.044pool or 0.5mem", None)
    mechanism: Mechanism | None = doc("how the capacity is imposed", None)
    reclaim: Reclaim | None = doc("MGLRU or the classic LRU", None)
    mode: Mode | None = doc("what the replay does with the page cache", None)
    prefetch: Prefetch | None = doc("none or <hints>-<delivery> (oracle-advice ...)", None)


AXES = tuple(_Axes.model_fields)


class Exclude(_Axes):
    """Cells of the product left out: every axis given must match."""

    @model_validator(mode="after")
    def _not_empty(self) -> "Exclude":
        if not self.model_fields_set:
            raise bad("must be a non-empty table of axis = value", hint=f"axes: {', '.join(AXES)}")
        return self


class Extra(_Axes):
    """One more cell: a cell name, or its axes (capacity, mechanism and reclaim at least)."""
    cell: Annotated[str, AfterValidator(_cell_name)] | None = doc(
        "a cell name, e.g. 448G-cgroup-mglru (instead of the axes)", None)
    tags: Tags = doc("hosts of this cell (default: the matrix's hosts.tags)", None)
    placement: Placement | None = doc("default: the matrix's hosts.placement", None)
    repetitions: Repetitions | None = doc("default: the matrix's repetitions", None)

    @model_validator(mode="after")
    def _cell_or_axes(self) -> "Extra":
        if self.cell is not None and self.model_fields_set & set(AXES):
            raise bad("give either cell = NAME or the axes, not both")
        if self.cell is None:
            missing = [Problem((k,), "missing (required)", allowed)
                       for k, allowed in (("capacity", ()), ("mechanism", MECHANISMS),
                                          ("reclaim", RECLAIMS)) if getattr(self, k) is None]
            if missing:
                raise many(missing)
        return self


# non-empty lists of distinct allowed values
Mechanisms = Annotated[list[Mechanism], at.MinLen(1), _distinct()]
Reclaims = Annotated[list[Reclaim], at.MinLen(1), _distinct()]
Modes = Annotated[list[Mode], at.MinLen(1), _distinct()]
PRODUCT = ("capacities", "mechanisms", "reclaims")


class Cells(Table):
    """The cells: capacities x mechanisms x reclaims x modes x prefetch, minus exclude, plus
    extra."""
    capacities: Annotated[list[CapacityText], at.MinLen(1), _distinct(
        "lists the same capacity twice")] | None = doc("C of each cell", None)
    mechanisms: Mechanisms | None = doc("capacity mechanisms", None)
    reclaims: Reclaims | None = doc("reclaim algorithms", None)
    modes: Modes = doc("replay modes", ["pagecache"])
    prefetch: Annotated[list[Prefetch], at.MinLen(1), _distinct()] = doc(
        "none or <hints>-<delivery> (oracle-advice, pilot-block ...)", ["none"])
    exclude: list[Exclude] = doc("cells of the product left out", [])
    extra: list[Extra] = doc("cells added to the product ([[cells.extra]])", [])

    @staticmethod
    def rules(v: View, ctx: dict) -> Iterator[Problem]:
        if any(v.given(k) for k in PRODUCT):
            for k, allowed in zip(PRODUCT, ((), MECHANISMS, RECLAIMS)):
                if not v.given(k):
                    yield Problem((k,), "missing (required)", allowed)
        elif v.given("exclude"):
            yield Problem(("exclude",), "without a product (capacities x mechanisms x reclaims)")
