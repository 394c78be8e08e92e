"""fingerprint_matches in the store: the reason names every field that differs, and
`bench retention recheck` re-judges runs stored under the previous definition (which read the
kernel from a key the runner never wrote, so runs on two kernels were both retained)."""

import hashlib
import json
import re

from sqlalchemy import select

from bench.judge import measured, retention
from bench.store.ingest import ingest_bundle, recheck
from bench.store.models import CampaignHost, Fingerprint, Run
from bench.store.queries import campaign_fingerprints, list_runs


def _verdict(store, run_id, rule="fingerprint_matches"):
    run = next(r for r in list_runs(store) if r["run_id"] == run_id)
    return next(v for v in run["verdicts"] if v["rule"] == rule)


def _kernel(release):
    return lambda p: p["host.json"].update(kernel_release=release)


def test_the_reason_names_every_field_that_differs(store, bundles):
    assert ingest_bundle(store, bundles("r1"))["retained"]

    def edit(p):
        p["host.json"]["kernel_release"] = "6.8.0-test"
        p["host.json"]["settings"]["block"]["vda"]["read_ahead_kb"] = 128
        p["host.json"]["settings"]["vm"]["swappiness"] = 10
    res = ingest_bundle(store, bundles("r2", edit=edit))
    assert res["failed"] == ["fingerprint_matches"]
    v = _verdict(store, "r2")
    assert v["version"] == 3
    ref = campaign_fingerprints(store, "c1")["fixture-a"]
    assert v["reason"] == (
        f"differs from the campaign's reference on this host (this run vs reference "
        f"{ref['digest']}): kernel 6.8.0-test vs {ref['kernel']}; read_ahead_kb[vda] 128 vs "
        "8192; vm.swappiness 10 vs 60")
    # another host of the same campaign has its own reference
    assert ingest_bundle(store, bundles("r3", host="fixture-b", edit=edit))["retained"]


def _old_fingerprint(b):
    """The fingerprint as bench stored it before (definition 1), kept here to build a
    database of that time."""
    args = sorted(a for a in (b.host.get("cmdline") or "").split()
                  if not re.match(r"^(mem|bench\.lru_gen|lru_gen\.enabled|panic|BOOT_IMAGE|"
                                  r"initrd)=", a))
    fp = {"kernel": b.host.get("kernel"), "arch": b.host.get("arch"), "cmdline": " ".join(args),
          "agent_sha256": b.spec.get("agent", {}).get("source_sha256"),
          "controller_version": b.spec.get("controller_version")}
    fp["digest"] = hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:16]
    return fp


def _old_rule(b, ctx):
    want = ctx.get("campaign_fingerprint")
    if not b.spec.get("campaign") or not want:
        return True, "first run"
    got = _old_fingerprint(b)
    bad = [k for k in ("kernel", "arch", "cmdline", "agent_sha256", "controller_version")
           if got.get(k) != want.get(k)]
    return (False, f"{bad[0]} differs") if bad else (True, f"fingerprint {got['digest']} matches")


def _old_bundle(release):
    """host.json as the runner wrote it before it recorded settings."""
    def edit(p):
        p["host.json"].pop("settings")
        p["host.json"]["kernel_release"] = release
    return edit


def test_recheck_rejects_what_the_old_definition_let_through(store, bundles, monkeypatch):
    with monkeypatch.context() as m:            # the database as the previous bench left it
        m.setattr(measured, "fingerprint", _old_fingerprint)
        m.setattr(retention, "RULES", [retention.Rule("fingerprint_matches", 2, _old_rule, "")
                                       if r.name == "fingerprint_matches" else r
                                       for r in retention.RULES])
        assert ingest_bundle(store, bundles("r1", edit=_old_bundle("6.1.0-old")))["retained"]
        assert ingest_bundle(store, bundles("r2", edit=_old_bundle("6.1.0-old")))["retained"]
        assert ingest_bundle(store, bundles("r3", edit=_old_bundle("6.8.0-new")))["retained"]
    with store.session() as s:
        assert all("definition" not in f.data for f in s.scalars(select(Fingerprint)))
    # the probe reads the reference under the current definition without writing
    assert campaign_fingerprints(store, "c1")["fixture-a"]["kernel"] == "6.1.0-old"

    changes = recheck(store)
    assert sorted((c["run_id"], c["new"]["passed"]) for c in changes
                  if c["rule"] == "fingerprint_matches") == [("r1", True), ("r2", True),
                                                              ("r3", False)]
    assert all(c["old"]["version"] == 2 and c["new"]["version"] == 3 for c in changes)
    v = _verdict(store, "r3")
    assert "kernel 6.8.0-new vs 6.1.0-old" in v["reason"] and v["version"] == 3
    assert [r["run_id"] for r in list_runs(store, rejected=True)] == ["r3"]
    with store.session() as s:                  # the stored fingerprints are current now
        runs = {r.run_id: r for r in s.scalars(select(Run))}
        data = {k: s.get(Fingerprint, r.fingerprint_id).data for k, r in runs.items()}
        assert {d["definition"] for d in data.values()} == {measured.FINGERPRINT_DEFINITION}
        assert data["r1"]["kernel"] == "6.1.0-old" and data["r1"]["settings"] is None
        assert data["r1"]["digest"] == data["r2"]["digest"] != data["r3"]["digest"]
        ch = s.scalar(select(CampaignHost))
        assert ch.fingerprint_id == runs["r1"].fingerprint_id
    assert recheck(store) == []

    # a run recorded with settings differs from the settings-less reference
    res = ingest_bundle(store, bundles("r4", edit=_kernel("6.1.0-old")))
    assert res["failed"] == ["fingerprint_matches"]
    assert "settings recorded vs absent" in _verdict(store, "r4")["reason"]
