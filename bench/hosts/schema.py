"""The inventory's host file (hosts/NAME.toml, see hosts/README.md) as a pydantic model: each key
spelled once, here; `bench schema inventory` prints its JSON Schema. Validation and the wording
of problems are bench.matrix.schema's: every problem of a file at once, each naming the file,
the dotted key and the allowed values. bench.hosts.inventory turns a valid file into a Host.
Pure: no I/O.
"""

import re
from pathlib import Path
from typing import Annotated, Iterator, Literal, get_args

import annotated_types as at
from pydantic import AfterValidator

from bench.errors import InventoryError
from bench.matrix.schema import AbsPath, Problem, SchemaError, Size, Table, View, bad, doc, matches

Transport = Literal["ssh", "local"]
RebootMethod = Literal["grub-reboot", "kexec", "command", "none"]
TRANSPORTS: tuple[str, ...] = get_args(Transport)
REBOOT_METHODS: tuple[str, ...] = get_args(RebootMethod)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_NAME_HINT = "use letters, digits, '.', '_' and '-' (at most 64)"


class HostFileError(SchemaError, InventoryError):
    """A host file with one or more problems, each on its own line (`problems` keeps them)."""


def _seconds(v: float) -> float:
    if v <= 0:
        raise bad(f"must be a positive number of seconds, got {v}")
    return v


def _argv(v: list[str]) -> list[str]:
    if not v:
        raise bad("must be a non-empty list of strings (an argv; no shell is involved)")
    return v


Seconds = Annotated[float, AfterValidator(_seconds)]
Argv = Annotated[list[str], AfterValidator(_argv)]


class SSHTable(Table):
    """How the controller connects (~/.ssh/config is honoured as well)."""
    identity_file: str | None = doc("private key file", None)
    proxy_jump: str | None = doc("jump host, as ssh -J takes it", None)
    known_hosts: str | None = doc("known_hosts file (default ~/.ssh/known_hosts)", None)
    config: str | None = doc("ssh config file (default ~/.ssh/config when it exists)", None)
    connect_timeout: Seconds = doc("seconds", 10.0)
    banner_timeout: Seconds = doc("seconds", 15.0)
    auth_timeout: Seconds = doc("seconds", 15.0)


class MemoryTable(Table):
    """The host's memory, as bench may shape it."""
    total: Size | None = doc("the host's memory (0.5mem capacities are fractions of it): "
                             "\"480G\" (480 x 10^9 bytes, the paper's GB) or \"448Gi\" (binary, "
                             "as MemTotal counts)", None)
    floor: Size | None = doc("the lowest mem= bench will ever boot the host with (a size, "
                             "like total; bench writes mem= as exact bytes)", None)

    @staticmethod
    def rules(v: View, ctx: dict) -> Iterator[Problem]:
        if v.ok("total", "floor") and None not in (v.total, v.floor) and v.floor > v.total:
            yield Problem(("floor",), "is above memory.total")


class RebootTable(Table):
    """Whether and how bench reboots the host (memboot cells, MGLRU at boot)."""
    allowed: bool = doc("bench may reboot this host", False)
    method: RebootMethod = doc("how bench boots a new kernel command line", "none")
    grub_entry: str | None = doc("the GRUB menu entry bench rewrites (method grub-reboot)", None)
    kexec_kernel: str | None = doc("kernel image for kexec (default: the running one)", None)
    kexec_initrd: str | None = doc("initrd for kexec (default: the running one)", None)
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
    pool_dir: AbsPath = doc("the expert pool", "/var/lib/bench/pool")
    work_dir: AbsPath = doc("the agent, runs and bundles", "/var/lib/bench")


class ExpectTable(Table):
    """Facts the probe should find (bench hosts probe)."""
    arch: str | None = doc("uname -m, e.g. aarch64", None)
    page_size: int | None = doc("bytes, e.g. 65536", None)
    kernel: str | None = doc("kernel release prefix, e.g. 6.8", None)


class HostFile(Table):
    """A host of the inventory: hosts/NAME.toml (or $BENCH_HOSTS, --hosts-dir)."""
    name: Annotated[str, matches(NAME_RE, "is not a valid host name", _NAME_HINT)] | None = doc(
        "the host's name: equals the file's stem (default: the stem)", None,
        json_schema_extra={"pattern": NAME_RE.pattern})
    address: str | None = doc("host name, IP or ssh_config alias the controller connects to "
                              "(required for ssh)", None)
    port: Annotated[int, at.Ge(1), at.Le(65535)] | None = doc(
        "SSH port (default: ssh_config's Port for the address, else 22)", None)
    user: str | None = doc("SSH user (default: ssh_config's User for the address, else root)",
                           None)
    transport: Transport = doc("ssh, or local: the controller's own machine")
    tags: dict[str, str] = doc('free labels matrices select on: machine = "A", nvme = ...', {})
    ssh: SSHTable = doc("SSH options", default_factory=SSHTable.model_construct)
    memory: MemoryTable = doc("memory total and floor", default_factory=MemoryTable.model_construct)
    reboot: RebootTable = doc("reboots", default_factory=RebootTable.model_construct)
    paths: PathsTable = doc("directories on the host", default_factory=PathsTable.model_construct)
    expect: ExpectTable = doc("facts the probe checks", default_factory=ExpectTable.model_construct)

    @staticmethod
    def rules(v: View, ctx: dict) -> Iterator[Problem]:
        path: Path = ctx["path"]
        if not v.given("name") and not NAME_RE.match(path.stem):
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
