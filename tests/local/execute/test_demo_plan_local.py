"""The demo's plan on this machine (the real trace, inventory, probe, matrix and scheduler, a
real SQLite file made by the migrations): the local host never reboots, so neither the plan
nor the live ETA counts a reboot, and each says whether its run times were measured."""

from __future__ import annotations

import pytest

from bench.execute.campaign.watch import progress
from bench.execute.demo import prepare_campaign
from bench.results import campaign_views, plan_views
from bench.store.campaigns import journal_rows
from bench.store.db import open_store

pytestmark = [pytest.mark.root]       # the demo drops caches before it reads MemAvailable


def test_the_demo_plan_counts_no_reboot_on_the_local_host(tmp_path):
    db = f"sqlite:///{tmp_path / 'demo.db'}"
    dc, _settings = prepare_campaign(tmp_path / "demo", db_url=db, max_lock=256 << 20)
    e = dc.estimate
    assert e["reboot_count"] == 0 and e["reboots"] == "none"
    assert e["runs"] == "modelled"               # a fresh database has measured nothing
    assert e["seconds"] == 5.0 * len(dc.runs)    # the demo matrix's 5 s per run, no reboot
    text = plan_views.estimates_text(e)
    assert text.endswith("; no reboot") and "per reboot" not in text
    store = open_store(db, write=False)
    try:
        [plan] = journal_rows(store, dc.campaign, kinds=("plan",))
        assert not any(r["reboot_before"] for r in plan.data["runs"].values())
        p = progress(store, dc.campaign)
    finally:
        store.close()
    assert p["reboots_left"] == 0
    assert campaign_views.eta_basis(p).endswith("modelled, no reboot left")
    assert "reboot ~" not in campaign_views.eta_basis(p)
