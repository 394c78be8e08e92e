"""The GH200 twin lab (test tier 4): two aarch64 Debian guests, twin-a and twin-b, under
qemu-system-aarch64 (TCG, machine virt, -cpu max) booting UEFI firmware (AAVMF, a vars pflash
per guest), GRUB and the 16 KiB-page 6.12 kernel with systemd as PID 1 (cgroup v2, MGLRU), each
with a virtio pool disk mounted at /srv/bench and a simulated BMC (OpenIPMI `ipmi_sim`,
lanplus on a local UDP port, power through bench.lab.twin_bmc).

Image: bench.lab.twin_image (cached). Guest state lives in $BENCH_TWIN_DIR (default
/run/bench-lab-twin): per guest a qcow2 overlay, its vars, pool disk, console log, the BMC's
lan.conf and password file. `lab_up()` starts each BMC and powers the guest on through it
(`ipmitool chassis power on`), waits for SSH with a boot_id, and writes inventory files
<state>/hosts/twin-a.toml, twin-b.toml in the shape of hosts/gh200-a.toml (grub-reboot, an
ipmitool power_cycle, [expect] arch aarch64, page size 16384). `lab_down()` stops exactly the
qemu and ipmi_sim processes of the state file (PIDs checked against their command lines).
`python3 -m bench.lab.twin up|down|status|build|power-cycle NAME`."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.errors import BenchError, CommandFailed, HostError, InputError
from bench.hosts.inventory import Host, RebootSpec, SSHOptions, render_host_toml
from bench.lab import twin_bmc
from bench.lab.twin_image import FIRMWARE_CODE, FIRMWARE_VARS, build_image, missing_capabilities
from bench.lab.qemu_lab import (keep_consoles, lab_main, load_state, remove_runtime_files,
                                save_state, shared_commands, ssh_look, write_known_hosts)
from bench.lab.vm import transport_for, wait_for_boot
from bench.lab.vm_image import (cache_dir, free_port, is_our_process, lab_key, run_cmd, say,
                                stop_process)

NAMES = ("twin-a", "twin-b")
GUEST_MEM_MIB = 1536
SMP = 2
# Measured (twin-b, 6.12 16k kernel, systemd reaches "running"): mem=320Mi boots with MemTotal
# 278.6 MB and MemAvailable 173 MB; 380M 211.6 MB, 700M 462.6 MB available. Lower is untested.
MEM_FLOOR = 320 << 20
POOL_DISK_BYTES = 4 << 30
GRUB_ENTRY = "bench-memboot"
BMC_USER = "bench"
QEMU_START_S = 120.0            # power on -> qemu daemonized (its devices up)
EXPECT = {"arch": "aarch64", "page_size": 16384, "kernel": "6.12"}


def state_dir() -> Path:
    return Path(os.environ.get("BENCH_TWIN_DIR", "/run/bench-lab-twin"))


def _load_state() -> dict:
    return load_state(state_dir())


def _save_state(st: dict) -> None:
    save_state(state_dir(), st, private=True)     # the guests' BMC passwords are in it


def qemu_argv(g: dict) -> list[str]:
    """The guest's qemu: TCG with multi-threaded translation, -cpu max with the cheap
    (implementation-defined) pointer-authentication hash, UEFI from pflash, its disks, user-mode
    net with 127.0.0.1:PORT -> 22, serial console appended to a file, daemonized."""
    return ["qemu-system-aarch64", "-name", f"bench-twin-{g['name']}",
            "-machine", "virt,gic-version=3", "-accel", "tcg,thread=multi,tb-size=256",
            "-cpu", "max,pauth-impdef=on", "-smp", str(SMP), "-m", str(g["mem_mib"]),
            "-nodefaults", "-display", "none", "-monitor", "none",
            "-chardev", f"file,id=con0,path={g['console']},append=on", "-serial", "chardev:con0",
            "-drive", f"if=pflash,format=raw,readonly=on,file={FIRMWARE_CODE}",
            "-drive", f"if=pflash,format=raw,file={g['vars']}",
            "-drive", f"file={g['overlay']},if=virtio,format=qcow2",
            "-drive", f"file={g['pool_disk']},if=virtio,format=raw,cache=none,aio=threads",
            "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{g['port']}-:22",
            "-device", "virtio-net-pci,netdev=n0", "-device", "virtio-rng-pci",
            "-smbios", f"type=1,serial={g['name']}",
            "-pidfile", g["pidfile"], "-D", g["qemu_log"], "-daemonize"]


def _lan_conf(g: dict) -> str:
    """ipmi_sim's configuration (ipmi_lan(5)): one BMC, lanplus on 127.0.0.1:PORT, one admin
    user, chassis control through bench.lab.twin_bmc with the guest's directory."""
    chassis = f"{sys.executable} -m bench.lab.twin_bmc {g['dir']}"
    return (f'name "bench-{g["name"]}"\n'
            "set_working_mc 0x20\n"
            "  startlan 1\n"
            f"    addr 127.0.0.1 {g['bmc_port']}\n"
            "    priv_limit admin\n"
            "    allowed_auths_callback none md2 md5 straight\n"
            "    allowed_auths_user none md2 md5 straight\n"
            "    allowed_auths_operator none md2 md5 straight\n"
            "    allowed_auths_admin none md2 md5 straight\n"
            f"    guid {secrets.token_hex(16)}\n"
            "  endlan\n"
            f'  chassis_control "{chassis}"\n'
            f'  user 2 true "{BMC_USER}" "{g["bmc_password"]}" admin 10 none md2 md5 straight\n')


_BMC_EMU = ("mc_setbmc 0x20\n"
            "mc_add 0x20 0 no-device-sdrs 0x23 9 8 0x9f 0x1291 0xf02 persist_sdr\n"
            "sel_enable 0x20 1000 0x0a\n"
            "mc_enable 0x20\n")


def ipmitool_argv(g: dict, *command: str) -> list[str]:
    """ipmitool against the guest's BMC (lanplus, cipher suite 3 named so ipmitool does not
    wait on the cipher-suite query ipmi_sim leaves unanswered; password from a file)."""
    return ["ipmitool", "-I", "lanplus", "-C", "3", "-H", "127.0.0.1", "-p", str(g["bmc_port"]),
            "-U", BMC_USER, "-f", g["bmc_password_file"], *command]


def _new_guest(name: str, sd: Path, mem_mib: int, key: Path, kh: Path, disk: str) -> dict:
    """A guest's state and files: overlay of the image, UEFI vars, fresh ext4 pool disk, the
    BMC's configuration and password, guest.json for the BMC's power program."""
    gd = sd / name
    shutil.rmtree(gd, ignore_errors=True)
    gd.mkdir(parents=True)
    g: dict[str, Any] = {"name": name, "dir": str(gd), "port": free_port(),
         "bmc_port": free_port(socket.SOCK_DGRAM), "address": "127.0.0.1", "user": "root",
         "mem_mib": mem_mib, "overlay": str(gd / "root.qcow2"), "vars": str(gd / "vars.fd"),
         "pool_disk": str(gd / "pool.img"), "console": str(gd / "console.log"),
         "qemu_log": str(gd / "qemu.log"), "pidfile": str(gd / "qemu.pid"),
         "bmc_conf": str(gd / "lan.conf"), "bmc_log": str(gd / "bmc.log"),
         "bmc_password": secrets.token_hex(8), "bmc_password_file": str(gd / "bmc.pass"),
         "identity_file": str(key), "known_hosts": str(kh)}
    run_cmd(["qemu-img", "create", "-q", "-f", "qcow2", "-b", disk, "-F", "raw", g["overlay"]])
    shutil.copyfile(FIRMWARE_VARS, g["vars"])
    with open(g["pool_disk"], "wb") as fh:
        fh.truncate(POOL_DISK_BYTES)
    run_cmd(["mkfs.ext4", "-q", "-F", "-L", "benchpool", "-E",
             "lazy_itable_init=0,lazy_journal_init=0", g["pool_disk"]])
    g["qemu_argv"] = qemu_argv(g)
    for path, text in ((Path(g["bmc_password_file"]), g["bmc_password"]),   # hold the password
                       (Path(g["bmc_conf"]), _lan_conf(g)),
                       (gd / twin_bmc.GUEST_FILE, json.dumps(g, indent=2) + "\n")):
        path.touch(mode=0o600)
        path.write_text(text)
    (gd / "bmc.emu").write_text(_BMC_EMU)
    (gd / "bmc-state").mkdir()
    Path(g["console"]).write_text("")
    return g


def _write_inventory(g: dict, hosts_dir: Path) -> Path:
    """The guest as bench sees a GH200: grub-reboot with the bench-memboot entry, the BMC's
    ipmitool power cycle, [expect] aarch64 with 16 KiB pages."""
    h = Host(name=g["name"], address="127.0.0.1", transport="ssh", port=g["port"], user="root",
             tags={"lab": "twin", "machine": g["name"][-1].upper(), "accel": "tcg"},
             ssh=SSHOptions(identity_file=g["identity_file"], known_hosts=g["known_hosts"],
                            connect_timeout=10.0, banner_timeout=60.0, auth_timeout=60.0),
             mem_total=g["mem_mib"] << 20, mem_floor=MEM_FLOOR,
             reboot=RebootSpec(allowed=True, method="grub-reboot", grub_entry=GRUB_ENTRY,
                               down_timeout=300.0, up_timeout=900.0,
                               power_cycle=tuple(ipmitool_argv(g, "chassis", "power",
                                                               "cycle"))),
             pool_dir="/srv/bench/pool", work_dir="/var/lib/bench", expect=dict(EXPECT))
    text = ("# written by bench.lab.twin (qemu TCG aarch64 guest, UEFI + GRUB, simulated BMC);"
            " the pool is on vdb, mounted at /srv/bench\n" + render_host_toml(h))
    hosts_dir.mkdir(parents=True, exist_ok=True)
    p = hosts_dir / f"{h.name}.toml"
    p.write_text(text)
    return p


def _start_bmc(g: dict) -> int:
    """Start the guest's ipmi_sim (its own session, so it outlives this process) and wait
    until it answers `chassis power status`."""
    gd = Path(g["dir"])
    with open(g["bmc_log"], "a") as out:
        p = subprocess.Popen(["ipmi_sim", "-n", "-c", g["bmc_conf"], "-f", str(gd / "bmc.emu"),
                              "-s", str(gd / "bmc-state")], stdin=subprocess.DEVNULL,
                             stdout=out, stderr=out, start_new_session=True)
    g["bmc_pid"] = p.pid
    deadline = time.monotonic() + 30
    while True:
        try:
            run_cmd(ipmitool_argv(g, "chassis", "power", "status"), timeout=15)
            return p.pid
        except BenchError:
            if p.poll() is not None or time.monotonic() > deadline:
                raise HostError(g["name"], f"its BMC (ipmi_sim pid {p.pid}) does not answer; "
                                f"see {g['bmc_log']}") from None
            time.sleep(0.3)


def _alive(g: dict) -> list[str]:
    out = []
    if twin_bmc.qemu_pid(g) is not None:
        out.append("qemu")
    if g.get("bmc_pid") and is_our_process(g["bmc_pid"], "ipmi_sim", g["bmc_conf"]):
        out.append("ipmi_sim")
    return out


def lab_up(*, mem_mib: int = GUEST_MEM_MIB, boot_timeout: float = 900.0,
           log: Callable[[str], None] | None = None) -> dict:
    """Build/find the image, bring up twin-a and twin-b (BMC first, then power on through it),
    wait for SSH with a boot_id, write <state>/hosts/*.toml. Returns the state. If a guest
    does not come up, everything started here is stopped and the error re-raised."""
    st = _load_state()
    alive = [n for n, g in st.get("guests", {}).items() if _alive(g)]
    if alive:
        raise InputError(f"twin lab already up ({', '.join(alive)})",
                         hint="bench lab down --kind twin")
    why = missing_capabilities(build=True)
    if why:
        raise BenchError("cannot bring up the twin lab: " + "; ".join(why))
    image = build_image(log)
    disk = str(cache_dir() / image["key"] / "disk.img")
    sd = state_dir()
    sd.mkdir(parents=True, exist_ok=True)
    kh = sd / "known_hosts"
    guests = {n: _new_guest(n, sd, mem_mib, lab_key(), kh, disk) for n in NAMES}
    host_pub = (cache_dir() / image["key"] / "host_key.pub").read_text()
    write_known_hosts(kh, guests.values(), host_pub)
    for g in guests.values():
        g["inventory"] = str(_write_inventory(g, sd / "hosts"))
    st = {"guests": guests, "image": image, "started_at": time.time(),
          "hosts_dir": str(sd / "hosts")}
    try:
        _boot_all(st, boot_timeout, log)
    except BaseException:
        _save_state(st)
        keep_consoles(sd, guests.values())
        lab_down(log=log)
        raise
    _save_state(st)
    return st


def _await_qemu(g: dict, timeout: float) -> int:
    """The pid of the guest's qemu once it is up (the BMC starts it and answers at once)."""
    deadline = time.monotonic() + timeout
    while (pid := twin_bmc.qemu_pid(g)) is None:
        if time.monotonic() > deadline:
            raise HostError(g["name"], f"its qemu did not come up within {timeout:.0f}s of "
                            f"`chassis power on`; see {g['qemu_log']}")
        time.sleep(0.2)
    return pid


def _boot_all(st: dict, boot_timeout: float, log) -> None:
    guests = st["guests"]
    for g in guests.values():
        _start_bmc(g)
        _save_state(st)
    t0 = time.monotonic()
    for g in guests.values():
        run_cmd(ipmitool_argv(g, "chassis", "power", "on"), timeout=150)
        g["qemu_pid"] = _await_qemu(g, QEMU_START_S)
        _save_state(st)
    say(log, "powered on through their BMCs: " + ", ".join(
        f"{n} (qemu pid {g['qemu_pid']}, ssh port {g['port']}, bmc udp {g['bmc_port']})"
        for n, g in guests.items()))

    def wait(g: dict) -> None:
        g["boot_id"] = wait_for_boot(transport_for(g), None, boot_timeout, None, g["console"])
        g["boot_seconds"] = round(time.monotonic() - t0, 1)
        say(log, f"{g['name']} answers SSH on 127.0.0.1:{g['port']} after "
                 f"{g['boot_seconds']}s")
    with ThreadPoolExecutor(len(guests)) as ex:
        list(ex.map(wait, guests.values()))


def lab_down(log: Callable[[str], None] | None = None, keep_files: bool = False) -> list[str]:
    """Stop every qemu and ipmi_sim this lab started (PIDs from the state, checked against
    their command lines), remove the runtime files. Returns what was stopped."""
    st = _load_state()
    stopped = []
    for name, g in st.get("guests", {}).items():
        for pid in (twin_bmc.qemu_pid(g), twin_bmc.starting_pid(g)):
            if pid is not None:
                stop_process(pid, twin_bmc.QEMU, g["overlay"], wait=10.0)
                stopped.append(f"{name} qemu (pid {pid})")
        bmc = g.get("bmc_pid")
        if bmc and is_our_process(bmc, "ipmi_sim", g["bmc_conf"]):
            stop_process(bmc, "ipmi_sim", g["bmc_conf"], wait=5.0)
            stopped.append(f"{name} ipmi_sim (pid {bmc})")
        if not keep_files:
            shutil.rmtree(g["dir"], ignore_errors=True)
    for s in stopped:
        say(log, f"stopped {s}")
    if not keep_files:
        remove_runtime_files(state_dir())
    return stopped


def lab_status(probe: bool = True) -> list[dict]:
    """One dict per guest: name, qemu pid, running, ports, inventory, and (probe) boot_id,
    page size and command line over SSH (or the error)."""
    out = []
    for name, g in _load_state().get("guests", {}).items():
        pid = twin_bmc.qemu_pid(g)
        row = {"name": name, "pid": pid, "port": g["port"], "bmc_port": g["bmc_port"],
               "running": pid is not None, "bmc": "ipmi_sim" in _alive(g),
               "inventory": g.get("inventory"), "console": g["console"]}
        if probe and pid is not None:
            row.update(ssh_look(transport_for, g, ["sh", "-c",
                                                   "cat /proc/sys/kernel/random/boot_id; "
                                                   "getconf PAGESIZE; cat /proc/cmdline"], 30))
        out.append(row)
    return out


def power_cycle(name: str) -> float:
    """`chassis power cycle` through the guest's BMC (the inventory's power_cycle command);
    returns the seconds ipmitool took."""
    g = _load_state().get("guests", {}).get(name)
    if g is None:
        raise InputError(f"no twin guest {name!r}", hint=f"known: {', '.join(NAMES)}")
    t0 = time.monotonic()
    try:
        run_cmd(ipmitool_argv(g, "chassis", "power", "cycle"), timeout=60)
    except CommandFailed as exc:
        raise HostError(name, f"BMC power cycle failed: {exc}") from None
    return time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    def up(a: argparse.Namespace, tell: Callable[[str], None]) -> str:
        st = lab_up(log=tell)
        return json.dumps({n: {k: g.get(k) for k in ("port", "bmc_port", "qemu_pid",
                                                     "boot_seconds", "inventory")}
                           for n, g in st["guests"].items()}, indent=2)
    return lab_main("python3 -m bench.lab.twin", argv, {
        "up": up, **shared_commands(lab_down, lab_status, build_image),
        "power-cycle": lambda a, tell: f"{power_cycle(a.name):.2f}"})


if __name__ == "__main__":
    sys.exit(main())
