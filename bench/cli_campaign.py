"""`bench matrix list|show` and `bench schedule --dry-run`: matrices and the campaign plan.

Planning only: nothing here touches a host (no SSH); the plan comes from the inventory files,
the matrix and the seed. Running a campaign (without --dry-run) is the executor's job."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from .cli_hosts import HostsDirOpt, JsonOpt

matrix_app = typer.Typer(no_args_is_help=True, help="Matrices: named sets of cells with "
                                                    "repetitions, ordering and host constraints.")
MatrixArg = Annotated[str, typer.Argument(help="A shipped matrix name (bench matrix list) or a "
                                               "path to a matrix TOML file.")]


@matrix_app.command("list")
def matrix_list(json_out: JsonOpt = False) -> None:
    """List the shipped matrices."""
    from . import views
    from .matrix import list_matrices
    rows = list_matrices()
    if json_out:
        views.emit_json(rows)
    else:
        views.print_table(views.matrix_list_table(rows))


@matrix_app.command("show")
def matrix_show(matrix: MatrixArg, json_out: JsonOpt = False) -> None:
    """Validate a matrix and show it: workload, repetitions, ordering, hosts, cells."""
    from . import views
    from .matrix import load_matrix
    m = load_matrix(matrix).as_dict()
    if json_out:
        views.emit_json(m)
    else:
        print(views.matrix_text(m), end="")


def build_plan(matrix: str, host_names: list[str] | None, hosts_dir: Path | None, seed: int):
    """(plan, expansion, matrix) for a matrix on inventory hosts; pure apart from reading files."""
    from .inventory import load_inventory, select
    from .matrix import expand, load_matrix
    from .schedule import HostState, schedule
    m = load_matrix(matrix)
    hosts = select(load_inventory(hosts_dir), host_names)
    exp = expand(m, hosts)
    plan = schedule(exp.requests, [HostState.from_host(h) for h in hosts], seed,
                    campaign=f"{m.name}-s{seed}", randomize=m.randomize,
                    interleave=m.interleave, run_seconds=m.run_seconds,
                    reboot_seconds=m.reboot_seconds)
    return plan, exp, m


def schedule_cmd(
    matrix: Annotated[str, typer.Option("--matrix", help="Matrix name or TOML file.")],
    hosts: Annotated[Optional[str], typer.Option(
        "--hosts", help="Comma-separated host names (default: every inventory host).")] = None,
    hosts_dir: HostsDirOpt = None,
    seed: Annotated[Optional[int], typer.Option(
        "--seed", help="Random seed of the order (default: a fresh one, printed).")] = None,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the ordered plan per host, reboots and estimated duration; "
                          "touch nothing.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Schedule a matrix on hosts: randomized with a recorded seed, grouped by boot config so
    each host reboots as few times as the matrix allows, repetitions interleaved."""
    import secrets

    from . import views
    from .errors import InputError
    if not dry_run:
        raise InputError("running a campaign is not available yet: the campaign executor is "
                         "not wired in this version",
                         "use --dry-run to see the plan (nothing is touched)")
    names = [x.strip() for x in hosts.split(",") if x.strip()] if hosts else None
    if seed is None:
        seed = secrets.randbelow(1_000_000)
    plan, exp, m = build_plan(matrix, names, hosts_dir, seed)
    if json_out:
        views.emit_json({"matrix": m.name, "source": m.source, "workload": m.workload,
                         **plan.as_dict(), "skipped": exp.as_dict()["skipped"],
                         "warnings": exp.warnings})
    else:
        print(views.plan_text(m.as_dict(), plan.as_dict(), exp.as_dict()), end="")


def register(app: typer.Typer) -> None:
    app.add_typer(matrix_app, name="matrix")
    app.command("schedule")(schedule_cmd)
