"""The inventory: one TOML file per host in the inventory directory, the first of
`--hosts-dir`, `$BENCH_HOSTS`, `./hosts` (when the current directory has one) and
`$XDG_CONFIG_HOME/bench/hosts` (~/.config/bench/hosts); `bench hosts init` writes commented
examples there (bench.hosts.templates). A missing or empty directory is an empty inventory: a
command that needs a host says "no hosts" and how to add them.

Pure except for reading files and looking at the SSH files a host names. Every key is
checked (the model: bench.hosts.inventory_schema.HostFile; `bench schema inventory` prints its JSON
Schema): a missing required key, a wrong type, a value outside its allowed set or bounds, an
unknown key or a broken cross-field rule is a problem naming the file, the dotted key and what
is allowed, and every problem of a file is reported at once (a HostFileError, an
InventoryError with one problem a line). A file that is not a regular file, not UTF-8, larger
than 1 MiB or not TOML is one line naming it; a known_hosts, ssh config or identity file that
is a directory or unreadable is a problem of the key that names it (or would default to it).
Schema (see hosts/README.md for a commented example):

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

import dataclasses
import difflib
import os
import stat
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from bench.errors import InventoryError
from bench.hosts.inventory_schema import (  # noqa: F401 - the allowed values, re-exported from their old home
    NAME_RE, REBOOT_METHODS, TRANSPORTS, HostFile, HostFileError)
from bench.hosts.toml_lines import key_lines, line_of
from bench.matrix.matrix_schema import Problem, SchemaError, collect
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

MAX_HOST_FILE = 1 << 20         # bytes of one host file (the reference files are about 1.5K)
MAX_HOST_FILES = 4096           # host files in one inventory directory
MAX_DEPTH = 6                   # tables and lists in tables (the schema needs 3)
MAX_PROBLEMS = 50               # problems reported per file (then "... and N more")


def _validate(data: dict, path: Path) -> tuple[HostFile | None, list[Problem]]:
    deep = _too_deep(data)
    if deep is not None:
        return None, [Problem(deep, f"nests more than {MAX_DEPTH} tables or lists deep",
                              source=str(path))]
    h, problems = collect(HostFile, data, source=str(path), context={"path": path})
    if len(problems) > MAX_PROBLEMS:
        more = len(problems) - MAX_PROBLEMS
        problems = problems[:MAX_PROBLEMS] + [Problem((), f"... and {more} more problems",
                                                      source=str(path))]
    return h, problems


def _too_deep(data: object) -> tuple[str | int, ...] | None:
    """The location of a value nested more than MAX_DEPTH deep, or None (no recursion)."""
    stack: list[tuple[object, tuple[str | int, ...]]] = [(data, ())]
    while stack:
        v, loc = stack.pop()
        if len(loc) > MAX_DEPTH:
            return loc[:MAX_DEPTH]
        if isinstance(v, dict):
            stack.extend((x, loc + (k,)) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((x, loc + (i,)) for i, x in enumerate(v))
    return None


def _host(h: HostFile, path: Path) -> Host:
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


def parse_host(data: dict, path: Path) -> Host:
    """Validate one parsed TOML document (path is only used in messages and for the stem); every
    problem of it at once, as a HostFileError. Pure: the files it names are not looked at."""
    h, problems = _validate(data, path)
    if problems or h is None:
        raise HostFileError(problems)
    return _host(h, path)


def _file_problem(path: str, *, must_exist: bool) -> str | None:
    """Why `path` cannot serve as a file bench (or paramiko, or fabric) reads, or None."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return f"{path} does not exist" if must_exist else None
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    if stat.S_ISDIR(st.st_mode):
        return f"{path} is a directory, not a file"
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if not os.access(path, os.R_OK):
        return f"{path} cannot be read (permission denied)"
    return None


def local_file_problems(h: Host) -> list[Problem]:
    """The controller-side files an SSH host relies on (known_hosts, ssh config, identity file)
    that would fail later: a directory, a device, unreadable, or a named config that is
    missing. A missing known_hosts is fine (`bench hosts trust` creates it)."""
    if h.transport != "ssh":
        return []
    given, default = "", " (the default)"
    checks = [
        (("ssh", "known_hosts"), h.known_hosts_path, False,
         given if h.ssh.known_hosts else default, "set ssh.known_hosts to a file"),
        (("ssh", "config"), "" if (h.ssh.config or "").lower() == "none"  # `ssh -F none`
         else os.path.expanduser(h.ssh.config or "~/.ssh/config"),
         h.ssh.config is not None, given if h.ssh.config else default,
         "set ssh.config to an ssh_config file, or drop the key"),
        (("ssh", "identity_file"), os.path.expanduser(h.ssh.identity_file or ""), False, given,
         "set ssh.identity_file to a private key file"),
    ]
    out = []
    for loc, path, must_exist, which, hint in checks:
        why = _file_problem(path, must_exist=must_exist) if path else None
        if why:
            out.append(Problem(loc, why + which, hint=hint, source=h.source))
    return out


def _read_text(path: Path) -> str:
    """A host file's text: a regular file of at most MAX_HOST_FILE bytes, UTF-8 (a BOM is
    dropped); else an InventoryError naming the file."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise InventoryError(f"{path}: not a regular file",
                                 "an inventory holds one NAME.toml file per host")
        with open(path, "rb") as f:
            data = f.read(MAX_HOST_FILE + 1)
    except OSError as exc:
        raise InventoryError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > MAX_HOST_FILE:
        raise InventoryError(f"{path}: larger than {MAX_HOST_FILE >> 20} MiB: not a host file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InventoryError(f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at "
                             f"offset {exc.start})", "save the file as UTF-8") from None


def _located(problems: list[Problem], text: str, path: Path) -> list[Problem]:
    """Each problem with its key's line (FILE:LINE), and "did you mean" for an unknown key
    close to an allowed one (tomllib gives lines for syntax errors only)."""
    lines = key_lines(text)
    out = []
    for p in problems:
        n = line_of(lines, p.loc)
        changes: dict[str, Any] = {"source": f"{path}:{n}" if n else str(path)}
        last = p.loc[-1] if p.loc else None
        if p.message == "unknown key" and isinstance(last, str):
            near = difflib.get_close_matches(last, p.allowed, n=1, cutoff=0.6)
            if near:
                changes["message"] = f"unknown key, did you mean '{near[0]}'?"
                changes["hint"] = p.hint or f"rename '{last}' to '{near[0]}'"
        out.append(dataclasses.replace(p, **changes))
    return out


def _load(path: Path) -> tuple[Host, str]:
    """One host file, read, parsed and validated, with the SSH files it names checked; its
    text (for the lines of later problems)."""
    text = _read_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InventoryError(f"{path}: not valid TOML: {exc}") from None
    except ValueError as exc:       # an integer past Python's digit limit
        raise InventoryError(f"{path}: not valid TOML: {exc}") from None
    except RecursionError:
        raise InventoryError(f"{path}: not valid TOML: nests too deeply") from None
    h, problems = _validate(data, path)
    if h is not None and not problems:
        host = _host(h, path)
        problems = local_file_problems(host)
        if not problems:
            return host, text
    raise HostFileError(_located(problems, text, path))


def load_host_file(path: Path) -> Host:
    """One host file, read, parsed and validated, with the SSH files it names checked."""
    return _load(path)[0]


def connect_problems(h: Host) -> list[Problem]:
    """What would stop a connection that a plan does not need: an identity file that is not
    there (`bench hosts check` reports it; planning with --facts works without it)."""
    if h.transport != "ssh" or not h.ssh.identity_file:
        return []
    path = os.path.expanduser(h.ssh.identity_file)
    why = _file_problem(path, must_exist=True)
    return [Problem(("ssh", "identity_file"), why, source=h.source,
                    hint="create the key (ssh-keygen -t ed25519 -f FILE) or point "
                         "ssh.identity_file at an existing private key")] if why else []


# where the inventory is -------------------------------------------------------------------------

@dataclass(frozen=True)
class InventoryDir:
    """The inventory directory in use and what chose it (shown in messages)."""
    path: Path
    origin: str         # --hosts-dir, $BENCH_HOSTS, ./hosts or $XDG_CONFIG_HOME/bench/hosts


def config_hosts_dir() -> Path:
    """$XDG_CONFIG_HOME/bench/hosts, ~/.config/bench/hosts when XDG_CONFIG_HOME is unset or not
    absolute (the XDG base-directory rule)."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(base):
        base = str(Path.home() / ".config")
    return Path(base) / "bench" / "hosts"


def _config_origin() -> str:
    return ("$XDG_CONFIG_HOME/bench/hosts" if os.path.isabs(os.environ.get("XDG_CONFIG_HOME", ""))
            else "~/.config/bench/hosts")


def find_hosts_dir(hosts_dir: Path | None = None) -> InventoryDir:
    """The inventory directory: `hosts_dir` (--hosts-dir), else $BENCH_HOSTS, else ./hosts when
    the current directory has one, else $XDG_CONFIG_HOME/bench/hosts. It need not exist."""
    if hosts_dir:
        return InventoryDir(Path(hosts_dir), "--hosts-dir")
    env = os.environ.get("BENCH_HOSTS")
    if env:
        return InventoryDir(Path(env), "$BENCH_HOSTS")
    try:
        here = Path.cwd() / "hosts"
        if here.is_dir():
            return InventoryDir(here, "./hosts")
    except OSError:                 # the current directory was removed
        pass
    return InventoryDir(config_hosts_dir(), _config_origin())


def default_hosts_dir() -> Path:
    return find_hosts_dir().path


def init_hosts_dir() -> Path:
    """Where `bench hosts init` writes by default: $BENCH_HOSTS, else the XDG directory."""
    env = os.environ.get("BENCH_HOSTS")
    return Path(env) if env else config_hosts_dir()


class Inventory(dict[str, Host]):
    """The hosts by name (sorted), the directory they were read from, and the host files that
    did not load (`broken`: host name, the file's stem -> its error): one broken file does not
    hide the other hosts; asking for a broken host by name raises its file's error."""

    def __init__(self, hosts: dict[str, Host], where: InventoryDir,
                 broken: dict[str, InventoryError] | None = None):
        super().__init__(hosts)
        self.where = where
        self.broken = dict(broken or {})

    def __missing__(self, name: str) -> Host:
        if name in self.broken:
            raise self.broken[name]
        raise KeyError(name)


def no_hosts(where: InventoryDir) -> InventoryError:
    """"no hosts" with the fix, for an inventory directory that is missing or empty."""
    state = "does not exist" if not where.path.exists() else "holds no host files (*.toml)"
    init = "bench hosts init"
    if where.path != init_hosts_dir():
        init += f" --dir {where.path}"
    return InventoryError(f"no hosts: {where.path} ({where.origin}) {state}",
                          f"run `{init}` (writes a local host and a commented SSH example), "
                          "or set BENCH_HOSTS (or --hosts-dir) to your inventory directory")


def _host_files(where: InventoryDir) -> list[Path]:
    """The directory's NAME.toml files, sorted (hidden files, e.g. editor locks, skipped); none
    when it does not exist."""
    d = where.path
    try:
        if not d.exists():
            return []
        if not d.is_dir():
            raise InventoryError(f"{d} ({where.origin}): not a directory",
                                 "the inventory is a directory of NAME.toml files")
        names = sorted(e.name for e in os.scandir(d)
                       if e.name.endswith(".toml") and not e.name.startswith("."))
    except OSError as exc:
        raise InventoryError(f"{d} ({where.origin}): cannot read: {exc.strerror}") from None
    if len(names) > MAX_HOST_FILES:
        raise InventoryError(f"{d}: {len(names)} host files; an inventory holds at most "
                             f"{MAX_HOST_FILES}")
    return [d / n for n in names]


def load_inventory(hosts_dir: Path | None = None) -> Inventory:
    """Every host file of the inventory directory (find_hosts_dir), validated, by name
    (sorted); an empty Inventory when the directory is missing or has no host file. A file
    that does not load is kept in `broken` with its error, not raised: the others still load."""
    where = find_hosts_dir(hosts_dir)
    hosts, broken = {}, {}
    for f in _host_files(where):
        try:
            h = load_host_file(f)
        except InventoryError as exc:
            broken[f.stem] = exc
            continue
        hosts[h.name] = h
    return Inventory(hosts, where, broken)


def _problem_rows(exc: InventoryError) -> list[dict]:
    if isinstance(exc, SchemaError):
        return [dict(p.as_dict(), where=p.source) for p in exc.problems]
    return [{"key": None, "problem": exc.message, "allowed": [], "hint": exc.hint}]


def check_inventory(hosts_dir: Path | None = None) -> list[dict]:
    """Validate every file without stopping at the first bad one, nor at the first problem of
    a file, and the identity file of each (connect_problems): [{file, host, ok, error, hint,
    problems}] (`error`: every problem, one a line, each FILE:LINE when the key is written)."""
    out = []
    for f in _host_files(find_hosts_dir(hosts_dir)):
        try:
            h, text = _load(f)
            more = connect_problems(h)
            if more:
                raise HostFileError(_located(more, text, f))
            out.append({"file": str(f), "host": h.name, "ok": True, "error": None, "hint": None,
                        "problems": []})
        except InventoryError as exc:
            # every problem of the file: one a line in `error`, and each on its own in `problems`
            out.append({"file": str(f), "host": f.stem, "ok": False, "error": exc.message,
                        "hint": exc.hint, "problems": _problem_rows(exc)})
    return out


def broken_files(inv: Inventory) -> InventoryError:
    """The inventory's broken files, every problem of each, and how to go on."""
    names = sorted(inv.broken)
    lines = "\n".join(inv.broken[n].message for n in names)
    good = " ".join(inv) or None
    return InventoryError(
        f"{len(names)} host file(s) in {inv.where.path} do not load: {', '.join(names)}\n{lines}",
        "fix them (`bench hosts check` lists every problem)"
        + (f", or name the hosts to use: {good}" if good else ""))


def select(hosts: dict[str, Host], names: list[str] | None) -> list[Host]:
    """The named hosts (all when names is empty), or an InventoryError naming the unknown ones,
    the broken file of a named host, or (all hosts asked for) every broken file."""
    where = getattr(hosts, "where", None)
    broken = hosts.broken if isinstance(hosts, Inventory) else {}
    for n in names or ():
        if n not in hosts and n in broken:
            raise broken[n]
    if not names and isinstance(hosts, Inventory) and broken:
        raise broken_files(hosts)
    if not hosts and where is not None and not broken:
        empty = no_hosts(where)
        if not names:
            raise empty
        raise InventoryError(f"unknown host(s): {', '.join(names)}: {empty.message}", empty.hint)
    if not names:
        return list(hosts.values())
    unknown = [n for n in names if n not in hosts]
    if unknown:
        inv = f" (inventory {where.path}, {where.origin})" if where is not None else ""
        bad = f"; files that do not load: {', '.join(sorted(broken))}" if broken else ""
        raise InventoryError(f"unknown host(s): {', '.join(unknown)}",
                             f"known hosts{inv}: {', '.join(hosts) or '(none)'}{bad}")
    return [hosts[n] for n in names]


def render_host_toml(h: Host) -> str:
    """A host as a TOML file (used by the lab, the demo and the tests to write inventories):
    tomli_w writes it, so every value is escaped as TOML wants; keys left unset are left out."""
    def given(d: dict) -> dict:
        return {k: v for k, v in d.items() if v is not None}
    doc: dict[str, Any] = given({"name": h.name, "address": h.address, "port": h.port,
                                 "user": h.user, "transport": h.transport})
    if h.tags:
        doc["tags"] = dict(h.tags)
    doc["ssh"] = given(asdict(h.ssh))
    if h.mem_total or h.mem_floor:
        doc["memory"] = given({"total": format_size(h.mem_total) if h.mem_total else None,
                               "floor": format_size(h.mem_floor) if h.mem_floor else None})
    doc["reboot"] = given(asdict(h.reboot))
    doc["paths"] = {"pool_dir": h.pool_dir, "work_dir": h.work_dir}
    if h.expect:
        doc["expect"] = dict(sorted(h.expect.items()))
    return tomli_w.dumps(doc)
