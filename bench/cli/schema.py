"""`bench schema inventory|matrix|engine|bundle`: the JSON Schema of each TOML file bench reads,
made from the models that validate them (bench.hosts.inventory_schema.HostFile,
bench.matrix.load.MatrixFile, bench.matrix.engine_cells.EngineTable), so that editors validate and
complete those files: taplo and Even Better TOML (VS Code) take it through a `#:schema` line or
.taplo.toml (hosts/README.md). `bundle` is the run bundle's contract (docs/bundle.md): the JSON
parts the host runner writes and ingest validates (bench.judge.bundle_schema.BundleParts), by
file name."""

from typing import Annotated, Any

import typer

from bench.results import views

# The models (pydantic) load inside the commands: see bench.cli.trace on deferred imports.

schema_app = typer.Typer(no_args_is_help=True, help="JSON Schemas of the TOML files bench reads "
                                                    "(host files, matrices, the [engine] table), "
                                                    "for editors, and of a run bundle's parts.")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (implied: a JSON Schema is "
                                                      "JSON).")]
TITLES = {"inventory": "bench host file (hosts/NAME.toml)",
          "matrix": "bench matrix (bench/data/matrices/NAME.toml or a user matrix)",
          "engine": "bench [engine] table of an end-to-end matrix (docs/engine.md)",
          "bundle": "bench run bundle: its JSON parts by file name (docs/bundle.md)"}


def _model(kind: str) -> Any:
    if kind == "inventory":
        from bench.hosts.inventory_schema import HostFile
        return HostFile
    if kind == "matrix":
        from bench.matrix.load import MatrixFile
        return MatrixFile
    from bench.matrix.engine_cells import EngineTable
    return EngineTable


def _drop_null_defaults(node: Any) -> None:
    """No `default: null` (TOML has no null), nor the default of a whole table (its keys say
    theirs, and an unset key would show as null)."""
    if isinstance(node, dict):
        if "default" in node and (node["default"] is None or "$ref" in node):
            del node["default"]
        for v in node.values():
            _drop_null_defaults(v)
    elif isinstance(node, list):
        for v in node:
            _drop_null_defaults(v)


def document_schema(kind: str) -> dict:
    """The JSON Schema of one kind of document: inventory, matrix, engine or bundle."""
    from pydantic.json_schema import GenerateJsonSchema

    if kind == "bundle":        # JSON, not TOML: null is a value there
        from bench.judge.bundle_schema import BundleParts
        out = BundleParts.model_json_schema(by_alias=True)
        return {"title": TITLES[kind], **{k: v for k, v in out.items() if k != "title"}}

    class TomlJsonSchema(GenerateJsonSchema):
        """TOML has no null: an optional key is one left out, not one set to null."""

        def nullable_schema(self, schema: Any) -> Any:
            return self.generate_inner(schema["schema"])

    out = _model(kind).model_json_schema(schema_generator=TomlJsonSchema)
    _drop_null_defaults(out)
    return {"title": TITLES[kind], **{k: v for k, v in out.items() if k != "title"}}


def _emit(kind: str) -> None:
    views.emit_json(document_schema(kind))


@schema_app.command("inventory")
def schema_inventory(json_out: JsonOpt = True) -> None:
    """The JSON Schema of a host file (hosts/NAME.toml)."""
    _emit("inventory")


@schema_app.command("matrix")
def schema_matrix(json_out: JsonOpt = True) -> None:
    """The JSON Schema of a matrix file ([engine] tables included)."""
    _emit("matrix")


@schema_app.command("engine")
def schema_engine(json_out: JsonOpt = True) -> None:
    """The JSON Schema of a matrix's [engine] table alone."""
    _emit("engine")


@schema_app.command("bundle")
def schema_bundle(json_out: JsonOpt = True) -> None:
    """The JSON Schema of a run bundle's parts (spec.json, status.json, manifest.json ...)."""
    _emit("bundle")


def register(app: typer.Typer) -> None:
    app.add_typer(schema_app, name="schema")
