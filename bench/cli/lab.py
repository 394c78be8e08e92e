"""`bench lab ...`: test fleets on this machine: the netns lab (real sshd in network namespaces),
the vm lab (qemu guests with real reboots) and the twin lab (aarch64 GH200 twins: UEFI, GRUB,
systemd, 16 KiB pages, a simulated BMC)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer

from bench.errors import InputError
from bench.results import fleet_views, views

lab_app = typer.Typer(no_args_is_help=True, help="Test fleets on this machine: network "
                                                 "namespaces running real sshd, or qemu guests "
                                                 "with real reboots (root).")

KindOpt = Annotated[Literal["netns", "vm", "twin"], typer.Option(
    "--kind", help="Lab kind: netns, vm (x86 qemu guests) or twin (aarch64 GH200 twins, "
    "twin-a and twin-b).")]
StateOpt = Annotated[Optional[Path], typer.Option(
    "--state-dir", help="Lab state directory (default $BENCH_LAB_DIR or /run/bench-lab; twin: "
    "$BENCH_TWIN_DIR or /run/bench-lab-twin).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def _lab(kind: str, state_dir: Path | None):
    from bench.lab.netns import Lab
    if kind not in ("netns", "vm", "twin"):
        raise InputError(f"--kind {kind!r} is not available", "allowed values: netns, vm, twin")
    if kind in ("vm", "twin"):
        return None
    return Lab(state_dir)


def _vm_state_dir(state_dir: Path | None, kind: str = "vm") -> None:
    if state_dir is not None:
        os.environ["BENCH_TWIN_DIR" if kind == "twin" else "BENCH_LAB_DIR"] = str(state_dir)


def _vm_status(json_out: bool, kind: str = "vm") -> None:
    if kind == "twin":
        from bench.lab.twin import lab_status
    else:
        from bench.lab.vm import lab_status
    rows = lab_status()
    if json_out:
        views.emit_json(rows)
    else:
        views.print_table(fleet_views.vm_lab_table(rows))


def _twin_up(state_dir: Path | None, count: int, json_out: bool, t0: float) -> None:
    from bench.lab.twin import NAMES
    from bench.lab.twin import lab_up as twin_up
    if count not in (2, len(NAMES)):
        raise InputError(f"--count {count}: the twin lab is always {len(NAMES)} hosts "
                         f"({', '.join(NAMES)})")
    _vm_state_dir(state_dir, "twin")
    st = twin_up(log=views.say)
    views.say(f"up in {time.monotonic() - t0:.0f}s; inventory in {st['hosts_dir']}")
    _vm_status(json_out, "twin")


@lab_app.command("up")
def lab_up(kind: KindOpt = "netns",
           count: Annotated[int, typer.Option("--count", help="Number of hosts.")] = 2,
           state_dir: StateOpt = None,
           prefix: Annotated[str, typer.Option("--prefix", help="Short prefix of namespace and "
                                               "link names.")] = "blab",
           subnet: Annotated[str, typer.Option("--subnet", help="Lab /24 inside 10.200.0.0/16, "
                                               "as 10.200.N.")] = "10.200.0",
           json_out: JsonOpt = False) -> None:
    """Bring up COUNT hosts and write their inventory (<state-dir>/hosts) and known_hosts."""

    t0 = time.monotonic()
    lab = _lab(kind, state_dir)
    if kind == "twin":
        _twin_up(state_dir, count, json_out, t0)
        return
    if lab is None:
        from bench.lab.vm import lab_up as vm_up
        _vm_state_dir(state_dir)
        st = vm_up(count, log=views.say)
        views.say(f"up in {time.monotonic() - t0:.0f}s; inventory in {st['hosts_dir']}")
        _vm_status(json_out)
        return
    lab.up(count, prefix=prefix, subnet=subnet)
    status = dict(lab.status(), seconds=round(time.monotonic() - t0, 3))
    if json_out:
        views.emit_json(status)
    else:
        views.print_table(fleet_views.lab_table(status))
        views.say(f"up in {status['seconds']}s; try: bench hosts probe --hosts-dir "
                  f"{status['hosts_dir']}")


@lab_app.command("down")
def lab_down(kind: KindOpt = "netns", state_dir: StateOpt = None,
             json_out: JsonOpt = False) -> None:
    """Tear down exactly what `lab up` made (processes, namespaces, links, route, files)."""
    lab = _lab(kind, state_dir)
    if kind == "twin":
        from bench.lab.twin import lab_down as twin_down
        _vm_state_dir(state_dir, "twin")
        removed = twin_down(log=views.say)
    elif lab is None:
        from bench.lab.vm import lab_down as vm_down
        _vm_state_dir(state_dir)
        removed = vm_down(log=views.say)
    else:
        removed = lab.down()
    if json_out:
        views.emit_json({"removed": removed})
    else:
        views.say("\n".join(removed) if removed else "no lab to tear down")


@lab_app.command("status")
def lab_status(kind: KindOpt = "netns", state_dir: StateOpt = None,
               json_out: JsonOpt = False) -> None:
    """Show the lab's hosts, their sshd and boot ids."""
    lab = _lab(kind, state_dir)
    if lab is None:
        _vm_state_dir(state_dir, kind)
        _vm_status(json_out, kind)
        return
    status = lab.status()
    if json_out:
        views.emit_json(status)
    else:
        views.print_table(fleet_views.lab_table(status))


def register(app: typer.Typer) -> None:
    app.add_typer(lab_app, name="lab")
