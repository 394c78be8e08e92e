"""The `bench` command line (typer): parses options, calls the library, hands results to
bench.results.views. `bench.cli:main` is the console script; it imports bench.cli.app (and
through it the commands) when called, so importing one area of the CLI does not import all.

One command line is answered before that: `bench results --matrix KIND` or `--cell CELL`
(tables, or `--json`) is answered by bench.store.result_serve when its view is stored at the
database's current generation (the standard library reads it: no typer, SQLAlchemy or rich
for JSON; rich alone for tables), else computed by bench.store.result_answer without typer
(at 100,000 runs typer, pydantic, rich and SQLAlchemy were most of such a command's time).
Only a plain line takes that way: the command first, then the results options alone, each
at most once, with a value that does not start with `-`, a matrix kind whose view is stored
and one of --cell or --matrix; anything else (help, a global option, `--opt=value`, an
unknown or repeated option), any error and any doubt go to the typer app, which parses,
refuses and computes as always. What is printed is what the app prints for that view
(tests/local/store/test_results_served.py)."""

from __future__ import annotations

import os
import sys
from typing import Any

_VALUED = ("--cell", "--matrix", "--host", "--campaign", "--workload", "--db")
_FLAGS = {"--include-demo": "include_demo", "--pool": "pool", "-v": "verbose",
          "--verbose": "verbose", "--json": "json"}
# bench.cli.results.MatrixKind but prefetch (its view is not stored as one entry)
_STORED_MATRICES = ("capacity", "reclaim", "equal-memory", "admission", "end-to-end")


def main(argv: list[str] | None = None) -> int:
    """bench.cli.app.main, unless the stored view answers (module doc)."""
    args = sys.argv[1:] if argv is None else argv
    text = served(args)
    if text is not None:
        try:
            if "--json" in args:
                sys.stdout.write(text + "\n")
            else:
                _show(args, text)
            sys.stdout.flush()
        except BrokenPipeError:     # as click ends the app then: silent, exit status 1
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        return 0
    from bench.cli.app import main as run
    return run(argv)


def served_view(args: list[str]) -> tuple[str | None, str, dict] | None:
    """(--db, view, the view's key arguments as bench.cli.results looks them up) of a plain
    `results` line (module doc), else None."""
    if len(args) < 2 or args[0] != "results":
        return None
    opts: dict[str, Any] = {}
    i = 1
    while i < len(args):
        a = args[i]
        value: Any
        if a in _FLAGS:
            name, value, i = _FLAGS[a], True, i + 1
        elif a in _VALUED and i + 1 < len(args) and not args[i + 1].startswith("-"):
            name, value, i = a[2:], args[i + 1], i + 2
        else:
            return None
        if name in opts:
            return None
        opts[name] = value
    opts.pop("json", None)
    db = opts.pop("db", None)
    where = {k: opts.get(k) for k in ("host", "campaign", "workload")}
    where["include_demo"] = bool(opts.get("include_demo"))
    if "matrix" in opts and "cell" not in opts and not opts.get("pool"):
        kind = opts["matrix"]
        return (db, "matrix", dict(kind=kind, **where)) if kind in _STORED_MATRICES else None
    if "cell" in opts and "matrix" not in opts:
        return db, "cell_results", dict(cell=opts["cell"], **where,
                                        pool=bool(opts.get("pool")),
                                        verbose=bool(opts.get("verbose")))
    return None


def _show(args: list[str], text: str) -> None:
    """The tables of a served view, drawn as the app draws them (bench.results.store_views)."""
    import json
    from bench.results import store_views
    if "--matrix" in args:
        store_views.show_matrix(json.loads(text))
    else:
        store_views.show_cell(json.loads(text), "-v" in args or "--verbose" in args)


def served(args: list[str]) -> str | None:
    """The JSON text of the view that answers the command line `args`: stored, else computed
    without typer and rich; None when the app is to answer (module doc)."""
    view = served_view(args)
    cache = sys.modules.get("bench.store.result_cache")
    if view is None or (cache is not None and not getattr(cache, "ENABLED", True)):
        return None
    from bench.store.result_serve import stored_text
    text = stored_text(*view)
    if text is not None:
        return text
    try:
        from bench.store.result_answer import answer_text
        return answer_text(*view)
    except Exception:  # noqa: BLE001 - the app computes it again and says what went wrong
        return None


__all__ = ["main"]
