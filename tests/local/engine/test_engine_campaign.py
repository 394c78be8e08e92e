"""The built-in engine as an end-to-end cell's engine (issue 25, item 4, in part): an [engine]
table whose command is `bench engine run` (llama.cpp on a tiny MoE GGUF made here), admit =
`--load mmap`, nocache = `--load direct-io`; a campaign of balanced pairs on this host through
the real executor, runner, ingest and retention gates. The model sits on an ext4 loop device
named as the host's pool_dir, so each run's device bytes are the model's reads: both arms read
the whole file cold (mmap through its WILLNEED prefetch), the outputs agree."""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("gguf", reason="needs the engine extra: pip install '.[engine]'")
pytest.importorskip("llama_cpp", reason="needs the engine extra: pip install '.[engine]'")

from bench.cli import main  # noqa: E402
from tests.support import nativelib as nl  # noqa: E402

BENCH = Path(sys.executable).parent / "bench"
PROMPTS = {"prose": "Write a short story about a lighthouse keeper.\n",
           "code": "def fib(n):\n    # complete this function\n"}
TOKENS, PAIRS = 16, 2
SLACK = 1 << 20            # ext4 metadata and the header's buffered read


def matrix_toml(model: Path, prompt_dir: Path) -> str:
    q = json.dumps
    engine = {"command": [str(BENCH), "engine", "run", str(model), "--prompt-file",
                          "{prompt_file}", "--tokens", "{n_tokens}", "{policy_args}"],
              "backend": "backend: llama.cpp CPU", "n_tokens": TOKENS, "pairs": PAIRS,
              "timeout_s": 300, "tokens_regex": "^output token ids: (?P<tokens>.*)$",
              "load_regex": "^cold load: (?P<seconds>[0-9.]+) s"}
    lines = ['name = "e2e-builtin"', 'description = "the built-in engine on this host"',
             "[order]", "randomize = true", "interleave_reps = true",
             "[hosts]", 'tags = "any"', 'placement = "each"',
             "[estimate]", "run_seconds = 5", "reboot_seconds = 60", "[engine]"]
    lines += [f"{k} = {q(v)}" for k, v in engine.items()]
    lines += ["[engine.policies.admit]", f"args = {q(['--load', 'mmap'])}",
              "[engine.policies.nocache]", f"args = {q(['--load', 'direct-io'])}",
              "[engine.prompts]"]
    lines += [f"{p} = {q(str(prompt_dir / (p + '.txt')))}" for p in PROMPTS]
    return "\n".join(lines) + "\n"


@pytest.mark.root
def test_a_campaign_of_builtin_engine_pairs(tmp_path):
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
    with nl.loopfs_or_skip(128 << 20, "bench-e2e-builtin-") as fs:
        model = fs.mnt / "tiny.gguf"
        with contextlib.redirect_stdout(None):
            assert main(["engine", "model", "make", str(model), "--layers", "4", "--experts",
                         "16", "--k", "4", "--expert-mib", "0.25", "--seed", "5"]) == 0
        size = model.stat().st_size
        for p, text in PROMPTS.items():
            (tmp_path / f"{p}.txt").write_text(text)
        hosts_dir = tmp_path / "hosts"
        hosts_dir.mkdir()
        (hosts_dir / "local.toml").write_text(render_host_toml(Host(
            name="local", address="localhost", transport="local",
            tags={"machine": "controller"}, pool_dir=str(fs.mnt),
            work_dir=str(tmp_path / "work"))))
        mpath = tmp_path / "e2e-builtin.toml"
        mpath.write_text(matrix_toml(model, tmp_path))
        m = load_matrix(mpath)
        hosts = select(load_inventory(hosts_dir), ["local"])
        exp = expand(m, hosts)
        plan = schedule(exp.requests, [HostState.from_host(h) for h in hosts], 5,
                        campaign="e2e-b1", randomize=m.randomize, interleave=m.interleave)
        assert len(plan.runs) == len(PROMPTS) * PAIRS * 2
        url = f"sqlite:///{tmp_path}/campaign.db"
        settings = Settings(threads=1, retries=1, data_dir=tmp_path / "data", db_url=url,
                            hosts_dir=hosts_dir, chunk_s=1.0, retry_pause_s=0.5)
        store = open_store(url)
        try:
            create(store, plan, exp, m, ["local"], settings, str(mpath))
            res = Executor(store, "e2e-b1", settings).run()
            assert res.state == "done", res
            assert {r.state for r in res.runs} == {"validated"}, res.runs
            rows = queries.engine_rows(store, campaign="e2e-b1")
            table3 = {p["prompt"]: p for p in
                      queries.engine_results(store, campaign="e2e-b1")["prompts"]}
        finally:
            store.close()
    assert len(rows) == len(plan.runs)
    for r in rows:
        assert r["tokens"] == TOKENS and "llama.cpp CPU" in r["backend_line"]
        # cold, each arm reads the whole model: mmap through the loader's WILLNEED prefetch,
        # direct-io past the page cache
        assert size <= r["device_bytes"] <= size + SLACK, (r["policy"], r["device_bytes"], size)
    by_prompt = {}
    for r in rows:
        by_prompt.setdefault(r["prompt"], set()).add(r["output_sha256"])
    assert all(len(h) == 1 for h in by_prompt.values()), by_prompt   # greedy: one output
    assert set(table3) == set(PROMPTS)
    for p in table3.values():
        assert p["pairs"] == PAIRS and p["hashes_match"] is True and p["incomplete"] == []
    print("\nbuilt-in engine pairs: " + "; ".join(
        f"{r['prompt']} {r['policy']} steady {r['steady_s']:.3f}s device {r['device_bytes']}"
        for r in sorted(rows, key=lambda r: (r["prompt"], r["policy"]))))
