"""The inventory: one TOML file per host in `hosts/` (or $BENCH_HOSTS, or --hosts-dir).

Pure except for reading files. Every key is checked (the model: bench.hosts.schema.HostFile;
`bench schema inventory` prints its JSON Schema): a missing required key, a wrong type, a value
outside its allowed set, an unknown key or a broken cross-field rule is a problem naming the
file, the dotted key and what is allowed, and every problem of a file is reported at once (a
HostFileError, an InventoryError with one problem a line). Schema (see hosts/README.md for a
commented example):

    name = "gh200-a"            # must equal the file's stem
    address = "10.0.0.21"       # host name or IP the controller connects to
    port = 22                   # optional: default ssh_config's Port, else 22
    user = "root"               # optional: default ssh_config's User, else root
    transport = "ssh"           # ssh | local
    [tags]                      # free-form str -> str (machine = "A", nvme = "gen5" ...)
    [ssh]                       # optional: identity_file, proxy_jump, known_hosts, config,
                                #   connect_timeout, banner_timeout, auth_timeout
    [memory]                    # total (size), floor (lowest safe mem=, size); sizes as bench
                                #   writes them: "480G" = 480 x 10^9 bytes (the paper's 480 GB
                                #   machines), "448Gi" binary (as MemTotal counts), or bytes
    [reboot]                    # allowed, method (grub-reboot | kexec | command | none),
                                #   grub_entry, kexec_kernel, kexec_initrd, command (argv),
                                #   down_timeout, up_timeout (seconds), power_cycle (argv,
                                #   run on the controller)
    [paths]                     # pool_dir, work_dir (absolute)
    [expect]                    # optional facts the probe should find: arch, page_size, kernel
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.errors import InventoryError
from bench.hosts.schema import (  # noqa: F401 - the allowed values, re-exported from their old home
    NAME_RE, REBOOT_METHODS, TRANSPORTS, HostFile, HostFileError)
from bench.matrix.schema import SchemaError, collect
from bench.units import format_size


@dataclass(frozen=True)
class SSHOptions:
    identity_file: str | None = None
    proxy_jump: str | None = None
    known_hosts: str | None = None      # default ~/.ssh/known_hosts
    config: str | None = None           # default ~/.ssh/config (when it exists)
    connect_timeout: float = 10.0
    banner_timeout: float = 15.0
    auth_timeout: float = 15.0


@dataclass(frozen=True)
class RebootSpec:
    allowed: bool = False
    method: str = "none"
    grub_entry: str | None = None
    kexec_kernel: str | None = None
    kexec_initrd: str | None = None
    command: tuple[str, ...] | None = None
    down_timeout: float = 300.0
    up_timeout: float = 900.0
    power_cycle: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    transport: str
    port: int | None = None     # None: ssh_config's Port for the address, else 22
    user: str | None = None     # None: ssh_config's User for the address, else root
    tags: dict[str, str] = field(default_factory=dict)
    ssh: SSHOptions = field(default_factory=SSHOptions)
    mem_total: int | None = None
    mem_floor: int | None = None
    reboot: RebootSpec = field(default_factory=RebootSpec)
    pool_dir: str = "/var/lib/bench/pool"
    work_dir: str = "/var/lib/bench"
    expect: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    @property
    def known_hosts_path(self) -> str:
        return os.path.expanduser(self.ssh.known_hosts or "~/.ssh/known_hosts")

    def as_dict(self) -> dict:
        d = asdict(self)
        d["known_hosts_path"] = self.known_hosts_path
        return d


# validation ---------------------------------------------------------------------------------------

def parse_host(data: dict, path: Path) -> Host:
    """Validate one parsed TOML document (path is only used in messages and for the stem); every
    problem of it at once, as a HostFileError."""
    h, problems = collect(HostFile, data, source=str(path), context={"path": path})
    if problems:
        raise HostFileError(problems)
    r = h.reboot
    return Host(name=h.name or path.stem, address=h.address or "localhost",
                transport=h.transport, port=h.port, user=h.user, tags=dict(h.tags),
                ssh=SSHOptions(**{k: getattr(h.ssh, k) for k in type(h.ssh).model_fields}),
                mem_total=h.memory.total, mem_floor=h.memory.floor,
                reboot=RebootSpec(
                    allowed=r.allowed, method=r.method, grub_entry=r.grub_entry,
                    kexec_kernel=r.kexec_kernel, kexec_initrd=r.kexec_initrd,
                    command=None if r.command is None else tuple(r.command),
                    down_timeout=float(r.down_timeout), up_timeout=float(r.up_timeout),
                    power_cycle=None if r.power_cycle is None else tuple(r.power_cycle)),
                pool_dir=h.paths.pool_dir, work_dir=h.paths.work_dir,
                expect={k: getattr(h.expect, k) for k in type(h.expect).model_fields
                        if getattr(h.expect, k) is not None},
                source=str(path))


def load_host_file(path: Path) -> Host:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InventoryError(f"{path}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise InventoryError(f"{path}: cannot read: {exc.strerror}") from None
    return parse_host(data, path)


def default_hosts_dir() -> Path:
    env = os.environ.get("BENCH_HOSTS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "hosts"


def load_inventory(hosts_dir: Path | None = None) -> dict[str, Host]:
    """Every hosts_dir/*.toml, validated, by name (sorted)."""
    d = Path(hosts_dir) if hosts_dir else default_hosts_dir()
    if not d.is_dir():
        raise InventoryError(f"{d}: inventory directory does not exist",
                             "pass --hosts-dir DIR or set BENCH_HOSTS")
    hosts = {}
    for f in sorted(d.glob("*.toml")):
        h = load_host_file(f)
        hosts[h.name] = h
    return hosts


def check_inventory(hosts_dir: Path | None = None) -> list[dict]:
    """Validate every file without stopping at the first bad one, nor at the first problem of
    a file: [{file, host, ok, error, hint, problems}] (`error`: every problem, one a line)."""
    d = Path(hosts_dir) if hosts_dir else default_hosts_dir()
    if not d.is_dir():
        raise InventoryError(f"{d}: inventory directory does not exist",
                             "pass --hosts-dir DIR or set BENCH_HOSTS")
    out = []
    for f in sorted(d.glob("*.toml")):
        try:
            h = load_host_file(f)
            out.append({"file": str(f), "host": h.name, "ok": True, "error": None, "hint": None,
                        "problems": []})
        except InventoryError as exc:
            # every problem of the file: one a line in `error`, and each on its own in `problems`
            problems = [p.as_dict() for p in exc.problems] if isinstance(exc, SchemaError) else [
                {"key": None, "problem": exc.message, "allowed": [], "hint": exc.hint}]
            out.append({"file": str(f), "host": f.stem, "ok": False, "error": exc.message,
                        "hint": exc.hint, "problems": problems})
    return out


def select(hosts: dict[str, Host], names: list[str] | None) -> list[Host]:
    """The named hosts (all when names is empty), or an InventoryError naming the unknown ones."""
    if not names:
        return list(hosts.values())
    unknown = [n for n in names if n not in hosts]
    if unknown:
        raise InventoryError(f"unknown host(s): {', '.join(unknown)}",
                             f"known hosts: {', '.join(hosts) or '(none)'}")
    return [hosts[n] for n in names]


def render_host_toml(h: Host) -> str:
    """A host as a TOML file (used by the lab to write its inventory)."""
    def q(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, (list, tuple)):
            return "[" + ", ".join(q(x) for x in v) + "]"
        s = str(v).replace("\\", "\\\\").replace('"', '\\"')
        return f'"{s}"'
    lines = [f"name = {q(h.name)}", f"address = {q(h.address)}"]
    lines += [f"port = {h.port}"] if h.port is not None else []
    lines += [f"user = {q(h.user)}"] if h.user is not None else []
    lines += [f"transport = {q(h.transport)}", ""]
    if h.tags:
        lines.append("[tags]")
        lines += [f"{k} = {q(v)}" for k, v in h.tags.items()] + [""]
    lines.append("[ssh]")
    for k, v in asdict(h.ssh).items():
        if v is not None:
            lines.append(f"{k} = {q(v)}")
    lines.append("")
    if h.mem_total or h.mem_floor:
        lines.append("[memory]")
        if h.mem_total:
            lines.append(f"total = {q(format_size(h.mem_total))}")
        if h.mem_floor:
            lines.append(f"floor = {q(format_size(h.mem_floor))}")
        lines.append("")
    lines.append("[reboot]")
    for k, v in asdict(h.reboot).items():
        if v is not None:
            lines.append(f"{k} = {q(v)}")
    lines += ["", "[paths]", f"pool_dir = {q(h.pool_dir)}", f"work_dir = {q(h.work_dir)}", ""]
    return "\n".join(lines)
