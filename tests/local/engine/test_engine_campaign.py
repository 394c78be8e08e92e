"""The shipped end-to-end matrix at lab scale (issue 25, item 4): its engine is the built-in
one, `{bench} engine run` (llama.cpp on the tiny MoE model its `prepare` makes in the host's
pool_dir before the first run's drop, admit = `--load mmap`, nocache = `--load direct-io`), its
prompts the shipped ones ({bench_data}); a campaign of balanced pairs on this host through the
real executor, runner, ingest and retention gates. The pool_dir is an ext4 loop device, so each
run's device bytes are the model's reads: both arms read the whole file cold (mmap through its
WILLNEED prefetch), the outputs agree."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("gguf", reason="needs the engine extra: pip install '.[engine]'")
pytest.importorskip("llama_cpp", reason="needs the engine extra: pip install '.[engine]'")

from tests.support import nativelib as nl  # noqa: E402

BENCH = Path(sys.executable).parent / "bench"
SLACK = 1 << 20            # ext4 metadata and the header's buffered read
MODEL = "bench-tiny-moe.gguf"


@pytest.mark.root
def test_the_shipped_end_to_end_matrix_at_lab_scale(tmp_path):
    if not BENCH.is_file():
        pytest.skip(f"no bench script beside {sys.executable} (install the package)")
    from bench.execute.campaign.executor import Executor
    from bench.execute.campaign.record import Settings, create
    from bench.hosts.inventory import Host, load_inventory, render_host_toml, select
    from bench.matrix.expand import expand
    from bench.matrix.load import load_matrix
    from bench.matrix.schedule import HostState, schedule
    from bench.store import queries
    from bench.store.db import open_store
    m = load_matrix("end-to-end", scale="lab")
    prompts, pairs, tokens = m.engine.prompt_names, m.engine.pairs, m.engine.n_tokens
    with nl.loopfs_or_skip(400 << 20, "bench-e2e-lab-") as fs:
        hosts_dir = tmp_path / "hosts"
        hosts_dir.mkdir()
        pool = fs.mnt / "pool"          # absent: prepare's --mkdir makes it
        (hosts_dir / "local.toml").write_text(render_host_toml(Host(
            name="local", address="localhost", transport="local",
            tags={"machine": "controller"}, pool_dir=str(pool),
            work_dir=str(tmp_path / "work"))))
        hosts = select(load_inventory(hosts_dir), ["local"])
        exp = expand(m, hosts)
        plan = schedule(exp.requests, [HostState.from_host(h) for h in hosts], 5,
                        campaign="e2e-lab", randomize=m.randomize, interleave=m.interleave)
        assert len(plan.runs) == len(prompts) * pairs * 2
        url = f"sqlite:///{tmp_path}/campaign.db"
        settings = Settings(threads=1, retries=1, data_dir=tmp_path / "data", db_url=url,
                            hosts_dir=hosts_dir, chunk_s=1.0, retry_pause_s=0.5)
        store = open_store(url)
        try:
            create(store, plan, exp, m, ["local"], settings, "end-to-end")
            res = Executor(store, "e2e-lab", settings).run()
            assert res.state == "done", res
            assert {r.state for r in res.runs} == {"validated"}, res.runs
            rows = queries.engine_rows(store, campaign="e2e-lab")
            table3 = {p["prompt"]: p for p in
                      queries.engine_results(store, campaign="e2e-lab")["prompts"]}
        finally:
            store.close()
        size = (pool / MODEL).stat().st_size
        made = sorted(p.name for p in pool.iterdir())
    assert made == [MODEL]                  # made once, kept by every later run's --reuse
    assert len(rows) == len(plan.runs)
    for r in rows:
        assert r["tokens"] == tokens and "llama.cpp CPU" in r["backend_line"]
        # cold, each arm reads the whole model: mmap through the loader's WILLNEED prefetch,
        # direct-io past the page cache
        assert size <= r["device_bytes"] <= size + SLACK, (r["policy"], r["device_bytes"], size)
    by_prompt: dict[str, set] = {}
    for r in rows:
        by_prompt.setdefault(r["prompt"], set()).add(r["output_sha256"])
    assert all(len(h) == 1 for h in by_prompt.values()), by_prompt   # greedy: one output
    assert set(table3) == set(prompts)
    for p in table3.values():
        assert p["pairs"] == pairs and p["hashes_match"] is True and p["incomplete"] == []
    print("\nlab end-to-end pairs: " + "; ".join(
        f"{r['prompt']} {r['policy']} steady {r['steady_s']:.3f}s device {r['device_bytes']}"
        for r in sorted(rows, key=lambda r: (r["prompt"], r["policy"]))))
