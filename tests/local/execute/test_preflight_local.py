"""A campaign checks its hosts before it is created, on this machine through the local
transport (a real read-only probe, a real SQLite file made by the migrations, the real
executor): `bench schedule --matrix smoke --hosts local --dry-run` plans runs from the probed
MemTotal; a plan with no run writes nothing; a deterministic input error is not retried."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from bench.cli import main
from bench.hosts.inventory import Host, render_host_toml
from bench.units import MB

REPO = Path(__file__).resolve().parents[3]


def _memtotal() -> int:
    m = re.search(r"^MemTotal:\s+(\d+) kB$", Path("/proc/meminfo").read_text(), re.M)
    assert m
    return int(m.group(1)) * 1024


def _local_inventory(tmp_path: Path) -> Path:
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    (hosts / "local.toml").write_text(render_host_toml(Host(
        name="local", address="localhost", transport="local",
        pool_dir=str(tmp_path / "pool"), work_dir=str(tmp_path / "work"))))
    return hosts


def test_smoke_plans_runs_on_this_machine_from_its_probed_memory(tmp_path, capsys):
    """The shipped inventory's `local` has no memory.total: 0.5mem comes from the probe."""
    args = ["schedule", "--matrix", "smoke", "--hosts", "local", "--hosts-dir",
            str(REPO / "hosts"), "--seed", "3", "--dry-run", "--json", "--data-dir",
            str(tmp_path)]
    assert main(args) == 0
    d = json.loads(capsys.readouterr().out)
    cells = {r["cell"] for r in d["hosts"][0]["runs"]}
    assert f"{int(_memtotal() * 0.5) // MB}M-none-classic" in cells, d
    # whatever this machine lacks is skipped with its reason, never for want of memory.total
    assert not any("memory.total" in s["reason"] for s in d["skipped"]), d["skipped"]
    assert d["facts"]["sources"] == {"local": "probed"}
    assert main(args) == 0            # a second plan within minutes reuses the facts
    assert json.loads(capsys.readouterr().out)["facts"]["sources"] == {"local": "cached"}
    assert main(args + ["--facts-max-age", "0"]) == 0
    assert json.loads(capsys.readouterr().out)["facts"]["sources"] == {"local": "probed"}


def test_a_campaign_with_no_run_is_refused_before_anything_is_written(tmp_path, capsys):
    (tmp_path / "m.toml").write_text('name = "huge"\ndescription = "above any machine"\n'
                                     'repetitions = 1\n[workload]\ntrace = "tiny"\n[cells]\n'
                                     'capacities = ["100T"]\nmechanisms = ["none"]\n'
                                     'reclaims = ["classic"]\n')
    db = tmp_path / "bench.db"
    rc = main(["schedule", "--matrix", str(tmp_path / "m.toml"), "--hosts", "local",
               "--hosts-dir", str(_local_inventory(tmp_path)), "--db", f"sqlite:///{db}",
               "--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "plans no run on local: 100T-none-classic on local: capacity 100T is above the " \
           "host's memory" in err
    assert not db.exists()


def test_a_deterministic_input_error_is_not_retried(tmp_path):
    """A campaign planned without facts (as before this check, or a host that changed since)
    holds a cell this machine cannot run: its preflight refuses it once, the run is failed at
    once with the reason, without the retries' pauses, and `bench resume` leaves it."""
    from bench.cli.schedule import build_plan
    from bench.execute.campaign.executor import Executor
    from bench.execute.campaign.record import Settings, create
    from bench.store.campaigns import campaign_row, journal_rows, run_rows
    from bench.store.db import open_store
    (tmp_path / "m.toml").write_text('name = "huge"\ndescription = "above any machine"\n'
                                     'repetitions = 1\n[workload]\ntrace = "tiny"\n'
                                     'tokens = 20\n[cells]\ncapacities = ["100T"]\n'
                                     'mechanisms = ["none"]\nreclaims = ["classic"]\n')
    hosts = _local_inventory(tmp_path)
    plan, exp, m = build_plan(str(tmp_path / "m.toml"), ["local"], hosts, 1, "det")
    assert [r.cell for r in plan.runs] == ["100T-none-classic"]      # no facts: not skipped
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    s = Settings(threads=1, retries=2, retry_pause_s=30.0, data_dir=tmp_path / "data",
                 db_url=db, hosts_dir=hosts)
    store = open_store(db)
    try:
        create(store, plan, exp, m, ["local"], s, str(tmp_path / "m.toml"))
        t0 = time.monotonic()
        res = Executor(store, "det", s).run()
        took = time.monotonic() - t0
        assert took < s.retry_pause_s, took                   # no retry pause was taken
        assert res.state == "done" and res.counts["failed"] == 1 and res.counts["refused"] == 1
        assert res.summary == ("0 validated, 0 rejected, 1 failed (1 not retried: input "
                               "refused), 0 skipped at planning")
        (run,) = run_rows(store, "det")
        failed = [j for j in journal_rows(store, "det", kinds=("state",))
                  if j.get("to") == "failed"]
        assert run.state == "failed" and len(failed) == 1
        assert failed[0].get("deterministic") is True and failed[0].get("error") == "SafetyError"
        assert "not retried" in failed[0].message and "above the host's memory" in \
            failed[0].message
        n = len(journal_rows(store, "det", kinds=("state",)))
        res2 = Executor(store, "det", s).run()              # resume: nothing is tried again
        assert res2.state == "done" and len(journal_rows(store, "det", kinds=("state",))) == n
        assert campaign_row(store, "det").state == "done"
        assert not (tmp_path / "work" / "runs").exists()     # nothing reached the host
    finally:
        store.close()


def test_the_runner_refusing_a_spec_is_a_final_failure(tmp_path):
    """The real host runner (deployed on this machine) refuses a spec whose plan is not on the
    host with exit 2: `start_run` raises SpecRefused, which a campaign never retries. Needs
    root and a C toolchain (deploy builds the agent)."""
    import os
    import shutil

    import pytest

    from bench.execute.campaign.record import deterministic
    from bench.execute.hostrun import SpecRefused, start_run
    from bench.hosts.deploy import REPO as SRC
    from bench.hosts.deploy import deploy, source_hash
    from bench.hosts.inventory import load_inventory
    from bench.hosts.transport import LocalTransport
    from bench.matrix.runspec import RunOptions, build_spec
    from bench.plan.planinfo import PlanInfo
    if os.geteuid() != 0 or any(shutil.which(t) is None for t in ("make", "cc", "python3")):
        pytest.skip("needs root, make, cc and python3 (deploy builds the agent)")
    host = load_inventory(_local_inventory(tmp_path))["local"]
    t = LocalTransport("local")
    deploy(t, host)
    spec = build_spec("64M-none-classic", host, PlanInfo("a" * 64, 4, 32, 65536, 10, "t"),
                      run_id="refused-1",
                      options=RunOptions(source_sha256=source_hash(SRC / "native")))
    with pytest.raises(SpecRefused, match="the runner refused the spec: bad spec") as e:
        start_run(t, host, spec)
    assert deterministic(e.value)
    assert not (tmp_path / "work" / "runs" / "refused-1").exists()


def test_a_campaign_records_the_inventory_it_was_planned_from(tmp_path, monkeypatch, capsys):
    """The inventory found through $BENCH_HOSTS (no --hosts-dir) is recorded as an absolute
    path, so `bench resume` from another directory, without that variable, drives the same
    hosts instead of whatever inventory it would find there."""
    from bench.execute.campaign.record import load_record
    from bench.store.db import open_store
    hosts = _local_inventory(tmp_path)
    (tmp_path / "m.toml").write_text('name = "one"\ndescription = "one none run"\n'
                                     'repetitions = 1\n[workload]\ntrace = "tiny"\n'
                                     'tokens = 20\n[cells]\ncapacities = ["1G"]\n'
                                     'mechanisms = ["none"]\nreclaims = ["classic"]\n')
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))   # holds no inventory
    monkeypatch.setenv("BENCH_HOSTS", str(hosts.relative_to(tmp_path)))
    monkeypatch.chdir(tmp_path)
    assert main(["schedule", "--matrix", "m.toml", "--hosts", "local", "--seed", "1",
                 "--campaign", "inv", "--db", db, "--data-dir", str(tmp_path / "data")]) == 0
    store = open_store(db, write=False)
    try:
        assert load_record(store, "inv")["settings"]["hosts_dir"] == str(hosts)
    finally:
        store.close()
    monkeypatch.delenv("BENCH_HOSTS")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    capsys.readouterr()
    assert main(["resume", "inv", "--db", db]) == 0, capsys.readouterr().err
