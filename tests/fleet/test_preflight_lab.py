"""A campaign checks its hosts before it is created, on the netns lab over real SSH.

What the lab hosts report: no memory cgroup. They share this machine's kernel, but `ip netns
exec` gives each a mount namespace with a fresh sysfs mounted over /sys, which hides this
machine's cgroup mounts under /sys/fs/cgroup; the probe over SSH reads /proc/self/mounts there
and finds neither a cgroup2 mount with the memory controller nor a v1 memory hierarchy, and the
runner, in the same namespace, could not make a wall either. So the lab hosts are real hosts
without a memory cgroup. On a machine where a lab host did see one, the fixture
`no_memory_cgroup_on_x` takes it away inside lab-netns-1's mount namespace only (every v1
memory hierarchy and cgroup2 mount unmounted there, as in a container without cgroup mounts;
this machine's own mounts are checked untouched, and a lab "reboot" of the host afterwards
gives it a fresh namespace); lab-netns-2 is taken as it is, and the test expects of it what its
probe reports.

1. `bench schedule` of a matrix with cgroup cells on lab-netns-1 (no memory cgroup) and
   lab-netns-2 (as its probe finds it): the cgroup cells of a host without one are skipped at
   planning time with the reason, recorded in the campaign; everything planned ends validated
   or rejected, and the final line counts the skipped runs.
2. The same cells planned without facts (a campaign created before the check): the worker's
   preflight refuses the cgroup run on lab-netns-1 once, and it is not retried.
3. Unreachable hosts (an address of the lab's subnet where nothing answers, a closed port)
   stop `bench schedule` before the campaign or the database exists, within the connect
   timeout (not the hosts' 900 s up_timeout), naming every one of them.

Needs root."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench.store.campaigns import campaign_row, journal_rows, run_rows
from bench.store.db import open_store

pytestmark = pytest.mark.root
REPO = Path(__file__).resolve().parents[2]
X, Y = "lab-netns-1", "lab-netns-2"
MATRIX = """
name = "lab-preflight"
description = "a cgroup wall and none, once each, on every lab host"
repetitions = 1

[workload]
trace = "tiny"        # 4 layers x 32 experts x 64 KiB: an 8 MiB pool
tokens = 40
batch = 1

[protocol]
cgroup_headroom = "16Mi"

[estimate]
run_seconds = 5
reboot_seconds = 30

[cells]
capacities = ["2pool"]
mechanisms = ["cgroup", "none"]
reclaims = ["classic"]
"""
HIDE = ("awk '($3 == \"cgroup\" && $4 ~ /(^|,)memory(,|$)/) || $3 == \"cgroup2\" "
        "{print $2}' /proc/self/mounts | sort -r | while read -r m; do umount -l \"$m\"; done")


def bench(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench", *args]


def env_for(tmp_path: Path) -> dict:
    return dict(os.environ, BENCH_DATA_DIR=str(tmp_path / "data"), PYTHONPATH=str(REPO))


def memory_cgroup_mounts(mounts: str) -> list[str]:
    out = []
    for line in mounts.splitlines():
        f = line.split()
        if len(f) > 3 and (f[2] == "cgroup2" or (f[2] == "cgroup" and "memory" in
                                                 f[3].split(","))):
            out.append(f[1])
    return out


@pytest.fixture
def no_memory_cgroup_on_x(lab):
    """lab-netns-1 without a memory cgroup (module doc); a fresh boot of it afterwards."""
    if shutil.which("nsenter") is None:
        pytest.skip("nsenter (util-linux) is needed to enter a lab host's mount namespace")
    ours = memory_cgroup_mounts(Path("/proc/self/mounts").read_text())
    pid = lab.host(X).sshd_pid
    assert pid and os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    subprocess.run(["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--", "sh", "-c", HIDE],
                   check=True, timeout=30)
    try:
        theirs = subprocess.run(["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--", "cat",
                                 "/proc/self/mounts"], capture_output=True, text=True,
                                check=True).stdout
        assert memory_cgroup_mounts(theirs) == []
        assert memory_cgroup_mounts(Path("/proc/self/mounts").read_text()) == ours
        yield lab
    finally:
        lab.reboot(X)


def probe(lab, name: str, capsys) -> dict:
    from bench.cli import main
    capsys.readouterr()
    assert main(["hosts", "probe", name, "--hosts-dir", str(lab.hosts_dir), "--json"]) in (0, 1)
    (r,) = json.loads(capsys.readouterr().out)
    assert r["error"] is None, r
    return r["facts"]


def test_cgroup_cells_are_skipped_at_planning_on_a_host_without_a_memory_cgroup(
        clean_pools, no_memory_cgroup_on_x, lab_inventory, tmp_path, capsys):
    lab = no_memory_cgroup_on_x
    assert probe(lab, X, capsys)["cgroup"]["backend"] == "none"      # what the probe really sees
    y_has = probe(lab, Y, capsys)["cgroup"]["backend"] != "none"
    (tmp_path / "m.toml").write_text(MATRIX)
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    cid = "preflight-s5"
    r = subprocess.run(bench("schedule", "--matrix", str(tmp_path / "m.toml"), "--hosts",
                             f"{X},{Y}", "--hosts-dir", str(lab.hosts_dir), "--seed", "5",
                             "--campaign", cid, "--threads", "1", "--db", db),
                       capture_output=True, text=True, env=env_for(tmp_path), cwd=tmp_path,
                       timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    store = open_store(db)
    try:
        rec = journal_rows(store, cid, kinds=("plan",))[0].data
        rows = run_rows(store, cid)
        js = journal_rows(store, cid, kinds=("state",))
        final = campaign_row(store, cid).state
    finally:
        store.close()
    skipped = {(s["host"], s["point"]): s["reason"] for s in rec["skipped"]}
    assert "needs a memory cgroup" in skipped[(X, "2pool-cgroup-classic")], skipped
    assert rec["facts"][X]["cgroup"]["backend"] == "none" and rec["facts"][X]["source"]
    planned = sorted((x.host, x.cell.split("-", 1)[1]) for x in rows)
    assert planned == sorted([(X, "none-classic"), (Y, "none-classic")]
                             + ([(Y, "cgroup-classic")] if y_has else []))
    assert final == "done" and {x.state for x in rows} <= {"validated", "rejected"}, rows
    assert not any(j.get("to") == "failed" for j in js)
    want_skipped = 1 if y_has else 2
    said = " ".join(r.stderr.split())           # the console may wrap its lines
    n = {s: sum(1 for x in rows if x.state == s) for s in ("validated", "rejected")}
    assert (f"campaign {cid}: done: {n['validated']} validated, {n['rejected']} rejected, 0 "
            f"failed, {want_skipped} skipped at planning") in said, said
    print(f"{X}: cgroup cells skipped at planning; {Y} memory cgroup: {y_has}")


def test_a_cgroup_run_refused_on_such_a_host_is_not_retried(no_memory_cgroup_on_x, tmp_path):
    """Planned without facts (as a campaign created before the check was), the cgroup run on
    lab-netns-1 reaches the worker's preflight, which refuses it: failed once, not retried."""
    from bench.cli.schedule import build_plan
    from bench.execute.campaign.executor import Executor
    from bench.execute.campaign.record import Settings, create
    lab = no_memory_cgroup_on_x
    m = tmp_path / "m.toml"
    m.write_text(MATRIX.replace('mechanisms = ["cgroup", "none"]', 'mechanisms = ["cgroup"]'))
    plan, exp, mx = build_plan(str(m), [X], lab.hosts_dir, 5, "refused")
    assert [r.cell.split("-", 1)[1] for r in plan.runs] == ["cgroup-classic"]
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    s = Settings(threads=1, retries=2, retry_pause_s=20.0, data_dir=tmp_path / "data",
                 db_url=db, hosts_dir=lab.hosts_dir)
    store = open_store(db)
    try:
        create(store, plan, exp, mx, [X], s, str(m))
        t0 = time.monotonic()
        res = Executor(store, "refused", s).run()
        assert time.monotonic() - t0 < s.retry_pause_s
        failed = [j for j in journal_rows(store, "refused", kinds=("state",))
                  if j.get("to") == "failed"]
    finally:
        store.close()
    assert res.counts["failed"] == res.counts["refused"] == 1, res.summary
    assert len(failed) == 1 and failed[0].get("deterministic") is True
    assert "needs a memory cgroup" in failed[0].message


def test_unreachable_hosts_stop_the_campaign_before_it_is_created(lab, lab_inventory, tmp_path):
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    shutil.copy(Path(lab.hosts_dir) / f"{X}.toml", hosts)
    subnet = lab.state["subnet"]
    for name, address, port in (("gone-a", f"{subnet}.250", 22), ("gone-b", "127.0.0.1", 1)):
        (hosts / f"{name}.toml").write_text(
            f'name = "{name}"\naddress = "{address}"\nport = {port}\ntransport = "ssh"\n'
            '[ssh]\nconnect_timeout = 5\n[reboot]\nup_timeout = 900\n')
    db = tmp_path / "bench.db"
    (tmp_path / "m.toml").write_text(MATRIX)
    t0 = time.monotonic()
    r = subprocess.run(bench("schedule", "--matrix", str(tmp_path / "m.toml"), "--hosts-dir",
                             str(hosts), "--seed", "5", "--db", f"sqlite:///{db}"),
                       capture_output=True, text=True, env=env_for(tmp_path), cwd=tmp_path,
                       timeout=120)
    took = time.monotonic() - t0
    assert r.returncode == 1, (r.stdout + r.stderr)[-3000:]
    assert "cannot probe 2 host(s), no campaign created" in r.stderr
    assert "gone-a" in r.stderr and "gone-b" in r.stderr and X + ":" not in r.stderr
    assert took < 5 + 15, took          # the connect timeout and Python's start, not 900 s
    assert not db.exists()
    print(f"unreachable hosts refused in {took:.1f}s")


def test_a_run_probe_reads_what_a_run_needs_and_reuses_only_boot_fixed_facts(lab,
                                                                            lab_inventory):
    """A campaign run's preflight (bench.hosts.facts.probe_for_run) reads memory, MGLRU, the
    cgroup backend, the kernel and the boot id of the real host every time; the interpreter
    (the costly fact) is taken from the previous probe only while the boot id is the same.
    The previous probe's python3 is marked to tell a reuse from a probe."""
    from bench.hosts.facts import RUN_FACTS, probe, probe_for_run
    from bench.hosts.ssh import transport_for
    h = lab_inventory["lab-netns-1"]
    t = transport_for(h)
    try:
        full = probe(t, h)
        first = probe_for_run(t, h)
        assert first.ok, (first.error, first.fact_errors)
        for k in ("kernel", "boot_id", "mglru", "cgroup", "mem_total_bytes", "python3"):
            assert first.facts[k] == full.facts[k], k
        assert first.facts["mem_available_bytes"] > 0
        assert "pool_device" not in first.facts and "settings" not in first.facts
        marked = {**first.facts, "python3": "0.0.1"}
        same = probe_for_run(t, h, marked)
        assert same.ok and same.facts["python3"] == "0.0.1"
        assert set(RUN_FACTS) - {"memory"} <= set(same.facts)
        other_boot = probe_for_run(t, h, {**marked, "boot_id": "0" * 32})
        assert other_boot.ok and other_boot.facts["python3"] == full.facts["python3"]
        assert other_boot.facts["boot_id"] == full.facts["boot_id"]
    finally:
        t.close()
