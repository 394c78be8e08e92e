"""ThreadSanitizer: the progress seqlock and the replay's threads (crew, prefetcher) are
race-free by the C memory model.

- progress_stress (tests/local/native/c): a writer thread publishes (i, i) with progress_set while
  reader threads take copies with progress_read on the same mapping; TSan sees both sides. With
  the previous writer (plain stores of the data words under the sequence) TSan reports a data
  race in progress_set here.
- `make tsan` builds the whole agent with -fsanitize=thread; a short replay with --progress,
  four demand threads and each prefetcher runs under it while this process reads the progress
  file with the host runner's own reader (agents/runner.py read_progress), which checks the
  layout is the one it knows. (TSan cannot see across processes; the in-process check is the
  stress test.) pinned/hybrid are left out: TSan's mlock interceptor does nothing, so VmLck
  stays 0 and the agent rightly fails the run.
"""

import importlib.util
import random
import subprocess
import threading
import time

import pytest

from bench.plan.planfile import oracle_hints, write_plan
from bench.plan.pool import PoolSpec, make_pool
from tests.support import nativelib as nl
from tests.support.native_plans import make_plan

pytestmark = pytest.mark.native

TSAN_WARNING = "WARNING: ThreadSanitizer"
TSAN_ENV = {"TSAN_OPTIONS": "halt_on_error=0 exitcode=66 second_deadlock_stack=1"}


@pytest.fixture(scope="session")
def tsan_cc(tmp_path_factory) -> str:
    """A compiler whose -fsanitize=thread builds a program that runs, or a skip naming what is
    missing (no compiler, no libtsan, or a kernel address layout the runtime refuses)."""
    cc = nl.shutil.which("cc") or nl.shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler (build-essential)")
    d = tmp_path_factory.mktemp("tsan-probe")
    (d / "t.c").write_text("#include <pthread.h>\nstatic void *f(void *a) { return a; }\n"
                           "int main(void) { pthread_t t; pthread_create(&t, 0, f, 0);"
                           " return pthread_join(t, 0); }\n")
    r = subprocess.run([cc, "-fsanitize=thread", "-pthread", "-o", str(d / "t"), str(d / "t.c")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"{cc} cannot build with -fsanitize=thread (no ThreadSanitizer runtime, "
                    f"libtsan): {r.stderr.strip()[-200:]}")
    r = subprocess.run([str(d / "t")], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        pytest.skip(f"ThreadSanitizer runtime does not start here: {r.stderr.strip()[-200:]}")
    return cc


def _runner_module():
    spec = importlib.util.spec_from_file_location("bench_runner_agent_tsan",
                                                  nl.REPO / "agents" / "runner.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_progress_seqlock_is_race_free_under_tsan(tsan_cc, tmp_path):
    exe = tmp_path / "progress_stress"
    cmd = [tsan_cc, "-std=gnu11", "-D_GNU_SOURCE", "-fsanitize=thread", "-g", "-O1", "-pthread",
           "-Wall", "-Wextra", "-Werror", "-I", str(nl.NATIVE), "-o", str(exe),
           str(nl.REPO / "tests" / "local" / "native" / "c" / "progress_stress.c"),
           str(nl.NATIVE / "progress.c"), str(nl.NATIVE / "util.c")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([str(exe), str(tmp_path / "progress.bin"), "200000", "2"],
                       capture_output=True, text=True, timeout=300, env=TSAN_ENV)
    print(r.stdout)
    assert TSAN_WARNING not in r.stderr, r.stderr
    assert r.returncode == 0, r.stdout + r.stderr
    # the readers did overlap the writer: some copies were taken, some met an update
    copies = [int(line.split()[2]) for line in r.stdout.splitlines() if line.startswith("reader")]
    assert len(copies) == 2 and all(c > 0 for c in copies), r.stdout


@pytest.fixture(scope="session")
def tsan_agent(tsan_cc):
    r = subprocess.run(["make", "-C", str(nl.NATIVE), "tsan", f"CC={tsan_cc}"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return nl.NATIVE / "bench-agent-tsan"


@pytest.mark.parametrize("prefetch", ["none", "advice", "block"])
def test_replay_with_progress_under_tsan(tsan_agent, tmp_path, prefetch):
    layers, experts, size = 4, 16, 65536
    pool = tmp_path / "pool"
    make_pool(pool, PoolSpec(layers, experts, size))
    rng = random.Random(11)
    plan = make_plan([[(l, tuple(rng.sample(range(experts), 4))) for l in range(layers)]
                      for _ in range(300)], layers, experts, size)
    pf, hf, prog = tmp_path / "plan.bpln", tmp_path / "hints.bpln", tmp_path / "progress.bin"
    write_plan(pf, plan)
    write_plan(hf, oracle_hints(plan))
    argv = [str(tsan_agent), "replay", "--pool", str(pool), "--plan", str(pf), "--threads", "4",
            "--passes", "3", "--progress", str(prog), "--out", str(tmp_path / "out.jsonl")]
    if prefetch != "none":
        argv += ["--prefetch", prefetch, "--hints", str(hf)]

    # the runner's reader takes its path from (work_dir, run_id)
    runner = _runner_module()
    work = tmp_path / "work"
    (work / "progress").mkdir(parents=True)
    link = work / "progress" / "tsan.bin"
    seen, stop = [], threading.Event()

    def poll():
        while not stop.is_set():
            if prog.exists() and not link.exists():
                link.symlink_to(prog)
            p = runner.read_progress(str(work), "tsan")
            if p is not None:
                seen.append(p)
            time.sleep(0.001)

    t = threading.Thread(target=poll)
    t.start()
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=600, env=TSAN_ENV)
    finally:
        stop.set()
        t.join()
    assert TSAN_WARNING not in r.stderr, r.stderr
    assert r.returncode == 0, r.stderr
    n = len(plan.iterations)
    final = runner.read_progress(str(work), "tsan")
    assert final == {"pass": 2, "passes": 3, "iteration": n, "iterations": n}
    print(f"{len(seen)} copies, {len(set((p['pass'], p['iteration']) for p in seen))} distinct")
    assert seen, "the runner's reader never got a copy"
    for p in seen:
        assert p["passes"] == 3 and p["iterations"] == n, p
        assert 0 <= p["pass"] < 3 and 0 <= p["iteration"] <= n, p
    assert [(p["pass"], p["iteration"]) for p in seen] == \
        sorted((p["pass"], p["iteration"]) for p in seen), "progress went backwards"
