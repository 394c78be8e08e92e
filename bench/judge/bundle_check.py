"""A bundle's parts checked against the contract (bench.judge.bundle_schema), in bench's words:
one line per problem, `BUNDLE: FILE[:LINE]: key 'dotted.key': problem`, the first line complete
on its own (bench.matrix.matrix_schema's style; never pydantic's English). At most MAX_REPORTED
problems are reported; a part stops being read at the first MAX_REPORTED.

- `document(content, rel, where)`: a JSON document (spec.json, status.json ...) parsed by the
  strict reader and validated by its model; returns the parsed dict as written.
- `agent_output(data, where, partial)`: agent.jsonl, line by line (never all lines at once):
  iteration records validated in chunks, the summary by its model.
- `timeline(data, where)`: timeline.csv rows, typed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from functools import cache
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from bench.judge.bundle_files import (BundleError, DupKeys, NonFinite, json_problem, lines, loads,
                                      utf8)
from bench.judge.bundle_schema import DOCUMENTS, MAX_LIST, Record, Summary, TimelineRow
from bench.matrix.matrix_schema import Problem, collect
from bench.matrix.matrix_schema import _got as got  # the one way a value is shown
# the one translation of pydantic errors
from bench.matrix.matrix_schema import _translate as translate

MAX_REPORTED = 10
CHUNK = 4096                # lines validated together (bounds the error list)
TIMELINE_COLUMNS = (b"mono_ns", b"phase", b"memory_current", b"cached", b"mem_available")
_INT = re.compile(rb"^-?[0-9]{1,19}$")


@cache
def _adapter(item: Any) -> TypeAdapter[list[Any]]:
    """A list validator, built on first use (building it imports what pydantic needs, which a
    pure module must not at import time)."""
    return TypeAdapter(list[item])


class BundleProblems(BundleError):
    """Problems of one bundle's parts, one a line (`problems` keeps them)."""

    def __init__(self, where: str, part: str, problems: list[Problem]):
        shown = [p.line() for p in problems[:MAX_REPORTED]]
        if len(problems) > MAX_REPORTED:
            shown.append(f"{where}: {part}: and {len(problems) - MAX_REPORTED} more problems")
        super().__init__(where, part, "")
        self.message = "\n".join(shown)
        self.args = (self.message,)
        self.problems = tuple(problems)


_JSON_WORDS = (("must be a table,", "must be a JSON object,"),
               ("must be a list,", "must be a JSON array,"))


def _raise(where: str, rel: str, problems: list[Problem]) -> None:
    """Refuse with these problems, in JSON's words (the shared translation speaks TOML)."""
    if problems:
        out = []
        for p in problems:
            msg = p.message
            for toml, json_word in _JSON_WORDS:
                msg = msg.replace(toml, json_word)
            out.append(replace(p, message=msg))
        raise BundleProblems(where, rel, out)


def _parsed(data: bytes, where: str, rel: str, line: int | None = None) -> Any:
    """A JSON value by the strict reader, or BundleError naming the file (and line)."""
    at = rel if line is None else f"{rel}:{line}"
    text = utf8(data, where, rel, line)
    try:
        return loads(text)
    except RecursionError:
        raise BundleError(where, at, "not valid JSON (nested too deep)") from None
    except ValueError as exc:
        raise BundleError(where, at, f"not valid JSON ({str(exc)[:200]})") from None


def _object_problem(value: Any, max_items: int) -> Problem | None:
    if not isinstance(value, dict):
        return Problem((), f"must be a JSON object, got {got(value)}")
    found = json_problem(value, max_items)
    return None if found is None else Problem(found[0], found[1])


def document(content: Mapping[str, bytes], rel: str, where: str, *,
             max_items: int = MAX_LIST) -> dict:
    """The JSON document `rel`, validated by its model (bundle_schema.DOCUMENTS)."""
    if rel not in content:
        raise BundleError(where, rel, "missing")
    value = _parsed(content[rel], where, rel)
    source = f"{where}: {rel}"
    p = _object_problem(value, max_items)
    if p is not None:
        _raise(where, rel, [replace(p, source=source)])
    _, problems = collect(DOCUMENTS[rel], value, source=source)
    _raise(where, rel, problems)
    return value


def _pydantic(exc: ValidationError, root: Any, at: list[str]) -> list[Problem]:
    """Problems of a chunk's ValidationError; at[i]: where item i is (file:line)."""
    out = []
    for err in exc.errors(include_url=False):
        i, loc = err["loc"][0], tuple(err["loc"][1:])
        value = err.get("input")
        if isinstance(value, NonFinite):
            ps = [Problem(loc, f"{value.text} is not a finite number")]
        else:
            ps = translate(ErrorDetails(**{**err, "loc": loc}), root)
        out += [replace(p, source=at[int(i)]) for p in ps]
        if len(out) >= MAX_REPORTED:
            break
    return out


def _validate(root: Any, chunk: list, at: list[str]) -> list[Problem]:
    try:
        _adapter(root).validate_python(chunk)
    except ValidationError as exc:
        return _pydantic(exc, root, at)
    return []


def _summary(obj: dict, source: str) -> list[Problem]:
    found = json_problem(obj, MAX_LIST)
    if found is not None:
        return [Problem(found[0], found[1], source=source)]
    return collect(Summary, obj, source=source)[1]


def _agent_line(raw: bytes, n: int, last: bool, partial: bool, where: str) -> Any:
    """One line's JSON value, or None for a killed agent's cut-off last line."""
    try:
        return _parsed(raw, where, "agent.jsonl", n)
    except BundleError:
        if partial and last:        # a killed agent's last line may be cut short
            return None
        raise


# long: one pass over the lines, its checks in order (each a few lines)
def agent_output(data: bytes, where: str, partial: bool = False) -> tuple[list[dict], dict]:
    """(iteration records, summary) of agent.jsonl. `partial`: the run failed, so the agent
    may have been killed (no summary, a cut-off last line)."""
    records: list[dict] = []
    summary: dict | None = None
    problems: list[Problem] = []
    chunk: list[dict] = []
    at: list[str] = []
    cut_line = data.count(b"\n") + 1 if data and not data.endswith(b"\n") else 0
    for n, raw in lines(data):
        if not raw.strip():
            continue
        source = f"{where}: agent.jsonl:{n}"
        obj = _agent_line(raw, n, n == cut_line, partial, where)
        if obj is None:
            continue
        if summary is not None:
            problems.append(Problem((), "a line after the summary", source=source))
        elif not isinstance(obj, dict) or isinstance(obj, DupKeys):
            problems.append(replace(_object_problem(obj, MAX_LIST) or Problem((), "?"),
                                    source=source))
        elif "summary" in obj:
            summary = obj
            problems += _summary(obj, source)
        else:
            records.append(obj)
            chunk.append(obj)
            at.append(source)
            if len(chunk) >= CHUNK:
                problems += _validate(Record, chunk, at)
                chunk, at = [], []
        if len(problems) >= MAX_REPORTED:
            break
    if chunk and len(problems) < MAX_REPORTED:
        problems += _validate(Record, chunk, at)
    _raise(where, "agent.jsonl", problems)
    if summary is None:
        if partial:         # the agent was killed: what it wrote is kept, the run is rejected
            return records, {}
        raise BundleError(where, "agent.jsonl", "has no summary record (the agent did not "
                          "finish)")
    return records, summary


def _cell(field: bytes, name: str, source: str) -> tuple[Any, Problem | None]:
    if name == "phase":
        try:
            return field.decode("ascii"), None
        except UnicodeDecodeError:
            return None, Problem((name,), "not ASCII", source=source)
    if not field:
        return None, None
    if not _INT.fullmatch(field):
        return None, Problem((name,), f"must be an integer, got {field[:40]!r}", source=source)
    return int(field), None


def _row(raw: bytes, names: tuple[str, ...], source: str) -> tuple[dict, list[Problem]]:
    fields = raw.rstrip(b"\r").split(b",")
    if len(fields) != len(names):
        return {}, [Problem((), f"{len(fields)} fields, the header has {len(names)}",
                            source=source)]
    row: dict[str, Any] = {"cached": None, "mem_available": None}
    problems = []
    for name, f in zip(names, fields):
        row[name], p = _cell(f, name, source)
        if p is not None:
            problems.append(p)
    return row, problems


def timeline(data: bytes, where: str, partial: bool = False) -> list[dict]:
    """timeline.csv rows ({mono_ns, phase, memory_current, cached, mem_available}; an empty
    field is None). Older runners wrote only the first three columns. `partial`: a failed
    run, whose runner may have been killed in the middle of its last row."""
    rows: list[dict] = []
    problems: list[Problem] = []
    names: tuple[str, ...] = ()
    chunk: list[dict] = []
    at: list[str] = []
    cut_line = data.count(b"\n") + 1 if partial and not data.endswith(b"\n") else 0
    for n, raw in lines(data):
        if n == cut_line:
            break
        source = f"{where}: timeline.csv:{n}"
        if n == 1:
            head = tuple(raw.rstrip(b"\r").split(b","))
            if head not in (TIMELINE_COLUMNS, TIMELINE_COLUMNS[:3]):
                raise BundleError(where, "timeline.csv:1", "the header is not "
                                  + ",".join(c.decode() for c in TIMELINE_COLUMNS))
            names = tuple(c.decode() for c in head)
            continue
        if not raw.strip():
            continue
        row, ps = _row(raw, names, source)
        problems += ps
        if not ps:
            rows.append(row)
            chunk.append(row)
            at.append(source)
        if len(chunk) >= CHUNK:
            problems += _validate(TimelineRow, chunk, at)
            chunk, at = [], []
        if len(problems) >= MAX_REPORTED:
            break
    if chunk and len(problems) < MAX_REPORTED:
        problems += _validate(TimelineRow, chunk, at)
    _raise(where, "timeline.csv", problems)
    return rows
