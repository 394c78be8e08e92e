"""The bundle contract (docs/bundle.md made executable): the test generator's bundles validate,
through the loader and through the JSON Schema `bench schema bundle` prints; the doc's spec
example validates; the models' allowed values are the cell grammar's; the caps read the
environment; the strict JSON reader names what it refuses. The hostile corpus is in
tests/local/store/test_bundle_corpus.py, the runner's real bundles in tests/local/runner."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench.cli import schema as schema_cli
from bench.errors import InputError
from bench.judge import bundle_schema
from bench.judge.bundle import BundleError, Caps, load, read_dir
from bench.judge.bundle_check import agent_output, document, timeline
from bench.judge.bundle_files import json_problem, loads
from bench.matrix.cells import DELIVERIES, ENGINE_RECLAIM, MECHANISMS, MODES, RECLAIMS
from bench.matrix.runspec import NOCACHE
from tests.support.bundlegen import make_bundle

DOCS = Path(__file__).resolve().parents[2] / "docs" / "bundle.md"
CELLS = ["64m-cgroup-mglru", "64m-balloon-classic", "64m-none-mglru", "64m-cgroup-mglru-pinned",
         "64m-cgroup-mglru-hybrid", "64m-cgroup-mglru-oracle-advice", "e2e-prose-admit",
         "e2e-code-nocache"]


def _failed(p):
    """What a runner stopped before the agent leaves: spec and status, a few parts."""
    p["status.json"].update(phase="failed", ok=False, reason="balloon not ready after 900 s")
    for rel in ("agent.jsonl", "timeline.csv", "kmsg.txt"):
        p.pop(rel)
    for phase in [k for k in p["snapshots"] if k.startswith("pass")]:
        del p["snapshots"][phase]


def conforms(schema: dict, value, root: dict, at: str = "") -> list[str]:
    """A small JSON Schema check (the keywords bundle_schema's models produce)."""
    if "$ref" in schema:
        return conforms(root["$defs"][schema["$ref"].rsplit("/", 1)[1]], value, root, at)
    if "anyOf" in schema:
        return [] if any(not conforms(s, value, root, at) for s in schema["anyOf"]) else [
            f"{at}: {value!r:.60} fits no alternative"]
    kinds = {"object": dict, "array": list, "string": str, "integer": int,
             "number": (int, float), "boolean": bool, "null": type(None)}
    t = schema.get("type")
    if t and (not isinstance(value, kinds[t]) or (t in ("integer", "number")
                                                  and isinstance(value, bool))):
        return [f"{at}: {value!r:.60} is not {t}"]
    errs = []
    for key, bad in (("enum", lambda: value not in schema["enum"]),
                     ("const", lambda: value != schema["const"]),
                     ("pattern", lambda: not re.search(schema["pattern"], value)),
                     ("minimum", lambda: value < schema["minimum"]),
                     ("maximum", lambda: value > schema["maximum"]),
                     ("maxLength", lambda: len(value) > schema["maxLength"]),
                     ("maxItems", lambda: len(value) > schema["maxItems"])):
        if key in schema and bad():
            errs.append(f"{at}: {value!r:.60} fails {key} {schema[key]!r:.60}")
    if t == "array":
        errs += [e for i, x in enumerate(value)
                 for e in conforms(schema.get("items", {}), x, root, f"{at}[{i}]")]
    if t == "object":
        errs += [f"{at}: missing {k}" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if k in schema.get("properties", {}):
                errs += conforms(schema["properties"][k], v, root, f"{at}.{k}")
            elif schema.get("additionalProperties") is False:
                errs.append(f"{at}: unknown key {k}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errs += conforms(schema["additionalProperties"], v, root, f"{at}.{k}")
    return errs


@pytest.fixture(scope="module")
def printed_schema() -> dict:
    import typer
    app = typer.Typer()
    schema_cli.register(app)
    res = CliRunner().invoke(app, ["schema", "bundle", "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _as_parts(files: dict[str, bytes]) -> dict:
    """The bundle's JSON parts as `bench schema bundle` lays them out (by file name)."""
    out = {rel: json.loads(files[rel]) for rel in bundle_schema.DOCUMENTS if rel in files}
    if "agent.jsonl" in files:
        out["agent.jsonl"] = [json.loads(ln) for ln in files["agent.jsonl"].splitlines()]
    if "timeline.csv" in files:
        out["timeline.csv"] = timeline(files["timeline.csv"], "b")
    return out


@pytest.mark.parametrize("cell, edit", [(c, None) for c in CELLS]
                         + [("64m-balloon-mglru", _failed)],
                         ids=CELLS + ["failed-run"])
def test_generated_bundles_validate(tmp_path, printed_schema, cell, edit):
    """tests/support/bundlegen.py writes what the contract accepts: through the loader and
    through the JSON Schema that `bench schema bundle` prints."""
    files = read_dir(make_bundle(tmp_path, "r1", cell, edit=edit))
    b = load(files, "r1")
    assert b.run_id == "r1" and b.completed == (edit is None)
    assert conforms(printed_schema, _as_parts(files), printed_schema) == []


def test_the_printed_schema_names_every_part_and_refuses_what_the_models_refuse(
        printed_schema):
    assert set(printed_schema["properties"]) == set(bundle_schema.DOCUMENTS) | {
        "agent.jsonl", "timeline.csv"}
    spec = printed_schema["$defs"]["AgentSpec"]["properties"]
    assert (spec["passes"]["minimum"], spec["passes"]["maximum"]) == (2, 1000)
    assert (spec["threads"]["minimum"], spec["threads"]["maximum"]) == (1, 1024)
    s = printed_schema
    assert conforms(s, {"spec.json": {"format": 1, "run_id": "../x"}}, s)
    assert conforms(s, {"manifest.json": {"run_id": "r", "complete": True, "files": {
        "a": {"bytes": -1, "sha256": "x"}}}}, s)


def test_the_docs_spec_example_validates():
    """docs/bundle.md's spec.json example is a spec the contract accepts (so its field table
    stays true)."""
    text = DOCS.read_text()
    section = text[text.index("## spec.json"):]
    example = re.search(r"```json\n(.*?)```", section, re.S).group(1)
    spec = document({"spec.json": example.encode()}, "spec.json", "docs/bundle.md")
    assert spec["run_id"] == "c12-r0042" and spec["agent"]["passes"] == 2
    for key in bundle_schema.Spec.model_fields:       # every key the doc's prose names
        assert f"`{key}`" in text or f'"{key}"' in text, key


def test_allowed_values_are_the_cell_grammars():
    fields = bundle_schema.Spec.model_fields
    from typing import get_args

    def values(name, model=bundle_schema.Spec):
        tp = model.model_fields[name].annotation
        return {a for arm in get_args(tp) or (tp,) for a in (get_args(arm) or (arm,))
                if isinstance(a, str)}
    assert values("mechanism") == set(MECHANISMS)
    assert values("reclaim") == set(RECLAIMS) | {ENGINE_RECLAIM}
    assert values("mode") == set(MODES)
    assert values("delivery") == set(DELIVERIES)
    assert values("nocache", bundle_schema.AgentSpec) == set(NOCACHE)
    assert "plan_iterations" in fields


def test_caps_come_from_the_environment_then_the_caller():
    assert Caps.from_env({}) == Caps()
    c = Caps.from_env({"BENCH_BUNDLE_MAX_FILE_BYTES": "1Mi", "BENCH_BUNDLE_MAX_FILES": "10"},
                      total_bytes=4096)
    assert (c.file_bytes, c.total_bytes, c.files, c.json_bytes) == (1 << 20, 4096, 10, 1 << 20)
    # decimal like every size bench reads (docs/design.md, Vocabulary): 1M is 10^6 bytes
    assert Caps.from_env({"BENCH_BUNDLE_MAX_FILE_BYTES": "1M"}).file_bytes == 10 ** 6
    with pytest.raises(InputError, match="BENCH_BUNDLE_MAX_BYTES"):
        Caps.from_env({"BENCH_BUNDLE_MAX_BYTES": "lots"})
    with pytest.raises(InputError, match="positive"):
        Caps.from_env({}, files=0)


@pytest.mark.parametrize("text, loc, words", [
    ('{"a": 1, "a": 2}', (), "'a' is written twice"),
    ('{"a": {"b": NaN}}', ("a", "b"), "NaN is not a finite number"),
    ('{"a": [1, -Infinity]}', ("a", 1), "-Infinity is not a finite number"),
    ('{"a": 1e999}', ("a",), "1e999 is not a finite number"),
    ('{"a": ' + "1" * 30 + "}", ("a",), "30 digits does not fit 64 bits"),
    ('{"a": ' + "[" * 40 + "]" * 40 + "}", ("a",) + (0,) * 31, "nested deeper than 32"),
    ('{"a": [' + ",".join(["0"] * 5000) + "]}", ("a",), "5000 entries (at most 4096)"),
])
def test_the_strict_reader_names_where_the_json_is_refused(text, loc, words):
    got = json_problem(loads(text), 4096)
    assert got is not None and got[0] == loc and words in got[1], got


def test_agent_output_names_the_line_and_the_key():
    ok = b'{"pass": 0, "iter": 0, "wall_ns": 5, "bytes": 8, "reads": 1}\n'
    summary = b'{"summary": true, "ok": true}\n'
    records, sm = agent_output(ok + summary, "b")
    assert records == [json.loads(ok)] and sm["ok"] is True
    cases = [
        (b'[1, 2]\n', "b: agent.jsonl:2: must be a JSON object, got list [1, 2]"),
        (b'{"pass": 0, "iter": "x", "wall_ns": 5, "bytes": 8, "reads": 1}\n',
         "b: agent.jsonl:2: key 'iter': must be an integer, got str 'x'"),
        (b'{"pass": 0, "iter": 1, "wall_ns": NaN, "bytes": 8, "reads": 1}\n',
         "b: agent.jsonl:2: key 'wall_ns': NaN is not a finite number"),
        (b'{"pass": 0, "iter": 1, "wall_ns": 5, "bytes": 8, "reads": 1, "x": 1}\n',
         "b: agent.jsonl:2: key 'x': unknown key"),
        (b'{"pass": 0, "iter": 1, "wall_ns": 5, "bytes": 8, "reads": \xff}\n',
         "b: agent.jsonl:2: not UTF-8 text"),
    ]
    for line, want in cases:
        with pytest.raises(BundleError) as exc:
            agent_output(ok + line + summary, "b")
        assert exc.value.message.startswith(want), exc.value.message
        assert "\n" not in exc.value.message
    with pytest.raises(BundleError, match="a line after the summary"):
        agent_output(ok + summary + ok, "b")
    # a failed run's agent may have been killed mid-line: only the last line may be cut
    assert agent_output(ok + b'{"pass": 0, "it', "b", partial=True) == ([json.loads(ok)], {})
    with pytest.raises(BundleError, match="agent.jsonl:1: not valid JSON"):
        agent_output(b'{"pass": 0, "it\n' + ok, "b", partial=True)


def test_timeline_rows_are_typed():
    head = b"mono_ns,phase,memory_current,cached,mem_available\n"
    assert timeline(head + b"5,warmup,,7,8\n", "b") == [
        {"mono_ns": 5, "phase": "warmup", "memory_current": None, "cached": 7,
         "mem_available": 8}]
    for row, want in ((b"5,boiling,1,2,3\n", "key 'phase'"), (b"-5,warmup,1,2,3\n",
                                                             "key 'mono_ns'"),
                      (b"5,warmup,1e3,2,3\n", "key 'memory_current'"), (b"5,warmup\n",
                                                                        "2 fields")):
        with pytest.raises(BundleError) as exc:
            timeline(head + row, "b")
        assert exc.value.message.startswith("b: timeline.csv:2: ") and want in \
            exc.value.message, exc.value.message
    assert timeline(head + b"5,warmup,1,2,3\n6,meas", "b", partial=True)[-1]["mono_ns"] == 5
