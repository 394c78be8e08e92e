"""bench.judge.agreement on reclaim-matrix rows: every mechanism against the cgroup wall at the
same capacity, group and reclaim; a memboot point against the balloon curve interpolated at its
capacity, never extrapolated; points missing a partner give no entry."""

from __future__ import annotations

import pytest

from bench.judge.agreement import agreement, interpolation

G = 10 ** 9


def s(t, dev=1.0, n=3):
    return {"median_s": t, "device_gb_per_iteration": dev, "n_retained": n}


ROWS = [
    {"group": "g1", "capacity_bytes": 64 * G, "mechanism": "balloon",
     "mglru": s(2.76, 33.6), "classic": s(2.2, 16.8)},
    {"group": "g1", "capacity_bytes": 64 * G, "mechanism": "cgroup",
     "mglru": s(2.0, 16.5), "classic": s(2.0, 16.5)},
    {"group": "g1", "capacity_bytes": 256 * G, "mechanism": "balloon", "mglru": s(1.37)},
    {"group": "g1", "capacity_bytes": 448 * G, "mechanism": "balloon", "mglru": s(0.99)},
    {"group": "g1", "capacity_bytes": 448 * G, "mechanism": "cgroup", "mglru": s(1.04, n=2)},
    {"group": "g1", "capacity_bytes": 339 * G, "mechanism": "memboot", "mglru": s(1.17)},
    {"group": "g1", "capacity_bytes": 93 * G, "mechanism": "memboot", "classic": s(2.0)},
    {"group": "g2", "capacity_bytes": 600 * G, "mechanism": "memboot", "mglru": s(0.9)},
    {"group": "g2", "capacity_bytes": 64 * G, "mechanism": "balloon", "mglru": s(3.0)},
]


def test_every_mechanism_against_the_wall():
    got = {(a["capacity_bytes"] // G, a["reclaim"], a["mechanism"]): a for a in agreement(ROWS)}
    assert set(got) == {(64, "mglru", "balloon"), (64, "classic", "balloon"),
                        (448, "mglru", "balloon")}
    a = got[(64, "mglru", "balloon")]
    assert a["time_vs_cgroup"] == pytest.approx(2.76 / 2.0 - 1)
    assert a["device_vs_cgroup"] == pytest.approx(33.6 / 16.5 - 1)
    b = got[(448, "mglru", "balloon")]
    assert b["time_vs_cgroup"] == pytest.approx(0.99 / 1.04 - 1) and b["n_cgroup"] == 2


def test_memboot_on_the_balloon_curve():
    got = {(i["group"], i["capacity_bytes"] // G, i["reclaim"]): i for i in interpolation(ROWS)}
    i = got[("g1", 339, "mglru")]
    want = 1.37 + (0.99 - 1.37) * (339 - 256) / (448 - 256)
    assert i["status"] == "interpolated" and i["balloon_s"] == pytest.approx(want)
    assert i["between"] == [256 * G, 448 * G]
    assert i["memboot_vs_balloon"] == pytest.approx(1.17 / want - 1)
    # classic has a single balloon point at 64G: 93G lies outside it
    assert got[("g1", 93, "classic")]["status"] == "outside the balloon sweep"
    assert got[("g1", 93, "classic")]["balloon_s"] is None
    # g2's memboot at 600G is beyond its sweep (64G only): reported, not extrapolated
    assert got[("g2", 600, "mglru")]["memboot_vs_balloon"] is None
