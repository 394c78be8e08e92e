"""The inventory: one TOML file per host in `hosts/` (or $BENCH_HOSTS, or --hosts-dir).

Pure except for reading files. Every key is checked: a missing required key, a wrong type, a
value outside its allowed set or an unknown key is an InventoryError that names the file, the
dotted key and what is allowed. Schema (see hosts/README.md for a commented example):

    name = "gh200-a"            # must equal the file's stem
    address = "10.0.0.21"       # host name or IP the controller connects to
    port = 22                   # optional, default 22
    user = "root"               # optional, default root
    transport = "ssh"           # ssh | local
    [tags]                      # free-form str -> str (machine = "A", nvme = "gen5" ...)
    [ssh]                       # optional: identity_file, proxy_jump, known_hosts, config,
                                #   connect_timeout, banner_timeout, auth_timeout
    [memory]                    # total (size), floor (lowest safe mem=, size)
    [reboot]                    # allowed, method (grub-reboot | kexec | command | none),
                                #   grub_entry, kexec_kernel, kexec_initrd, command (argv),
                                #   down_timeout, up_timeout (seconds), power_cycle (argv,
                                #   run on the controller)
    [paths]                     # pool_dir, work_dir (absolute)
    [expect]                    # optional facts the probe should find: arch, page_size, kernel
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.errors import InputError, InventoryError
from bench.units import parse_size

TRANSPORTS = ("ssh", "local")
REBOOT_METHODS = ("grub-reboot", "kexec", "command", "none")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


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
    port: int = 22
    user: str = "root"
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

class _Checker:
    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str, message: str, hint: str | None = None) -> InventoryError:
        return InventoryError(f"{self.path}: key '{key}': {message}", hint)

    def table(self, data: dict, prefix: str, allowed: dict[str, str]) -> None:
        for k in data:
            if k not in allowed:
                key = f"{prefix}{k}"
                raise self.fail(key, "unknown key",
                                f"allowed keys{' in [' + prefix[:-1] + ']' if prefix else ''}: "
                                + ", ".join(allowed))

    def get(self, data: dict, prefix: str, key: str, kind: type | tuple, required: bool = False,
            default: Any = None, choices: tuple | None = None) -> Any:
        full = f"{prefix}{key}"
        if key not in data:
            if required:
                raise self.fail(full, "missing (required)",
                                f"add `{key} = ...`" + (f"; allowed: {', '.join(choices)}"
                                                        if choices else ""))
            return default
        value = data[key]
        kinds = kind if isinstance(kind, tuple) else (kind,)
        if isinstance(value, bool) and bool not in kinds:
            ok = False
        else:
            ok = isinstance(value, kinds)
        if not ok:
            names = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            raise self.fail(full, f"must be {names}, got {type(value).__name__} {value!r}")
        if choices is not None and value not in choices:
            raise self.fail(full, f"{value!r} is not allowed", f"allowed values: {', '.join(choices)}")
        return value

    def size(self, data: dict, prefix: str, key: str, required: bool = False) -> int | None:
        raw = self.get(data, prefix, key, (str, int), required)
        if raw is None:
            return None
        try:
            return parse_size(raw, f"{prefix}{key}")
        except InputError as exc:
            raise self.fail(f"{prefix}{key}", exc.message, exc.hint) from None

    def argv(self, data: dict, prefix: str, key: str) -> tuple[str, ...] | None:
        raw = self.get(data, prefix, key, list)
        if raw is None:
            return None
        if not raw or not all(isinstance(a, str) for a in raw):
            raise self.fail(f"{prefix}{key}", "must be a non-empty list of strings (an argv; "
                            "no shell is involved)")
        return tuple(raw)

    def seconds(self, data: dict, prefix: str, key: str, default: float) -> float:
        v = self.get(data, prefix, key, (int, float), default=default)
        if v <= 0:
            raise self.fail(f"{prefix}{key}", f"must be a positive number of seconds, got {v}")
        return float(v)

    def abspath(self, data: dict, prefix: str, key: str, default: str) -> str:
        v = self.get(data, prefix, key, str, default=default)
        if not v.startswith("/"):
            raise self.fail(f"{prefix}{key}", f"must be an absolute path, got {v!r}")
        return v

    def subtable(self, data: dict, key: str) -> dict:
        v = self.get(data, "", key, dict, default={})
        return v


_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false",
               list: "a list", dict: "a table"}

TOP_KEYS = {"name": "host name (= file stem)", "address": "host name or IP",
            "port": "SSH port", "user": "SSH user", "transport": "ssh | local",
            "tags": "table", "ssh": "table", "memory": "table", "reboot": "table",
            "paths": "table", "expect": "table"}
SSH_KEYS = dict.fromkeys(("identity_file", "proxy_jump", "known_hosts", "config",
                          "connect_timeout", "banner_timeout", "auth_timeout"), "")
MEMORY_KEYS = dict.fromkeys(("total", "floor"), "")
REBOOT_KEYS = dict.fromkeys(("allowed", "method", "grub_entry", "kexec_kernel", "kexec_initrd",
                             "command", "down_timeout", "up_timeout", "power_cycle"), "")
PATHS_KEYS = dict.fromkeys(("pool_dir", "work_dir"), "")
EXPECT_KEYS = dict.fromkeys(("arch", "page_size", "kernel"), "")


def parse_host(data: dict, path: Path) -> Host:
    """Validate one parsed TOML document (path is only used in messages and for the stem)."""
    c = _Checker(path)
    c.table(data, "", TOP_KEYS)
    stem = path.stem
    name = c.get(data, "", "name", str, default=stem)
    if not NAME_RE.match(name):
        raise c.fail("name", f"{name!r} is not a valid host name",
                     "use letters, digits, '.', '_' and '-' (at most 64)")
    if name != stem:
        raise c.fail("name", f"{name!r} differs from the file name {path.name!r}",
                     f"rename the file to {name}.toml or set name = {stem!r}")
    transport = c.get(data, "", "transport", str, required=True, choices=TRANSPORTS)
    address = c.get(data, "", "address", str, required=transport == "ssh", default="localhost")
    port = c.get(data, "", "port", int, default=22)
    if not 1 <= port <= 65535:
        raise c.fail("port", f"{port} is out of range", "allowed values: 1-65535")
    user = c.get(data, "", "user", str, default="root")

    tags = c.subtable(data, "tags")
    for k, v in tags.items():
        if not isinstance(v, str):
            raise c.fail(f"tags.{k}", f"must be a string, got {type(v).__name__} {v!r}")

    s = c.subtable(data, "ssh")
    c.table(s, "ssh.", SSH_KEYS)
    ssh = SSHOptions(
        identity_file=c.get(s, "ssh.", "identity_file", str),
        proxy_jump=c.get(s, "ssh.", "proxy_jump", str),
        known_hosts=c.get(s, "ssh.", "known_hosts", str),
        config=c.get(s, "ssh.", "config", str),
        connect_timeout=c.seconds(s, "ssh.", "connect_timeout", 10.0),
        banner_timeout=c.seconds(s, "ssh.", "banner_timeout", 15.0),
        auth_timeout=c.seconds(s, "ssh.", "auth_timeout", 15.0))

    m = c.subtable(data, "memory")
    c.table(m, "memory.", MEMORY_KEYS)
    total = c.size(m, "memory.", "total")
    floor = c.size(m, "memory.", "floor")
    if total is not None and floor is not None and floor > total:
        raise c.fail("memory.floor", "is above memory.total")

    r = c.subtable(data, "reboot")
    c.table(r, "reboot.", REBOOT_KEYS)
    method = c.get(r, "reboot.", "method", str, default="none", choices=REBOOT_METHODS)
    allowed = c.get(r, "reboot.", "allowed", bool, default=False)
    command = c.argv(r, "reboot.", "command")
    grub_entry = c.get(r, "reboot.", "grub_entry", str)
    if allowed and method == "none":
        raise c.fail("reboot.method", "reboot.allowed is true but no method is given",
                     f"allowed values: {', '.join(REBOOT_METHODS[:-1])}")
    if method == "command" and command is None:
        raise c.fail("reboot.command", "missing (required when reboot.method = 'command')",
                     'an argv list run on the host; "{cmdline}" is replaced by the new command line')
    if method == "grub-reboot" and grub_entry is None:
        raise c.fail("reboot.grub_entry", "missing (required when reboot.method = 'grub-reboot')",
                     "the GRUB menu entry (title or id) bench writes the new command line into")
    if transport == "local" and allowed:
        raise c.fail("reboot.allowed", "a local host (the controller's own machine) is never "
                     "rebooted", "set reboot.allowed = false")
    reboot = RebootSpec(
        allowed=allowed, method=method, grub_entry=grub_entry,
        kexec_kernel=c.get(r, "reboot.", "kexec_kernel", str),
        kexec_initrd=c.get(r, "reboot.", "kexec_initrd", str),
        command=command,
        down_timeout=c.seconds(r, "reboot.", "down_timeout", 300.0),
        up_timeout=c.seconds(r, "reboot.", "up_timeout", 900.0),
        power_cycle=c.argv(r, "reboot.", "power_cycle"))

    p = c.subtable(data, "paths")
    c.table(p, "paths.", PATHS_KEYS)
    e = c.subtable(data, "expect")
    c.table(e, "expect.", EXPECT_KEYS)
    expect = {}
    for key, kind in (("arch", str), ("page_size", int), ("kernel", str)):
        v = c.get(e, "expect.", key, kind)
        if v is not None:
            expect[key] = v
    return Host(name=name, address=address, transport=transport, port=port, user=user,
                tags=dict(tags), ssh=ssh, mem_total=total, mem_floor=floor, reboot=reboot,
                pool_dir=c.abspath(p, "paths.", "pool_dir", "/var/lib/bench/pool"),
                work_dir=c.abspath(p, "paths.", "work_dir", "/var/lib/bench"),
                expect=expect, source=str(path))


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
    """Validate every file without stopping at the first bad one: [{file, ok, error, hint}]."""
    d = Path(hosts_dir) if hosts_dir else default_hosts_dir()
    if not d.is_dir():
        raise InventoryError(f"{d}: inventory directory does not exist",
                             "pass --hosts-dir DIR or set BENCH_HOSTS")
    out = []
    for f in sorted(d.glob("*.toml")):
        try:
            h = load_host_file(f)
            out.append({"file": str(f), "host": h.name, "ok": True, "error": None, "hint": None})
        except InventoryError as exc:
            out.append({"file": str(f), "host": f.stem, "ok": False, "error": exc.message,
                        "hint": exc.hint})
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
    lines = [f"name = {q(h.name)}", f"address = {q(h.address)}", f"port = {h.port}",
             f"user = {q(h.user)}", f"transport = {q(h.transport)}", ""]
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
            lines.append(f"total = {h.mem_total}")
        if h.mem_floor:
            lines.append(f"floor = {h.mem_floor}")
        lines.append("")
    lines.append("[reboot]")
    for k, v in asdict(h.reboot).items():
        if v is not None:
            lines.append(f"{k} = {q(v)}")
    lines += ["", "[paths]", f"pool_dir = {q(h.pool_dir)}", f"work_dir = {q(h.work_dir)}", ""]
    return "\n".join(lines)
