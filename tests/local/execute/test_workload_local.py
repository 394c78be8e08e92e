"""Workload fields through a real campaign on the local transport (tier 1): `batch` and
`domain` change what the agent replays (the plan it reads, its reads per pass) and each lands
in its own result group; a batch run's seconds per accepted token is its median iteration time
over the merged plan's tokens per iteration. Real runner, agent and SQLite store.

Needs root (the runner drops caches) and a C toolchain (the agent is built on deploy)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli.schedule import build_plan
from bench.execute.campaign.executor import Executor
from bench.execute.campaign.record import create
from bench.plan.planfile import read_plan
from bench.store import queries
from bench.store.db import open_store
from tests.support.local_host import local_hosts_dir, local_settings

pytestmark = [pytest.mark.root, pytest.mark.native]

MATRIX = """
name = "wl-{name}"
description = "one none cell on the local host"
repetitions = 1
[workload]
trace = "tiny"
tokens = 40
{extra}
[estimate]
run_seconds = 2
reboot_seconds = 30
[cells]
capacities = ["2pool"]
mechanisms = ["none"]
reclaims = ["classic"]
"""


@pytest.fixture
def local(tmp_path):
    hosts = local_hosts_dir(tmp_path)
    db = f"sqlite:///{tmp_path / 'bench.db'}"
    store = open_store(db)
    s = local_settings(tmp_path, hosts, db)

    def campaign(name: str, extra: str) -> dict:
        path = tmp_path / f"{name}.toml"
        path.write_text(MATRIX.format(name=name, extra=extra))
        plan, exp, m = build_plan(str(path), ["local"], hosts, 5, name)
        create(store, plan, exp, m, ["local"], s, str(path))
        res = Executor(store, name, s).run()
        assert res.state == "done" and {r.state for r in res.runs} == {"validated"}, res.runs
        (rid,) = [r.run_id for r in res.runs]
        spec = json.loads((tmp_path / "data" / "bundles" / "local" / rid / "spec.json")
                          .read_text())
        return {"rid": rid, "spec": spec,
                "plan": read_plan(Path(s.data_dir) / "plans" / f"{spec['plan_sha256']}.bin")}
    try:
        yield store, campaign
    finally:
        store.close()


def test_batch_and_domain_change_what_is_replayed(local):
    store, campaign = local
    one = campaign("one", 'domain = "prose"')
    code = campaign("code", 'domain = "code"')
    four = campaign("four", 'domain = "prose"\nbatch = 4')
    assert code["spec"]["workload"]["domain"] == "code"
    assert code["spec"]["workload"]["trace_sha256"] != one["spec"]["workload"]["trace_sha256"]
    assert four["spec"]["workload"]["batch"] == 4
    assert four["plan"].reads > one["plan"].reads          # the union of four streams
    assert one["spec"]["cell"] == code["spec"]["cell"] == four["spec"]["cell"]
    res = queries.cell_results(store, one["spec"]["cell"])
    assert len(res) == 3                                    # three workloads, never pooled
    by_batch = {g["workload"]["batch"]: g for g in res if g["workload"]["domain"] == "prose"}
    g = by_batch[4]
    tokens = four["spec"]["workload"]["accepted_tokens"]
    assert tokens == sum(it.tokens for it in four["plan"].iterations)
    assert g["seconds_per_accepted_token"] == pytest.approx(
        g["median_s"] * len(four["plan"].iterations) / tokens)

