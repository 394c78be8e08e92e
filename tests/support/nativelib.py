"""Helpers for the native agent's tests and its benchmark: build, loop devices, counters.

Plain functions (no pytest) so that tests/perf/agent_vs_fio.py can use them standalone.
Everything that creates a kernel object (loop device, mount) has a matching teardown that is
safe to call on a half-built setup.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import paths

REPO = paths.REPO
NATIVE = REPO / "native"
AGENT = NATIVE / "bench-agent"
SECTOR = 512  # /proc/diskstats sectors are always 512 bytes
# the agent's exit codes (native/README.md "Exit codes", native/util.h BENCH_EXIT_*)
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_SKIP = 0, 1, 2, 4


def source_hash(native_dir: Path = NATIVE) -> str:
    """The recipe documented in native/README.md: sha256 over Makefile, *.c, *.h of native/
    (not recursive), concatenated in byte order of their names."""
    names = sorted([p.name for p in native_dir.iterdir()
                    if p.is_file() and (p.name == "Makefile" or p.suffix in (".c", ".h"))],
                   key=lambda n: n.encode())
    h = hashlib.sha256()
    for n in names:
        h.update((native_dir / n).read_bytes())
    return h.hexdigest()


def agent_or_skip() -> Path:
    """The agent built (make), or a skip naming the missing build tool (pytest imported
    here only: the other helpers stay usable without it)."""
    import pytest
    for tool in ("make", "cc"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (build-essential): cannot build the agent")
    return build_agent()


def build_agent() -> Path:
    r = subprocess.run(["make", "-C", str(NATIVE)], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"make failed:\n{r.stdout}\n{r.stderr}")
    return AGENT


def run(cmd, check=True, **kw) -> subprocess.CompletedProcess:
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def drop_caches() -> None:
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def diskstats_sectors_read(dev: str, text: str | None = None) -> int:
    """Sectors read (field 3 after the name) of block device `dev` (e.g. 'loop3')."""
    if text is None:
        text = Path("/proc/diskstats").read_text()
    for line in text.splitlines():
        f = line.split()
        if len(f) > 5 and f[2] == dev:
            return int(f[5])
    raise KeyError(f"{dev} not in /proc/diskstats")


def device_bytes_read(dev: str) -> int:
    return diskstats_sectors_read(dev) * SECTOR


def meminfo_kb(key: str) -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


def status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    raise KeyError(key)


@dataclass
class LoopFs:
    """An ext4 file system on a loop device with direct I/O (no double caching)."""

    root: Path
    image: Path
    mnt: Path
    dev: str = ""          # 'loop3'
    mounted: bool = False

    @property
    def devpath(self) -> str:
        return f"/dev/{self.dev}"


def make_loopfs(size_bytes: int, prefix: str = "bench-native-") -> LoopFs:
    """Create image, attach with --direct-io=on, mkfs.ext4, mount. Raises OSError/RuntimeError;
    on failure, everything created so far is removed before raising."""
    root = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    fs = LoopFs(root=root, image=root / "disk.img", mnt=root / "mnt")
    try:
        with open(fs.image, "wb") as f:
            f.truncate(size_bytes)
        out = run(["losetup", "--find", "--show", "--direct-io=on", fs.image]).stdout.strip()
        fs.dev = os.path.basename(out)
        dio = Path(f"/sys/block/{fs.dev}/loop/dio")
        if dio.exists() and dio.read_text().strip() != "1":
            raise RuntimeError(f"{fs.dev}: direct I/O did not turn on (backing file system?)")
        # no lazy init: a background ext4lazyinit thread would touch the device mid-test
        run(["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0",
             fs.devpath])
        fs.mnt.mkdir()
        run(["mount", "-o", "noatime", fs.devpath, fs.mnt])
        fs.mounted = True
        return fs
    except BaseException:
        destroy_loopfs(fs)
        raise


def destroy_loopfs(fs: LoopFs) -> None:
    if fs.mounted:
        for _ in range(10):
            if run(["umount", fs.mnt], check=False).returncode == 0:
                fs.mounted = False
                break
            time.sleep(0.5)
        if fs.mounted:
            # something still holds a file open: detach now, the kernel finishes when it closes
            if run(["umount", "-l", fs.mnt], check=False).returncode == 0:
                fs.mounted = False
    if fs.dev:
        # on a busy device this sets autoclear: it detaches when the last user goes
        run(["losetup", "-d", fs.devpath], check=False)
        fs.dev = ""
    if fs.mounted:
        # never recurse into a file system that is still mounted
        fs.image.unlink(missing_ok=True)
        return
    shutil.rmtree(fs.root, ignore_errors=True)


@dataclass
class AgentResult:
    rc: int
    records: list = field(default_factory=list)
    summary: dict | None = None
    stderr: str = ""
    stdout: str = ""

    def passes(self, p: int) -> list:
        return [r for r in self.records if r.get("pass") == p]


def run_agent(args, timeout: float = 300, **kw) -> AgentResult:
    r = subprocess.run([str(AGENT)] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=timeout, **kw)
    recs, summary = [], None
    for line in r.stdout.splitlines():
        obj = json.loads(line)
        if obj.get("summary"):
            summary = obj
        else:
            recs.append(obj)
    return AgentResult(r.returncode, recs, summary, r.stderr, r.stdout)


def snapshot_device_bytes(snap_dir: Path, p: int, dev: str) -> int:
    """Device bytes read during replay pass p, from the agent's own pass-boundary snapshots."""
    start = (snap_dir / f"pass{p}-start" / "proc_diskstats").read_text()
    end = (snap_dir / f"pass{p}-end" / "proc_diskstats").read_text()
    return (diskstats_sectors_read(dev, end) - diskstats_sectors_read(dev, start)) * SECTOR


def _vmstat_delta(snap_dir: Path, first: int, last: int, counted) -> int:
    """The change of the /proc/vmstat counters `counted` names from pass `first`'s start to
    pass `last`'s end snapshot; 0 when the snapshots hold no vmstat."""
    def total(d: str) -> int:
        f = snap_dir / d / "proc_vmstat"
        if not f.exists():
            return 0
        fields = dict(line.split() for line in f.read_text().splitlines() if line.strip())
        return sum(int(v) for k, v in fields.items() if counted(k))
    return total(f"pass{last}-end") - total(f"pass{first}-start")


def reclaimed_pages(snap_dir: Path, p: int, since: int | None = None) -> int:
    """Pages the kernel reclaimed (every pgsteal_ source: kswapd, direct, and those only the
    file/anon totals count, such as DAMON's pageout) during pass p, or from pass `since` to
    the end of pass p; 0 without vmstat snapshots."""
    return _vmstat_delta(snap_dir, p if since is None else since, p,
                         lambda k: k.startswith("pgsteal_"))


def refaulted_pages(snap_dir: Path, p: int) -> int:
    """File pages read again during pass p that reclaim had evicted (workingset_refault_file:
    only reclaim leaves the shadow entry a refault is told by; drop_caches, fadvise DONTNEED
    and O_DIRECT leave none)."""
    return _vmstat_delta(snap_dir, p, p, lambda k: k == "workingset_refault_file")


def cache_drops(snap_dir: Path, p: int) -> int:
    """Writes to /proc/sys/vm/drop_caches during pass p (vmstat's drop_pagecache): on one
    kernel shared with other work (a netns lab host's runner left finishing a run, another
    test), a drop by anyone empties the warm pass's cache and counts no pgsteal."""
    return _vmstat_delta(snap_dir, p, p, lambda k: k == "drop_pagecache")


def skip_if_evicted_from_outside(snap_dir: Path, p: int, warm_bytes: int, slack: int) -> None:
    """A warm pass p that read the device after the kernel reclaimed during the replay (from
    the cold pass on: a page read cold and reclaimed before the warm pass is read again), that
    re-read pages reclaim had evicted, or during which someone dropped the page cache:
    something outside the test took memory (this project's VMs have a virtio balloon,
    virtio-mem and a DAMON pageout that the hypervisor drives) or emptied the cache, so cache
    hits cannot be judged on this machine now. Without any of these, a warm pass that reads
    the device stays a failure: a cache bypass or a drop by the agent leaves no refault."""
    n, refaults = reclaimed_pages(snap_dir, p, since=0), refaulted_pages(snap_dir, p)
    drops = cache_drops(snap_dir, p)
    if warm_bytes > slack and (n > 0 or refaults > 0 or drops > 0):
        import pytest
        pytest.skip(f"the machine reclaimed {n} pages during the replay, {refaults} of the warm "
                    f"pass's reads were refaults and the page cache was dropped {drops} "
                    f"time(s) during it (memory taken or the cache emptied from outside the "
                    f"test, e.g. by the hypervisor's balloon, DAMON pageout or another "
                    f"process's drop_caches): warm reads ({warm_bytes} bytes) cannot be judged "
                    f"on this machine now")


def warm_device_bytes(snap_dir: Path, p: int, dev: str, slack: int) -> int:
    """Device bytes of warm pass p, after skipping when the cache was emptied from outside
    (skip_if_evicted_from_outside; the snapshots must include /proc/vmstat)."""
    if not (snap_dir / f"pass{p}-end" / "proc_vmstat").exists():
        raise AssertionError("the warm-pass guard needs --snapshot-file /proc/vmstat")
    warm = snapshot_device_bytes(snap_dir, p, dev)
    skip_if_evicted_from_outside(snap_dir, p, warm, slack)
    return warm


@contextlib.contextmanager
def loopfs_or_skip(size_bytes: int, prefix: str):
    """An ext4 file system on a direct-I/O loop device for one test session, or a pytest skip
    naming the missing capability; always torn down."""
    import pytest
    if os.geteuid() != 0:
        pytest.skip("needs root for a loop device")
    for tool in ("losetup", "mkfs.ext4", "mount"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed")
    if not Path("/proc/sys/vm/drop_caches").exists():
        pytest.skip("no /proc/sys/vm/drop_caches")
    try:
        fs = make_loopfs(size_bytes, prefix=prefix)
    except (OSError, RuntimeError) as exc:
        pytest.skip(f"no loop device support: {exc}")
    try:
        yield fs
    finally:
        destroy_loopfs(fs)


class NoThrottle(RuntimeError):
    """The kernel offers no per-cgroup read throttling here."""


def _cgroup_mounts():
    for line in Path("/proc/mounts").read_text().splitlines():
        f = line.split()
        if len(f) >= 4:
            yield f[2], f[1], f[3].split(",")


@contextlib.contextmanager
def throttled_reads(dev: str, bps: int, name: str = "bench-native-throttle"):
    """A cgroup whose tasks may read block device `dev` (e.g. 'loop3') at most `bps` bytes per
    second: cgroup v1 blkio.throttle.read_bps_device, or v2 io.max where the io controller is
    already enabled at the root (this never enables controllers on a shared machine). Yields
    a preexec_fn that moves the child into it. blk-throttle queues a group's bios FIFO per
    direction, so the group's reads reach the device in the order they were submitted. The
    cgroup is removed on exit (its tasks must have exited). Raises NoThrottle, naming what is
    missing, when neither interface exists."""
    majmin = Path(f"/sys/block/{dev}/dev").read_text().strip()
    path = None
    for fstype, mnt, opts in _cgroup_mounts():
        if fstype == "cgroup" and "blkio" in opts and \
                Path(mnt, "blkio.throttle.read_bps_device").exists():
            path, kind = Path(mnt) / f"{name}-{os.getpid()}", "v1"
            break
    if path is None:
        for fstype, mnt, _ in _cgroup_mounts():
            ctl = Path(mnt, "cgroup.subtree_control")
            if fstype == "cgroup2" and ctl.exists() and "io" in ctl.read_text().split():
                path, kind = Path(mnt) / f"{name}-{os.getpid()}", "v2"
                break
    if path is None:
        raise NoThrottle("no read throttling: neither cgroup v1 blkio.throttle.read_bps_device "
                         "(CONFIG_BLK_DEV_THROTTLING) nor a cgroup v2 root with io enabled")
    path.mkdir()
    try:
        if kind == "v1":
            (path / "blkio.throttle.read_bps_device").write_text(f"{majmin} {bps}\n")
        else:
            (path / "io.max").write_text(f"{majmin} rbps={bps}\n")
        procs = str(path / "cgroup.procs")

        def enter():
            with open(procs, "w") as f:
                f.write(f"{os.getpid()}\n")
        yield enter
    finally:
        rmdir_cgroup(path)


def pool_on(fs: LoopFs, layers: int, experts: int, expert_bytes: int) -> Path:
    """A pool of real data on the loop file system, synced so the cold pass reads the device."""
    from bench.plan.pool import PoolSpec, make_pool
    d = fs.mnt / "pool"
    make_pool(d, PoolSpec(layers, experts, expert_bytes))
    os.sync()
    return d


def rmdir_cgroup(path: Path) -> None:
    """Remove a cgroup directory once its last task is gone (an exited one may still be being
    reaped: retried for 5 s, then the error is raised)."""
    for attempt in range(50):
        try:
            path.rmdir()
            return
        except OSError:
            if attempt == 49:
                raise
            time.sleep(0.1)
