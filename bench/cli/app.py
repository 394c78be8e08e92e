"""The `bench` command line: a thin layer that parses options, calls the library, and shows
results (rich tables, or JSON with --json). Library errors become one message with the fix.

Each command group lives in its own module with a register(app); they are all imported here,
so a missing module is an ImportError, never a silently absent group."""

from __future__ import annotations

import sys

import typer

from bench import __version__
from bench.cli import campaign, demo, hosts, lab, pool, reboot, results, run, schema, trace
from bench.errors import BenchError
from bench.results import views
from bench.results.views import compose

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Test-bench controller: the kernel page cache as the expert tier of a "
                       "larger-than-DRAM MoE pool.")


@app.command()
def version() -> None:
    """Print bench's version."""
    print(__version__)


for _area in (trace, pool, demo, hosts, reboot, lab, results, run, campaign, schema):
    _area.register(app)


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and turns library errors into one message and an exit code."""
    try:
        app(args=argv, prog_name="bench", standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    except BenchError as exc:
        # the message and hint often quote what a host or a file said: literal text
        views.err_console.print(compose(("error:", "bold red"), f" {exc.message}"),
                                soft_wrap=True)
        if exc.hint:
            views.err_console.print(compose(("fix:", "bold"), f" {exc.hint}"), soft_wrap=True)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
