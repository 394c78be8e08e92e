"""Shell completion with real choices (`bench --install-completion`): host names from the
inventory, shipped matrix names, cells and campaigns from the database; options with a fixed
set of values (Literal or Enum annotations) complete their choices through typer itself.

The completers are attached by parameter name to the whole command tree in one place
(attach()), so every command's `--host`, `--hosts`, `HOST`, `--matrix`, `--cell`,
`--campaign` completes the same way. A completer never fails and never writes: a broken
inventory or a missing database completes nothing (readers open the database with
write=False, so completing never creates one)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.errors import BenchError

Completer = Callable[[Any, str], list[str]]


def _comma_list(values: list[str], incomplete: str) -> list[str]:
    """Completions of the last item of a comma-separated list (`a,b,<TAB>`)."""
    head, sep, last = incomplete.rpartition(",")
    done = set(head.split(",")) if sep else set()
    return [f"{head}{sep}{v}" for v in values if v.startswith(last) and v not in done]


def host_names(ctx: Any) -> list[str]:
    from bench.hosts.inventory import load_inventory
    hosts_dir = (ctx.params or {}).get("hosts_dir") if ctx is not None else None
    try:
        return sorted(load_inventory(Path(hosts_dir) if hosts_dir else None))
    except (BenchError, OSError, ValueError):
        return []


def matrix_names(_ctx: Any) -> list[str]:
    from bench.matrix.load import shipped_names
    try:
        return shipped_names()
    except (BenchError, OSError):
        return []


def _db_names(ctx: Any, what: str) -> list[str]:
    from bench.store.db import open_store
    from bench.store.export import stored_names
    db = (ctx.params or {}).get("db") if ctx is not None else None
    try:
        store = open_store(db, write=False)
    except BenchError:
        return []
    try:
        return stored_names(store, what)
    except Exception:  # noqa: BLE001 - a completer must never end in a traceback in the shell
        return []
    finally:
        store.close()


def complete_hosts(ctx: Any, incomplete: str) -> list[str]:
    return _comma_list(host_names(ctx), incomplete)


def complete_matrix(ctx: Any, incomplete: str) -> list[str]:
    return [m for m in matrix_names(ctx) if m.startswith(incomplete)]


def complete_cell(ctx: Any, incomplete: str) -> list[str]:
    low = incomplete.lower()
    return [c for c in _db_names(ctx, "cells") if c.lower().startswith(low)]


def complete_campaign(ctx: Any, incomplete: str) -> list[str]:
    return [c for c in _db_names(ctx, "campaigns") if c.startswith(incomplete)]


# parameter name -> completer, for parameters whose type is free text (choices complete
# themselves); `matrix` of results/plot is a Literal of kinds, so it keeps its choices
BY_NAME: dict[str, Completer] = {
    "host": complete_hosts, "hosts": complete_hosts, "matrix": complete_matrix,
    "cell": complete_cell, "cell_a": complete_cell, "cell_b": complete_cell,
    "campaign": complete_campaign,
}


def _walk(cmd: Any) -> Iterator[Any]:
    yield cmd
    for sub in (getattr(cmd, "commands", None) or {}).values():
        yield from _walk(sub)


def attach(root: Any) -> Any:
    """Give every free-text parameter named in BY_NAME its completer; returns `root`."""
    for cmd in _walk(root):
        for param in cmd.params:
            fn = BY_NAME.get(param.name or "")
            desc = getattr(param, "type_descriptor", None)
            if fn is None or getattr(desc, "is_choice", False):
                continue
            param._custom_shell_complete = _adapter(fn)
    return root


def _adapter(fn: Completer) -> Callable[[Any, Any, str], list[str]]:
    def complete(ctx: Any, _param: Any, incomplete: str) -> list[str]:
        try:
            return fn(ctx, incomplete)
        except Exception:  # noqa: BLE001 - a completer must never end in a traceback
            return []
    return complete
