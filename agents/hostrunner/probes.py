"""What this host is: mounts, the memory cgroup backend, the pool's block device, the MGLRU
mask, and the host.json fingerprint built from them (with the page-cache settings of
hostrunner.settings). Read-only.

Test hook: BENCH_RUNNER_TEST_KERNEL_RELEASE, when set and not empty, is written as host.json's
kernel_release instead of `uname -r` (and recorded under `test_hooks`), so tests can produce real
bundles of "another kernel" (agents/README.md). Nothing else reads it."""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

from .files import meminfo, read_or_none, read_text
from .settings import read_settings
from .systemd import choose_wall, detect

LRU_GEN = "/sys/kernel/mm/lru_gen/enabled"
SYS_FILES = ["/proc/diskstats", "/proc/vmstat", "/proc/meminfo", "/proc/pressure/memory",
             "/proc/pressure/io", "/proc/pressure/cpu"]
CG_FILES = {"v2": ["memory.current", "memory.peak", "memory.events", "memory.stat",
                   "memory.max", "memory.swap.max"],
            "v1": ["memory.usage_in_bytes", "memory.max_usage_in_bytes",
                   "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.failcnt",
                   "memory.oom_control", "memory.stat"]}
CG_CURRENT = {"v2": "memory.current", "v1": "memory.usage_in_bytes"}
TEST_KERNEL_RELEASE = "BENCH_RUNNER_TEST_KERNEL_RELEASE"


def mounts() -> list[tuple[str, str, str]]:
    """(mountpoint, fstype, options) of /proc/self/mounts."""
    out = []
    for line in read_text("/proc/self/mounts").splitlines():
        fields = line.split()
        if len(fields) >= 4:
            out.append((fields[1].replace("\\040", " "), fields[2], fields[3]))
    return out


def cgroup_backend() -> tuple[str, str | None]:
    """('v2', mountpoint) when a cgroup2 mount offers the memory controller, else ('v1', mount
    of the v1 memory hierarchy), else ('none', None). Probed, never assumed."""
    ms = mounts()
    for mp, fstype, _ in ms:
        controllers = read_or_none(f"{mp}/cgroup.controllers") or ""
        if fstype == "cgroup2" and "memory" in controllers.split():
            return "v2", mp
    for mp, fstype, opts in ms:
        if fstype == "cgroup" and "memory" in opts.split(","):
            return "v1", mp
    return "none", None


def _leaves(name: str, seen: set[str]) -> list[str]:
    """The devices at the bottom of name's dm/md stack (name itself when it has none)."""
    slaves = f"/sys/class/block/{name}/slaves"
    subs = sorted(os.listdir(slaves)) if os.path.isdir(slaves) else []
    if not subs:
        return [name]
    out = []
    for s in subs:
        if s not in seen:
            seen.add(s)
            out += _leaves(s, seen)
    return out


def block_device(path: str) -> dict[str, Any]:
    """The block device holding path: name, major:minor, leaf devices, a loop's backing file."""
    st = os.stat(path)
    majmin = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    sysdir = f"/sys/dev/block/{majmin}"
    if not os.path.exists(sysdir):
        return {"name": None, "major:minor": majmin, "leaves": [],
                "note": "not a block device (tmpfs, overlay, btrfs subvolume?)"}
    name = os.path.basename(os.path.realpath(sysdir))
    dev: dict[str, Any] = {"name": name, "major:minor": majmin, "leaves": _leaves(name, set())}
    backing = read_or_none(f"/sys/class/block/{name}/loop/backing_file")
    if backing:
        dev["loop_backing_file"] = backing.strip()
    return dev


def lru_gen_mask() -> str | None:
    text = read_or_none(LRU_GEN)
    return text.strip() if text is not None else None


def host_fingerprint(cfg: dict[str, Any]) -> dict[str, Any]:
    """host.json (docs/bundle.md), taken at `pre`."""
    mi = meminfo()
    backend, mp = cgroup_backend()
    sd = detect()
    comm1 = sd["pid1_comm"]
    pool_device = block_device(cfg["pool"])
    hooked = os.environ.get(TEST_KERNEL_RELEASE)
    host = {
        "hostname": socket.gethostname(), "kernel_release": hooked or platform.release(),
        "arch": platform.machine(), "page_size": os.sysconf("SC_PAGE_SIZE"),
        "cmdline": (read_or_none("/proc/cmdline") or "").strip(),
        "boot_id": (read_or_none("/proc/sys/kernel/random/boot_id") or "").strip(),
        "mem_total_bytes": mi["MemTotal"], "swap_total_bytes": mi.get("SwapTotal"),
        "mglru": lru_gen_mask(), "cgroup_backend": backend, "cgroup_mount": mp,
        "systemd_pid1": comm1 == "systemd", "pid1_comm": comm1,
        "systemd": sd["systemd"], "run_systemd_system": sd["run_systemd_system"],
        # the path a cgroup wall takes on this host (capacity.json `wall` says the one used)
        "capacity_path": choose_wall(bool(sd["systemd"]), backend)[0],
        "python": platform.python_version(),
        "agent_version": cfg["agent_version"].get("version"),
        "agent_source_sha256": cfg["agent_version"].get("source_sha256"),
        "pool_device": pool_device,
        "settings": read_settings(pool_device),
        "expect_boot": cfg["expect_boot"],
    }
    if hooked:
        host["test_hooks"] = {TEST_KERNEL_RELEASE: hooked}
    return host
