"""The host settings that move page-cache numbers, for host.json's `settings` (docs/bundle.md):
the block queues of the pool's device and of the leaves of its dm/md stack (a partition stands
for its disk, whose queue it uses), transparent huge pages, the vm sysctls of reclaim and
writeback, the NUMA nodes with their memory, and the CPU frequency governors. A file that is
missing, unreadable or empty is recorded as null (a NUMA node or cpufreq policy whose file
cannot be read is left out): never a failure.

`settings_from_files` is the one definition: it turns {path: text} into the record. The runner
feeds it the files it reads itself (`read_settings`); the controller's probe
(bench.hosts.facts) feeds it the files one remote `grep -H` printed (`grep_script`,
`parse_grep`), so a probed host and a bundle written on it carry the same record.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any, Callable

THP_DIR = "/sys/kernel/mm/transparent_hugepage"
VM_DIR = "/proc/sys/vm"
NODE_DIR = "/sys/devices/system/node"
CPUFREQ_DIR = "/sys/devices/system/cpu/cpufreq"
VM_KEYS = ("swappiness", "min_free_kbytes", "watermark_scale_factor", "dirty_ratio",
           "dirty_background_ratio", "dirty_bytes", "dirty_background_bytes")
QUEUE_KEYS = ("read_ahead_kb", "max_sectors_kb", "scheduler")
THP_KEYS = ("enabled", "defrag")
NODE_MEMINFO = re.compile(r"^" + re.escape(NODE_DIR) + r"/node(\d+)/meminfo$")
GOVERNOR = re.compile(r"^" + re.escape(CPUFREQ_DIR) + r"/policy(\d+)/scaling_governor$")
MEM_TOTAL = re.compile(r"MemTotal:\s*(\d+)\s*kB")


def fixed_paths() -> list[str]:
    """The files every host has (or lacks) at a known path."""
    return ([f"{THP_DIR}/{k}" for k in THP_KEYS] + [f"{VM_DIR}/{k}" for k in VM_KEYS]
            + [f"{NODE_DIR}/online"])


def queue_path(dev: str, key: str) -> str:
    return f"/sys/block/{dev}/queue/{key}"


# pure ----------------------------------------------------------------------------------------

def parse_int(text: str | None) -> int | None:
    try:
        return int((text or "").strip())
    except ValueError:
        return None


def parse_choice(text: str | None) -> str | None:
    """A sysfs choice file: the [bracketed] entry ('always [madvise] never' -> 'madvise'),
    else its only word ('none', as a dm device's scheduler reads), else the text itself."""
    value = (text or "").strip()
    if not value:
        return None
    m = re.search(r"\[([^\]]+)\]", value)
    return m.group(1) if m else value


def node_mem_total(text: str | None) -> int | None:
    """Bytes of `Node N MemTotal: X kB` in a node's meminfo."""
    m = MEM_TOTAL.search(text or "")
    return int(m.group(1)) * 1024 if m else None


def settings_from_files(files: dict[str, str | None], queue_devs: list[str]) -> dict[str, Any]:
    """The settings record from file texts keyed by path (absent or None = unreadable) and the
    names of the block devices whose queues count (see `queue_devices`)."""
    get = files.get
    nodes: dict[str, int | None] = {}
    governors: dict[str, int] = {}
    for path in sorted(files):
        text = files[path]
        node, gov = NODE_MEMINFO.fullmatch(path), GOVERNOR.fullmatch(path)
        if node and text is not None:
            nodes[node.group(1)] = node_mem_total(text)
        elif gov and parse_choice(text) is not None:
            name = str(parse_choice(text))
            governors[name] = governors.get(name, 0) + 1
    return {
        "block": {d: {"read_ahead_kb": parse_int(get(queue_path(d, "read_ahead_kb"))),
                      "max_sectors_kb": parse_int(get(queue_path(d, "max_sectors_kb"))),
                      "scheduler": parse_choice(get(queue_path(d, "scheduler")))}
                  for d in sorted(set(queue_devs))},
        "thp": {k: parse_choice(get(f"{THP_DIR}/{k}")) for k in THP_KEYS},
        "vm": {k: parse_int(get(f"{VM_DIR}/{k}")) for k in VM_KEYS},
        "numa": {"online": (get(f"{NODE_DIR}/online") or "").strip() or None,
                 "nodes": {k: nodes[k] for k in sorted(nodes, key=int)}},
        "cpufreq": {"policies": sum(governors.values()),
                    "governors": {k: governors[k] for k in sorted(governors)}},
    }


# the controller's remote read -----------------------------------------------------------------

def grep_script() -> str:
    """A shell script printing `path:line` for every line of the settings files, the block
    queues of every disk (the caller keeps the pool's) and the MemTotal line of every NUMA
    node: one process per group, missing files silent. Exits 0."""
    fixed = " ".join(fixed_paths())
    queues = " ".join(f"/sys/block/*/queue/{k}" for k in QUEUE_KEYS)
    return (f"grep -H '' {fixed} {queues} {CPUFREQ_DIR}/policy*/scaling_governor 2>/dev/null; "
            f"grep -H MemTotal {NODE_DIR}/node*/meminfo 2>/dev/null; true")


def parse_grep(text: str) -> dict[str, str]:
    """`grep -H` output -> {path: text} (sysfs and procfs paths hold no colon)."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        path, sep, rest = line.partition(":")
        if sep and path.startswith("/"):
            out.setdefault(path, []).append(rest)
    return {p: "\n".join(lines) + "\n" for p, lines in out.items()}


# the runner's own read ------------------------------------------------------------------------

def _disk_of(name: str, sys_block: str = "/sys/block") -> str:
    """The device whose queue `name` uses: itself when it has one (a disk, dm, md, loop),
    else (a partition) the disk above it in sysfs."""
    if os.path.isdir(f"{sys_block}/{name}/queue"):
        return name
    real = os.path.realpath(f"/sys/class/block/{name}")
    if os.path.exists(os.path.join(real, "partition")):
        return os.path.basename(os.path.dirname(real))
    return name


def queue_devices(dev: dict[str, Any], disk_of: Callable[[str], str] = _disk_of) -> list[str]:
    """The pool device (hostrunner.probes.block_device) and its leaves, each as the device
    whose queue it uses, sorted and without repeats."""
    names = ([dev["name"]] if dev.get("name") else []) + list(dev.get("leaves") or [])
    return sorted({disk_of(n) for n in names})


def read_settings(dev: dict[str, Any]) -> dict[str, Any]:
    """The settings record of this host for a pool on block device `dev`."""
    devs = queue_devices(dev)
    paths = (fixed_paths() + [queue_path(d, k) for d in devs for k in QUEUE_KEYS]
             + glob.glob(f"{NODE_DIR}/node*/meminfo")
             + glob.glob(f"{CPUFREQ_DIR}/policy*/scaling_governor"))
    files: dict[str, str | None] = {}
    for p in paths:
        try:
            with open(p) as f:
                files[p] = f.read()
        except OSError:
            files[p] = None
    return settings_from_files(files, devs)
