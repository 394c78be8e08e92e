"""The virtual-machine lab (test tier 3): Debian guests under qemu (TCG), reached over SSH.

Image: bench.lab.vm_image (Debian from debootstrap, cached). Init is busybox init with
bench/lab/guest/rcS (mounts, `bench.lru_gen=on|off` from the kernel command line, network,
sshd); the guest's SSH host key is made at build time and recorded in the lab's known_hosts;
root logs in with the lab key.

Guests: `lab_up(count)` starts `count` qemu-system-x86_64 (TCG) guests in parallel, each with a
qcow2 overlay on the cached image (vda), its own ext4 pool disk (vdb, mounted at /srv/bench),
user-mode networking with 127.0.0.1:PORT -> 22, serial console to a log file; it waits until
each answers SSH with a boot_id (qemu accepts TCP on the forwarded port while the guest is still
down) and writes inventory files <state>/hosts/lab-a.toml, lab-b.toml ... (bench.hosts.inventory's
schema). Runtime state lives in $BENCH_LAB_DIR (default /run/bench-lab-vm). `lab_down()` stops
exactly the qemu processes this lab started (PIDs from the state file, checked against
/proc/PID/cmdline). `python3 -m bench.lab.vm up|down|status|build|power-cycle NAME`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.errors import AuthError, CommandTimeout, HostError, HostKeyError, InputError
from bench.hosts.inventory import Host, RebootSpec, SSHOptions, load_host_file, render_host_toml
from bench.hosts.ssh import transport_for as ssh_transport_for
from bench.lab.qemu_lab import (keep_consoles, lab_main, load_state, remove_runtime_files,
                                save_state, shared_commands, ssh_look, write_known_hosts)
from bench.lab.vm_image import (build_image, cache_dir, free_port, is_our_process, lab_key,
                                run_cmd, say, stop_process)

GUEST_MEM_MIB = 1536
# the lowest mem= a guest is booted with (inventory floor): a 6.1 guest booted mem=250M (idle
# with 180 MB free); at mem=191M it panicked while booting ("System is deadlocked on memory",
# the initramfs being unpacked)
MEM_FLOOR = 240 << 20
POOL_DISK_BYTES = 4 << 30
NAMES = "abcdefghij"
BASE_APPEND = "root=/dev/vda rw console=ttyS0 panic=10 loglevel=4"


def state_dir() -> Path:
    return Path(os.environ.get("BENCH_LAB_DIR", "/run/bench-lab-vm"))


# capabilities ---------------------------------------------------------------------------------


# image -----------------------------------------------------------------------------------------


def transport_for(entry):
    """The controller's own transport (bench.hosts.ssh) for a guest: its inventory entry, or the
    state dict whose inventory file lab_up wrote. One SSH implementation serves labs and fleet."""
    if isinstance(entry, Mapping):
        entry = load_host_file(Path(entry["inventory"]))
    return ssh_transport_for(entry)


# guests ----------------------------------------------------------------------------------------

def _qemu_argv(g: dict, image: dict, append: str) -> list[str]:
    return ["qemu-system-x86_64", "-name", f"bench-lab-{g['name']}", "-accel", "tcg",
            "-machine", "q35", "-cpu", "max", "-smp", "1", "-m", str(g["mem_mib"]),
            "-nodefaults", "-display", "none", "-vga", "none", "-monitor", "none",
            "-serial", f"file:{g['console']}",
            "-kernel", image["vmlinuz"], "-initrd", image["initrd"], "-append", append,
            "-drive", f"file={g['overlay']},if=virtio,format=qcow2",
            "-drive", f"file={g['pool_disk']},if=virtio,format=raw,cache=none,aio=threads",
            "-netdev", f"user,id=n0,hostfwd=tcp:127.0.0.1:{g['port']}-:22",
            "-device", "virtio-net-pci,netdev=n0", "-device", "virtio-rng-pci",
            "-pidfile", g["pidfile"]]


def _start_qemu(g: dict, image: dict, append: str) -> int:
    Path(g["console"]).write_text("")   # a fresh console log per boot of this process
    argv = _qemu_argv(g, image, append)
    with open(g["qemu_log"], "a") as out:
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                             start_new_session=True)
    g["pid"] = p.pid
    g["append"] = append
    return p.pid


def _is_our_qemu(pid: int, marker: str) -> bool:
    return is_our_process(pid, "qemu-system-x86_64", marker)


def _stop_pid(pid: int, marker: str, wait: float = 15.0) -> None:
    stop_process(pid, "qemu-system-x86_64", marker, wait)


def wait_for_boot(t, old_boot_id: str | None, timeout: float,
                  pid: int | None = None, console: str | None = None) -> str:
    """Poll `t` (any Transport) until the guest answers with a boot_id other than old_boot_id.
    A refused key or host key ends the wait at once; other connection errors are retried."""
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if pid is not None and not Path(f"/proc/{pid}").exists():
            raise HostError(t.host, f"qemu (pid {pid}) exited; see {console}")
        try:
            bid = t.run(["cat", "/proc/sys/kernel/random/boot_id"], timeout=20).stdout.strip()
            if bid and bid != old_boot_id:
                return bid
        except (HostKeyError, AuthError):
            raise
        except (HostError, OSError) as exc:
            last = str(exc)
        time.sleep(1.0)
    raise CommandTimeout(t.host, f"no SSH with a new boot_id within {timeout:.0f}s ({last}); "
                         f"console log: {console}")


def _load_state() -> dict:
    return load_state(state_dir())


def _save_state(st: dict) -> None:
    save_state(state_dir(), st)


def _write_inventory(g: dict, hosts_dir: Path) -> Path:
    h = Host(name=g["name"], address="127.0.0.1", transport="ssh", port=g["port"], user="root",
             tags={"lab": "vm", "machine": g["name"][-1].upper(), "accel": "tcg"},
             ssh=SSHOptions(identity_file=g["identity_file"], known_hosts=g["known_hosts"],
                            connect_timeout=10.0, banner_timeout=30.0, auth_timeout=30.0),
             mem_total=g["mem_mib"] << 20, mem_floor=MEM_FLOOR,
             reboot=RebootSpec(allowed=True, method="kexec", down_timeout=120.0,
                               up_timeout=300.0,
                               power_cycle=(sys.executable, "-m", "bench.lab.vm",
                                            "power-cycle", g["name"])),
             pool_dir="/srv/bench/pool", work_dir="/var/lib/bench",
             expect={"arch": "x86_64", "page_size": 4096})   # what `hosts check` must find
    hosts_dir.mkdir(parents=True, exist_ok=True)
    p = hosts_dir / f"{g['name']}.toml"
    text = render_host_toml(h)
    text = ("# written by bench.lab.vm (qemu TCG guest); the pool is on vdb, mounted at "
            "/srv/bench\n" + text)
    p.write_text(text)
    return p


def lab_up(count: int = 2, *, mem_mib: int = GUEST_MEM_MIB, boot_timeout: float = 300.0,
           log: Callable[[str], None] | None = None) -> dict:
    """Build/find the image, start `count` guests (lab-a, lab-b, ...) in parallel, wait for SSH
    (new boot_id), write <state>/hosts/*.toml. Returns the state (guests, timings). If a
    guest does not come up, every guest started here is stopped and the error re-raised."""
    if not 1 <= count <= len(NAMES):
        raise InputError(f"lab size {count} out of range 1-{len(NAMES)}")
    st = _load_state()
    alive = [n for n, g in st.get("guests", {}).items()
             if _is_our_qemu(g.get("pid", 0), g["overlay"])]
    if alive:
        raise InputError(f"lab already up ({', '.join(alive)}); run lab_down() first",
                         hint="bench lab down --kind vm")
    image = build_image(log)
    img_dir = cache_dir() / image["key"]
    img = {"vmlinuz": str(img_dir / "vmlinuz"), "initrd": str(img_dir / "initrd.img"),
           "base": str(img_dir / "base.img")}
    sd = state_dir()
    sd.mkdir(parents=True, exist_ok=True)
    key = lab_key()
    kh = sd / "known_hosts"
    host_pub = (img_dir / "host_key.pub").read_text()
    guests = {}
    for i in range(count):
        g = _new_guest(f"lab-{NAMES[i]}", sd, mem_mib, key, kh, img["base"])
        guests[g["name"]] = g
    write_known_hosts(kh, guests.values(), host_pub)
    hosts_dir = sd / "hosts"
    for g in guests.values():  # written first: the boot wait connects through it
        g["inventory"] = str(_write_inventory(g, hosts_dir))
    st = {"guests": guests, "image": image, "started_at": time.time()}
    t0 = time.monotonic()
    for g in guests.values():
        _start_qemu(g, img, g["default_append"])
    _save_state(st)
    started = ", ".join(f"{n} (pid {g['pid']}, port {g['port']})" for n, g in guests.items())
    say(log, f"started {started}")

    def wait(g):
        bid = wait_for_boot(transport_for(g), None, boot_timeout, g["pid"], g["console"])
        g["boot_id"] = bid
        g["boot_seconds"] = round(time.monotonic() - t0, 1)
        return g
    try:
        with ThreadPoolExecutor(len(guests)) as ex:
            list(ex.map(wait, guests.values()))
    except BaseException:
        _save_state(st)
        keep_consoles(sd, guests.values())
        lab_down(log=log)
        raise
    for g in guests.values():
        say(log, f"{g['name']} answers SSH on 127.0.0.1:{g['port']} after {g['boot_seconds']}s")
    st["hosts_dir"] = str(hosts_dir)
    _save_state(st)
    return st


def _new_guest(name: str, sd: Path, mem_mib: int, key: Path, kh: Path, base: str) -> dict:
    """A guest's state: its directory, port, disks (a qcow2 overlay of the image and a fresh
    ext4 pool disk), logs and SSH settings."""
    gd = sd / name
    gd.mkdir(parents=True, exist_ok=True)
    overlay, pool_disk = str(gd / "root.qcow2"), str(gd / "pool.img")
    g = {"name": name, "dir": str(gd), "port": free_port(), "address": "127.0.0.1",
         "user": "root", "mem_mib": mem_mib, "overlay": overlay,
         "pool_disk": pool_disk, "console": str(gd / "console.log"),
         "qemu_log": str(gd / "qemu.log"), "pidfile": str(gd / "qemu.pid"),
         "identity_file": str(key), "known_hosts": str(kh),
         "default_append": f"{BASE_APPEND} bench.name={name}"}
    for f in (overlay, pool_disk):
        Path(f).unlink(missing_ok=True)
    run_cmd(["qemu-img", "create", "-q", "-f", "qcow2", "-b", base, "-F", "raw", overlay])
    with open(pool_disk, "wb") as fh:
        fh.truncate(POOL_DISK_BYTES)
    run_cmd(["mkfs.ext4", "-q", "-F", "-L", "benchpool", "-E",
          "lazy_itable_init=0,lazy_journal_init=0", pool_disk])
    return g


def lab_down(log: Callable[[str], None] | None = None, keep_disks: bool = False) -> list[str]:
    """Stop every guest this lab started (only PIDs from the state file that still are our
    qemu), remove their runtime files. Returns the names stopped."""
    st = _load_state()
    stopped = []
    for name, g in st.get("guests", {}).items():
        pid = g.get("pid")
        if pid and _is_our_qemu(pid, g["overlay"]):
            _stop_pid(pid, g["overlay"])
            stopped.append(name)
            say(log, f"stopped {name} (pid {pid})")
        if not keep_disks:
            shutil.rmtree(g["dir"], ignore_errors=True)
    if not keep_disks:
        remove_runtime_files(state_dir())
    return stopped


def lab_status(probe: bool = True) -> list[dict]:
    """One dict per guest: name, pid, running, port, inventory, and (probe) its boot_id,
    MemTotal and command line as seen over SSH (or the error)."""
    st = _load_state()
    out = []
    for name, g in st.get("guests", {}).items():
        row = {"name": name, "pid": g.get("pid"), "port": g["port"],
               "running": _is_our_qemu(g.get("pid", 0), g["overlay"]),
               "inventory": g.get("inventory"), "console": g["console"]}
        if probe and row["running"]:
            row.update(ssh_look(transport_for, g, ["head", "-n", "1",
                                                   "/proc/sys/kernel/random/boot_id",
                                                   "/proc/cmdline"], 20))
        out.append(row)
    return out


def power_cycle(name: str, append: str | None = None) -> int:
    """Hard reset of one guest: kill its qemu and start it again (default command line unless
    `append` is given). The controller-side power_cycle of the lab inventory. Returns the PID."""
    st = _load_state()
    g = st.get("guests", {}).get(name)
    if g is None:
        raise InputError(f"no lab guest {name!r}", hint=f"known: {', '.join(st.get('guests', {}))}")
    if g.get("pid") and _is_our_qemu(g["pid"], g["overlay"]):
        _stop_pid(g["pid"], g["overlay"], wait=5.0)
    img_dir = cache_dir() / st["image"]["key"]
    img = {"vmlinuz": str(img_dir / "vmlinuz"), "initrd": str(img_dir / "initrd.img")}
    pid = _start_qemu(g, img, append or g["default_append"])
    _save_state(st)
    return pid


def main(argv: list[str] | None = None) -> int:
    def options(parsers: dict[str, argparse.ArgumentParser]) -> None:
        parsers["up"].add_argument("--count", type=int, default=2)
        parsers["power-cycle"].add_argument("--append")

    def up(a: argparse.Namespace, tell: Callable[[str], None]) -> str:
        st = lab_up(a.count, log=tell)
        return json.dumps({n: {k: g[k] for k in ("port", "pid", "boot_seconds", "inventory")}
                           for n, g in st["guests"].items()}, indent=2)
    return lab_main("python3 -m bench.lab.vm", argv, {
        "up": up, **shared_commands(lab_down, lab_status, build_image),
        "power-cycle": lambda a, tell: power_cycle(a.name, a.append)}, options)


if __name__ == "__main__":
    sys.exit(main())
