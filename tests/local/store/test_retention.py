"""Each retention rule: a clean run passes it; one injected fault fails it (and only it)."""

import re

import pytest

from bench.judge import retention
from bench.judge.bundle import BundleError, load, read_dir
from bench.store.ingest import ingest_bundle
from bench.store.queries import list_runs


def _sub(parts, phase, name, pattern, repl):
    snap = parts["snapshots"][phase]
    snap[name] = re.sub(pattern, repl, snap[name], flags=re.M)


def _vmstat_bump(key, by):
    def edit(p):
        _sub(p, "post", "proc_vmstat", rf"^{key} (\d+)$", lambda m: f"{key} {int(m[1]) + by}")
    return edit


def _agent_errors(p):
    p["agent.jsonl"][-1].update(ok=False, errors=2, reason="short read on L003/E0012.bin")


def _twice_in_warmup(p):
    """Iteration 3 of pass 0 recorded twice, the summary's pass 0 totals counting it twice too
    (so that only the iteration numbering is wrong, not the totals: totals_agree's fault)."""
    recs = p["agent.jsonl"]
    recs.insert(3, dict(recs[3]))
    sm = recs[-1]
    for key, field in (("pass_bytes", "bytes"), ("pass_reads", "reads"),
                       ("pass_wall_ns", "wall_ns")):
        sm[key][0] += recs[3][field]


def _negative_wall(p):
    p["agent.jsonl"][2]["wall_ns"] = -1000


def _low_timeline(p):
    lines = p["timeline.csv"].splitlines()
    p["timeline.csv"] = "\n".join([lines[0]] + [re.sub(r"^([^,]*,[^,]*),(\d+),",
                                                       lambda m: f"{m[1]},{int(m[2]) // 4},", ln)
                                                for ln in lines[1:]]) + "\n"


def _stdout(pattern, repl):
    def edit(p):
        p["engine.stdout"] = re.sub(pattern, repl, p["engine.stdout"], flags=re.M)
    return edit


def _runner_failed(p):
    st = p["status.json"]
    st.update(phase="failed", ok=False, reason="balloon not ready after 900 s")
    st["history"] = [h for h in st["history"] if h["phase"] in (
        "accepted", "locked", "cleaned", "caches_dropped", "mglru_set")]
    st["history"].append({"phase": "failed", "t": "x", "mono_ns": 1})


FAULTS = {
    "runner_completed": ("64Mi-balloon-mglru", _runner_failed),
    "vmlck_held": ("64Mi-balloon-mglru", lambda p: _sub(p, "post", "balloon_status",
                                                       r"^VmLck:.*$", "VmLck:\t 1024 kB")),
    "no_oom": ("64Mi-cgroup-mglru", lambda p: _sub(p, "post", "memory.oom_control",
                                                  r"^oom_kill \d+$", "oom_kill 1")),
    "alive_throughout": ("64Mi-balloon-mglru",
                         lambda p: p["balloon.json"].update(alive_at_end=False, signal=9)),
    "mglru_as_requested": ("64Mi-cgroup-mglru", lambda p: p["snapshots"]["post"].update(
        sys_kernel_mm_lru_gen_enabled="0x0000\n")),
    "boot_matches": ("64Mi-cgroup-mglru", lambda p: p["snapshots"]["post"].update(
        proc_sys_kernel_random_boot_id="00000000-0000-0000-0000-000000000000\n")),
    "caches_dropped": ("64Mi-cgroup-mglru",
                       lambda p: p["drop.json"].update(cached_after_bytes=8 << 30)),
    "no_swap": ("64Mi-cgroup-mglru", _vmstat_bump("pswpin", 7)),
    "measured_pass_complete": ("64Mi-cgroup-mglru", _agent_errors),
    "timeline_reaches_wall": ("64Mi-cgroup-mglru", _low_timeline),
    "kernel_log_clean": ("64Mi-cgroup-mglru", lambda p: p.update(
        {"kmsg.txt": "[ 12.3] blk_update_request: I/O error, dev vda, sector 2048\n"})),
    "preload_outside": ("64Mi-cgroup-mglru-pinned", lambda p: _sub(
        p, "pass1-start", "proc_self_status", r"^VmLck:.*$", "VmLck:\t       0 kB")),
    "hint_provenance": ("64Mi-cgroup-mglru-oracle-advice",
                        lambda p: p["spec.json"].update(hints_provenance=None)),
    # impossible numbers
    "numbers_possible": ("64Mi-cgroup-mglru", _negative_wall),
    "passes_agree": ("64Mi-cgroup-mglru", lambda p: p["agent.jsonl"][-1].update(passes=3)),
    "iterations_complete": ("64Mi-cgroup-mglru", _twice_in_warmup),
    # end-to-end engine runs (docs/engine.md)
    "engine_exit_ok": ("e2e-prose-admit", lambda p: p["engine.json"].update(exit_code=3)),
    "engine_backend": ("e2e-prose-nocache", _stdout(r"^MoE backend: .*$",
                                                    "MoE backend: cpu-fallback (nocache)")),
    "engine_output_nondegenerate": ("e2e-code-admit", _stdout(
        r"^output token ids: .*$", "output token ids: " + ", ".join(["17"] * 20))),
    "engine_load_reported": ("e2e-chat-admit", _stdout(r"^cold load: .*\n", "")),
    # memory arithmetic (bench.judge.rules_memory; the other branches: test_memory_rules.py)
    "locked_fraction_sums": ("64Mi-balloon-mglru", lambda p: _sub(
        p, "pass1-start", "proc_meminfo", r"^Mlocked:\s+\d+ kB$", "Mlocked:           14508 kB")),
    "capacity_sums": ("64Mi-balloon-mglru", lambda p: _sub(
        p, "pass1-start", "proc_meminfo", r"^MemAvailable:\s+(\d+) kB$",
        lambda m: f"MemAvailable:   {int(m[1]) + (2 << 20)} kB")),
}
CLEAN_CELLS = ["64Mi-cgroup-mglru", "64Mi-balloon-mglru", "64Mi-balloon-classic",
               "64Mi-cgroup-mglru-pinned", "64Mi-cgroup-mglru-hybrid",
               "64Mi-cgroup-mglru-oracle-advice", "64Mi-none-mglru", "e2e-prose-admit",
               "e2e-code-nocache"]


def test_every_rule_has_a_fault_test():
    """Here, or for the plausibility rules in test_plausibility.py (its FAULTS)."""
    from tests.local.store.test_plausibility import FAULTS as PLAUSIBLE
    assert {r.name for r in retention.RULES} == set(FAULTS) | set(PLAUSIBLE) | {
        "fingerprint_matches", "bundle_contract"}


@pytest.mark.parametrize("cell", CLEAN_CELLS)
def test_clean_run_passes_every_rule(bundles, cell):
    b = load(read_dir(bundles("r1", cell)))
    bad = [v for v in retention.evaluate(b) if not v.passed]
    assert bad == []


@pytest.mark.parametrize("rule", sorted(FAULTS))
def test_fault_fails_its_rule(bundles, rule):
    cell, edit = FAULTS[rule]
    b = load(read_dir(bundles("r1", cell, edit=edit)))
    failed = {v.rule: v.reason for v in retention.evaluate(b) if not v.passed}
    assert rule in failed, failed
    assert failed[rule]                       # a human reason
    if rule not in ("no_oom",):               # the OOM fault is also the only failure
        assert set(failed) == {rule}, failed


def test_fingerprint_must_match_the_campaign(store, bundles):
    assert ingest_bundle(store, bundles("r1"))["retained"]
    other = bundles("r2", edit=lambda p: p["host.json"].update(agent_source_sha256="e" * 64))
    res = ingest_bundle(store, other)
    assert res["failed"] == ["fingerprint_matches"]
    run = [r for r in list_runs(store) if r["run_id"] == "r2"][0]
    v = [x for x in run["verdicts"] if x["rule"] == "fingerprint_matches"][0]
    assert "agent_sha256 eeeeeeeeeeee vs aaaaaaaaaaaa" in v["reason"] and v["version"] == 3


def test_fingerprint_ignores_what_the_campaigns_own_reboots_change():
    """A memboot reboot rewrites the command line: mem=, bench.lru_gen=, panic= and the order
    of the other arguments may change; the kernel or another argument may not."""
    from types import SimpleNamespace as NS

    from bench.judge.measured import fingerprint, fingerprint_diff

    def fp(cmdline, kernel="6.1"):
        return fingerprint(NS(host={"cmdline": cmdline, "kernel_release": kernel,
                                    "arch": "x86_64", "agent_source_sha256": "a" * 64},
                              spec={"controller_version": "0.1.0+src.0123456789ab"}))
    base = fp("root=/dev/vda rw console=ttyS0 panic=10 loglevel=4 bench.name=lab-a")
    same = fp("root=/dev/vda rw console=ttyS0 loglevel=4 bench.name=lab-a mem=553M "
              "bench.lru_gen=off panic=10")
    assert same["digest"] == base["digest"] and fingerprint_diff(same, base) == []
    other = fp("root=/dev/vda rw console=ttyS0 loglevel=7 bench.name=lab-a")
    assert other["digest"] != base["digest"]
    assert fingerprint_diff(other, base) == ["cmdline +loglevel=7 -loglevel=4"]
    newer = fp("root=/dev/vda rw console=ttyS0 loglevel=4 bench.name=lab-a", kernel="6.8")
    assert newer["digest"] != base["digest"]
    assert fingerprint_diff(newer, base) == ["kernel 6.8 vs 6.1"]


def test_recheck_reports_changes_under_new_rule_versions(store, bundles, monkeypatch):
    from bench.store.ingest import recheck
    ingest_bundle(store, bundles("r1"))
    assert recheck(store) == []
    old = next(r for r in retention.RULES if r.name == "caches_dropped")
    strict = retention.Rule("caches_dropped", 2, lambda b, ctx: (False, "stricter"), old.doc)
    monkeypatch.setattr(retention, "RULES", [strict if r is old else r for r in retention.RULES])
    changes = recheck(store)
    assert [(c["run_id"], c["rule"], c["old"]["version"], c["new"]["passed"]) for c in changes] \
        == [("r1", "caches_dropped", 1, False)]
    assert list_runs(store, rejected=True)[0]["failed"] == ["caches_dropped"]
    assert recheck(store) == []


@pytest.mark.parametrize("cell, other", [("e2e-prose-admit", "agent"),
                                         ("64Mi-cgroup-mglru", "engine")])
def test_rules_of_the_other_kind_are_not_evaluated(bundles, cell, other):
    """Agent-only rules never judge an engine run (no agent data there), nor engine gates an
    agent run: no verdict of theirs is recorded; the rules both kinds share are."""
    b = load(read_dir(bundles("r1", cell)))
    got = {v.rule for v in retention.evaluate(b)}
    foreign = {r.name for r in retention.RULES if r.kinds == (other,)}
    shared = {r.name for r in retention.RULES if len(r.kinds) == 2}
    assert foreign and not got & foreign
    assert shared <= got


def test_engine_run_stores_its_facts_and_verdicts(store, bundles):
    res = ingest_bundle(store, bundles("e1", "e2e-prose-nocache", wall_s=9.5, load_s=1.5))
    assert res["retained"] and res["status"] == "ingested"
    from bench.store.queries import engine_rows
    row = engine_rows(store)[0]
    assert (row["prompt"], row["policy"], row["pair_index"], row["pair_order"]) == (
        "prose", "nocache", 0, "admit-first")
    assert row["pair_position"] == 1 and row["steady_s"] == pytest.approx(8.0)
    assert row["backend_found"] and row["tokens"] == 20 and len(row["output_sha256"]) == 64
    bad = ingest_bundle(store, bundles("e2", "e2e-prose-admit", edit=FAULTS[
        "engine_output_nondegenerate"][1]))
    assert bad["failed"] == ["engine_output_nondegenerate"]


def test_a_partial_bundle_of_a_failed_run_is_stored_and_rejected_with_the_runners_reason(
        store, bundles):
    """The runner stopped before the agent (a balloon that never got ready): no agent.jsonl,
    timeline or pass snapshots. It verifies, is stored without figures, and is rejected by
    runner_completed with the runner's reason: never an infrastructure failure to retry."""
    def partial(p):
        _runner_failed(p)
        for rel in ("agent.jsonl", "timeline.csv", "kmsg.txt"):
            p.pop(rel, None)
        for phase in [k for k in p["snapshots"] if k.startswith("pass")]:
            del p["snapshots"][phase]
    path = bundles("rf", "64Mi-balloon-mglru", edit=partial)
    b = load(read_dir(path))
    assert not b.completed and b.records == [] and b.summary == {} and b.timeline == []
    res = ingest_bundle(store, path)
    assert res["status"] == "ingested" and res["retained"] is False
    assert "runner_completed" in res["failed"]
    run = [r for r in list_runs(store) if r["run_id"] == "rf"][0]
    v = {x["rule"]: x for x in run["verdicts"]}
    assert v["runner_completed"]["reason"] == ("runner ended 'failed' after phase mglru_set: "
                                               "balloon not ready after 900 s")
    assert run["iteration_median_s"] is None and run["device_gb_per_iteration"] is None
    # a complete bundle still needs every part
    with pytest.raises(BundleError, match="agent.jsonl"):
        load(read_dir(bundles("rg", "64Mi-balloon-mglru",
                              edit=lambda p: p.pop("agent.jsonl"))))


def test_recheck_rejects_a_stored_bundle_that_no_longer_validates(store, bundles):
    """A run stored before the contract (here: its stored spec says 1 pass, which ingest
    refuses today) is rejected by bundle_contract on recheck, with the first problem; its
    other verdicts stay."""
    import hashlib
    import json
    import zlib

    from sqlalchemy import select

    from bench.store.ingest import recheck
    from bench.store.models import RawFile
    ingest_bundle(store, bundles("r1"))
    with store.session() as s, s.begin():
        raw = {rf.path: rf for rf in s.scalars(select(RawFile))}
        spec = json.loads(zlib.decompress(raw["spec.json"].data))
        spec["agent"]["passes"] = 1
        data = json.dumps(spec).encode()
        raw["spec.json"].data = zlib.compress(data)
        m = json.loads(zlib.decompress(raw["manifest.json"].data))
        m["files"]["spec.json"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        raw["manifest.json"].data = zlib.compress(json.dumps(m).encode())
    changes = recheck(store)
    assert [(c["rule"], c["new"]["passed"]) for c in changes] == [("bundle_contract", False)]
    assert "spec.json: key 'agent.passes': must be at least 2" in changes[0]["reason"]
    run = list_runs(store, rejected=True)[0]
    assert run["run_id"] == "r1" and run["failed"] == ["bundle_contract"]
    assert recheck(store) == []
