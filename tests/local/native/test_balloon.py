"""The balloon: mlocked anonymous memory held until SIGTERM/SIGINT."""

import json
import signal
import subprocess
import threading
import time

import pytest

from tests.support import nativelib as nl

pytestmark = [pytest.mark.native, pytest.mark.root]

MIB = 1 << 20
# /proc/meminfo Mlocked is system-wide: other processes may lock or unlock a little meanwhile
MLOCKED_SLACK_KB = 16 * 1024


@pytest.fixture
def balloons():
    """Start balloons; every one still running at the end is stopped by its own PID."""
    procs = []

    def start(*args):
        p = subprocess.Popen([str(nl.AGENT), "balloon", *map(str, args)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        procs.append(p)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def ready_line(p, timeout=60):
    deadline = time.time() + timeout
    line = p.stdout.readline()  # the agent flushes the ready line itself
    assert time.time() < deadline
    return json.loads(line)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_balloon_locks_and_releases(agent, balloons, tmp_path, sig):
    size = 512 * MIB
    before = nl.meminfo_kb("Mlocked")
    ready_file = tmp_path / "ready.json"
    p = balloons("--bytes", "512M", "--ready-file", ready_file)
    r = ready_line(p)
    assert r["ready"] is True and r["ok"] is True
    assert r["bytes"] == size
    assert r["vmlck_bytes"] >= size
    assert nl.status_kb(p.pid, "VmLck") * 1024 >= size
    assert nl.meminfo_kb("Mlocked") - before >= size // 1024 - MLOCKED_SLACK_KB
    assert json.loads(ready_file.read_text()) == r
    p.send_signal(sig)
    assert p.wait(timeout=30) == 0
    assert json.loads(p.stdout.readline())["released"] is True
    assert nl.meminfo_kb("Mlocked") - before <= MLOCKED_SLACK_KB


def settled_mem_available(tolerance=8 * MIB, timeout=10.0) -> int:
    """MemAvailable once memory freed by earlier teardowns has landed: two reads 0.2 s apart
    within `tolerance` (it kept rising by ~100 MiB right after the replay tests' teardown)."""
    prev = nl.meminfo_kb("MemAvailable") * 1024
    end = time.time() + timeout
    while time.time() < end:
        time.sleep(0.2)
        cur = nl.meminfo_kb("MemAvailable") * 1024
        if abs(cur - prev) <= tolerance:
            return cur
        prev = cur
    return prev


class MemSampler(threading.Thread):
    """Samples, every ~2 ms, MemAvailable and the balloon's RssAnon (None until its pid is
    set)."""

    def __init__(self):
        super().__init__(daemon=True)
        self.pid = None
        self.samples = []          # (monotonic s, MemAvailable bytes, balloon RssAnon bytes)
        self.stop = threading.Event()

    def rss(self):
        if self.pid is None:
            return None
        try:
            return nl.status_kb(self.pid, "RssAnon") * 1024
        except (OSError, KeyError):
            return None

    def run(self):
        while not self.stop.is_set():
            rss = self.rss()
            self.samples.append((time.monotonic(), nl.meminfo_kb("MemAvailable") * 1024, rss))
            time.sleep(0.002)


# MemAvailable's own lag and granularity, between two reads of it that the machine's memory
# did not move between: it is computed from global vmstat counters that trail per-CPU
# deltas of up to stat_threshold (<= 125) pages per CPU for each of the free, file and
# reclaimable counters (~3 x 2 x 0.5 MiB on 2 CPUs), and the balloon rounds to whole pages.
# 8 MiB covers that (~3 MiB) with room.
READ_BOUND = 8 * MIB
BALLOON = 256 * MIB


def test_balloon_leave_available(agent, balloons):
    """--leave-available N makes the agent read MemAvailable (A), lock A - N bytes, and report
    MemAvailable read again after locking (mem_available_after). We pass N = A0 - 256 MiB with
    A0 our own read just before starting it, while a thread samples MemAvailable (and the
    balloon's RssAnon) every ~2 ms from 0.5 s before the start to just after the ready line.

    - bytes - 256 MiB = A - A0: how far MemAvailable moved between two reads taken before the
      balloon held anything. Tolerance: the range of the samples over that span (0.5 s
      before the start until the balloon's RssAnon starts to grow; none from the few ms
      between the start and its pid being known) + READ_BOUND.
    - mem_available_after must be MemAvailable as the machine showed it once the balloon was
      locked: within the range of the samples from the first one with RssAnon at the full
      size to 50 ms after the ready line, +- READ_BOUND.

    It used to assert mem_available_after = N within 192 MiB and failed when MemAvailable
    moved 270 MB while it ran. Measured here, that movement is the VM answering the balloon:
    locking 512 MiB raised AnonPages and Mlocked by 512 MiB but lowered MemAvailable by only
    0-330 MiB, and freeing it raised MemAvailable by only 13-160 MiB (MemTotal unchanged):
    the VM's free memory follows the guest's own allocations. So "N left available" is not
    a property of this machine, while both checks above are of any machine. Quiet or busy, each tolerance is what MemAvailable did during that very
    span: in 16 runs here the spans moved 0-19 MiB before the lock and 0-8 MiB after it,
    against a 256 MiB balloon (bytes - request within 0.2 MiB, the after-read within 0.6 MiB
    of the samples; mem_available_after - N anywhere from +1 to +266 MiB), so a wrong size,
    a wrong unit or an ignored N fails."""
    settled_mem_available()
    sampler = MemSampler()
    sampler.start()
    try:
        time.sleep(0.5)
        t_start = time.monotonic()
        a0 = nl.meminfo_kb("MemAvailable") * 1024
        leave = a0 - BALLOON
        p = balloons("--leave-available", leave)
        sampler.pid = p.pid
        r = ready_line(p)
        t_ready = time.monotonic()
        time.sleep(0.05)
        assert nl.status_kb(p.pid, "VmLck") * 1024 >= r["bytes"]
    finally:
        sampler.stop.set()
        sampler.join()
    assert r["ready"] is True and r["vmlck_bytes"] >= r["bytes"]
    assert r["bytes"] % r["page_size"] == 0
    s = sampler.samples
    # the agent's first read: after our start, before the balloon held anything (samples
    # taken before its pid was known cannot tell, so they are left out)
    grow = next((t for t, _, rss in s if rss is not None and rss >= 2 * MIB), t_ready)
    before = [a for t, a, rss in s
              if t_start - 0.5 <= t <= grow and (t <= t_start or rss is not None)] + [a0]
    # its second read: after the lock was complete, before the ready line
    full = next((t for t, _, rss in s if rss is not None and rss >= r["bytes"]), t_ready)
    after = [a for t, a, _ in s if full <= t <= t_ready + 0.05]
    assert after, "no sample between the completed lock and the ready line"
    tol_before = max(before) - min(before) + READ_BOUND
    moved = r["bytes"] - BALLOON
    print(f"before the lock: {len(before)} samples, range "
          f"{(max(before) - min(before)) / MIB:.1f} MiB, bytes - request {moved / MIB:+.1f} "
          f"MiB; after it: {len(after)} samples, range "
          f"{(max(after) - min(after)) / MIB:.1f} MiB, reported - samples "
          f"{(r['mem_available_after'] - min(after)) / MIB:+.1f}.."
          f"{(r['mem_available_after'] - max(after)) / MIB:+.1f} MiB; reported - N "
          f"{(r['mem_available_after'] - leave) / MIB:+.1f} MiB")
    assert abs(moved) <= tol_before, (moved, tol_before)
    assert min(after) - READ_BOUND <= r["mem_available_after"] <= max(after) + READ_BOUND
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 0


def test_impossible_balloon_fails_fast(agent, balloons):
    t = time.time()
    p = balloons("--bytes", "64T")
    assert p.wait(timeout=30) == nl.EXIT_FAIL
    assert time.time() - t < 10
    r = json.loads(p.stdout.readline())
    assert r["ready"] is False and "MemAvailable" in r["reason"]
    assert "MemAvailable" in p.stderr.read()
    p = balloons("--leave-available", "64T")
    assert p.wait(timeout=30) == nl.EXIT_FAIL
    assert "cannot leave" in json.loads(p.stdout.readline())["reason"]


def test_balloon_without_lock_privilege_fails_with_reason(agent, balloons):
    """No CAP_IPC_LOCK, RLIMIT_MEMLOCK of 8 MiB: the mlock fails and the balloon says so."""
    if nl.shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) not installed")
    r = subprocess.run(["prlimit", "--memlock=8388608:8388608", "setpriv", "--bounding-set",
                        "-ipc_lock,-sys_resource", "--inh-caps", "-ipc_lock,-sys_resource",
                        str(nl.AGENT), "balloon", "--bytes", "64M"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == nl.EXIT_FAIL
    assert "mlock of 67108864 bytes failed" in json.loads(r.stdout)["reason"]


def test_balloon_usage(agent):
    r = subprocess.run([str(nl.AGENT), "balloon"], capture_output=True, text=True)
    assert r.returncode == nl.EXIT_USAGE and "exactly one" in r.stderr
    r = subprocess.run([str(nl.AGENT), "balloon", "--bytes", "12Q"], capture_output=True,
                       text=True)
    assert r.returncode == nl.EXIT_USAGE
