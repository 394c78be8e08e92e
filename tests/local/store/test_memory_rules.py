"""The memory-arithmetic rules (bench.judge.rules_memory, vmlck_held v2): generated bundles of
real captured /proc output sum, each fault injected into one of them fails its rule, and the
balloon the golden once retained (VmLck 22,606 MiB while meminfo showed 14 MiB locked) is stored
rejected through `bench ingest`. The per-rule fault of test_retention.FAULTS is the first of
each; these are the other branches."""

from __future__ import annotations

import re

import pytest

from bench.cli import main
from bench.hosts.procfs import parse_meminfo, parse_status, status_bytes
from bench.judge import retention
from bench.judge.bundle import load, read_dir
from bench.judge.measured import metrics
from bench.store.db import open_store
from bench.store.queries import list_runs
from tests.support.bundlegen import CAPTURED, _with_locked, ensure_campaigns, make_bundle

MiB = 1 << 20
LOOP_ENTRY = "pass1-start"


def _meminfo(p, phase: str, **shift: int) -> None:
    """Move meminfo fields of one snapshot by the given bytes."""
    snap = p["snapshots"][phase]
    for key, by in shift.items():
        snap["proc_meminfo"] = re.sub(
            rf"^{re.escape(key)}:(\s+)(\d+) kB$",
            lambda m, key=key, by=by: f"{key}:{m[1]}{int(m[2]) + by // 1024} kB",
            snap["proc_meminfo"],
            flags=re.M)


def _captured_meminfo(p) -> None:
    """What bundlegen wrote before issue 22: the balloon's VmLck in its status, the captured
    meminfo (nothing locked, MemAvailable of the whole host) left as it was."""
    for phase, snap in p["snapshots"].items():
        snap["proc_meminfo"] = (CAPTURED / "snapshots" / phase / "proc_meminfo").read_text()


def _balloon_locks_more(p) -> None:
    """The balloon locked 512 MiB more than it was asked, and the kernel shows it."""
    for phase in (LOOP_ENTRY, "post"):
        snap = p["snapshots"][phase]
        got = status_bytes(parse_status(snap["balloon_status"]), "VmLck")
        snap["balloon_status"] = re.sub(r"^VmLck:.*$", f"VmLck:\t{(got + 512 * MiB) >> 10} kB",
                                        snap["balloon_status"], flags=re.M)
        snap["proc_meminfo"] = _with_locked(snap["proc_meminfo"], 512 * MiB)


def _timeline_over_the_wall(p) -> None:
    lines = p["timeline.csv"].splitlines()
    limit = p["capacity.json"]["limit_read_back"]
    p["timeline.csv"] = "\n".join(
        lines[:-1] + [re.sub(r"^([^,]*,[^,]*),(\d+),", rf"\1,{limit + 4 * MiB},", lines[-1])]
    ) + "\n"


OTHER_FAULTS = {
    "balloon VmLck far above the request": ("vmlck_held", "64Mi-balloon-mglru",
                                            _balloon_locks_more),
    "balloon sized from another MemAvailable": (
        "capacity_sums", "64Mi-balloon-mglru",
        lambda p: p["capacity.json"].update(
            mem_available_before=p["capacity.json"]["mem_available_before"] + (1 << 30))),
    "room below C at loop entry (another process took 1 GiB)": (
        "capacity_sums", "8Gi-balloon-mglru",
        lambda p: _meminfo(p, LOOP_ENTRY, MemAvailable=-(1 << 30), MemFree=-(1 << 30))),
    "cgroup headroom not the spec's": ("capacity_sums", "64Mi-cgroup-mglru",
                                       lambda p: p["capacity.json"].update(headroom_bytes=0)),
    "cgroup limit written is not C + headroom": (
        "capacity_sums", "64Mi-cgroup-mglru",
        lambda p: p["capacity.json"].update(limit_bytes=p["capacity.json"]["limit_bytes"] * 2)),
    "cgroup limit in force at loop entry is another": (
        "capacity_sums", "64Mi-cgroup-mglru",
        lambda p: p["snapshots"][LOOP_ENTRY].update(
            {"memory.limit_in_bytes": "9223372036854771712\n"})),
    "cgroup usage above the limit at the end": (
        "capacity_sums", "64Mi-cgroup-mglru",
        lambda p: p["snapshots"]["pass1-end"].update(
            {"memory.max_usage_in_bytes": f"{200 * MiB}\n"})),
    "cgroup usage above the limit in the timeline": ("capacity_sums", "64Mi-cgroup-mglru",
                                                     _timeline_over_the_wall),
    "MemTotal at loop entry is not the boot's": (
        "locked_fraction_sums", "64Mi-balloon-mglru",
        lambda p: _meminfo(p, LOOP_ENTRY, MemTotal=64 << 30)),
    "pinned arena not in Mlocked": (
        "locked_fraction_sums", "1Gi-cgroup-mglru-pinned",
        lambda p: _meminfo(p, LOOP_ENTRY, Mlocked=-(1 << 30))),
}


@pytest.mark.parametrize("case", sorted(OTHER_FAULTS))
def test_fault_fails_its_memory_rule(bundles, case):
    rule, cell, edit = OTHER_FAULTS[case]
    b = load(read_dir(bundles("r1", cell, edit=edit)))
    failed = {v.rule: v.reason for v in retention.evaluate(b) if not v.passed}
    assert set(failed) == {rule}, failed


@pytest.mark.parametrize("cell", ["64Mi-balloon-mglru", "8Gi-balloon-mglru",
                                  "64Mi-cgroup-mglru-pinned", "1Gi-cgroup-mglru-pinned",
                                  "64Mi-cgroup-mglru-hybrid", "64M-cgroup-classic",
                                  "64Mi-none-mglru"])
def test_the_locked_fraction_shown_is_the_locked_memory_it_sums(bundles, cell):
    """metrics' locked fraction (what the views show) is Mlocked / MemTotal at loop entry, and
    on a retained run that is the host's own locked memory before the run plus the balloon's
    and the arena's VmLck, over the boot's MemTotal."""
    b = load(read_dir(bundles("r1", cell)))
    assert all(v.passed for v in retention.evaluate(b))
    le, pre = b.snapshots[LOOP_ENTRY], parse_meminfo(b.snapshots["pre"]["proc_meminfo"])
    locked = [status_bytes(parse_status(le[f]), "VmLck") or 0
              for f in ("balloon_status", "proc_self_status") if f in le]
    want = (pre["Mlocked"] + sum(locked)) / b.host["mem_total_bytes"]
    assert metrics(b)["locked_fraction"] == pytest.approx(want, abs=1e-6)
    if b.spec["mechanism"] == "balloon":       # most of the host: the paper's balloon shape
        assert metrics(b)["locked_fraction"] > 0.5


def test_the_balloon_whose_arithmetic_does_not_sum_is_stored_rejected(tmp_path, capsys):
    """The golden's balloon before issue 22 (VmLck 22,606 MiB, Mlocked 14 MiB, MemAvailable of
    the whole host at loop entry) through `bench ingest` into a database the migrations made:
    stored, rejected by the two memory-arithmetic rules, each naming the numbers."""
    url = f"sqlite:///{tmp_path}/bench.db"
    ensure_campaigns(open_store(url), "c1")
    p = make_bundle(tmp_path / "in", "bad-balloon", "64Mi-balloon-mglru",
                    edit=_captured_meminfo)
    assert main(["ingest", str(p), "--db", url]) == 0, capsys.readouterr()
    (run,) = list_runs(open_store(url, write=False), cell="64Mi-balloon-mglru")
    assert run["run_id"] == "bad-balloon" and run["retained"] is False
    assert set(run["failed"]) == {"locked_fraction_sums", "capacity_sums"}, run["failed"]
    why = {v["rule"]: v["reason"] for v in run["verdicts"]}
    assert "Mlocked 14 MiB at loop entry" in why["locked_fraction_sums"]
    assert "balloon 22606 MiB" in why["locked_fraction_sums"]
    assert re.search(r"MemAvailable 22\d{3} MiB at loop entry, C 64 MiB",
                     why["capacity_sums"]), why["capacity_sums"]
