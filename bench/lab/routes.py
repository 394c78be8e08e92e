"""Routes that several labs on one machine share (the netns lab's safety route
`unreachable 10.200.0.0/16`), reference-counted so that a lab removes only what it added.

The record is a small JSON file, /run/bench-lab-routes.json (or $BENCH_LAB_ROUTES), read and
written under an exclusive flock of <file>.lock, so labs brought up and down by different
processes at once see one another:

    {"10.200.0.0/16": {"added": true, "users": ["/run/bench-lab", "/tmp/lab-2"]}}

`users` are the state dirs of the labs that use the route; `added` says a lab added the route
(it was absent when the first user came). `hold` adds a user (and the route when absent);
`release` removes one, and the last user removes the route only when a lab added it: a route
that was there before any lab stays. A user whose lab.json is gone (its state dir wiped without
`down`) no longer counts. Everything under /run is gone after a reboot, as are the routes."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

Sh = Callable[..., Any]          # bench.lab.netns._sh: (*argv, check=True) -> CompletedProcess


def routes_file() -> Path:
    return Path(os.environ.get("BENCH_LAB_ROUTES") or "/run/bench-lab-routes.json")


@contextmanager
def _record() -> Iterator[dict]:
    """The record, read and written back under the flock (other processes wait)."""
    path = routes_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            data = json.loads(path.read_text()) if path.exists() else {}
        except ValueError:
            data = {}           # a torn file of a killed writer: rebuilt by the labs that come
        data = data if isinstance(data, dict) else {}
        yield data
        if data:
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps(data, indent=2) + "\n")
            tmp.replace(path)
        else:
            path.unlink(missing_ok=True)
    finally:
        os.close(fd)


def present(route: str, sh: Sh) -> bool:
    return "unreachable" in sh("ip", "route", "show", route).stdout


def _live(users: object) -> list[str]:
    """Users whose lab still exists (its lab.json)."""
    if not isinstance(users, list):
        return []
    return [u for u in users if isinstance(u, str) and (Path(u) / "lab.json").is_file()]


def users(route: str) -> list[str]:
    """The state dirs of the labs that hold `route` now."""
    with _record() as data:
        return _live((data.get(route) or {}).get("users"))


def hold(route: str, state_dir: Path, sh: Sh) -> None:
    """Make the lab in state_dir a user of `route`, adding the route when it is absent."""
    me = str(Path(state_dir).resolve())
    with _record() as data:
        ent = data.setdefault(route, {"added": False, "users": []})
        live = _live(ent.get("users"))
        if not live:
            ent["added"] = False
        if not present(route, sh):
            sh("ip", "route", "replace", "unreachable", route, "metric", "4000")
            ent["added"] = True
        ent["users"] = [u for u in live if u != me] + [me]


def release(route: str, state_dir: Path, sh: Sh) -> str | None:
    """The lab in state_dir stops using `route`; the last user removes it if a lab added it.
    Returns what was removed (None: nothing)."""
    me = str(Path(state_dir).resolve())
    with _record() as data:
        ent = data.get(route)
        if not isinstance(ent, dict):
            return None
        ent["users"] = [u for u in _live(ent.get("users")) if u != me]
        if ent["users"]:
            return None
        del data[route]
        if ent.get("added") and present(route, sh):
            sh("ip", "route", "del", "unreachable", route, "metric", "4000", check=False)
            return f"route unreachable {route}"
        return None
