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
def test_the_shipped_end_to_end_matrix_at_lab_scale(tmp_path, capsys):
    """What a user types: `bench schedule --matrix end-to-end --scale lab --hosts local`, then
    `bench results --matrix end-to-end`, against an inventory whose local host keeps its pool
    on a loop device."""
    if not BENCH.is_file():
        pytest.skip(f"no bench script beside {sys.executable} (install the package)")
    from bench.cli import main
    from bench.hosts.inventory import Host, render_host_toml
    from bench.matrix import engine_cells
    from bench.matrix.load import load_matrix
    from bench.store import queries
    from bench.store.db import open_store
    m = load_matrix("end-to-end", scale="lab")
    prompts, pairs, tokens = m.engine.prompt_names, m.engine.pairs, m.engine.n_tokens
    arms = {engine_cells.arm_text(c, mech) for c, mech in m.engine.arms}
    runs = len(m.engine.cells()) * pairs
    db = f"sqlite:///{tmp_path}/campaign.db"
    with nl.loopfs_or_skip(400 << 20, "bench-e2e-lab-") as fs:
        hosts_dir = tmp_path / "hosts"
        hosts_dir.mkdir()
        pool = fs.mnt / "pool"          # absent: prepare's --mkdir makes it
        (hosts_dir / "local.toml").write_text(render_host_toml(Host(
            name="local", address="localhost", transport="local",
            tags={"machine": "controller"}, pool_dir=str(pool),
            work_dir=str(tmp_path / "work"))))
        rc = main(["schedule", "--matrix", "end-to-end", "--scale", "lab", "--hosts", "local",
                   "--hosts-dir", str(hosts_dir), "--db", db, "--data-dir",
                   str(tmp_path / "data"), "--seed", "5", "--campaign", "e2e-lab"])
        out = capsys.readouterr()
        assert rc == 0, out.err[-2000:]
        assert f"{runs} validated, 0 rejected, 0 failed" in out.err + out.out
        size = (pool / MODEL).stat().st_size
        made = sorted(p.name for p in pool.iterdir())
    store = open_store(db)
    try:
        rows = queries.engine_rows(store, campaign="e2e-lab")
        table3 = {(p["prompt"], p["arm"]): p for p in
                  queries.engine_results(store, campaign="e2e-lab")["prompts"]}
    finally:
        store.close()
    # the model made once and kept by every later run; each prompt's trace and plan beside it
    assert made == [MODEL, MODEL + ".replay"]
    assert len(rows) == runs and arms == {"ample", "500M-cgroup"}
    for r in rows:
        assert r["tokens"] == tokens and r["retained"], r
        if r["policy"] == "replay":     # the agent reads the traced experts' pages only
            assert "bench-agent replay" in r["backend_line"]
            assert 0 < r["device_bytes"] < size, r["device_bytes"]
            continue
        assert "llama.cpp CPU" in r["backend_line"]
        # cold, each arm reads the whole model: mmap through the loader's WILLNEED prefetch,
        # direct-io past the page cache
        assert size <= r["device_bytes"] <= size + SLACK, (r["policy"], r["device_bytes"], size)
    by_prompt: dict[str, set] = {}
    for r in rows:      # greedy: one output per prompt, whatever the arm and the capacity
        by_prompt.setdefault(r["prompt"], set()).add(r["output_sha256"])
    assert all(len(h) == 1 for h in by_prompt.values()), by_prompt
    assert set(table3) == {(p, a) for p in prompts for a in arms}
    for p in table3.values():
        assert p["pairs"] == pairs and p["hashes_match"] is True and p["incomplete"] == []
        assert (p["arms"]["admit"], p["arms"]["nocache"]) == ("--load mmap", "--load direct-io")
        for pol in ("admit", "nocache"):
            assert size / tokens <= p[f"{pol}_bytes_per_token"] <= (size + SLACK) / tokens
        # the replay-vs-engine line: the engine (admit) reads the whole file, so it holds all
        # of it in the page cache after the run, experts and the rest; the replay of its trace
        # reads only the experts the decode routed to (and what readahead adds)
        x = p["replay"]
        e, rp = x["engine"], x["replay"]
        assert (e["n"], rp["n"], e["n_split"], rp["n_split"]) == (pairs,) * 4
        assert x["outputs_match"] is True and x["ratio"] > 1
        assert (e["experts"], e["rest"]) == (e["model_experts"], e["model_rest"])
        assert e["model_experts"] + e["model_rest"] == size
        assert rp["experts"] < e["model_experts"] and rp["rest"] < e["model_rest"]
        assert rp["bytes_per_token"] * tokens <= rp["experts"] + rp["rest"] + SLACK
    assert main(["results", "--matrix", "end-to-end", "--db", db]) == 0
    shown = capsys.readouterr().out
    flat = " ".join(shown.split())
    assert "arms admit `--load mmap`, nocache `--load direct-io`, replay `--load replay" in flat
    assert flat.count("replay vs engine, device MB/token: engine (admit)") == len(table3)
    print("\n" + "\n".join(line for line in shown.splitlines() if "replay vs engine" in line))
    assert main(["report", "e2e-lab", "--db", db, "-o", str(tmp_path / "r.md")]) == 0
    capsys.readouterr()
    report = (tmp_path / "r.md").read_text()          # the morning page has the lines too
    assert report.count("replay vs engine, device MB/token: engine (admit)") == len(table3)
    print("\nlab end-to-end pairs: " + "; ".join(
        f"{r['prompt']} {r['policy']} steady {r['steady_s']:.3f}s device {r['device_bytes']}"
        for r in sorted(rows, key=lambda r: (r["prompt"], r["policy"]))))


@pytest.mark.root
def test_below_the_models_size_mmap_rereads_and_direct_io_is_oom_killed(tmp_path, capsys):
    """The measured finding behind the shipped arm (end-to-end.toml): under a 300 MB wall,
    less than the 277 MB model plus the engine's own memory, llama.cpp's mmap load still
    decodes the same tokens, re-reading the model from the device, while its direct-io load,
    which holds the whole model in anonymous memory, is OOM-killed and rejected."""
    if not BENCH.is_file():
        pytest.skip(f"no bench script beside {sys.executable} (install the package)")
    from importlib import resources

    from bench.cli import main
    from bench.hosts.inventory import Host, render_host_toml
    from bench.store import queries
    from bench.store.db import open_store
    text = resources.files("bench").joinpath("data", "matrices", "end-to-end.toml").read_text()
    text = text.replace('capacities = ["500M-cgroup"]', 'capacities = ["300M-cgroup"]')
    text = text.replace("pairs = 3\n", "pairs = 1\n").replace('name = "end-to-end"',
                                                              'name = "e2e-300m"')
    lines = [ln for ln in text.splitlines() if not ln.startswith(("code = ", "chat = "))]
    (tmp_path / "e2e-300m.toml").write_text("\n".join(lines) + "\n")
    db = f"sqlite:///{tmp_path}/c.db"
    with nl.loopfs_or_skip(400 << 20, "bench-e2e-300m-") as fs:
        hosts_dir = tmp_path / "hosts"
        hosts_dir.mkdir()
        (hosts_dir / "local.toml").write_text(render_host_toml(Host(
            name="local", address="localhost", transport="local", tags={"m": "c"},
            pool_dir=str(fs.mnt / "pool"), work_dir=str(tmp_path / "work"))))
        rc = main(["schedule", "--matrix", str(tmp_path / "e2e-300m.toml"), "--scale", "lab",
                   "--hosts", "local", "--hosts-dir", str(hosts_dir), "--db", db, "--data-dir",
                   str(tmp_path / "data"), "--seed", "1", "--campaign", "e2e-300m"])
        out = capsys.readouterr()
        assert rc in (0, 1), out.err[-2000:]
        size = (fs.mnt / "pool" / MODEL).stat().st_size
    store = open_store(db)
    try:
        rows = {r["cell"]: r for r in queries.engine_rows(store, campaign="e2e-300m")}
        why = {r["cell"]: {v["rule"] for v in r["verdicts"] if not v["passed"]}
               for r in queries.list_runs(store, campaign="e2e-300m")}
    finally:
        store.close()
    admit, nocache = rows["e2e-prose-admit-300M-cgroup"], rows["e2e-prose-nocache-300M-cgroup"]
    assert admit["retained"] and admit["device_bytes"] > 1.5 * size, (admit, size)
    assert admit["output_sha256"] == rows["e2e-prose-admit"]["output_sha256"]
    assert nocache["retained"] is False and {"no_oom", "engine_exit_ok"} <= why[nocache["cell"]]
    print(f"\n300M wall: admit read {admit['device_bytes'] / size:.2f}x the model "
          f"({admit['device_bytes']} B), steady {admit['steady_s']:.3f}s; nocache OOM-killed")
