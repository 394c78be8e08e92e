"""One validator for every TOML file bench reads (bench.matrix.matrix_schema and the models of the
host file, the matrix file and the [engine] table): every problem of a file at once, one a line,
each naming the file, the dotted key and the allowed values, never in pydantic's words; and the JSON
Schema `bench schema inventory|matrix|engine` prints, from the same models, accepts the shipped
files and shows the allowed values as enums."""

import copy
import dataclasses
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bench.cli import schema as schema_cli
from bench.errors import InventoryError
from bench.hosts.inventory import RebootSpec, SSHOptions, check_inventory, load_host_file
from bench.hosts.inventory_schema import REBOOT_METHODS, TRANSPORTS, HostFile, RebootTable, SSHTable
from bench.matrix import engine_cells
from bench.matrix.cells import MECHANISMS, MODES, POLICY_MODES, RECLAIMS
from bench.matrix.load import (MatrixError, MatrixFile, apply_scale, load_matrix, parse_matrix,
                               shipped_names)
from bench.matrix.matrix_schema import PLACEMENTS, SchemaError, Table

ROOT = Path(__file__).resolve().parents[2]
MATRICES = ROOT / "bench" / "data" / "matrices"
# pydantic's own wording and links must never reach a user
PYDANTIC_WORDS = ("Input should", "Field required", "Extra inputs", "pydantic", "type=",
                  "validation error", "For further information")


def problems_by_key(exc: SchemaError) -> dict[str, str]:
    """key -> the message of its line, checking every line names the file and a dotted key."""
    out = {}
    for line in exc.message.splitlines():
        m = re.fullmatch(r"(.+?): key '([^']+)': (.+)", line)
        assert m, line
        out[m.group(2)] = m.group(3)
    return out


def assert_bench_wording(exc: SchemaError) -> None:
    text = exc.message + "\n" + (exc.hint or "")
    assert not [w for w in PYDANTIC_WORDS if w in text], text
    assert len(exc.problems) == len(exc.message.splitlines())


# the host file -----------------------------------------------------------------------------------

BAD_HOST = """
name = "h1"
address = "10.0.0.1"
port = "22"
transport = "ssh"
colour = "red"
[memory]
total = "480G"
floor = "lots"
[reboot]
allowed = true
method = "kexe"
up_timeout = 0
[paths]
work_dir = "var/lib/bench"
"""


def test_a_host_file_reports_every_problem_at_once(tmp_path):
    p = tmp_path / "h1.toml"
    p.write_text(BAD_HOST)
    with pytest.raises(InventoryError) as e:
        load_host_file(p)
    assert isinstance(e.value, SchemaError) and e.value.exit_code == 2
    assert problems_by_key(e.value) == {
        "port": "must be an integer, got str '22'",
        "memory.floor": "'lots' is not a size",
        "reboot.method": "'kexe' is not allowed (allowed values: grub-reboot, kexec, command, "
                         "none)",
        "reboot.up_timeout": "must be a positive number of seconds, got 0.0",
        "paths.work_dir": "must be an absolute path, got 'var/lib/bench'",
        "colour": "unknown key (allowed keys: name, address, port, user, transport, tags, ssh, "
                  "memory, reboot, paths, expect)"}
    # each line names the file and the line its key is written on (BAD_HOST starts with "\n")
    assert [line.split(": key '")[0] for line in e.value.message.splitlines()] == [
        f"{p}:{n}" for n in (4, 9, 12, 13, 15, 6)]
    assert_bench_wording(e.value)
    # a rule whose input failed is skipped, not reported a second time: no "allowed but no
    # method" for the misspelt method, no "floor above total" for the floor that is no size
    assert "no method" not in e.value.message and "above" not in e.value.message
    # the fix line names the key it belongs to
    assert "key 'memory.floor': write a number with an optional decimal unit" in e.value.hint


def test_cross_field_rules_of_a_host_file_are_collected_too(tmp_path):
    p = tmp_path / "me.toml"
    p.write_text('name = "you"\ntransport = "local"\n[memory]\ntotal = "4G"\nfloor = "8G"\n'
                 '[reboot]\nallowed = true\nmethod = "grub-reboot"\n')
    with pytest.raises(InventoryError) as e:
        load_host_file(p)
    got = problems_by_key(e.value)
    assert got == {"name": "'you' differs from the file name 'me.toml'",
                   "reboot.allowed": "a local host (the controller's own machine) is never "
                                     "rebooted",
                   "memory.floor": "is above memory.total",
                   "reboot.grub_entry": "missing (required when reboot.method = 'grub-reboot')"}
    assert "rename the file to you.toml" in e.value.hint
    assert_bench_wording(e.value)


@pytest.mark.parametrize("text, key, line, message", [
    ('transport = "ssh"\n', "address", None, "missing (required for transport ssh)"),
    ('address = "a"\n', "transport", None, "missing (required; allowed values: ssh, local)"),
    ('transport = "local"\nport = 70000\n', "port", 2, "must be at most 65535, got 70000"),
    ('transport = "ssh"\naddress = "a"\n[reboot]\nallowed = true\n', "reboot.method", 3,
     "reboot.allowed is true but no method is given (allowed values: grub-reboot, kexec, "
     "command)"),
    ('transport = "local"\n[reboot]\nmethod = "command"\ncommand = []\n', "reboot.command", 4,
     "must be a non-empty list of strings (an argv; no shell is involved)"),
    ('transport = "local"\n[tags]\nmachine = 1\n', "tags.machine", 3,
     "must be a string, got int 1"),
    ('transport = "local"\nssh = 3\n', "ssh", 2, "must be a table, got int 3"),
])
def test_one_problem_is_one_line_as_before(tmp_path, text, key, line, message):
    """One line: FILE[:LINE]: key 'KEY': problem (the line where the key, or the table that
    misses it, is written)."""
    p = tmp_path / "h.toml"
    p.write_text(text)
    with pytest.raises(InventoryError) as e:
        load_host_file(p)
    where = f"{p}:{line}" if line else str(p)
    assert e.value.message == f"{where}: key '{key}': {message}"
    assert_bench_wording(e.value)


def test_a_file_stem_that_is_no_host_name(tmp_path):
    p = tmp_path / "bad name.toml"
    p.write_text('transport = "local"\n')
    with pytest.raises(InventoryError, match="key 'name': 'bad name' .* is not a valid host name"):
        load_host_file(p)


def test_check_inventory_carries_every_problem_of_each_file(tmp_path):
    (tmp_path / "h1.toml").write_text(BAD_HOST)
    (tmp_path / "ok.toml").write_text('transport = "local"\n')
    (tmp_path / "zz.toml").write_text("name = \n")
    bad, ok, toml = check_inventory(tmp_path)
    assert not bad["ok"] and ok["ok"] and ok["problems"] == [] and not toml["ok"]
    assert len(bad["problems"]) == 6 == len(bad["error"].splitlines())
    assert {p["key"] for p in bad["problems"]} >= {"port", "memory.floor", "reboot.method",
                                                   "paths.work_dir", "colour"}
    method = next(p for p in bad["problems"] if p["key"] == "reboot.method")
    assert method["allowed"] == list(REBOOT_METHODS)
    assert "not valid TOML" in toml["error"] and toml["problems"][0]["key"] is None


def test_the_host_models_spell_the_keys_the_dataclasses_hold():
    assert set(SSHTable.model_fields) == {f.name for f in dataclasses.fields(SSHOptions)}
    assert set(RebootTable.model_fields) == {f.name for f in dataclasses.fields(RebootSpec)}
    assert HostFile.model_fields["transport"].annotation.__args__ == TRANSPORTS


# the matrix file ---------------------------------------------------------------------------------

def matrix(**over):
    d = {"name": "m", "description": "d", "repetitions": 1, "workload": {"trace": "k3"},
         "cells": {"capacities": ["64G"], "mechanisms": ["cgroup"], "reclaims": ["mglru"]}}
    d.update(over)
    return d


def test_a_matrix_reports_every_problem_at_once():
    d = matrix(repetitions=0, colour="red", workload={"trace": "k3", "passes": 1},
               hosts={"placement": "some"},
               cells={"capacities": ["64G", "64Q", "1.5mem"], "mechanisms": ["cgroup", "baloon"],
                      "reclaims": ["mglru"], "prefetch": ["oracle-push"]})
    with pytest.raises(MatrixError) as e:
        parse_matrix(d, "my.toml")
    assert problems_by_key(e.value) == {
        "repetitions": "must be at least 1, got 0",
        "workload.passes": "must be at least 2 (warm-up + measured), got 1",
        "hosts.placement": "'some' is not allowed (allowed values: each, one)",
        "cells.capacities[1]": "'64Q' is not a capacity",
        "cells.capacities[2]": "fraction 1.5 of mem is out of range",
        "cells.mechanisms[1]": "'baloon' is not allowed (allowed values: cgroup, balloon, "
                               "memboot, none)",
        "cells.prefetch[0]": "'oracle-push': unknown delivery 'push'",
        "colour": "unknown key (allowed keys: name, description, reference, repetitions, "
                  "memboot_overhead, mglru_at_boot, workload, order, hosts, estimate, "
                  "protocol, cells, scale, engine)"}
    assert_bench_wording(e.value)
    assert "deliveries: advice, block" in e.value.hint


def test_cross_field_rules_of_a_matrix_are_collected_too():
    d = matrix(workload={"trace": "/data/k3.jsonl", "layers": 2},
               cells={"capacities": ["64G", "0.1pool"], "mechanisms": ["cgroup"],
                      "reclaims": ["mglru"], "exclude": [{"mechanism": "balloon"}],
                      "extra": [{"cell": "64G-cgroup-mglru"}, {"capacity": "1G"}]})
    with pytest.raises(MatrixError) as e:
        parse_matrix(d, "my.toml")
    got = problems_by_key(e.value)
    assert got["workload.layers"] == "only a synth preset trace can be re-sized"
    assert got["cells.extra[1].mechanism"] == ("missing (required; allowed values: cgroup, "
                                               "balloon, memboot, none)")
    assert got["cells.extra[1].reclaim"].startswith("missing (required")
    # cells failed (extra[1]): the rules over the expanded cells wait for a valid [cells]
    assert len(got) == 3
    del d["cells"]["extra"][1]
    with pytest.raises(MatrixError) as e:
        parse_matrix(d, "my.toml")
    assert problems_by_key(e.value) == {
        "workload.layers": "only a synth preset trace can be re-sized",
        "cells.exclude[0]": "matches no cell of the product: {'mechanism': 'balloon'}",
        "cells": "cell 64G-cgroup-mglru is listed twice (product, extra)",
        "workload.pool": "missing: capacity 0.1pool is relative to the pool and the trace is "
                         "a file"}
    assert_bench_wording(e.value)


def test_a_partial_product_is_named_once():
    with pytest.raises(MatrixError) as e:
        parse_matrix(matrix(cells={"capacities": ["64G"], "exclude": [{"capacity": "64G"}]}), "m")
    assert problems_by_key(e.value) == {
        "cells.mechanisms": "missing (required; allowed values: cgroup, balloon, memboot, none)",
        "cells.reclaims": "missing (required; allowed values: mglru, classic)"}


def test_missing_top_level_tables_are_all_named():
    with pytest.raises(MatrixError) as e:
        parse_matrix({"name": "m"}, "m.toml")
    assert set(problems_by_key(e.value)) == {"description", "repetitions", "workload", "cells"}


def test_every_scale_of_a_file_is_checked_and_reported_together(tmp_path):
    p = tmp_path / "m.toml"
    p.write_text('name = "m"\ndescription = "d"\nrepetitions = 1\n[workload]\ntrace = "tiny"\n'
                 '[cells]\ncapacities = ["1G", "2G"]\nmechanisms = ["cgroup"]\n'
                 'reclaims = ["classic"]\n'
                 '[scale.a]\ncapacities = { "1G" = "0.1mem" }\n'
                 '[scale.b]\ncapacities = { "2G" = "0.2mem" }\n')
    with pytest.raises(MatrixError) as e:
        load_matrix(p)
    assert e.value.message.splitlines() == [
        f"{p}: key 'scale.a.capacities': has no entry for 2G (used at cells.capacities[1])",
        f"{p}: key 'scale.b.capacities': has no entry for 1G (used at cells.capacities[0])"]


def test_a_scale_table_is_validated_as_a_table():
    d = matrix(scale={"s": {"capacities": {"0.5mem": "0.1mem", "64G": "lots"},
                            "workload": {"batch": 0, "colour": 1}, "repetitions": "2"}})
    with pytest.raises(MatrixError) as e:
        parse_matrix(d, "m.toml")
    assert problems_by_key(e.value) == {
        "scale.s.repetitions": "must be an integer, got str '2'",
        "scale.s.capacities.0.5mem": "only absolute capacities are mapped",
        "scale.s.capacities.64G": "'lots' is not a capacity",
        "scale.s.workload.batch": "must be at least 1, got 0",
        "scale.s.workload.colour": "unknown key (allowed keys: trace, domain, batch, pool, "
                                   "passes, fixed_set_bytes, hints, layers, experts, expert_bytes, "
                                   "tokens)"}
    with pytest.raises(MatrixError, match=r"key 'scale\.s\.capacities\.0\.5mem'"):
        apply_scale(d, "s", "m.toml")


# the [engine] table ------------------------------------------------------------------------------

def engine_table(**over):
    t = {"command": ["/e", "{prompt_file}", "{policy_args}"], "backend": "B",
         "tokens_regex": "^ids: (.*)$", "load_regex": "^load: (.*) s",
         "policies": {"admit": {"args": ["-a"]}, "nocache": {"args": ["-n"]}},
         "prompts": {"prose": "/p/prose.txt"}}
    t.update(over)
    return t


def test_an_engine_table_reports_every_problem_at_once():
    t = engine_table(command=["/e", "{nope}", "{policy_args}"], backend="two\nlines",
                     timeout_s=True, speed=1, load_regex="(a)(b)", env={"1X": "a"},
                     policies={"admit": {"argv": []}, "nocache": {}},
                     prompts={"Prose": "/p/prose.txt"}, n_tokens=5, min_tokens=9)
    with pytest.raises(engine_cells.EngineConfigError) as e:
        engine_cells.parse_engine(t, "t.toml")
    assert problems_by_key(e.value) == {
        "engine.command[1]": "'{nope}': unknown placeholder {nope}",
        "engine.env.1X": "'1X' is not an environment variable name",
        "engine.timeout_s": "must be an integer, got bool True",
        "engine.backend": "must be a non-empty single line",
        "engine.load_regex": "needs exactly one capturing group or a group named "
                             "(?P<seconds>...), has 2",
        "engine.policies.admit.argv": "unknown key (allowed keys: args, env, backend)",
        "engine.prompts.Prose": "'Prose' is not a prompt label",
        "engine.speed": "unknown key (allowed keys: command, cwd, env, timeout_s, n_tokens, "
                        "min_tokens, pairs, prepare, capacities, backend, tokens_regex, "
                        "load_regex, policies, prompts)",
        "engine.min_tokens": "9 is above n_tokens 5"}
    assert_bench_wording(e.value)
    assert "placeholders: {prompt_file}" in e.value.hint


def test_engine_rules_are_collected_and_a_missing_command_shows_an_example():
    t = engine_table(policies={"admit": {}, "nocache": {}}, prompts={"a": "rel.txt", "b": "r"})
    del t["command"]
    with pytest.raises(engine_cells.EngineConfigError) as e:
        engine_cells.parse_engine(t, "t.toml")
    assert problems_by_key(e.value) == {
        "engine.command": "missing (required)",
        "engine.prompts.a": "'rel.txt' is relative and no cwd is given",
        "engine.prompts.b": "'r' is relative and no cwd is given"}
    assert 'e.g. command = ["/opt/engine/bin/decode"' in e.value.hint
    t = engine_table(command=["/e"], policies={"admit": {}, "nocache": {}})
    with pytest.raises(engine_cells.EngineConfigError, match="same arguments"):
        engine_cells.parse_engine(t, "t.toml")


def test_engine_problems_in_a_matrix_are_matrix_problems():
    d = {"name": "e", "description": "d", "repetitions": 2, "mglru_at_boot": True,
         "engine": engine_table(pairs=0, command=["/e", "{pool}"])}
    with pytest.raises(MatrixError) as e:
        parse_matrix(d, "m.toml")
    assert problems_by_key(e.value) == {
        "engine.command[1]": "'{pool}': unknown placeholder {pool}",
        "engine.pairs": "must be at least 1, got 0",
        "repetitions": "not allowed in an engine matrix",
        "mglru_at_boot": "an engine matrix leaves reclaim as the host runs it"}


def test_the_policy_table_spells_the_policies_of_the_cells():
    from bench.matrix.engine_cells import PoliciesTable
    assert tuple(PoliciesTable.model_fields) == tuple(POLICY_MODES)


# never pydantic's words --------------------------------------------------------------------------

ODD_VALUES = (1, -1, 1.5, True, "x", "", [], [1], ["x", "x"], {}, {"k": 1})


def key_paths(model, prefix=()):
    """Every key of a model and of its sub-tables (not list items or dict values)."""
    for name, f in model.model_fields.items():
        yield prefix + (name,)
        sub = getattr(f.annotation, "__args__", (f.annotation,))
        for s in sub:
            if isinstance(s, type) and issubclass(s, Table):
                yield from key_paths(s, prefix + (name,))


def with_value(doc, path, value):
    d = copy.deepcopy(doc)
    t = d
    for k in path[:-1]:
        t = t.setdefault(k, {}) if isinstance(t.get(k, {}), dict) else {}
    t[path[-1]] = value
    return d


@pytest.mark.parametrize("model, base, parse", [
    (HostFile, {"transport": "ssh", "address": "a"},
     lambda d: __import__("bench.hosts.inventory", fromlist=["x"]).parse_host(d, Path("h.toml"))),
    (MatrixFile, matrix(), lambda d: parse_matrix(d, "m.toml")),
    (engine_cells.EngineTable, engine_table(), lambda d: engine_cells.parse_engine(d, "t.toml")),
])
def test_any_odd_value_anywhere_gets_bench_wording(model, base, parse):
    seen = 0
    for path in key_paths(model):
        for value in ODD_VALUES:
            try:
                parse(with_value(base, path, value))
            except SchemaError as exc:
                seen += 1
                assert_bench_wording(exc)
                problems_by_key(exc)
    assert seen > 100


# the JSON Schema ---------------------------------------------------------------------------------

def conforms(schema: dict, value, root: dict) -> list[str]:
    """A small JSON Schema check (the keywords the models use): the problems, [] if none."""
    if "$ref" in schema:
        return conforms(root["$defs"][schema["$ref"].rsplit("/", 1)[1]], value, root)
    if "allOf" in schema:           # older pydantic (2.6) wraps a $ref with siblings in allOf
        return [e for s in schema["allOf"] for e in conforms(s, value, root)]
    if "anyOf" in schema:
        return [] if any(not conforms(s, value, root) for s in schema["anyOf"]) else [
            f"{value!r} fits no alternative"]
    kinds = {"object": dict, "array": list, "string": str, "integer": int,
             "number": (int, float), "boolean": bool}
    t = schema.get("type")
    if t and (not isinstance(value, kinds[t]) or (t in ("integer", "number")
                                                  and isinstance(value, bool))):
        return [f"{value!r} is not {t}"]
    errs = []
    if "enum" in schema and value not in schema["enum"]:
        errs.append(f"{value!r} not in {schema['enum']}")
    if "pattern" in schema and not re.search(schema["pattern"], value):
        errs.append(f"{value!r} !~ {schema['pattern']}")
    if "minimum" in schema and value < schema["minimum"]:
        errs.append(f"{value!r} < {schema['minimum']}")
    if t == "array":
        errs += [e for x in value for e in conforms(schema.get("items", {}), x, root)]
    if t == "object":
        errs += [f"missing {k}" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if k in schema.get("properties", {}):
                errs += conforms(schema["properties"][k], v, root)
            elif schema.get("additionalProperties") is False:
                errs.append(f"unknown key {k}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errs += conforms(schema["additionalProperties"], v, root)
    return errs


def cli_schema(kind: str) -> dict:
    app = typer.Typer()
    schema_cli.register(app)
    res = CliRunner().invoke(app, ["schema", kind, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_bench_schema_prints_json_schemas_that_accept_the_shipped_files():
    inv, mat, eng = (cli_schema(k) for k in ("inventory", "matrix", "engine"))
    for s in (inv, mat, eng):
        assert s["additionalProperties"] is False and s["title"].startswith("bench")
        assert "null" not in json.dumps(s)                  # TOML has no null
    for f in sorted((ROOT / "hosts").glob("*.toml")):
        assert conforms(inv, tomllib.loads(f.read_text()), inv) == [], f
    for name in shipped_names():
        doc = tomllib.loads((MATRICES / f"{name}.toml").read_text())
        assert conforms(mat, doc, mat) == [], name
        if "engine" in doc:
            assert conforms(eng, doc["engine"], eng) == []
    # and refuses what the validator refuses
    assert conforms(inv, {"transport": "ssh", "colour": 1}, inv) == ["unknown key colour"]
    assert conforms(mat, matrix(cells={"mechanisms": ["baloon"]}), mat)


def test_the_json_schema_shows_allowed_values_as_enums_and_describes_every_key():
    inv, mat = cli_schema("inventory"), cli_schema("matrix")
    d = mat["$defs"]
    assert inv["properties"]["transport"]["enum"] == list(TRANSPORTS)
    assert inv["$defs"]["RebootTable"]["properties"]["method"]["enum"] == list(REBOOT_METHODS)
    assert d["Cells"]["properties"]["mechanisms"]["items"]["enum"] == list(MECHANISMS)
    assert d["Cells"]["properties"]["reclaims"]["items"]["enum"] == list(RECLAIMS)
    assert d["Cells"]["properties"]["modes"]["items"]["enum"] == list(MODES)
    assert d["HostsTable"]["properties"]["placement"]["enum"] == list(PLACEMENTS)
    assert mat["properties"]["memboot_overhead"]["default"] == "9G"
    assert d["Protocol"]["properties"]["cgroup_headroom"]["default"] == "6Gi"
    for s in (inv, mat):
        for table in [s] + list(s["$defs"].values()):
            for key, prop in table.get("properties", {}).items():
                assert prop.get("description"), (table.get("title"), key)


def test_the_models_module_imports_no_io_or_ui_library():
    code = ("import sys, bench.hosts.inventory_schema, bench.matrix.load; "
            "print(','.join(m for m in ('fabric', 'paramiko', 'sqlalchemy', 'rich', 'typer', 'click', 'subprocess', "
            "'socket', 'matplotlib', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip()
    assert out == ""
