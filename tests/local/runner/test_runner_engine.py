"""End-to-end engine runs against the real kernel: the host-side runner runs a real engine
process (tests/fixtures/engine/engine.py: it decodes by reading a bench pool's expert files
with page-cache admission, or with O_DIRECT for nocache) instead of the agent, the bundles go
through ingest into a SQLite database made by the migrations, and the retention gates judge
them; then a whole end-to-end campaign through the executor on this host. docs/engine.md."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench.matrix import engine_cells
from tests.support import paths
from tests.support.bundlegen import ensure_campaigns
from tests.support.runner import (assert_private, contract, read_json, start, verify_manifest,
                                  wait)

REPO = paths.REPO
ENGINE = REPO / "tests" / "fixtures" / "engine" / "engine.py"
LAYERS, EXPERTS, EXPERT_BYTES = 4, 32, 256 << 10       # a 32 MiB pool
N_TOKENS, K = 40, 2
PROMPTS = {"prose": "Write a short story about a lighthouse keeper.\n",
           "code": "def fib(n):\n    # complete this function\n"}


def table(prompt_dir: Path, *extra: str, **over) -> dict:
    t = {"command": [str(ENGINE), "--pool", "{pool_dir}", "--prompt-file", "{prompt_file}",
                     "--n-tokens", "{n_tokens}", "--experts-per-token", str(K),
                     "{policy_args}", *extra],
         "backend": "MoE backend: fixture-pread", "n_tokens": N_TOKENS, "pairs": 3,
         "timeout_s": 120,
         "tokens_regex": "^output token ids: (?P<tokens>.*)$",
         "load_regex": "^cold load: (?P<seconds>[0-9.]+) s",
         "policies": {"admit": {"args": ["--policy", "admit"]},
                      "nocache": {"args": ["--policy", "nocache"]}},
         "prompts": {p: str(prompt_dir / f"{p}.txt") for p in PROMPTS}}
    t.update(over)
    return t


@pytest.fixture(scope="module")
def pool_and_prompts():
    from bench.plan.pool import PoolSpec, make_pool

    # /var/tmp: a disk filesystem (O_DIRECT works there, unlike tmpfs)
    d = Path(tempfile.mkdtemp(prefix="bench-e2e-", dir="/var/tmp"))
    make_pool(d / "pool", PoolSpec(LAYERS, EXPERTS, EXPERT_BYTES))
    for name, text in PROMPTS.items():
        (d / f"{name}.txt").write_text(text)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def host_of(d: Path, work_dir: Path):
    return SimpleNamespace(name="local", pool_dir=str(d / "pool"), work_dir=str(work_dir))


def spec(d, work_dir, run_id, cell, *extra, pair=0, first="admit", **over):
    cfg = engine_cells.parse_engine(table(d, *extra, **over), "test")
    return engine_cells.build_spec(cell, host_of(d, work_dir), cfg, run_id=run_id, pair_index=pair,
                             first=first, seed=0, campaign="e2e-test", timeline_interval_ms=50,
                             host_lock_timeout_s=120)


def run(d, work_dir, run_id, cell, *extra, **kw) -> tuple[dict, Path]:
    rc, res = start(spec(d, work_dir, run_id, cell, *extra, **kw), work_dir)
    assert rc == 0 and res["ok"], res
    return wait(run_id, work_dir, timeout=180), work_dir / "runs" / run_id


# --------------------------------------------------------------------------- no kernel needed

def test_bad_engine_specs_refused_before_touching_anything(pool_and_prompts, tmp_path):
    d, wd = pool_and_prompts, tmp_path / "wd"
    ok = spec(d, wd, "x1", "e2e-prose-admit")
    cases = [
        (lambda s: s["engine"].update(argv=[str(d / "missing-engine")]), "not an executable"),
        (lambda s: s["engine"].update(argv=[]), "non-empty list"),
        (lambda s: s["engine"].update(argv="engine --x"), "non-empty list"),
        (lambda s: s.update(mode="nocache"), "does not match cell"),
        (lambda s: s["engine"].update(policy="nocache"), "engine.policy"),
        (lambda s: s["engine"].update(env={"BAD NAME": "1"}), "engine.env"),
        (lambda s: s["engine"].update(cwd=str(d / "nope")), "engine.cwd"),
        (lambda s: s["engine"].update(prompt_file=str(d / "nope.txt")), "does not exist"),
        (lambda s: s["engine"].update(timeout_s=0), "timeout_s"),
        (lambda s: s.update(cell="e2e-prose"), "an engine cell is e2e-{prompt}-{policy}"),
        (lambda s: s["engine"].update(prepare_argv=[]), "engine.prepare_argv"),
        (lambda s: s["engine"].update(prepare_argv=[str(d / "missing")]), "not an executable"),
    ]
    for change, why in cases:
        s = json.loads(json.dumps(ok))
        change(s)
        rc, res = start(s, wd)
        assert rc == 2 and res["ok"] is False, (why, res)
        assert res["reason"].startswith("bad spec") and why in res["reason"], (why, res)
        assert not wd.exists(), "a refused spec must not create anything"


# --------------------------------------------------------------------------- real runs

ENGINE_FILES = {"spec.json", "status.json", "host.json", "drop.json", "mglru.json",
                "capacity.json", "engine.json", "engine.stdout", "engine.stderr",
                "timeline.csv", "kmsg.txt", "runner.json", "runner.log", "manifest.json"}


@pytest.mark.root
def test_a_pair_runs_is_ingested_and_passes_every_gate(pool_and_prompts, work_dir, tmp_path):
    from bench.store.db import open_store
    from bench.store.ingest import ingest_bundle
    from bench.store.queries import engine_results, engine_rows, list_runs
    d = pool_and_prompts
    bundles = []
    for rid, cell in (("p0-a", "e2e-prose-admit"), ("p0-n", "e2e-prose-nocache")):
        st, b = run(d, work_dir, rid, cell)
        assert st["phase"] == "done" and st["ok"] is True, st
        assert [h["phase"] for h in st["history"]] == [
            "accepted", "locked", "cleaned", "caches_dropped", "mglru_set", "capacity_applied",
            "measuring", "collecting", "done"]
        assert ENGINE_FILES <= {p.name for p in b.iterdir()}
        m = verify_manifest(b)
        assert {"snapshots/pre/proc_diskstats", "snapshots/post/proc_vmstat"} <= set(m["files"])
        e = read_json(b / "engine.json")
        assert e["exit_code"] == 0 and e["signal"] is None and not e["timed_out"]
        assert e["wall_s"] == pytest.approx((e["end_mono_ns"] - e["start_mono_ns"]) / 1e9)
        assert e["executable_sha256"] == hashlib.sha256(ENGINE.read_bytes()).hexdigest()
        assert e["argv"][0] == str(ENGINE) and "--policy" in e["argv"]
        assert read_json(b / "mglru.json")["requested"] is None
        assert read_json(b / "capacity.json")["mechanism"] == "none"
        assert "output token ids:" in (b / "engine.stdout").read_text()
        assert contract(b).engine == e          # an engine run's bundle validates too
        assert_private(b)
        # the engine keeps the umask runners always gave it; the bundle is private anyway
        assert "umask 0022" in (b / "engine.stderr").read_text()
        bundles.append(b)
    store = open_store(f"sqlite:///{tmp_path}/e2e.db")
    ensure_campaigns(store, "e2e-test")
    try:
        for b in bundles:
            res = ingest_bundle(store, b)
            assert res["status"] == "ingested" and res["retained"], res
        rows = {r["run_id"]: r for r in engine_rows(store)}
        a, n = rows["p0-a"], rows["p0-n"]
        assert a["output_sha256"] == n["output_sha256"] and a["tokens"] == N_TOKENS
        assert (a["pair_order"], a["pair_position"], n["pair_position"]) == ("admit-first", 0, 1)
        for r in (a, n):
            assert r["backend_found"] and r["steady_s"] == pytest.approx(r["wall_s"] - r["load_s"])
        # nocache reads every routed expert from the device: at least N x layers x k experts
        assert n["device_bytes"] >= 0.95 * N_TOKENS * LAYERS * K * EXPERT_BYTES
        verdicts = {v["rule"]: v for v in list_runs(store)[0]["verdicts"]}
        for rule in ("engine_exit_ok", "engine_backend", "engine_output_nondegenerate",
                     "engine_load_reported", "caches_dropped", "boot_matches"):
            assert verdicts[rule]["passed"], verdicts[rule]
        assert "measured_pass_complete" not in verdicts          # agent-only rules stay out
        res = engine_results(store)["prompts"][0]
        assert res["pairs"] == 1 and res["hashes_match"] is True
        assert res["speedup"] == pytest.approx(n["steady_s"] / a["steady_s"])
    finally:
        store.close()


PREPARE = [sys.executable, "-c", "import sys; print('prepare', sys.argv[1:]); "
           "sys.exit(int(sys.argv[1]))"]


@pytest.mark.root
def test_the_prepare_command_runs_before_the_drop_and_its_failure_fails_the_run(
        pool_and_prompts, work_dir):
    d = pool_and_prompts
    st, b = run(d, work_dir, "prep-ok", "e2e-prose-admit", prepare=PREPARE + ["0", "{run_id}"])
    assert st["ok"] is True, st
    assert (b / "prepare.log").read_text() == "prepare ['0', 'prep-ok']\n"
    rec = read_json(b / "runner.json")["engine_prepare"]
    assert rec["exit_code"] == 0 and rec["argv"][-1] == "prep-ok" and not rec["timed_out"]
    assert read_json(b / "spec.json")["engine"]["prepare_argv"][-2:] == ["0", "prep-ok"]
    verify_manifest(b)
    st, b = run(d, work_dir, "prep-bad", "e2e-prose-admit", prepare=PREPARE + ["3"])
    assert st["phase"] == "failed" and st["reason"] == (
        "the engine's prepare exited with 3: prepare ['3']"), st
    phases = [h["phase"] for h in st["history"]]
    assert "caches_dropped" not in phases and "measuring" not in phases
    assert not (b / "engine.stdout").exists() or not (b / "engine.stdout").read_text()


@pytest.mark.root
def test_an_engine_under_a_cgroup_wall_and_under_a_balloon(pool_and_prompts, work_dir, agent,
                                                            tmp_path):
    """Engine cells at a capacity: the engine enters the wall between fork and exec (its
    memory.current sampled), or runs beside a balloon that leaves C available; both pass
    alive_throughout's engine check and every gate."""
    from bench.store.db import open_store
    from bench.store.ingest import ingest_bundle
    from bench.store.queries import engine_results, list_runs
    from bench.units import format_size
    d = pool_and_prompts
    (work_dir / "native").mkdir(parents=True)         # where deploy puts the agent
    shutil.copy(agent, work_dir / "native" / "bench-agent")
    avail = int(next(ln for ln in Path("/proc/meminfo").read_text().splitlines()
                     if ln.startswith("MemAvailable:")).split()[1]) * 1024
    bal = format_size((avail - (512 << 20)) // 10 ** 6 * 10 ** 6)   # locks about 512 MiB
    cfg = engine_cells.parse_engine(table(d, capacities=["96M-cgroup", f"{bal}-balloon"]),
                                    "test")
    h = host_of(d, work_dir)
    bundles = {}
    for rid, cell in (("w-a", "e2e-prose-admit-96M-cgroup"),
                      ("b-a", f"e2e-prose-admit-{bal}-balloon")):
        spec = engine_cells.build_spec(cell, h, cfg, run_id=rid, pair_index=0, first="admit",
                                       seed=0, campaign="e2e-test", timeline_interval_ms=50,
                                       host_lock_timeout_s=120,
                                       extra={"balloon_max_bytes": 1 << 30})
        rc, res = start(spec, work_dir)
        assert rc == 0 and res["ok"], res
        st = wait(rid, work_dir, timeout=180)
        assert st["phase"] == "done" and st["ok"] is True, st
        bundles[rid] = work_dir / "runs" / rid
    w = bundles["w-a"]
    cap = read_json(w / "capacity.json")
    assert cap["mechanism"] == "cgroup" and cap["limit_bytes"] == 96_000_000
    e = read_json(w / "engine.json")
    assert e["in_cgroup"] is True and e["exit_code"] == 0
    rows = (w / "timeline.csv").read_text().splitlines()[1:]
    assert rows and all(r.split(",")[2] for r in rows)      # memory.current in every sample
    assert max(int(r.split(",")[2]) for r in rows) <= 96_000_000
    b = bundles["b-a"]
    bj = read_json(b / "balloon.json")
    assert bj["alive_at_engine_start"] is True and bj["alive_at_end"] is True
    assert read_json(b / "capacity.json")["vmlck_verified"] is True
    store = open_store(f"sqlite:///{tmp_path}/cap.db")
    ensure_campaigns(store, "e2e-test")
    try:
        for rid, bundle in bundles.items():
            got = ingest_bundle(store, bundle)
            assert got["retained"], (rid, got)
        why = {r["cell"]: {v["rule"]: v["reason"] for v in r["verdicts"]}
               for r in list_runs(store)}
        assert why["e2e-prose-admit-96M-cgroup"]["alive_throughout"] == (
            "scope alive at post and in every timeline sample")
        assert why[f"e2e-prose-admit-{bal}-balloon"]["alive_throughout"] == (
            "balloon alive at the engine's start and at the end")
        arms = {p["arm"] for p in engine_results(store)["prompts"]}
        assert arms == {"96M-cgroup", f"{bal}-balloon"}
    finally:
        store.close()


@pytest.mark.root
def test_degenerate_wrong_backend_and_hung_engines_are_rejected(pool_and_prompts, work_dir,
                                                               tmp_path):
    from bench.store.db import open_store
    from bench.store.ingest import ingest_bundle
    from bench.store.queries import list_runs
    d = pool_and_prompts
    st, deg = run(d, work_dir, "deg", "e2e-code-admit", "--degenerate")
    assert st["ok"] is True                 # the runner ran it; retention judges it
    st, wrong = run(d, work_dir, "cpu", "e2e-code-nocache", "--backend", "cpu-fallback")
    assert st["ok"] is True
    t0 = time.monotonic()
    st, hung = run(d, work_dir, "hung", "e2e-code-admit", "--sleep", "60", timeout_s=2)
    assert time.monotonic() - t0 < 40
    assert st["phase"] == "failed" and "timeout_s" in st["reason"], st
    e = read_json(hung / "engine.json")
    assert e["timed_out"] is True and e["signal"] == 15 and 2 <= e["wall_s"] < 15
    store = open_store(f"sqlite:///{tmp_path}/faults.db")
    ensure_campaigns(store, "e2e-test")
    try:
        failed = {b.name: ingest_bundle(store, b)["failed"] for b in (deg, wrong, hung)}
        assert failed["deg"] == ["engine_output_nondegenerate"]
        assert failed["cpu"] == ["engine_backend"]
        assert "engine_exit_ok" in failed["hung"]
        why = {r["run_id"]: {v["rule"]: v["reason"] for v in r["verdicts"] if not v["passed"]}
               for r in list_runs(store)}
        assert "repeated" in why["deg"]["engine_output_nondegenerate"]
        assert "cpu-fallback" in why["cpu"]["engine_backend"]
        assert "timeout_s 2" in why["hung"]["engine_exit_ok"]
    finally:
        store.close()


@pytest.mark.root
def test_an_orphaned_engine_is_stopped_by_the_next_status(pool_and_prompts, work_dir):
    """The runner dies (SIGKILL) while the engine decodes: the next `status` stops the
    engine it recorded (same start time, its executable or command line) and seals the
    bundle as failed."""
    import os
    import signal

    from tests.support.runner import runner, wait_phase
    d = pool_and_prompts
    rc, res = start(spec(d, work_dir, "orphan", "e2e-prose-admit", "--sleep", "60"), work_dir)
    assert rc == 0, res
    bundle = Path(res["bundle"])
    st = wait_phase(bundle, ("measuring",))
    end = time.monotonic() + 10
    while not (st.get("children") or {}).get("engine") and time.monotonic() < end:
        st = read_json(bundle / "status.json")
        time.sleep(0.05)
    engine_pid = st["children"]["engine"]
    os.kill(res["pid"], signal.SIGKILL)
    while Path(f"/proc/{res['pid']}").exists() and time.monotonic() < end:
        time.sleep(0.05)
    rc, st = runner("status", "orphan", "--work-dir", work_dir)
    assert st["phase"] == "failed" and "died" in st["reason"], st
    assert "killed 1 process" in st["reason"], st
    end = time.monotonic() + 10
    while Path(f"/proc/{engine_pid}").exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert not Path(f"/proc/{engine_pid}").exists() or \
        "\nState:\tZ" in Path(f"/proc/{engine_pid}/status").read_text()
    verify_manifest(bundle)


# --------------------------------------------------------------------------- a whole campaign

def matrix_toml(d: Path, pairs: int) -> str:
    t = table(d, pairs=pairs, timeout_s=120)
    q = json.dumps
    lines = ['name = "e2e-local"', 'description = "engine pairs on this host"',
             "[order]", "randomize = true", "interleave_reps = true",
             "[hosts]", 'tags = "any"', 'placement = "each"',
             "[estimate]", "run_seconds = 5", "reboot_seconds = 60", "[engine]"]
    lines += [f"{k} = {q(v)}" for k, v in t.items() if k not in ("policies", "prompts")]
    for pol, p in t["policies"].items():
        lines += [f"[engine.policies.{pol}]", f"args = {q(p['args'])}"]
    lines += ["[engine.prompts]"] + [f"{k} = {q(v)}" for k, v in t["prompts"].items()]
    return "\n".join(lines) + "\n"


@pytest.mark.root
def test_campaign_of_engine_pairs_through_the_executor(pool_and_prompts, tmp_path):
    """matrix -> expansion -> schedule -> executor (runner on this host, collect, ingest,
    retention) -> Table 3, with the per-pair median recomputed from the stored rows."""
    from bench.execute.campaign.executor import Executor
    from bench.execute.campaign.record import Settings, create
    from bench.hosts.inventory import Host, load_inventory, render_host_toml, select
    from bench.matrix.expand import expand
    from bench.matrix.load import load_matrix
    from bench.matrix.schedule import HostState, schedule
    from bench.store import queries
    from bench.store.db import open_store
    d = pool_and_prompts
    hosts_dir = tmp_path / "hosts"
    hosts_dir.mkdir()
    (hosts_dir / "local.toml").write_text(render_host_toml(Host(
        name="local", address="localhost", transport="local", tags={"machine": "controller"},
        pool_dir=str(d / "pool"), work_dir=str(tmp_path / "work"))))
    mpath = tmp_path / "e2e-local.toml"
    mpath.write_text(matrix_toml(d, pairs=3))
    m = load_matrix(mpath)
    hosts = select(load_inventory(hosts_dir), ["local"])
    exp = expand(m, hosts)
    plan = schedule(exp.requests, [HostState.from_host(h) for h in hosts], 11,
                    campaign="e2e-c1", randomize=m.randomize, interleave=m.interleave)
    assert len(plan.runs) == 12
    url = f"sqlite:///{tmp_path}/campaign.db"
    settings = Settings(threads=2, retries=1, data_dir=tmp_path / "data", db_url=url,
                        hosts_dir=hosts_dir, chunk_s=1.0, retry_pause_s=0.5)
    store = open_store(url)
    try:
        create(store, plan, exp, m, ["local"], settings, str(mpath))
        res = Executor(store, "e2e-c1", settings).run()
        assert res.state == "done", res
        assert {r.state for r in res.runs} == {"validated"}, res.runs
        rows = {r["run_id"]: r for r in queries.engine_rows(store, campaign="e2e-c1")}
        assert len(rows) == 12
        # the runs executed in the plan's balanced pair order
        for r in plan.runs:
            row = rows[r.run_id]
            assert (row["prompt"], row["pair_index"], row["pair_order"], row["pair_position"]) \
                == (r.pair["prompt"], r.pair["index"], r.pair["order"], r.pair["position"])
            assert row["cell"] == r.cell and row["position"] == r.position
        table3 = {p["prompt"]: p for p in
                  queries.engine_results(store, campaign="e2e-c1")["prompts"]}
        assert set(table3) == set(PROMPTS)
        for prompt, p in table3.items():
            pairs = {}
            for r in rows.values():
                if r["prompt"] == prompt:
                    pairs.setdefault(r["pair_index"], {})[r["policy"]] = r
            ratios = sorted(v["nocache"]["steady_s"] / v["admit"]["steady_s"]
                            for v in pairs.values())
            assert p["pairs"] == 3 and p["incomplete"] == []
            assert p["speedup"] == pytest.approx(ratios[1])
            assert (p["speedup_min"], p["speedup_max"]) == (pytest.approx(ratios[0]),
                                                            pytest.approx(ratios[2]))
            assert p["hashes_match"] is True
            assert len({v["admit"]["output_sha256"] for v in pairs.values()}) == 1
    finally:
        store.close()


@pytest.mark.root
def test_runner_stop_stops_the_engines_process_group(pool_and_prompts, work_dir):
    """`runner.py stop` while the engine decodes: the supervise loop stops the engine's whole
    process group; the run fails "stopped by request" with engine.json saying stopped."""
    import os

    from tests.support.runner import runner, wait_phase
    d = pool_and_prompts
    rc, res = start(spec(d, work_dir, "stopped", "e2e-prose-admit", "--sleep", "60"), work_dir)
    assert rc == 0, res
    bundle = Path(res["bundle"])
    wait_phase(bundle, ("measuring",))
    time.sleep(0.3)
    rc, st = runner("stop", "stopped", "--work-dir", work_dir)
    assert st.get("stop_sent") is True, st
    st = wait("stopped", work_dir, timeout=60)
    assert st["phase"] == "failed" and "stopped by request" in st["reason"], st
    e = read_json(bundle / "engine.json")
    assert e["stopped"] is True and e["timed_out"] is False and e["signal"] == 15, e
    assert e["wall_s"] < 30
    with pytest.raises(ProcessLookupError):
        os.killpg(e["pid"], 0)                  # nothing of its group is left
    verify_manifest(bundle)
    assert not (work_dir / "active" / "stopped.json").exists()
