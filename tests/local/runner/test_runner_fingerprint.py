"""Fingerprints of bundles the real runner writes (real agent, loop device, this kernel), one of
them on "another kernel" through the runner's test hook BENCH_RUNNER_TEST_KERNEL_RELEASE: their
fingerprints differ, ingested into one campaign the second is rejected naming the kernel, the
settings in host.json are this machine's, bundlegen writes the runner's host.json keys, and
`bench hosts probe --campaign` compares this host with what the campaign recorded."""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest

from bench.judge.bundle import load, read_dir
from bench.judge.measured import fingerprint, fingerprint_diff
from tests.support.bundlegen import ensure_campaigns
from tests.support.runner import REPO, make_spec, read_json, start, verify_manifest, wait

HOOK = "BENCH_RUNNER_TEST_KERNEL_RELEASE"
OTHER = "6.99.0-bench-test"
THIS = os.uname().release
CAMPAIGN = "fp-campaign"

pytestmark = pytest.mark.root


@pytest.fixture(scope="module")
def runs(agent, loopfs, pool, plans) -> dict[str, Path]:
    """Two `none` runs of one campaign on this host: one as it is, one with the hook set."""
    work = Path(tempfile.mkdtemp(prefix="bench-runner-fp-", dir="/tmp"))
    plain = {k: v for k, v in os.environ.items() if k != HOOK}
    out = {}
    try:
        for run_id, env in (("fp-this", plain), ("fp-other", dict(plain, **{HOOK: OTHER}))):
            spec = make_spec(run_id, "1g-none-classic", pool=pool, plan=plans["short"],
                             agent=agent, campaign=CAMPAIGN)
            rc, res = start(spec, work, env=env)
            assert rc == 0 and res["ok"], res
            st = wait(run_id, work)
            assert st["phase"] == "done", st
            verify_manifest(Path(res["bundle"]))
            out[run_id] = Path(res["bundle"])
        yield out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_two_kernels_two_fingerprints(runs):
    this, other = (load(read_dir(runs[r])) for r in ("fp-this", "fp-other"))
    assert this.host["kernel_release"] == THIS and "test_hooks" not in this.host
    assert other.host["kernel_release"] == OTHER and other.host["test_hooks"] == {HOOK: OTHER}
    a, b = fingerprint(this), fingerprint(other)
    assert a["kernel"] == THIS and b["kernel"] == OTHER and a["digest"] != b["digest"]
    assert a["settings"] and a["agent_sha256"] == this.host["agent_source_sha256"]
    # the same machine a few seconds apart: the kernel is the one difference
    assert fingerprint_diff(b, a) == [f"kernel {OTHER} vs {THIS}"]


def test_one_campaign_rejects_the_run_on_the_other_kernel(runs, tmp_path):
    from bench.store.db import open_store
    from bench.store.ingest import ingest_bundle
    from bench.store.queries import list_runs
    store = open_store(f"sqlite:///{tmp_path}/bench.db")
    ensure_campaigns(store, CAMPAIGN)             # the executor makes it; ingest never does
    try:
        ingest_bundle(store, runs["fp-this"])
        res = ingest_bundle(store, runs["fp-other"])
        verdicts = {r["run_id"]: {v["rule"]: v for v in r["verdicts"]} for r in list_runs(store)}
    finally:
        store.close()
    assert verdicts["fp-this"]["fingerprint_matches"]["passed"]
    assert "fingerprint_matches" in res["failed"] and res["retained"] is False
    v = verdicts["fp-other"]["fingerprint_matches"]
    assert v["version"] == 3 and f"kernel {OTHER} vs {THIS}" in v["reason"], v


def _choice(path: str) -> str | None:
    text = Path(path).read_text().strip()
    m = re.search(r"\[(.+?)\]", text)
    return m.group(1) if m else (text or None)


def test_host_json_settings_are_this_machines(runs, loopfs):
    s = read_json(runs["fp-this"] / "host.json")["settings"]
    q = f"/sys/block/{loopfs.dev}/queue"
    assert s["block"] == {loopfs.dev: {
        "read_ahead_kb": int(Path(f"{q}/read_ahead_kb").read_text()),
        "max_sectors_kb": int(Path(f"{q}/max_sectors_kb").read_text()),
        "scheduler": _choice(f"{q}/scheduler")}}
    for key in ("enabled", "defrag"):
        thp = f"/sys/kernel/mm/transparent_hugepage/{key}"
        assert s["thp"][key] == (_choice(thp) if os.path.exists(thp) else None)
    for key, value in s["vm"].items():
        assert value == int(Path(f"/proc/sys/vm/{key}").read_text()), key
    nodes = {}
    for path in glob.glob("/sys/devices/system/node/node*/meminfo"):
        n = re.search(r"node(\d+)/meminfo$", path).group(1)
        nodes[n] = int(re.search(r"MemTotal:\s+(\d+) kB", Path(path).read_text()).group(1)) << 10
    assert s["numa"]["nodes"] == nodes and set(nodes)
    assert s["numa"]["online"] == Path("/sys/devices/system/node/online").read_text().strip()
    govs = [Path(p).read_text().strip() for p in
            glob.glob("/sys/devices/system/cpu/cpufreq/policy*/scaling_governor")]
    assert s["cpufreq"] == {"policies": len(govs),
                            "governors": {g: govs.count(g) for g in sorted(set(govs))}}


def _keys(host: dict) -> dict:
    """host.json's key structure: top-level keys, settings' groups and their keys."""
    s = host.get("settings") or {}
    return {"top": set(host) - {"test_hooks"},
            "pool_device": set(host["pool_device"]) - {"loop_backing_file", "note"},
            "settings": {g: (set(next(iter(v.values()))) if g == "block" else set(v))
                         for g, v in s.items()}}


def test_bundlegen_writes_the_keys_the_runner_writes(runs):
    from tests.support.bundlegen import parts_for
    real = _keys(read_json(runs["fp-this"] / "host.json"))
    for cell in ("64m-cgroup-mglru", "e2e-prose-admit"):
        assert _keys(parts_for("x", cell)["host.json"]) == real, cell


def test_probe_compares_this_host_with_its_campaign(runs, pool, tmp_path, capsys):
    """`bench hosts probe --campaign`: this host, probed with its pool on the loop device,
    against the reference the campaign recorded: the run on the hook's kernel."""
    from bench.cli import main
    from bench.store.db import open_store
    from bench.store.ingest import ingest_bundle
    db = f"sqlite:///{tmp_path}/bench.db"
    store = open_store(db)
    ensure_campaigns(store, CAMPAIGN)
    try:
        ingest_bundle(store, runs["fp-other"])      # the campaign's reference: "another kernel"
    finally:
        store.close()
    hosts = tmp_path / "hosts"
    hosts.mkdir()
    (hosts / "local.toml").write_text(
        'name = "local"\ntransport = "local"\n[reboot]\nallowed = false\nmethod = "none"\n'
        f'[paths]\npool_dir = "{pool}"\nwork_dir = "{REPO}"\n')
    argv = ["hosts", "probe", "local", "--hosts-dir", str(hosts), "--campaign", CAMPAIGN,
            "--db", db]
    assert main(argv + ["--json"]) == 0
    (res,) = json.loads(capsys.readouterr().out)
    c = res["campaign"]
    assert c["matches"] is False and c["differences"] == [f"kernel {THIS} vs {OTHER}"], c
    assert res["facts"]["settings"] == read_json(runs["fp-other"] / "host.json")["settings"]
    assert main(argv + ["-v"]) == 0
    err = " ".join(capsys.readouterr().err.split())       # rich wraps at the console width
    assert "differs from campaign fp-campaign" in err and f"kernel {THIS} vs {OTHER}" in err
    assert f"read_ahead_kb[{res['facts']['pool_device']['name']}]=" in err


def test_docs_bundle_md_names_every_host_json_key(runs):
    doc = (REPO / "docs" / "bundle.md").read_text()
    section = doc[doc.index("## host.json"):doc.index("## The fingerprint")]
    host = read_json(runs["fp-other"] / "host.json")
    missing = [k for k in list(host) + list(host["settings"]) + list(host["settings"]["vm"])
               if f"`{k}`" not in section and k not in section]
    assert missing == []
