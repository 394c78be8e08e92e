"""The `bench` command line (typer): parses options, calls the library, hands results to
bench.results.views. `bench.cli:main` is the console script; it imports bench.cli.app (and
through it the commands a command line names) when called, so importing one area of the CLI
does not import all."""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    """bench.cli.app.main: run the typer app."""
    from bench.cli.app import main as run
    return run(argv)


__all__ = ["main"]
