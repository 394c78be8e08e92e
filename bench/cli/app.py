"""The `bench` command line: a thin layer that parses options, calls the library, and shows
results (rich tables, or JSON with --json). Library errors become one message with the fix.

Each command group lives in its own module with a register(app), listed in AREAS. A command
line that names a command of COMMANDS imports only the modules that command needs (so `bench
results` does not pay for the SSH, lab and campaign modules); anything else (help, completion,
an unknown or misspelt command, a command COMMANDS does not list) imports every area. The full
tree (`app`, command()) always holds every area, so a missing module is an ImportError, never a
silently absent group; tests/unit/test_cli_lazy.py checks COMMANDS against what each area
registers.

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

import importlib
from functools import lru_cache

from bench import __version__
from bench.errors import BenchError
from bench.results import views
from bench.results.views import compose

# the modules under bench.cli that register commands, in registration order
AREAS = ("trace", "pool", "demo", "hosts", "hosts_reboot", "lab", "db", "retention", "results",
         "run", "matrix", "schedule", "campaigns", "schema", "placement", "report", "engine")
# a top-level command -> the areas it needs (hosts_reboot adds commands to the hosts group)
COMMANDS = {"trace": ("trace",), "sim": ("trace",), "demand": ("trace",), "plan": ("trace",),
            "pool": ("pool",), "demo": ("demo",), "hosts": ("hosts", "hosts_reboot"),
            "lab": ("lab",), "run": ("run",), "schema": ("schema",), "placement": ("placement",),
            "rules": ("placement",),     # placement's hidden old name (bench.cli.placement)
            "db": ("db",), "retention": ("retention",),
            **{c: ("results",) for c in ("ingest", "runs", "results", "compare", "sizing",
                                         "export", "plot")},
            "matrix": ("matrix",), "schedule": ("schedule",), "resume": ("schedule",),
            "campaigns": ("campaigns",), "watch": ("campaigns",), "report": ("report",),
            "engine": ("engine",)}


def _root() -> typer.Typer:
    return typer.Typer(no_args_is_help=True, add_completion=True, pretty_exceptions_enable=False,
                       rich_markup_mode=None,
                       help="Test-bench controller: the kernel page cache as the expert tier of "
                            "a larger-than-DRAM MoE pool.")


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


def version() -> None:
    """Print bench's version (bench --version prints the source hashes too)."""
    print(__version__)


@lru_cache(maxsize=None)
def build(areas: tuple[str, ...] = AREAS) -> typer.Typer:
    """The app with the global options, `version` and the commands of `areas`."""
    root = _root()
    root.callback()(_global)
    root.command()(version)
    # every module first, then their register(): as when app.py imported them all, so that
    # commands a module adds to another's group on import keep their place in the help
    modules = [importlib.import_module(f"bench.cli.{name}") for name in areas]
    for module in modules:
        module.register(root)
    return root


def __getattr__(name: str) -> Any:
    if name == "app":                     # the full tree, built on first use
        return build()
    raise AttributeError(name)


def areas_for(argv: list[str]) -> tuple[str, ...]:
    """The areas a command line needs (module doc): the first word that is not an option
    names the command (bench's global options take no value)."""
    first = next((a for a in argv if not a.startswith("-")), None)
    if first is None or any(a in ("--help", "--install-completion", "--show-completion")
                            for a in argv[:argv.index(first)]):
        return AREAS
    return COMMANDS.get(first, AREAS)


def command(argv: list[str] | None = None) -> Any:
    """The click command tree, with bench's shell completers attached: the whole of it, or
    the part that the command line `argv` needs (areas_for)."""
    from bench.cli import complete
    areas = AREAS if argv is None else areas_for(argv)
    return complete.attach(typer.main.get_command(build(areas)))


def _report(exc: BenchError) -> int:
    # the message and hint often quote what a host or a file said: literal text
    views.err_console.print(compose(("error:", "bold red"), f" {exc.message}"), soft_wrap=True)
    if exc.hint:
        views.err_console.print(compose(("fix:", "bold"), f" {exc.hint}"), soft_wrap=True)
    return exc.exit_code


def as_bench_error(exc: Exception) -> BenchError | None:
    """A filesystem or database error that no command turned into a BenchError, in bench's
    words (one line and its fix); None for anything else (a bug: its traceback shows)."""
    if isinstance(exc, OSError):
        from bench.paths import os_failure
        return BenchError(*os_failure(exc))
    if "sqlalchemy" in sys.modules:        # else no database error can have been raised
        from bench.store.db import as_store_error
        return as_store_error(exc)
    return None


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and turns library errors into one message and an exit code;
    a filesystem or database error that reaches here unhandled too (its traceback at -vv)."""
    try:
        command(sys.argv[1:] if argv is None else argv).main(args=argv, prog_name="bench",
                                                               standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    except BenchError as exc:
        return _report(exc)
    except Exception as exc:
        err = as_bench_error(exc)
        if err is None:
            raise
        logging.getLogger("bench").debug("where it failed", exc_info=True)
        return _report(err)
    finally:
        views.set_quiet(False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
