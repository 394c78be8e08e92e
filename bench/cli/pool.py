"""`bench pool make|check`: expert pools on disk."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from bench.cli.options import JsonOpt
from bench.results import views

pool_app = typer.Typer(no_args_is_help=True, help="Expert pools on disk.")

@pool_app.command("make")
def pool_make(
    directory: Annotated[Path, typer.Argument(help="Pool directory.")],
    layers: Annotated[int, typer.Option(help="Routed layers.")],
    experts: Annotated[int, typer.Option(help="Experts per layer.")],
    expert_bytes: Annotated[int, typer.Option(help="Bytes per expert file.")],
    seed: Annotated[int, typer.Option(help="Data seed.")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Write per-expert files of real data with pool.json (resumable; never overwrites another
    pool)."""
    from bench.plan.pool import PoolSpec, make_pool  # numpy: loaded only when used
    spec = PoolSpec(layers, experts, expert_bytes, seed=seed)
    with views.progress_bar(f"pool {directory}", layers * experts) as update:
        result = make_pool(directory, spec, update)
    if json_out:
        views.emit_json(result)
    else:
        views.say(f"pool {directory}: {result['written']} experts written, {result['kept']} kept, "
                  f"{result['bytes'] / 1e9:.3f} GB")


@pool_app.command("check")
def pool_check(directory: Annotated[Path, typer.Argument(help="Pool directory.")],
               json_out: JsonOpt = False) -> None:
    """Show a pool's manifest; fail if it is missing or incomplete."""
    from bench.plan.pool import check_pool  # numpy: loaded only when used
    spec = check_pool(directory)
    if json_out:
        views.emit_json(dict(asdict(spec), complete=True, total_bytes=spec.total_bytes))
    else:
        views.say(f"pool {directory}: {spec.layers} x {spec.experts_per_layer} experts of "
                  f"{spec.expert_bytes} B, complete")


def register(app: typer.Typer) -> None:
    app.add_typer(pool_app, name="pool")
