"""`bench hosts init`: commented example host files, shipped as package data (bench/data/hosts/),
written into an inventory directory: `local.toml`, this machine (transport local) with its
MemTotal as memory.total so that relative capacities (0.5mem) resolve at once, and
`gh200.toml.example`, a commented SSH host modelled on the reference fleet, which bench does not
read until it is copied to NAME.toml. Existing files are never overwritten without `force`.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path

import tomli_w

from bench.errors import FormatError, InventoryError
from bench.hosts.inventory import find_hosts_dir, init_hosts_dir
from bench.hosts.procfs import parse_meminfo
from bench.hosts.inventory_schema import MAX_MEMORY, MIN_MEMORY
from bench.units import MB, format_size

LOCAL, EXAMPLE = "local.toml", "gh200.toml.example"
_MEMORY_MARK = "@MEMORY@"


def _template(name: str) -> str:
    return resources.files("bench").joinpath("data", "hosts", name).read_text(encoding="utf-8")


def this_mem_total() -> int | None:
    """MemTotal of this machine in bytes, or None when /proc/meminfo cannot tell."""
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as f:
            return parse_meminfo(f.read(1 << 16)).get("MemTotal")
    except (OSError, ValueError, FormatError):
        return None


def render_templates(mem_total: int | None) -> dict[str, str]:
    """{file name: text} of the example inventory; `mem_total` (bytes) fills the local host's
    memory.total, rounded down to whole MB (commented out when None or out of bounds)."""
    if mem_total is not None and _usable(mem_total):
        total = tomli_w.dumps({"total": format_size(mem_total // MB * MB)}).rstrip("\n")
        memory = (f"{total}    # MemTotal of this machine when `bench hosts init` ran, "
                  "rounded down to whole MB (10^6 bytes)")
    else:
        memory = ('# total = "64G"          # this machine\'s memory: capacities like 0.5mem '
                  "are fractions of it")
    local = _template(LOCAL + ".in").replace(_MEMORY_MARK, memory)
    return {LOCAL: local, EXAMPLE: _template(EXAMPLE)}


def _usable(mem_total: int) -> bool:
    return MIN_MEMORY <= mem_total <= MAX_MEMORY


def _write(path: Path, text: str) -> None:
    """Write atomically (a temp file beside it, then rename over `path`, even a symlink)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def init_inventory(directory: Path | None = None, *, force: bool = False,
                   mem_total: int | None = None) -> dict:
    """Write the example inventory into `directory` (default: $BENCH_HOSTS, else
    $XDG_CONFIG_HOME/bench/hosts), creating it; refuses (nothing written) when one of its
    files exists, unless `force`. Returns {dir, written, memory_total, reads, reads_origin,
    active}: `reads` is the inventory bench reads from here without --hosts-dir."""
    d = Path(directory) if directory else init_hosts_dir()
    total = mem_total if mem_total is not None else this_mem_total()
    files = render_templates(total)
    try:
        if d.exists() and not d.is_dir():
            raise InventoryError(f"{d}: not a directory", "pass --dir DIR for the inventory")
        present = [n for n in files if os.path.lexists(d / n)]
        if present and not force:
            raise InventoryError(f"{d}: {', '.join(present)} already there; nothing written",
                                 "pass --force to overwrite them, or --dir DIR to write "
                                 "elsewhere")
        d.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            _write(d / name, text)
    except OSError as exc:
        raise InventoryError(f"{d}: cannot write the inventory: {exc.strerror}",
                             "pass --dir DIR for a directory you can write") from None
    reads = find_hosts_dir()
    return {"dir": str(d), "written": [str(d / n) for n in files],
            "memory_total": total // MB * MB if total is not None and _usable(total) else None,
            "reads": str(reads.path), "reads_origin": reads.origin,
            "active": _same(reads.path, d)}


def _same(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False
