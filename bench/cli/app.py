"""The `bench` command line: a thin layer that parses options, calls the library, and shows
results (rich tables, or JSON with --json). Library errors become one message with the fix.

Each command group lives in its own module with a register(app); they are all imported here,
so a missing module is an ImportError, never a silently absent group.

Global options (before the command): `--version`; `-v` (bench's logs at INFO, SSH's at DEBUG:
the `bench.ssh` logger and paramiko's), `-vv` (bench and paramiko at DEBUG), `-q` (errors
only: no progress messages, no warnings); `--install-completion` / `--show-completion`
(typer's shell completion, with real choices: bench.cli.complete). Help is plain text (no
rich markup), so `[scale.NAME]` in a help string shows as written."""

from __future__ import annotations

import logging
import sys
from typing import Annotated, Any

import typer

from bench import __version__
from bench.cli import (campaign, complete, demo, hosts, lab, pool, reboot, results, run, schema,
                       trace)
from bench.errors import BenchError
from bench.results import views
from bench.results.views import compose

app = typer.Typer(no_args_is_help=True, add_completion=True, pretty_exceptions_enable=False,
                  rich_markup_mode=None,
                  help="Test-bench controller: the kernel page cache as the expert tier of a "
                       "larger-than-DRAM MoE pool.")


def version_lines() -> list[str]:
    """What `bench --version` prints: the package version, the controller's version (package
    + source digest, as runs record it) and the sha256 of the agent's sources (as
    `bench-agent version` reports it and deploy checks it)."""
    from bench.hosts.deploy import REPO, source_hash
    from bench.version import controller_version
    try:
        agent = source_hash(REPO / "native")
    except (BenchError, OSError) as exc:
        agent = f"unknown ({exc})"
    return [f"bench {__version__}", f"controller {controller_version()}",
            f"agent sources sha256 {agent}"]


def _version(value: bool) -> None:
    if value:
        for line in version_lines():
            print(line)
        raise typer.Exit()


def set_verbosity(verbose: int, quiet: bool) -> None:
    """Logging and messages for -v/-q (module doc). Log records go to stderr as literal
    text (views.LogHandler); paramiko's logger is configured beside bench's, so its records
    show whether or not they are routed through `bench.ssh`."""
    if verbose and quiet:
        raise typer.BadParameter("-v and -q exclude each other")
    views.set_quiet(quiet)
    root = logging.getLogger()
    if not any(isinstance(h, views.LogHandler) for h in root.handlers):
        root.addHandler(views.LogHandler())
    bench_level = (logging.DEBUG if verbose > 1 else logging.INFO if verbose
                   else logging.ERROR if quiet else logging.WARNING)
    ssh_level = logging.DEBUG if verbose else bench_level
    paramiko_level = (logging.DEBUG if verbose > 1 else logging.INFO if verbose
                      else logging.ERROR if quiet else logging.WARNING)
    logging.getLogger("bench").setLevel(bench_level)
    logging.getLogger("bench.ssh").setLevel(ssh_level)
    logging.getLogger("paramiko").setLevel(paramiko_level)


@app.callback()
def _global(
    version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_version,
        help="Print bench's version, the controller's source digest and the agent's source "
             "hash, and exit.")] = False,
    verbose: Annotated[int, typer.Option(
        "-v", "--verbose", count=True, show_default=False,
        help="More logs on stderr: -v shows SSH (bench.ssh, paramiko), -vv all of bench's and "
             "paramiko's at debug level.")] = 0,
    quiet: Annotated[bool, typer.Option(
        "-q", "--quiet", help="Errors only: no progress messages or warnings on stderr.")]
        = False,
) -> None:
    """Test-bench controller: the kernel page cache as the expert tier of a larger-than-DRAM
    MoE pool."""
    set_verbosity(verbose, quiet)


@app.command()
def version() -> None:
    """Print bench's version (bench --version prints the source hashes too)."""
    print(__version__)


for _area in (trace, pool, demo, hosts, reboot, lab, results, run, campaign, schema):
    _area.register(app)
from bench.cli import rules as _rules  # noqa: E402  (bench rules, issue 12)
_rules.register(app)


def command() -> Any:
    """The click command tree of `app`, with bench's shell completers attached."""
    return complete.attach(typer.main.get_command(app))


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and turns library errors into one message and an exit code."""
    try:
        command().main(args=argv, prog_name="bench", standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    except BenchError as exc:
        # the message and hint often quote what a host or a file said: literal text
        views.err_console.print(compose(("error:", "bold red"), f" {exc.message}"),
                                soft_wrap=True)
        if exc.hint:
            views.err_console.print(compose(("fix:", "bold"), f" {exc.hint}"), soft_wrap=True)
        return exc.exit_code
    finally:
        views.set_quiet(False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
