"""The inventory's host file (hosts/NAME.toml, see hosts/README.md) as a pydantic model: each key
spelled once, here; `bench schema inventory` prints its JSON Schema. Validation and the wording
of problems are bench.matrix.matrix_schema's: every problem of a file at once, each naming the file,
the dotted key and the allowed values. bench.hosts.inventory turns a valid file into a Host.
Pure: no I/O.
"""

import ipaddress
import math
import re
from pathlib import Path
from typing import Annotated, Iterator, Literal, get_args

import annotated_types as at
from pydantic import AfterValidator

from bench.errors import InventoryError
from bench.matrix.matrix_schema import (AbsPath, Problem, SchemaError, Size, Table, View, bad,
                                        doc, matches)

Transport = Literal["ssh", "local"]
RebootMethod = Literal["grub-reboot", "kexec", "command", "none"]
TRANSPORTS: tuple[str, ...] = get_args(Transport)
REBOOT_METHODS: tuple[str, ...] = get_args(RebootMethod)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_NAME_HINT = "use letters, digits, '.', '_' and '-' (at most 64)"


class HostFileError(SchemaError, InventoryError):
    """A host file with one or more problems, each on its own line (`problems` keeps them)."""


# bounds: what later steps rely on (a timeout paramiko and time.monotonic() can add, a size
# that is a machine's, a string that fits a path or a command line), refused here with the key
MAX_SECONDS = 86400.0           # a day: no connect, banner, auth, down or up wait is longer
MIN_MEMORY = 64 * 10 ** 6       # 64M: below this no kernel boots (a typo'd unit, "480" for "480G")
MAX_MEMORY = 10 ** 15           # 1000T: no host has more
MAX_PATH = 4096                 # PATH_MAX
MAX_TEXT = 256                  # a tag, a GRUB entry title, an expected kernel release
MAX_ARGV = 256                  # words of an argv (reboot.command, reboot.power_cycle)
MAX_TAGS = 64
_ADDRESS_HINT = ("the host name or IP the controller connects to, or an ~/.ssh/config Host "
                 "alias: letters, digits, '.', '-', '_' (an IPv6 address as it is, no brackets)")
HOST_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,252}$")
USER_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,63}$")


def _seconds(v: float) -> float:
    if not math.isfinite(v):
        raise bad(f"must be a finite number of seconds, got {v}")
    if v <= 0:
        raise bad(f"must be a positive number of seconds, got {v}")
    if v > MAX_SECONDS:
        raise bad(f"must be at most {MAX_SECONDS:.0f} seconds (a day), got {v}")
    return v


def text(max_len: int, *, empty: bool = False) -> AfterValidator:
    """A string of at most max_len characters with no control characters (NUL, newline, escape
    ...: nothing a path, a host name or an argv word needs), non-empty unless `empty`."""
    def check(v: str) -> str:
        if not v and not empty:
            raise bad("must not be empty")
        if len(v) > max_len:
            raise bad(f"is {len(v)} characters long (at most {max_len})")
        bad_char = next((c for c in v if ord(c) < 32 or ord(c) == 127), None)
        if bad_char is not None:
            raise bad(f"contains a control character ({bad_char!r})")
        return v
    return AfterValidator(check)


def _argv(v: list[str]) -> list[str]:
    if not v:
        raise bad("must be a non-empty list of strings (an argv; no shell is involved)")
    if len(v) > MAX_ARGV:
        raise bad(f"has {len(v)} words (at most {MAX_ARGV})")
    return v


def _address(v: str) -> str:
    """A host name, an IP address or an ssh_config alias: never user@host, host:port, a URL
    or an option (a leading '-')."""
    if not v.strip():
        raise bad("must not be empty", hint=_ADDRESS_HINT)
    if "://" in v:
        raise bad(f"{v!r} is a URL, not a host name", hint=_ADDRESS_HINT)
    user, at_sign, rest = v.rpartition("@")
    if at_sign:
        raise bad(f"{v!r} holds a user: the user goes in `user`",
                  hint=f"write address = {rest!r} and user = {user!r}")
    if v.startswith("["):
        raise bad(f"{v!r}: write the address without brackets; a port goes in `port`",
                  hint=_ADDRESS_HINT)
    if ":" in v:
        try:
            ipaddress.ip_address(v)
            return v                                # an IPv6 address (with a %zone or not)
        except ValueError:
            pass
        host, _, port = v.rpartition(":")
        if v.count(":") == 1 and port.isdigit():
            raise bad(f"{v!r} holds a port: the port goes in `port`",
                      hint=f"write address = {host!r} and port = {port}")
        raise bad(f"{v!r} is not a host name or IP address", hint=_ADDRESS_HINT)
    if not HOST_RE.fullmatch(v):
        raise bad(f"{v!r} is not a host name or IP address", hint=_ADDRESS_HINT)
    return v


def _user(v: str) -> str:
    if not v:
        raise bad("must not be empty", hint="the SSH user, e.g. root")
    if "@" in v or ":" in v:
        raise bad(f"{v!r} is not a user name: the host goes in `address`, the port in `port`")
    if not USER_RE.fullmatch(v):
        raise bad(f"{v!r} is not a user name",
                  hint="letters, digits, '.', '-', '_' (at most 64), not starting with '-' or '.'")
    return v


def _proxy_jump(v: str) -> str:
    for hop in v.split(","):
        h = hop.strip()
        if not h or h.startswith("-") or any(c.isspace() for c in h):
            raise bad(f"{v!r} is not a jump host list",
                      hint="[user@]host[:port], several separated by commas, as ssh -J takes it")
    return v


def _memory(v: int) -> int:
    if v < MIN_MEMORY:
        raise bad(f"{v} bytes is below {MIN_MEMORY // 10 ** 6}M (a size without its unit?)",
                  hint='write the unit: "480G" (10^9 bytes) or "448Gi" (2^30 bytes)')
    if v > MAX_MEMORY:
        raise bad(f"{v} bytes is above {MAX_MEMORY // 10 ** 12}T: no host has that much")
    return v


def _host_dir(v: str) -> str:
    if v.rstrip("/") == "":
        raise bad("must not be the root directory")
    if ".." in v.split("/"):
        raise bad(f"{v!r} has a '..' component", hint="write the directory as it is")
    return v


def _tags(v: dict[str, str]) -> dict[str, str]:
    if len(v) > MAX_TAGS:
        raise bad(f"has {len(v)} tags (at most {MAX_TAGS})")
    return v


def _page_size(v: int) -> int:
    if not 1024 <= v <= 1 << 20 or v & (v - 1):
        raise bad(f"must be a power of two from 1024 to 1048576 bytes, got {v}",
                  hint="the base page size (getconf PAGESIZE): 4096, 16384 or 65536")
    return v


Seconds = Annotated[float, AfterValidator(_seconds)]
Word = Annotated[str, text(MAX_PATH)]
Argv = Annotated[list[Word], AfterValidator(_argv)]
FilePath = Annotated[str, text(MAX_PATH)]
Label = Annotated[str, text(MAX_TEXT)]
Memory = Annotated[Size, AfterValidator(_memory)]
HostDir = Annotated[AbsPath, text(MAX_PATH), AfterValidator(_host_dir)]


class SSHTable(Table):
    """How the controller connects (~/.ssh/config is honoured as well)."""
    identity_file: FilePath | None = doc("private key file", None)
    proxy_jump: Annotated[str, text(MAX_PATH), AfterValidator(_proxy_jump)] | None = doc(
        "jump host, as ssh -J takes it", None)
    known_hosts: FilePath | None = doc("known_hosts file (default ~/.ssh/known_hosts)", None)
    config: FilePath | None = doc("ssh config file (default ~/.ssh/config when it exists)", None)
    connect_timeout: Seconds = doc("seconds", 10.0)
    banner_timeout: Seconds = doc("seconds", 15.0)
    auth_timeout: Seconds = doc("seconds", 15.0)


class MemoryTable(Table):
    """The host's memory, as bench may shape it."""
    total: Memory | None = doc("the host's memory (0.5mem capacities are fractions of it): "
                             "\"480G\" (480 x 10^9 bytes, the paper's GB) or \"448Gi\" (binary, "
                             "as MemTotal counts)", None)
    floor: Memory | None = doc("the lowest mem= bench will ever boot the host with (a size, "
                             "like total; bench writes mem= as exact bytes)", None)

    @staticmethod
    def rules(v: View, ctx: dict) -> Iterator[Problem]:
        if v.ok("total", "floor") and None not in (v.total, v.floor) and v.floor > v.total:
            yield Problem(("floor",), "is above memory.total")


class RebootTable(Table):
    """Whether and how bench reboots the host (memboot cells, MGLRU at boot)."""
    allowed: bool = doc("bench may reboot this host", False)
    method: RebootMethod = doc("how bench boots a new kernel command line", "none")
    grub_entry: Label | None = doc("the GRUB menu entry bench rewrites (method grub-reboot)",
                                   None)
    kexec_kernel: FilePath | None = doc("kernel image for kexec (default: the running one)",
                                        None)
    kexec_initrd: FilePath | None = doc("initrd for kexec (default: the running one)", None)
    command: Argv | None = doc('argv run on the host (method command); "{cmdline}" is replaced '
                              "by the new command line", None)
    down_timeout: Seconds = doc("seconds for the host to go down", 300.0)
    up_timeout: Seconds = doc("seconds for the host to come back", 900.0)
    power_cycle: Argv | None = doc("argv run on the controller when the host does not come "
                                   "back (BMC)", None)

    @staticmethod
    def rules(v: View, ctx: dict) -> Iterator[Problem]:
        if v.ok("allowed", "method") and v.allowed and v.method == "none":
            yield Problem(("method",), "reboot.allowed is true but no method is given",
                          REBOOT_METHODS[:-1])
        if v.ok("method", "command") and v.method == "command" and v.command is None:
            yield Problem(("command",), "missing (required when reboot.method = 'command')",
                          hint='an argv list run on the host; "{cmdline}" is replaced by the '
                               "new command line")
        if v.ok("method", "grub_entry") and v.method == "grub-reboot" and v.grub_entry is None:
            yield Problem(("grub_entry",), "missing (required when reboot.method = "
                          "'grub-reboot')", hint="the GRUB menu entry (title or id) bench "
                                                 "writes the new command line into")


class PathsTable(Table):
    """Where bench keeps its files on the host."""
    pool_dir: HostDir = doc("the expert pool", "/var/lib/bench/pool")
    work_dir: HostDir = doc("the agent, runs and bundles", "/var/lib/bench")


class ExpectTable(Table):
    """Facts the probe should find (bench hosts probe)."""
    arch: Label | None = doc("uname -m, e.g. aarch64", None)
    page_size: Annotated[int, AfterValidator(_page_size)] | None = doc("bytes, e.g. 65536",
                                                                        None)
    kernel: Label | None = doc("kernel release prefix, e.g. 6.8", None)


class HostFile(Table):
    """A host of the inventory: NAME.toml in --hosts-dir, $BENCH_HOSTS, ./hosts or
    $XDG_CONFIG_HOME/bench/hosts (the first given or found)."""
    name: Annotated[str, matches(NAME_RE, "is not a valid host name", _NAME_HINT)] | None = doc(
        "the host's name: equals the file's stem (default: the stem)", None,
        json_schema_extra={"pattern": NAME_RE.pattern})
    address: Annotated[str, AfterValidator(_address)] | None = doc(
        "host name, IP or ssh_config alias the controller connects to (required for ssh); never "
        "user@host or host:port (`user`, `port`)", None)
    port: Annotated[int, at.Ge(1), at.Le(65535)] | None = doc(
        "SSH port (default: ssh_config's Port for the address, else 22)", None)
    user: Annotated[str, AfterValidator(_user)] | None = doc(
        "SSH user (default: ssh_config's User for the address, else root)", None)
    transport: Transport = doc("ssh, or local: the controller's own machine")
    tags: Annotated[dict[Label, Word], AfterValidator(_tags)] = doc(
        'free labels matrices select on: machine = "A", nvme = ...', {})
    ssh: SSHTable = doc("SSH options", default_factory=SSHTable.model_construct)
    memory: MemoryTable = doc("memory total and floor", default_factory=MemoryTable.model_construct)
    reboot: RebootTable = doc("reboots", default_factory=RebootTable.model_construct)
    paths: PathsTable = doc("directories on the host", default_factory=PathsTable.model_construct)
    expect: ExpectTable = doc("facts the probe checks", default_factory=ExpectTable.model_construct)

    @staticmethod
    def rules(v: View, ctx: dict) -> Iterator[Problem]:
        path: Path = ctx["path"]
        if not v.given("name") and not NAME_RE.fullmatch(path.stem):
            yield Problem(("name",), f"{path.stem!r} (the file's stem) is not a valid host name",
                          hint=_NAME_HINT)
        if v.ok("name") and v.name is not None and v.name != path.stem:
            yield Problem(("name",), f"{v.name!r} differs from the file name {path.name!r}",
                          hint=f"rename the file to {v.name}.toml or set name = {path.stem!r}")
        if v.ok("transport") and v.transport == "ssh" and not v.given("address"):
            yield Problem(("address",), "missing (required for transport ssh)",
                          hint="the host name or IP the controller connects to")
        if (v.ok("transport", "reboot") and v.transport == "local" and v.reboot.allowed):
            yield Problem(("reboot", "allowed"), "a local host (the controller's own machine) "
                          "is never rebooted", hint="set reboot.allowed = false")
