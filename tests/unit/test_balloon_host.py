"""A lab balloon's host is sized so the balloon locks the paper's share of it (bench.matrix.
balloon_host): the model against the paper's measured shares, the mem= each shipped lab scale
boots, and what expansion does with it on hosts that can and cannot boot it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from bench.matrix.balloon_host import (MIN_BALLOON_BYTES, PAPER_BALLOON_OVERHEAD,
                                       balloon_host_memory, locked_share, paper_locked_share)
from bench.matrix.expand import expand
from bench.matrix.load import MatrixError, load_matrix
from bench.units import parse_size

G = 10**9
# §5, Fig. 3 middle: what the balloons locked on machine B (paper-figures.json reclaim.mechanism)
MEASURED = {64 * G: 0.81, 93 * G: 0.74}


def test_the_papers_balloons_model_to_their_measured_locked_shares():
    assert paper_locked_share(64 * G) == pytest.approx(MEASURED[64 * G], abs=1e-9)
    assert abs(paper_locked_share(93 * G) - MEASURED[93 * G]) < 0.01
    # the host's own use the model gives the paper's machines: tens of GB of 480, not 0
    assert 20 * G < PAPER_BALLOON_OVERHEAD < 35 * G
    assert paper_locked_share(448 * G) < 0.02           # a near-empty balloon at 448G


def test_a_host_too_small_for_a_balloon_locks_nothing():
    assert locked_share(350, 400, 150) == 0.0
    # a small host keeps a share of itself, a large one the overhead
    assert locked_share(100, 400, 150) == (400 - 0.26 * 400 - 100) / 400
    assert locked_share(100, 4000, 150) == (4000 - 150 - 100) / 4000


@pytest.mark.parametrize("name", ["capacity", "reclaim"])
def test_each_lab_balloon_boots_the_host_where_it_locks_the_papers_share(name):
    m = load_matrix(name, "lab")
    assert m.balloon_overhead and m.balloon_boots
    paper_of = {lab: int(parse_size(paper)) for paper, lab in m.capacity_map}
    balloons = {p.capacity.text for p in m.points if p.mechanism == "balloon"}
    assert set(dict(m.balloon_boots)) == balloons
    for lab, mem in m.balloon_boots:
        share = locked_share(parse_size(lab), mem, m.balloon_overhead)
        # the paper's share, or the floor's where the paper's balloon is smaller, up to the
        # whole MB mem= is rounded up to
        want = max(paper_locked_share(paper_of[lab]), MIN_BALLOON_BYTES / mem)
        assert 0 <= share - want < 1e6 / mem, (lab, mem, share, want)
        assert share * mem >= MIN_BALLOON_BYTES - 1e6
        assert mem == balloon_host_memory(paper_of[lab], parse_size(lab), m.balloon_overhead)


def _host(mem="1536Mi", floor="240Mi", reboot=True):
    return SimpleNamespace(name="lab-a", tags={"machine": "A"}, mem_total=parse_size(mem),
                           mem_floor=parse_size(floor), reboot=SimpleNamespace(allowed=reboot),
                           transport="ssh", address="lab-a.example", port=22, user="root")


def test_expansion_boots_each_balloon_cell_with_its_sized_host():
    m = load_matrix("reclaim", "lab")
    exp = expand(m, [_host()])
    boots = dict(m.balloon_boots)
    seen = {}
    for r in exp.requests:
        for c in r.candidates:
            cap, mech = c.cell.split("-")[:2]
            if mech == "balloon":
                seen[c.cell] = c.boot.mem
                assert c.boot.mem == boots[cap], c
            elif mech == "cgroup":
                assert c.boot.mem is None, c
    assert set(seen) == {"110M-balloon-mglru", "110M-balloon-classic", "135M-balloon-mglru",
                         "135M-balloon-classic", "265M-balloon-mglru"}


def test_a_host_that_may_not_reboot_skips_the_sized_balloons_with_the_reason():
    exp = expand(load_matrix("reclaim", "lab"), [_host(reboot=False)])
    why = {s.point: s.reason for s in exp.skipped}
    assert "balloon needs a mem= boot and the host's reboot.allowed is false" in why[
        "110M-balloon-mglru"]
    tiny = expand(load_matrix("reclaim", "lab"), [_host(mem="700M", floor="100M")])
    why = {s.point: s.reason for s in tiny.skipped}
    big = max(load_matrix("reclaim", "lab").balloon_boots, key=lambda kv: kv[1])
    assert "is above the host's memory" in why[f"{big[0]}-balloon-mglru"]


def test_a_balloon_overhead_needs_absolute_lab_capacities(tmp_path):
    f = tmp_path / "m.toml"
    f.write_text("""name = "m"
description = "m"
repetitions = 1
[workload]
trace = "tiny"
[cells]
capacities = ["64G"]
mechanisms = ["balloon"]
reclaims = ["mglru"]
[scale.lab]
capacities = { "64G" = "0.1mem" }
balloon_overhead = "100M"
""")
    with pytest.raises(MatrixError) as e:
        load_matrix(f, "lab")
    assert "balloon capacity 0.1mem" in e.value.message
