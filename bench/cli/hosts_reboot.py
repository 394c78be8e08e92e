"""`bench hosts reboot|restore|mglru`: proven reboots for mem= and MGLRU, and runtime toggles."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from bench.cli.hosts import hosts_app
from bench.cli.options import SECONDS_MAX, HostNameArg, HostsDirOpt, JsonOpt, number
from bench.errors import InputError
from bench.results import views
from bench.results.views import compose, styled

HostArg = HostNameArg
ForceOpt = Annotated[bool, typer.Option(
    "--force", help="Go ahead even when a run is in progress on the host or another controller "
                    "holds it (a campaign owns its hosts from start to end): says which run it "
                    "kills and whose campaign it disturbs. Without it such a host is refused, "
                    "naming the run or the campaign and its controller.")]
TimeoutOpt = Annotated[Optional[float], typer.Option(
    "--up-timeout", help="Seconds to wait for SSH with a new boot_id (default: inventory).",
    callback=number("--up-timeout", SECONDS_MAX, unit=" s", example="600"))]


def _host_and_transport(hosts_dir: Path | None, name: str):
    from bench.hosts.inventory import load_inventory, select
    from bench.hosts.ssh import transport_for
    host = select(load_inventory(hosts_dir), [name])[0]
    return host, transport_for(host)


def _show(result, json_out: bool) -> None:
    if json_out:
        views.emit_json(result.as_dict())
    elif result.ok:
        views.say(compose(("proven", "green"), f": {result.host} booted {result.cmdline!r} "
                          f"(boot_id {result.after.boot_id}, MemTotal {result.after.memtotal}, "
                          f"{result.seconds_to_ssh:.0f}s to SSH)"))
    else:
        views.say(compose(("quarantined", "red"), f": {result.host}: {result.reason}"))
    if not result.ok:
        raise typer.Exit(1)


def _log():
    return lambda ev: views.say(styled(ev.line(), "dim"))


def _say(line: str) -> None:
    views.say(styled(line, "yellow"))


def _guarded(t, h, what: str, force: bool, fn, *, kills: bool = True):
    """fn() under the host lock, refused (one line naming it) while a run is in progress on
    the host or another controller holds it (a campaign: named with its controller's host
    and pid) unless force (then the run it kills and the campaign it disturbs are named
    first, and fn goes ahead without the lock another holds)."""
    from bench.hosts.lock import release_quietly, take_for
    lock = take_for(t, h, what, force=force, say=_say, kills=kills)
    try:
        return fn()
    finally:
        release_quietly(lock)


@hosts_app.command("reboot")
def hosts_reboot(
    host: HostArg,
    mem: Annotated[Optional[str], typer.Option(
        help="mem= for the next boot, as bench writes sizes (93G = 93 x 10^9 bytes, 102Gi "
             "binary; written on the command line as exact bytes), or none.")] = None,
    lru_gen: Annotated[Optional[Literal["on", "off"]], typer.Option(
        help="MGLRU at boot: on or off (applied early at boot by bench.lru_gen=).")] = None,
    up_timeout: TimeoutOpt = None, force: ForceOpt = False,
    hosts_dir: HostsDirOpt = None, json_out: JsonOpt = False,
) -> None:
    """Reboot a rebootable host with a new command line and prove it: new boot_id, mem= in
    /proc/cmdline, MemTotal in range, MGLRU mask. Exit 1 if it ends quarantined. Refused
    while a run is in progress on the host or a campaign owns it, even between its runs
    (--force goes ahead, naming the run it kills and the campaign it disturbs)."""
    from bench.hosts.reboot import reboot_host
    if mem is not None and mem.strip().lower() not in ("", "none"):
        from bench.cli.options import size_option
        size_option(mem, "--mem")           # mem=93 is 93 bytes to the kernel: refused here
    h, t = _host_and_transport(hosts_dir, host)
    try:
        _show(_guarded(t, h, "reboot", force, lambda: reboot_host(
            t, h, mem, lru_gen, _log(), up_timeout=up_timeout)), json_out)
    finally:
        t.close()


@hosts_app.command("restore")
def hosts_restore(host: HostArg, up_timeout: TimeoutOpt = None, force: ForceOpt = False,
                  hosts_dir: HostsDirOpt = None, json_out: JsonOpt = False) -> None:
    """Boot the host's default command line again and prove it."""
    from bench.hosts.reboot import restore_host
    h, t = _host_and_transport(hosts_dir, host)
    try:
        _show(_guarded(t, h, "restore", force, lambda: restore_host(
            t, h, _log(), up_timeout=up_timeout)), json_out)
    finally:
        t.close()


@hosts_app.command("mglru")
def hosts_mglru(host: HostArg,
                state: Annotated[Literal["on", "off"], typer.Argument(help="MGLRU at run time.")],
                force: ForceOpt = False, hosts_dir: HostsDirOpt = None,
                json_out: JsonOpt = False) -> None:
    """Toggle MGLRU at run time (recorded as a runtime toggle) and read it back."""
    from bench.hosts.reboot import set_mglru_runtime
    if state not in ("on", "off"):
        raise InputError(f"MGLRU state {state!r}", hint="allowed values: on, off")
    h, t = _host_and_transport(hosts_dir, host)
    try:
        res = _guarded(t, h, f"toggle MGLRU {state}", force,
                       lambda: set_mglru_runtime(t, state == "on", _log()), kills=False)
    finally:
        t.close()
    if json_out:
        views.emit_json(res)
    else:
        views.say(f"{host}: MGLRU {state} at run time: {res}")


def register(app: typer.Typer) -> None:
    """Commands join the `hosts` group that bench.cli.hosts registers."""
