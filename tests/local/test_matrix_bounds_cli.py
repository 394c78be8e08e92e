"""Matrices too big to plan, through the real `bench schedule --dry-run` (a child capped at
1 GiB of address space, tests/support/hostile_inputs.run_capped), offline: the hosts' facts come
from a facts file (--facts, as `bench hosts probe --json` writes it). 10^9 repetitions grew past
2.9 GB in 40 s and hung; 200,000 runs did not plan in 300 s; 10^5 runs took 15 s and more. Now
the first two are refused in one line naming the key, the limit and the fix, and 10^5 runs plan
in seconds. Wall time and peak RSS of each are printed for the record."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from bench.matrix.limits import MAX_REPETITIONS, MAX_RUNS
from tests.support.facts import DEBIAN, fixture_facts, write_facts
from tests.support.hostile_inputs import AS_LIMIT, run_capped
from tests.support.paths import REPO

ANSWER_S = 20           # the bound on answering (refused or planned)
MEASURED: dict[str, str] = {}


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    if MEASURED:
        print("\nbench schedule --dry-run on big matrices:", json.dumps(MEASURED, sort_keys=True))


def _lab(d: Path, hosts: tuple[str, ...]) -> list[str]:
    """Inventory files and a facts file for these hosts (3 GiB lab VMs, the captured Debian
    host's facts): the arguments that plan on them offline."""
    inv = d / "hosts"
    inv.mkdir()
    for n in hosts:
        (inv / f"{n}.toml").write_text(
            f'name = "{n}"\naddress = "192.0.2.1"\ntransport = "ssh"\n[memory]\n'
            'total = "3Gi"\n[reboot]\nallowed = false\n')
    facts = write_facts(d / "facts.json", {n: fixture_facts(DEBIAN) for n in hosts})
    return ["--hosts-dir", str(inv), "--hosts", ",".join(hosts), "--facts", str(facts)]


def _matrix(d: Path, capacities: int, repetitions: int) -> Path:
    """The smoke matrix with `capacities` fractions of memory x cgroup (one cell each), every
    cell `repetitions` times."""
    text = (REPO / "bench" / "data" / "matrices" / "smoke.toml").read_text()
    text = text[:text.index("[[cells.extra]]")]
    caps = ", ".join(f'"{(i + 1) / 1000:.3f}mem"' for i in range(capacities))
    text = re.sub(r"(?m)^capacities = .*$", f"capacities = [{caps}]", text)
    text = re.sub(r"(?m)^mechanisms = .*$", 'mechanisms = ["cgroup"]', text)
    text = re.sub(r"(?m)^repetitions = .*$", f"repetitions = {repetitions}", text)
    p = d / "big.toml"
    p.write_text(text)
    return p


def _dry_run(tmp_path: Path, name: str, matrix: Path, hosts: list[str], *extra: str):
    t = time.monotonic()
    ran = run_capped(["schedule", "--matrix", str(matrix), *hosts, "--seed", "1", "--dry-run",
                      *extra], tmp_path, tmp_path / "report", timeout=120)
    took = time.monotonic() - t
    MEASURED[name] = f"{took:.1f} s, {ran.peak_rss_mib} MiB"
    assert "Traceback" not in ran.stderr, ran.stderr[-3000:]
    assert took < ANSWER_S, took
    assert ran.peak_rss_mib < AS_LIMIT >> 20
    return ran


def _refused(ran) -> tuple[str, str]:
    """The error and its fix, after the note on where the facts came from (said once the hosts
    are known, which a refusal of the matrix alone comes before)."""
    lines = [ln for ln in ran.stderr.splitlines() if ln.strip()]
    if lines and lines[0].startswith("host facts: "):
        lines = lines[1:]
    assert ran.rc == 2 and len(lines) == 2, (ran.rc, lines)
    assert lines[0].startswith("error: ") and lines[1].startswith("fix: "), lines
    return lines[0], lines[1]


def test_a_billion_repetitions_are_refused_before_any_expansion(tmp_path):
    matrix = _matrix(tmp_path, 2, 10 ** 9)
    ran = _dry_run(tmp_path, "repetitions-10^9", matrix, _lab(tmp_path, ("lab-a",)))
    error, fix = _refused(ran)
    assert error == (f"error: {matrix}: key 'repetitions': must be at most {MAX_REPETITIONS}, "
                     "got 1000000000")
    assert f"1 to {MAX_REPETITIONS} repetitions" in fix
    assert ran.peak_rss_mib < 256          # the load alone, no run made


def test_a_matrix_of_200000_runs_is_refused_naming_the_repetitions(tmp_path):
    matrix = _matrix(tmp_path, 200, 1000)                 # 200 cells x 1000 on one host
    ran = _dry_run(tmp_path, "runs-200k-matrix", matrix, _lab(tmp_path, ("lab-a",)))
    error, fix = _refused(ran)
    assert error == (f"error: {matrix}: key 'repetitions': 200 cells x 1000 repetitions make "
                     f"200000 runs, more than the {MAX_RUNS} a campaign may hold")
    assert "fewer repetitions or cells" in fix


def test_200000_runs_on_two_hosts_are_refused_naming_the_hosts(tmp_path):
    matrix = _matrix(tmp_path, 100, 1000)                 # 10^5 runs on each of two hosts
    ran = _dry_run(tmp_path, "runs-200k-two-hosts", matrix, _lab(tmp_path, ("lab-a", "lab-b")))
    error, fix = _refused(ran)
    assert error == (f"error: matrix smoke on 2 hosts makes 200000 runs, more than the "
                     f"{MAX_RUNS} a campaign may hold (placement each: every host runs every "
                     "cell)")
    assert "--hosts" in fix


def test_a_hundred_thousand_runs_plan_in_seconds(tmp_path):
    matrix = _matrix(tmp_path, 100, 1000)
    ran = _dry_run(tmp_path, "runs-10^5-planned", matrix, _lab(tmp_path, ("lab-a",)), "--json")
    assert ran.rc == 0, ran.stderr[-2000:]
    plan = json.loads(ran.stdout)
    runs = plan["hosts"][0]["runs"]
    assert plan["runs"] == len(runs) == MAX_RUNS
    assert len({r["run_id"] for r in runs}) == MAX_RUNS
    # interleaved: every cell's repetition r runs before any cell's r + 1, each round a
    # permutation of the 100 cells
    assert [r["rep"] for r in runs] == [i // 100 for i in range(MAX_RUNS)]
    assert all(len({r["cell"] for r in runs[i:i + 100]}) == 100 for i in range(0, MAX_RUNS, 100))
