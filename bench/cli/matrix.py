"""`bench matrix list|show`: the shipped matrices (bench/data/matrices/) and a matrix file
checked and shown, with --scale whether each capacity keeps the paper's regime. Planning one on
hosts is `bench schedule` (bench.cli.schedule)."""

from __future__ import annotations

from typing import Annotated

import typer

from bench.cli.options import JsonOpt, ScaleOpt
from bench.results import plan_views, views

matrix_app = typer.Typer(no_args_is_help=True, help="Matrices: named sets of cells with "
                                                    "repetitions, ordering and host constraints.")
MatrixArg = Annotated[str, typer.Argument(help="A shipped matrix name (bench matrix list) or a "
                                               "path to a matrix TOML file.")]


@matrix_app.command("list")
def matrix_list(json_out: JsonOpt = False) -> None:
    """List the shipped matrices."""
    from bench.matrix.load import list_matrices
    rows = list_matrices()
    if json_out:
        views.emit_json(rows)
    else:
        views.print_table(plan_views.matrix_list_table(rows))


@matrix_app.command("show")
def matrix_show(matrix: MatrixArg, scale: ScaleOpt = None, json_out: JsonOpt = False) -> None:
    """Validate a matrix (and every scale it offers) and show it: workload, repetitions,
    ordering, hosts, cells; with --scale, whether each capacity keeps the paper's regime (the
    demand model's miss fraction at the paper's C and at the scale's, and the share of the
    host's memory a balloon or arena locks), or why the matrix can have no such scale."""
    from bench.matrix.load import load_matrix
    from bench.matrix.regime import (engine_lines, fixed_set_lines, no_scale_reason, regime,
                                     regime_lines)
    from bench.paths import default_data_dir
    full = load_matrix(matrix)
    reason = no_scale_reason(full) if scale and scale not in full.scales else None
    if reason:      # a scale that cannot exist is an answer (exit 0), not an error
        m = full.as_dict() | {"no_scale_reason": f"no scale {scale!r}: {reason}"}
        if json_out:
            views.emit_json(m)
        else:
            print(plan_views.matrix_text(full.as_dict()), end="")
            print(views.visible(f"  regime       {m['no_scale_reason']}"))
        return
    loaded = load_matrix(matrix, scale)
    points = regime(loaded, default_data_dir()) if scale else []
    m = loaded.as_dict()
    if json_out:
        views.emit_json(m | ({"regime": [p.as_dict() for p in points]} if scale else {}))
    else:
        print(plan_views.matrix_text(m), end="")
        for line in regime_lines(points) + (fixed_set_lines(loaded) + engine_lines(loaded)
                                            if scale else []):
            print(views.visible(line))


def register(app: typer.Typer) -> None:
    app.add_typer(matrix_app, name="matrix")
