"""`bench pool make|check`: expert pools on disk."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from bench.cli.options import JsonOpt
from bench.results import views

pool_app = typer.Typer(no_args_is_help=True, help="Expert pools on disk.")
SHOWN = 50      # problem lines printed (all in --json, up to the verifier's cap)


@pool_app.command("make")
def pool_make(
    directory: Annotated[Path, typer.Argument(help="Pool directory (created inside an existing "
                                                   "parent; --parents creates the parents).")],
    layers: Annotated[int, typer.Option(help="Routed layers.")],
    experts: Annotated[int, typer.Option(help="Experts per layer.")],
    expert_bytes: Annotated[int, typer.Option(help="Bytes per expert file.")],
    seed: Annotated[int, typer.Option(help="Data seed.")] = 0,
    parents: Annotated[bool, typer.Option("--parents", help="Create missing parent "
                                          "directories too.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Write per-expert files of real data with pool.json and pool.sums (sampled digests);
    resumable; never overwrites another pool."""
    from bench.errors import InputError, PoolError
    from bench.plan.pool import PoolSpec, make_pool
    try:
        spec = PoolSpec(layers, experts, expert_bytes, seed=seed)
    except PoolError as e:          # options no pool can have: bad input (exit 2)
        raise InputError(e.message, hint="--layers, --experts >= 1, --expert-bytes >= 32, "
                         "--seed >= 0") from None
    with views.progress_bar(f"pool {directory}", layers * experts) as update:
        result = make_pool(directory, spec, update, parents=parents)
    if json_out:
        views.emit_json(result)
    else:
        if result["created"]:
            views.say(f"created {directory}")
        views.say(f"pool {directory} ({result['key']}): {result['written']} experts written, "
                  f"{result['kept']} kept, {result['bytes'] / 1e9:.3f} GB")


@pool_app.command("check")
def pool_check(directory: Annotated[Path, typer.Argument(help="Pool directory.")],
               json_out: JsonOpt = False) -> None:
    """Verify a pool: pool.json, every file's presence, type, size and header, the content of
    its sampled blocks against pool.sums, and no extra file. Exit 1 on any problem, one line
    each."""
    from bench.plan.pool import verify_pool
    rep = verify_pool(directory)
    if json_out:
        views.emit_json(rep)
    else:
        for p in rep["problems"][:SHOWN]:    # a gguf pool's model may lie outside it
            views.say(p["line"] if p["file"].startswith("/") else f"{directory}/{p['line']}")
        if rep["problem_count"] > SHOWN:
            views.say(f"... and {rep['problem_count'] - SHOWN} more problems (--json lists "
                      f"up to {len(rep['problems'])})")
        m = rep["manifest"]
        if m is not None and m.get("kind") == "gguf":
            views.say(f"pool {directory}: over the model {m['file']} ({m['file_bytes']} B), "
                      f"{m['layers']} x {m['experts_per_layer']} experts of "
                      f"{m['expert_bytes']} B in {m['ranges_per_expert']} ranges each, "
                      + ("complete" if rep["complete"] else "INCOMPLETE")
                      + "; model checked by size, mtime and first MiB, ranges by sha256; "
                      + f"{rep['problem_count']} problem(s)")
        elif m is not None:
            content = {"sampled": "content of sampled blocks checked against pool.sums",
                       "unverified": "content NOT checked: pool.json records no sampled "
                                     "digests (a pool written before bench kept them; "
                                     "remake it to get them)"}.get(rep["content"],
                                                                    "content not checked")
            views.say(f"pool {directory}: {m['layers']} x {m['experts_per_layer']} experts of "
                      f"{m['expert_bytes']} B, seed {m['seed']}: {rep['files']} files, "
                      + ("complete" if rep["complete"] else "INCOMPLETE")
                      + f"; {content}; {rep['problem_count']} problem(s)")
    if not rep["ok"]:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(pool_app, name="pool")
