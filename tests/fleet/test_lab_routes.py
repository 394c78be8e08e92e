"""Two real netns labs side by side share the safety route `unreachable 10.200.0.0/16`: downing
one keeps it (the other lab still uses it), downing both removes it, and only if it was absent
before the first came up. Each lab removes only what it added (bridge, veths, netns).

The two labs' prefixes and subnets come from BENCH_FLEET_PAIR (default
"bfr:10.200.78,bfs:10.200.79"), so parallel sessions on one machine can pick their own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.lab import routes
from bench.lab.netns import SAFETY_ROUTE, Lab
from tests.fleet.conftest import lab_skip_reason


def _pair() -> list[tuple[str, str]]:
    text = os.environ.get("BENCH_FLEET_PAIR", "bfr:10.200.78,bfs:10.200.79")
    return [tuple(x.split(":", 1)) for x in text.split(",")][:2]    # type: ignore[misc]


def _route() -> bool:
    out = subprocess.run(["ip", "route", "show", SAFETY_ROUTE], capture_output=True,
                         text=True, check=True).stdout
    return "unreachable" in out


def _link(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


@pytest.fixture
def two_labs(tmp_path):
    reason = lab_skip_reason()
    if reason:
        pytest.skip(reason)
    labs = []
    try:
        for i, (prefix, subnet) in enumerate(_pair()):
            lab = Lab(tmp_path / f"lab{i}")
            labs.append(lab)
            lab.up(1, prefix=prefix, subnet=subnet, host_prefix=f"{prefix}-host")
        yield labs
    finally:
        for lab in labs:
            lab.down()


def test_two_labs_share_the_safety_route(tmp_path, request):
    reason = lab_skip_reason()
    if reason:
        pytest.skip(reason)
    before = _route()
    held_before = set(routes.users(SAFETY_ROUTE))
    labs = request.getfixturevalue("two_labs")
    a, b = labs
    dirs = {str(lab.state_dir.resolve()) for lab in labs}
    assert _route()
    assert set(routes.users(SAFETY_ROUTE)) == held_before | dirs
    assert all(h["sshd"] for lab in labs for h in lab.status()["hosts"])

    removed = a.down()
    assert not any("route" in r for r in removed), removed
    assert _route(), "the route went while the other lab still uses it"
    assert not _link(f"{_pair()[0][0]}br") and _link(f"{_pair()[1][0]}br")
    assert all(h["sshd"] for h in b.status()["hosts"]), "the other lab lost its hosts"
    assert set(routes.users(SAFETY_ROUTE)) == held_before | {str(b.state_dir.resolve())}

    removed = b.down()
    assert not _link(f"{_pair()[1][0]}br")
    if held_before:
        # another lab of this machine (another session) still holds it
        assert _route() and not any("route" in r for r in removed)
    else:
        assert _route() == before, (before, removed)
        assert any("route" in r for r in removed) == (not before), removed
    assert set(routes.users(SAFETY_ROUTE)) == held_before


CHILD = r"""
import json, sys
from pathlib import Path
from bench.lab import routes
from bench.lab.netns import SAFETY_ROUTE, _sh
a, b = Path(sys.argv[1]), Path(sys.argv[2])
seen = []
def note(what):
    seen.append([what, routes.present(SAFETY_ROUTE, _sh), routes.users(SAFETY_ROUTE)])
note("start")
routes.hold(SAFETY_ROUTE, a, _sh); note("a up")
routes.hold(SAFETY_ROUTE, b, _sh); note("b up")
(a / "lab.json").unlink(); note("a wiped")
seen.append(["b down", routes.release(SAFETY_ROUTE, b, _sh)]); note("after b")
_sh("ip", "route", "replace", "unreachable", SAFETY_ROUTE, "metric", "4000"); note("preset")
(a / "lab.json").write_text("{}")
routes.hold(SAFETY_ROUTE, a, _sh)
seen.append(["a down", routes.release(SAFETY_ROUTE, a, _sh)]); note("end")
print(json.dumps(seen))
"""


def test_the_last_lab_removes_the_route_it_added_in_a_private_netns(tmp_path):
    """The real `ip route` in a network namespace of this test (unshare -n: its route table
    starts empty): the route is added by the first user, kept while one lives, removed by the
    last when a lab added it, kept when it was there before; a user whose lab.json is gone
    (state dir wiped without `down`) no longer counts."""
    reason = lab_skip_reason()
    if reason:
        pytest.skip(reason)
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
        (d / "lab.json").write_text("{}")
    env = dict(os.environ, BENCH_LAB_ROUTES=str(tmp_path / "routes.json"),
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    p = subprocess.run(["unshare", "-n", sys.executable, "-c", CHILD, str(a), str(b)],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr
    seen = {row[0]: row[1:] for row in json.loads(p.stdout)}
    sa, sb = str(a.resolve()), str(b.resolve())
    assert seen["start"] == [False, []]
    assert seen["a up"] == [True, [sa]]
    assert seen["b up"] == [True, [sa, sb]]
    assert seen["a wiped"] == [True, [sb]]
    assert seen["b down"] == [f"route unreachable {SAFETY_ROUTE}"]
    assert seen["after b"] == [False, []]
    assert seen["preset"] == [True, []]
    assert seen["a down"] == [None] and seen["end"] == [True, []]
    assert not (tmp_path / "routes.json").exists()
