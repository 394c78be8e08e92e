"""What `bench results --matrix KIND` (but prefetch) and `bench results --cell CELL` show, by
the key that bench.store.result_cache stores them under: the stored entry when it is valid
(result_cache.lookup: the views' module is not imported then), else the view computed (and
stored). bench.cli.results draws its tables and JSON from it; bench.cli.main prints its JSON
text without importing typer or rich when a plain command line names it (bench.cli)."""

from __future__ import annotations

from typing import Any

from bench.store import result_cache, result_cache_parts
from bench.store.db import Store, open_store

WHERE = ("host", "campaign", "workload", "include_demo")


def answer(store: Store, view: str, args: dict) -> Any:
    """The output of `view` ("matrix": args kind and WHERE; "cell_results": args cell, WHERE,
    pool and verbose), with its json_text when it is stored or storable."""
    if view == "matrix":
        out = result_cache.lookup(store, "matrix", args, result_cache_parts.every_cell) or {}
        if not out:
            from bench.store import queries
            out = queries.matrix(store, args["kind"], **{k: args[k] for k in WHERE})
        return out
    rest = {k: v for k, v in args.items() if k != "cell"}
    out = result_cache.lookup(store, "cell_results", args,
                              lambda st: result_cache_parts.cell_depends(
                                  st, cell=args["cell"], workload=args["workload"]))
    if out is None:
        from bench.store import queries
        out = queries.cell_results(store, args["cell"], **rest)
    return out


def answer_text(db: str | None, view: str, args: dict) -> str | None:
    """The JSON text `bench results ... --json` prints for `view` and `args` on the database
    `db` (a reader's open_store), or None when the output has none (not storable)."""
    store = open_store(db, write=False)
    try:
        return result_cache.json_text(answer(store, view, args))
    finally:
        store.close()
