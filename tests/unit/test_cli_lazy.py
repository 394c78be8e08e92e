"""The CLI imports only the command group a command line names (bench.cli.app.COMMANDS):
each command's lazily built tree is the full tree's, COMMANDS names every top-level command
with the areas that register it, and `bench results` in a fresh interpreter imports none of
the SSH, lab, campaign or bundle-schema modules."""

from __future__ import annotations

import subprocess
import sys

import typer.main

from bench.cli import app as cli_app
from tests.support.paths import REPO


def _tree(cmd, prefix=()) -> dict:
    """Every command path with its help, its parameters' option names and help, and its
    subcommands in the order its help lists them."""
    subs = list(getattr(cmd, "commands", {}))
    out = {prefix: (cmd.help, subs, [(p.name, tuple(getattr(p, "opts", ())),
                                      getattr(p, "help", None)) for p in cmd.params])}
    for name, sub in getattr(cmd, "commands", {}).items():
        out.update(_tree(sub, prefix + (name,)))
    return out


def test_commands_names_every_top_level_command_with_its_areas():
    full = typer.main.get_command(cli_app.app)
    assert set(full.commands) - {"version"} == set(cli_app.COMMANDS)
    whole = _tree(full)
    for name, areas in cli_app.COMMANDS.items():
        assert set(areas) <= set(cli_app.AREAS), name
        part = typer.main.get_command(cli_app.build(areas))
        assert {k: v for k, v in _tree(part).items() if k[:1] == (name,)} == \
            {k: v for k, v in whole.items() if k[:1] == (name,)}, name


def test_areas_for_a_command_line():
    assert cli_app.areas_for(["results", "--matrix", "reclaim"]) == ("results",)
    assert cli_app.areas_for(["-q", "hosts", "reboot", "x"]) == ("hosts", "hosts_reboot")
    for argv in ([], ["--help"], ["--help", "results"], ["resutls"], ["--version"]):
        assert cli_app.areas_for(argv) == cli_app.AREAS, argv


def test_results_imports_only_its_area():
    code = ("import sys; from bench.cli.app import command; command(['results', '--matrix', "
            "'reclaim']); print(' '.join(sorted(sys.modules)))")
    mods = set(subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True,
                              capture_output=True, text=True).stdout.split())
    assert "bench.cli.results" in mods
    for heavy in ("bench.cli.hosts", "bench.cli.schedule", "bench.cli.lab", "bench.cli.trace",
                  "paramiko", "fabric", "bench.judge.bundle", "numpy", "alembic"):
        assert heavy not in mods, heavy
