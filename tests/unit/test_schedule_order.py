"""The scheduler's per-host order is near-linear and the same order as before: the quadratic
algorithm it replaced (a scan of every run once per repetition, or once per cell, and once per
boot group) is kept here as the reference, and hypothesis checks that both give the same plan,
engine pairs, boot groups, randomized or not, interleaved or not. Plus the time of a plan of
10^5 runs, which took 15 s and more with the reference."""

import random
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.matrix import schedule as S
from bench.matrix.engine_cells import order_label, pair_orders
from bench.matrix.estimate import Estimate
from bench.matrix.expand import BootConfig, Candidate, RunRequest
from bench.matrix.schedule import HostSchedule, HostState, ScheduledRun, schedule

G = 1 << 30
BOOTS = [BootConfig(), BootConfig(102 * G), BootConfig(None, "off"), BootConfig(48 * G, "on")]


# the reference: bench.matrix.schedule's order as it was (quadratic) ------------------------------

def old_first(rep, prompt, seed):
    return pair_orders(rep + 1, seed, prompt)[rep][0]


def old_paired(rcs, seed):
    blocks, at = [], {}
    for rc in rcs:
        r = rc[0]
        if r.pair is None:
            blocks.append([rc])
        elif (r.unit, r.rep) in at:
            blocks[at[(r.unit, r.rep)]].append(rc)
        else:
            at[(r.unit, r.rep)] = len(blocks)
            blocks.append([rc])
    for i in at.values():
        r = blocks[i][0][0]
        first = old_first(r.rep, r.pair[0], seed)
        blocks[i].sort(key=lambda rc: rc[0].pair[1] != first)
    return blocks


def old_order_group(rcs, hrng, seed, randomize, interleave):
    rs = sorted(rcs, key=lambda rc: (rc[0].index, rc[0].unit, rc[0].rep))
    ordered = []
    if interleave:
        for rep in sorted({r.rep for r, _ in rs}):
            block = old_paired([rc for rc in rs if rc[0].rep == rep], seed)
            if randomize:
                hrng.shuffle(block)
            ordered += [rc for pair in block for rc in pair]
        return ordered
    cells = [u for u, _ in sorted({r.unit: r.index for r, _ in rs}.items(), key=lambda kv: kv[1])]
    if randomize:
        hrng.shuffle(cells)
    for u in cells:
        ordered += [rc for pair in old_paired(sorted((rc for rc in rs if rc[0].unit == u),
                                                     key=lambda rc: rc[0].rep), seed)
                    for rc in pair]
    return ordered


def old_pair_info(r, seed):
    if r.pair is None:
        return None
    first = old_first(r.rep, r.pair[0], seed)
    return {"prompt": r.pair[0], "index": r.rep, "order": order_label(first),
            "position": 0 if r.pair[1] == first else 1, "seed": seed}


def old_order_host(h, items, seed, campaign, randomize, interleave, est, reboot_seconds):
    hp = HostSchedule(h.name, h.current, reboot=Estimate(reboot_seconds))
    hrng = S._rng(seed, "order", h.name)
    first_seen = {}
    for _r, c in sorted(items, key=lambda rc: (rc[0].index, rc[0].rep, rc[0].unit)):
        first_seen.setdefault(c.boot, len(first_seen))
    groups = sorted(first_seen, key=first_seen.__getitem__)
    if randomize:
        hrng.shuffle(groups)
    cur = [b for b in groups if h.is_current(b)]
    groups = cur[:1] + [b for b in groups if b not in cur[:1]]
    pos = 0
    for gi, b in enumerate(groups):
        ordered = old_order_group([(r, c) for r, c in items if c.boot == b], hrng, seed,
                                  randomize, interleave)
        reboot = not (gi == 0 and h.is_current(b))
        if reboot:
            hp.reboots += 1
            hp.estimate_s += reboot_seconds
        for i, (r, c) in enumerate(ordered):
            pos += 1
            e = est(c)
            hp.estimate_s += e
            hp.runs.append(ScheduledRun(f"{campaign}-{h.name}-{pos:03d}", h.name, pos, r.rep,
                                        c.cell, r.point, b, reboot and i == 0, e,
                                        old_pair_info(r, seed)))
        hp.boots.append(b)
    hp.lower_bound = S.reboot_lower_bound(hp.boots, h)
    return hp


# inputs ---------------------------------------------------------------------------------------

@st.composite
def work(draw):
    """Hosts and requests: replay cells placed `each` or `one`, and engine prompts whose two
    cells share a unit and carry their pair, under several boots."""
    hosts = [HostState(f"h{i}", current=draw(st.sampled_from(BOOTS[:3])))
             for i in range(draw(st.integers(1, 3)))]
    names = [h.name for h in hosts]
    requests, index = [], 0
    for u in range(draw(st.integers(0, 8))):
        reps = draw(st.integers(1, 5))
        boot = draw(st.sampled_from(BOOTS))
        on = sorted(draw(st.lists(st.sampled_from(names), min_size=1, unique=True)))
        if draw(st.booleans()):                               # an engine prompt: two cells
            prompt = f"p{u}"
            for policy in ("admit", "nocache"):
                cands = tuple(Candidate(h, f"e2e-{prompt}-{policy}", boot) for h in on)
                requests += [RunRequest(prompt, f"e2e-{prompt}-{policy}", r, cands, index,
                                        (prompt, policy)) for r in range(reps)]
                index += 1
            continue
        cell = f"{u + 1}g-cgroup-mglru"
        if draw(st.booleans()):                               # placement one
            cands = tuple(Candidate(h, cell, boot) for h in on)
            requests += [RunRequest(f"c{u}", f"c{u}", r, cands, index) for r in range(reps)]
        else:                                                 # placement each
            for h in on:
                requests += [RunRequest(f"c{u}@{h}", f"c{u}", r, (Candidate(h, cell, boot),),
                                        index) for r in range(reps)]
        index += 1
    draw(st.randoms()).shuffle(requests)                      # any order in, one order out
    return hosts, requests


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(work(), st.integers(0, 2**31), st.booleans(), st.booleans())
def test_the_order_is_the_one_the_quadratic_algorithm_gave(w, seed, randomize, interleave):
    hosts, requests = w
    plan = schedule(requests, hosts, seed, campaign="c", randomize=randomize,
                    interleave=interleave, run_seconds=10, reboot_seconds=100)
    by_name = {h.name: h for h in hosts}

    def est(c):
        return 10.0

    assigned = S._assign(S._units(requests, by_name), by_name, seed, est, lambda _h: 100.0)
    want = [old_order_host(h, assigned[h.name], seed, "c", randomize, interleave, est, 100.0)
            for h in hosts]
    assert [hp.as_dict() for hp in plan.hosts] == [hp.as_dict() for hp in want]


@given(st.integers(0, 3000), st.integers(0, 2**31), st.sampled_from(["prose", "code", ""]))
def test_the_first_policy_of_a_pair_is_the_balanced_orders(rep, seed, prompt):
    assert S._first(rep, prompt, seed) == pair_orders(rep + 1, seed, prompt)[rep][0]


def _many(cells: int, reps: int) -> tuple[list[HostState], list[RunRequest]]:
    reqs = [RunRequest(f"c{u}@a", f"c{u}", r, (Candidate("a", f"{u + 1}m-cgroup-classic",
                                                         BootConfig()),), u)
            for u in range(cells) for r in range(reps)]
    random.Random(0).shuffle(reqs)
    return [HostState("a")], reqs


def test_a_hundred_thousand_runs_order_in_seconds():
    """5 cells x 20,000 repetitions: the reference scanned the 10^5 runs once per repetition
    (2 x 10^9 steps, 38 s through `bench schedule --dry-run`); the cells in turn, cell by cell."""
    hosts, reqs = _many(5, 20_000)
    for interleave in (True, False):
        t = time.monotonic()
        plan = schedule(reqs, hosts, 1, interleave=interleave)
        took = time.monotonic() - t
        assert len(plan.runs) == 100_000 and took < 10, took
        runs = plan.hosts[0].runs
        if interleave:                  # round by round: every cell's repetition r before r + 1
            assert [r.rep for r in runs] == sorted(r.rep for r in runs)
        else:                           # cell by cell, each cell's repetitions in order
            assert [r.rep for r in runs[:20_000]] == list(range(20_000))
