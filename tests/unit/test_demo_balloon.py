"""The demo's balloon capacity (bench.execute.demo): a stable, coarse name, a lock inside the
window the runner never refuses, and earlier demos' capacities kept while they fit. Pure
arithmetic over MemAvailable values, plus the machine-wide demo lock on a real file."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import tomllib
from pathlib import Path

import pytest

from bench.execute.demo import (balloon_capacity, balloon_grain, balloon_window, machine_lock,
                                matrix_text)
from bench.matrix.cells import parse_cell
from bench.matrix.load import parse_matrix
from bench.units import format_size

MB, G = 10 ** 6, 10 ** 9
AVAILS = [int(a * MB) for a in range(1_200, 64_000, 37)]      # 1.2 GB .. 64 GB, odd steps


@pytest.mark.parametrize("max_lock", [2 * G, 3 * G, 1 * G, 400 * MB, 8 * MB])
def test_lock_lies_in_the_window_for_every_mem_available(max_lock):
    lo, hi = balloon_window(max_lock)
    klo, khi = balloon_window(max_lock, keep=True)
    assert 0 < klo < lo < hi < khi <= max_lock
    grain = balloon_grain(max_lock)
    for avail in AVAILS:
        c = balloon_capacity(avail, max_lock)
        if avail - MB < lo:             # nothing worth locking: host_skip says so
            continue
        assert lo <= avail - c <= hi, (avail, c, max_lock)
        assert c % MB == 0
        if avail > 2 * max_lock + grain:
            assert c % grain == 0, (avail, c)
        # the runner refuses a lock above max_lock: MemAvailable may rise by max_lock/4
        assert avail + max_lock // 4 - c <= max_lock


def test_default_grain_is_a_whole_gb_and_names_are_coarse():
    assert balloon_grain(2 * G) == G and balloon_grain(1 * G) == 100 * MB
    names = {f"{format_size(balloon_capacity(a, 2 * G))}-balloon-classic"
             for a in range(22_000 * MB, 23_000 * MB, 10 * MB)}
    # a MemAvailable drifting over a whole GB gives at most two names, each a whole GB
    assert len(names) <= 2 and all(parse_cell(n).capacity_bytes % G == 0 for n in names), names


def test_an_earlier_capacity_is_kept_while_it_fits():
    first = balloon_capacity(22_480 * MB, 2 * G)
    assert first == 21 * G
    # past 22.5 GB rounding alone moves the name; the earlier capacity is kept instead
    assert balloon_capacity(22_520 * MB, 2 * G) == 22 * G
    for avail in range(21_300 * MB, 22_700 * MB, 7 * MB):
        assert balloon_capacity(avail, 2 * G, [first]) == first, avail
    # drifted out of the keep window (lock above 7/8 of max_lock): a new capacity
    assert balloon_capacity(22_800 * MB, 2 * G, [first]) == 22 * G
    assert balloon_capacity(23_600 * MB, 2 * G, [9 * G, first]) == 23 * G
    assert balloon_capacity(23_600 * MB, 2 * G, [9 * G, 22 * G, first]) == 22 * G


def test_matrix_runs_the_balloon_first():
    text = matrix_text(Path("/tmp/t.jsonl"), 22_480 * MB, 2 * G, 21 * G)
    m = parse_matrix(tomllib.loads(text), "demo")
    assert (m.points[0].mechanism, m.points[0].capacity.text) == ("balloon", "21G")
    assert [p.mechanism for p in m.points].count("balloon") == 3
    assert m.protocol["balloon_max"] == 2 * G


def test_machine_lock_serializes_demos(tmp_path):
    path = tmp_path / "demo.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.pwrite(fd, f'{os.getpid()}\\n'.encode(), 0)\n"
        "print('held', flush=True)\n"
        "sys.stdin.readline()\n")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        heard, got = [], threading.Event()

        def demo():
            with machine_lock(path, wait=heard.append):
                got.set()
        t = threading.Thread(target=demo)
        t.start()
        time.sleep(0.5)
        assert not got.is_set()
        assert heard and f"pid {holder.pid}" in heard[0]
        holder.stdin.write("\n")
        holder.stdin.flush()
        t.join(10)
        assert got.is_set()
    finally:
        holder.kill()
        holder.wait()
