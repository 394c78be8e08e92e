"""Where an inventory host really is, as OpenSSH would resolve it: which ssh_config files apply,
and what they say about the host's HostName, Port, User, IdentityFile, ProxyJump, ProxyCommand
and HostKeyAlias, merged with the inventory (bench.hosts.ssh does the paramiko side: it parses
the text this module gathers with paramiko.SSHConfig and hands `resolve` its lookup).

Which files (like `ssh -F`): the inventory's `ssh.config`, else $BENCH_SSH_CONFIG, else
~/.ssh/config then /etc/ssh/ssh_config (those that exist). `none` (either place) reads no file.
An explicit file that does not exist is an error. `Include` lines are expanded in place (globs,
relative paths from ~/.ssh for user files and /etc/ssh for system ones; inside a Host block
only when the block applies), at most 16 deep and 4 MiB in all.

Precedence, per value: the inventory (`address` is the name looked up, the alias; `user`,
`port`, `ssh.identity_file` and `ssh.proxy_jump` when set), then ssh_config (first obtained
value wins, as in OpenSSH), then the defaults (user root, port 22). Identity files: the
inventory's first, then ssh_config's that exist. A ProxyJump hop (`[user@]host[:port]`,
comma-separated, `ssh://` accepted) is resolved through ssh_config in turn (its own HostName,
Port, User, IdentityFile, ProxyJump), at most 8 hops, no loops. The known_hosts name of an
endpoint is HostKeyAlias when set, else the HostName, as `[HostName]:Port` when the port is
not 22: the name OpenSSH and paramiko look up. Pure: reads files, never connects.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.errors import InputError

ENV = "BENCH_SSH_CONFIG"
USER_CONFIG = "~/.ssh/config"
SYSTEM_CONFIG = "/etc/ssh/ssh_config"
DEFAULT_USER = "root"
DEFAULT_PORT = 22
MAX_TEXT = 4 << 20
MAX_INCLUDE_DEPTH = 16
MAX_HOPS = 8
_INCLUDE_RE = re.compile(r"^\s*include(?:\s*=\s*|\s+)(.+?)\s*$", re.IGNORECASE)
_HEADER_RE = re.compile(r"^\s*(host|match)(\s*=\s*|\s+)", re.IGNORECASE)
_NAME_RE = re.compile(r"^[^\s\x00-\x1f\x7f]{1,255}$")

Lookup = Callable[[str], Mapping[str, Any]]


class SSHConfigError(InputError):
    """An ssh_config file bench cannot use; names the file and the host or line."""


@dataclass(frozen=True)
class ConfigSource:
    """The files that apply (in order) and why: 'inventory ssh.config', '$BENCH_SSH_CONFIG'
    or 'default'."""
    files: tuple[str, ...]
    origin: str

    def label(self) -> str:
        return ", ".join(self.files) if self.files else "no ssh_config"


def config_source(inventory_config: str | None) -> ConfigSource:
    explicit, origin = inventory_config, "inventory ssh.config"
    if not explicit and os.environ.get(ENV):
        explicit, origin = os.environ[ENV], f"${ENV}"
    if explicit:
        if explicit.strip().lower() == "none":
            return ConfigSource((), origin)
        p = os.path.expanduser(explicit)
        if not os.path.isfile(p):
            raise SSHConfigError(f"{p} ({origin}): ssh config file does not exist",
                                 f"fix {origin}, or set it to 'none' to read no ssh_config")
        return ConfigSource((p,), origin)
    files = tuple(p for p in (os.path.expanduser(USER_CONFIG), SYSTEM_CONFIG)
                  if os.path.isfile(p))
    return ConfigSource(files, "default")


def _read(path: str, budget: list[int]) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(budget[0] + 1)
    except OSError as exc:
        raise SSHConfigError(f"{path}: cannot read ssh config: {exc.strerror}") from None
    budget[0] -= len(data)
    if budget[0] < 0:
        raise SSHConfigError(f"{path}: ssh config (with its Includes) is larger than "
                             f"{MAX_TEXT >> 20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SSHConfigError(f"{path}: ssh config is not UTF-8 (byte {exc.start})") from None


def _include_paths(spec: str, base: str) -> list[str]:
    out: list[str] = []
    for word in spec.split():
        word = word.strip('"')
        p = os.path.expanduser(word)
        if not os.path.isabs(p):
            p = os.path.join(base, p)
        out += sorted(x for x in glob.glob(p) if os.path.isfile(x))
    return out


def host_matches(patterns: str, alias: str) -> bool:
    """A `Host` line's patterns (blank-separated, `*`/`?` wildcards, `!` negation) against a
    name, as OpenSSH matches them (case-insensitive)."""
    hit = False
    for p in patterns.split():
        neg = p.startswith("!")
        rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c)
                     for c in (p[1:] if neg else p).strip('"'))
        if re.fullmatch(rx, alias, re.IGNORECASE):
            if neg:
                return False
            hit = True
    return hit


def _active(header: str, alias: str) -> bool:
    """Whether the block a line sits in applies to alias (Match blocks: assumed to apply;
    paramiko decides them later)."""
    m = _HEADER_RE.match(header)
    if m is None or m.group(1).lower() != "host":
        return True
    return host_matches(header[m.end():], alias)


def expand_includes(path: str, base: str, alias: str, depth: int = 0,
                    budget: list[int] | None = None) -> str:
    """The text of an ssh_config file, for looking up `alias`, with its Include lines replaced
    by the files they name. An Include inside a Host block is read only when that block
    applies to alias (as OpenSSH does); after an included text the enclosing Host/Match line is
    repeated, so the lines that follow stay in their block."""
    budget = budget if budget is not None else [MAX_TEXT]
    if depth > MAX_INCLUDE_DEPTH:
        raise SSHConfigError(f"{path}: Include nested more than {MAX_INCLUDE_DEPTH} deep "
                             "(a loop?)")
    out: list[str] = []
    header = ""
    for line in _read(path, budget).splitlines():
        m = _INCLUDE_RE.match(line)
        if m is None:
            if _HEADER_RE.match(line):
                header = line.strip()
            out.append(line)
            continue
        if header and not _active(header, alias):
            continue
        for inc in _include_paths(m.group(1), base):
            out.append(expand_includes(inc, base, alias, depth + 1, budget))
            out.append(header or "Host *")
    return "\n".join(out) + "\n"


def config_text(src: ConfigSource, alias: str) -> str:
    """Every file of src, Includes expanded for alias, one text (first obtained value wins
    across files as across blocks, so concatenation keeps OpenSSH's order)."""
    parts = []
    budget = [MAX_TEXT]
    for f in src.files:
        base = "/etc/ssh" if f == SYSTEM_CONFIG else os.path.expanduser("~/.ssh")
        parts.append(expand_includes(f, base, alias, 0, budget))
        parts.append("Host *\n")  # a file's last block does not run into the next file
    return "".join(parts)


# endpoints --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Endpoint:
    """One SSH server to connect to, resolved: where (hostname, port), as whom (user, identity
    files), through what (jumps, outermost first; or a proxy_command), and which known_hosts
    name its key is pinned under. `origins` says where user, port and hostname came from."""
    alias: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...] = ()
    jumps: tuple[Endpoint, ...] = ()
    proxy_command: str | None = None
    host_key_alias: str | None = None
    origins: Mapping[str, str] = field(default_factory=dict)

    @property
    def key_name(self) -> str:
        return self.host_key_alias or (self.hostname if self.port == 22
                                       else f"[{self.hostname}]:{self.port}")

    @property
    def where(self) -> str:
        via = f" (ssh_config alias {self.alias})" if self.alias != self.hostname else ""
        return f"{self.user}@{self.hostname}:{self.port}{via}"

    def describe(self) -> str:
        parts = [f"{k} {getattr(self, k)} from {v}" for k, v in self.origins.items()]
        if self.jumps:
            parts.append("via " + " -> ".join(j.where for j in self.jumps))
        if self.proxy_command:
            parts.append(f"ProxyCommand {self.proxy_command}")
        return f"{self.alias}: " + ", ".join(parts)


@dataclass(frozen=True)
class Hop:
    host: str
    user: str | None = None
    port: int | None = None


def _port(value: Any, what: str) -> int:
    text = str(value).strip()
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise SSHConfigError(f"{what}: Port {text[:40]!r} is not a port number (1-65535)")
    return int(text)


def _name(value: Any, key: str, what: str) -> str:
    text = str(value).strip()
    if not _NAME_RE.fullmatch(text):
        raise SSHConfigError(f"{what}: {key} {text[:60]!r} is not a usable name (empty, "
                             "blanks or control characters)")
    return text


def parse_jumps(spec: str, what: str) -> list[Hop]:
    """A ProxyJump value: comma-separated `[user@]host[:port]` (or ssh://...); 'none': []."""
    if spec.strip().lower() == "none":
        return []
    hops = []
    for raw in spec.split(","):
        s = raw.strip()
        s = s[len("ssh://"):] if s.startswith("ssh://") else s
        user, _, rest = s.rpartition("@")
        port: int | None = None
        if rest.startswith("["):
            host, _, tail = rest[1:].partition("]")
            if tail:
                port = _port(tail.lstrip(":"), f"{what}: ProxyJump {raw.strip()!r}")
        elif rest.count(":") == 1:
            host, _, p = rest.partition(":")
            port = _port(p, f"{what}: ProxyJump {raw.strip()!r}")
        else:
            host = rest
        hops.append(Hop(_name(host, "ProxyJump host", what),
                        _name(user, "ProxyJump user", what) if user else None, port))
    return hops


def resolve(alias: str, lookup: Lookup, *, source: ConfigSource, user: str | None = None,
            port: int | None = None, identity_file: str | None = None,
            proxy_jump: str | None = None, _chain: tuple[str, ...] = ()) -> Endpoint:
    """The endpoint for `alias` (the inventory address or a ProxyJump hop): values given here
    (the inventory's) win over `lookup(alias)` (ssh_config's), which win over the defaults."""
    what = f"{source.label()} (host {alias})"
    if alias in _chain or len(_chain) > MAX_HOPS:
        raise SSHConfigError(f"{what}: ProxyJump loops or is longer than {MAX_HOPS} hops: "
                             + " -> ".join((*_chain, alias)))
    cfg = lookup(alias)
    origins = {}
    hostname = _name(cfg.get("hostname") or alias, "HostName", what)
    origins["hostname"] = "ssh_config" if hostname != alias else "inventory"
    if user is None and cfg.get("user"):
        user, origins["user"] = _name(cfg["user"], "User", what), "ssh_config"
    else:
        origins["user"] = "inventory" if user is not None else "default"
    if port is None and cfg.get("port"):
        port, origins["port"] = _port(cfg["port"], what), "ssh_config"
    else:
        origins["port"] = "inventory" if port is not None else "default"
    ids = [os.path.expanduser(identity_file)] if identity_file else []
    ids += [os.path.expanduser(p) for p in cfg.get("identityfile") or []
            if os.path.isfile(os.path.expanduser(p)) and os.path.expanduser(p) not in ids]
    jump_spec = proxy_jump or cfg.get("proxyjump")
    jumps: list[Endpoint] = []
    for hop in parse_jumps(jump_spec, what) if jump_spec else []:
        ep = resolve(hop.host, lookup, source=source, user=hop.user, port=hop.port,
                     _chain=(*_chain, alias))
        jumps += [*ep.jumps, ep]
        if identity_file:  # the inventory's key is tried on the hops too (after theirs)
            jumps[-1] = _with_identity(jumps[-1], os.path.expanduser(identity_file))
    pc = cfg.get("proxycommand") if not jumps else None
    hka = cfg.get("hostkeyalias")
    return Endpoint(alias=alias, hostname=hostname, port=port or DEFAULT_PORT,
                    user=user or DEFAULT_USER, identity_files=tuple(ids), jumps=tuple(jumps),
                    proxy_command=str(pc) if pc and str(pc).lower() != "none" else None,
                    host_key_alias=_name(hka, "HostKeyAlias", what) if hka else None,
                    origins=origins)


def _with_identity(ep: Endpoint, path: str) -> Endpoint:
    if path in ep.identity_files:
        return ep
    return Endpoint(ep.alias, ep.hostname, ep.port, ep.user, (*ep.identity_files, path),
                    ep.jumps, ep.proxy_command, ep.host_key_alias, ep.origins)


