#!/usr/bin/env python3
"""Benchmark (not a timed test): bench-agent against fio on the same pool, cold and warm.

Standalone: `python3 tests/perf/agent_vs_fio.py [--runs 5] [--threads 4] ...` as root. It
builds the agent, makes an ext4 file system on its own loop device with direct I/O (so
/proc/diskstats of that device counts exactly the bytes read), writes a pool there, and tears
all of it down at the end, failure or not.

Equivalence: the same files, each read once per pass, whole, in one pread of expert_bytes
(fio: ioengine=psync, bs=expert_bytes, one file after another) by the same number of
threads (fio: one job per thread over an equal share of the files). The agent's plan has one
router pass per layer holding all of that layer's experts, so its pass barriers cost the least
they can. Cold = after sync + drop_caches (fio invalidate=1); warm = page cache filled by the
cold run just before (fio invalidate=0, else fio would drop the cache and read cold). Device
bytes are checked around every run: a cold run must read the pool, a warm one nothing.

fio's best engine as a second reference: the same job with ioengine=io_uring and --iodepth
reads in flight per job (buffered, as the agent reads), so the ratio says how far the agent's
one-pread-per-thread design is from an asynchronous reader with a queue. Where the kernel
refuses io_uring (kernel.io_uring_disabled, a seccomp filter) that column says why and the
psync one still stands.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[2]))    # run as a script: tests.support from the repo root

from bench.plan.planfile import REPLAY, Plan, write_plan  # noqa: E402 - after the path
from bench.plan.pool import PoolSpec, make_pool  # noqa: E402 - after the path
from bench.trace.parse import Iteration, Pass  # noqa: E402 - after the path
from tests.support import nativelib as nl  # noqa: E402 - after the path


def fio_jobfile(pool: Path, spec: PoolSpec, threads: int, warm: bool, engine: str = "psync",
                iodepth: int = 1) -> str:
    files = [spec.relpath(l, e) for l in range(spec.layers) for e in range(spec.experts_per_layer)]
    depth = [f"iodepth={iodepth}"] if engine != "psync" else []
    lines = ["[global]", f"directory={pool}", f"ioengine={engine}", *depth, "rw=read",
             f"bs={spec.expert_bytes}", f"filesize={spec.expert_bytes}",
             "file_service_type=sequential", "thread", "group_reporting",
             f"invalidate={0 if warm else 1}", "direct=0"]
    for t in range(threads):
        share = files[t::threads]
        # ':' separates names in fio; the pool's names have none
        lines += [f"[reader{t}]", f"filename={':'.join(share)}", f"nrfiles={len(share)}"]
    return "\n".join(lines) + "\n"


def run_fio(jobfile: Path, dev: str, expect_bytes: int):
    before = nl.device_bytes_read(dev)
    r = nl.run(["fio", "--output-format=json", str(jobfile)])
    dev_bytes = nl.device_bytes_read(dev) - before
    job = json.loads(r.stdout)["jobs"][0]["read"]
    if job["io_bytes"] != expect_bytes:
        raise RuntimeError(f"fio read {job['io_bytes']} bytes, expected {expect_bytes}")
    return job["bw_bytes"], dev_bytes


def run_agent(pool: Path, plan: Path, threads: int, passes: int, dev: str, snap: Path):
    r = nl.run_agent(["replay", "--pool", pool, "--plan", plan, "--threads", threads,
                      "--passes", passes, "--snapshot-dir", snap,
                      "--snapshot-file", "/proc/diskstats"])
    if r.rc != 0:
        raise RuntimeError(f"agent failed: {r.stderr}")
    s = r.summary
    out = []
    for p in range(passes):
        bw = s["pass_bytes"][p] / (s["pass_wall_ns"][p] / 1e9)
        out.append((bw, nl.snapshot_device_bytes(snap, p, dev)))
    return out


def uring_unavailable(jobfile: Path) -> str | None:
    """None if fio can run the io_uring job here, else why not (one line)."""
    r = subprocess.run(["fio", "--output-format=json", str(jobfile)], capture_output=True,
                       text=True, check=False)
    if r.returncode == 0:
        return None
    lines = (r.stderr or r.stdout).strip().splitlines()
    return lines[-1][:200] if lines else f"fio exited {r.returncode}"


def print_table(res: dict, devs: dict, readers: list[str], iodepth: int) -> None:
    """Medians per reader, the agent's ratio to each fio engine, device GB, every run."""
    gb = 1e9
    name = {"agent": "agent", "fio": "fio psync", "uring": f"fio io_uring qd{iodepth}"}
    refs = [r for r in readers if r != "agent"]
    print(f"{'case':<6} " + " ".join(f"{name[r] + ' GB/s':>22}" for r in readers) + " "
          + " ".join(f"{'agent/' + name[r]:>24}" for r in refs) + "   dev GB (med) "
          + " | ".join(name[r] for r in readers))
    for case in ("cold", "warm"):
        med = {r: statistics.median(res[f"{r}_{case}"]) for r in readers}
        print(f"{case:<6} " + " ".join(f"{med[r] / gb:>22.3f}" for r in readers) + " "
              + " ".join(f"{med['agent'] / med[r]:>24.3f}" for r in refs) + "   "
              + " | ".join(f"{statistics.median(devs[f'{r}_{case}']) / gb:.3f}"
                           for r in readers))
        for r in readers:
            print(f"       runs {name[r]:<20} "
                  + " ".join(f"{x / gb:.2f}" for x in res[f"{r}_{case}"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--experts", type=int, default=64)
    ap.add_argument("--expert-bytes", type=int, default=4 << 20)
    ap.add_argument("--iodepth", type=int, default=8,
                    help="reads in flight per fio io_uring job")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("needs root (loop device, drop_caches)", file=sys.stderr)
        return 2
    if subprocess.run(["which", "fio"], capture_output=True).returncode != 0:
        print("fio not installed (apt-get install -y fio)", file=sys.stderr)
        return 2
    nl.build_agent()
    spec = PoolSpec(args.layers, args.experts, args.expert_bytes)
    total = spec.total_bytes
    fs = nl.make_loopfs(total + total // 2 + (256 << 20), prefix="bench-perf-")
    try:
        pool = fs.mnt / "pool"
        make_pool(pool, spec)
        # one router pass per layer, all its experts: every file once per pass
        its = (Iteration(0, "normal", 1, tuple(Pass(l, tuple(range(spec.experts_per_layer)))
                                              for l in range(spec.layers))),)
        plan_path = fs.root / "plan.bpln"
        write_plan(plan_path, Plan(REPLAY, spec.layers, spec.experts_per_layer,
                                   spec.expert_bytes, its, {"bench": "agent_vs_fio"}))
        engines = {"fio": ("psync", 1), "uring": ("io_uring", args.iodepth)}
        jobs = {}
        for who, (engine, depth) in engines.items():
            for w in (False, True):
                jobs[who, w] = fs.root / f"{who}-{'warm' if w else 'cold'}.fio"
                jobs[who, w].write_text(fio_jobfile(pool, spec, args.threads, w, engine, depth))
        readers = ["agent", "fio"]
        why_not = uring_unavailable(jobs["uring", False])
        if why_not is None:
            readers.append("uring")
        res = {f"{who}_{case}": [] for who in readers for case in ("cold", "warm")}
        devs = {k: [] for k in res}
        for i in range(args.runs):
            # rotate who goes first so drift on a shared machine hits every reader alike
            order = readers[i % len(readers):] + readers[:i % len(readers)]
            for who in order:
                nl.drop_caches()
                if who == "agent":
                    snap = Path(tempfile.mkdtemp(dir=fs.root))
                    (cb, cd), (wb, wd) = run_agent(pool, plan_path, args.threads, 2, fs.dev, snap)
                else:
                    cb, cd = run_fio(jobs[who, False], fs.dev, total)
                    wb, wd = run_fio(jobs[who, True], fs.dev, total)
                res[f"{who}_cold"].append(cb)
                res[f"{who}_warm"].append(wb)
                devs[f"{who}_cold"].append(cd)
                devs[f"{who}_warm"].append(wd)
        ok = True
        for k, v in devs.items():
            want = total if k.endswith("cold") else 0
            for d in v:
                # cold: the pool's bytes within 1%; warm: at most 64 KiB of stray metadata
                good = abs(d - want) <= 0.01 * total if want else d <= (64 << 10)
                if not good:
                    ok = False
                    print(f"DEVICE CHECK FAILED: {k} read {d} bytes from {fs.dev}, want {want}")
        gb = 1e9
        print(f"\npool: {spec.layers}x{spec.experts_per_layer} experts of {spec.expert_bytes} B"
              f" = {total / gb:.3f} GB on {fs.dev} (ext4, loop --direct-io=on); "
              f"threads {args.threads}; {args.runs} runs; kernel {os.uname().release}")
        print_table(res, devs, readers, args.iodepth)
        if why_not is not None:
            print(f"fio io_uring: not measured: {why_not}")
        print("device checks:", "ok" if ok else "FAILED")
        return 0 if ok else 1
    finally:
        nl.destroy_loopfs(fs)


if __name__ == "__main__":
    sys.exit(main())
