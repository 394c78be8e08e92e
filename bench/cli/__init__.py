"""The `bench` command line (typer): parses options, calls the library, hands results to
bench.results.views. `bench.cli:main` is the console script."""

from bench.cli.app import main

__all__ = ["main"]
