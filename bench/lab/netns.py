"""The netns lab: N test hosts on this machine, each a network namespace with its own address,
hostname and mount namespace, running a real OpenSSH sshd with its own host key.

Layout (all names derive from a short `prefix`, default `blab`, so two labs never collide):

    root netns:  bridge <prefix>br with <subnet>.1/24, veth <prefix><i>h enslaved to it, and a
                 safety route `unreachable 10.200.0.0/16 metric 4000` (packets for the lab range
                 never leave by the default route), shared by every lab on the machine and
                 reference-counted in /run/bench-lab-routes.json under flock (bench.lab.routes): the
                 first lab up adds it if it was absent, each lab's `down` removes only itself
                 from the users, and the last one removes the route, and only if a lab added
                 it (a route that was there before any lab stays)
    netns <prefix>-<i>: eth0 = <subnet>.<10+i>/24, lo up; inside it `unshare -m -u` gives the
                 host its hostname (lab-netns-<i>) and a private mount namespace in which
                 <host dir>/cmdline and <host dir>/boot_id are bind-mounted over /proc/cmdline and
                 /proc/sys/kernel/random/boot_id; sshd -D runs there (root login with the lab key
                 only, sftp subsystem, PAM off)
    state dir (default /run/bench-lab, or $BENCH_LAB_DIR):
        lab.json                 what exists (written after every step, so `down` after a
                                 failed `up` removes exactly what was made)
        id_ed25519[.pub]         the lab's client keypair
        known_hosts              the lab hosts' host keys
        hosts/<name>.toml        inventory of the lab hosts (transport ssh)
        <name>/                  sshd_config, host key, authorized_keys, cmdline, boot_id,
                                 sshd.log, work/ (the host's work_dir), pool/

A "reboot" (`reboot(name, cmdline)`) kills every process of the host's netns, writes a new
boot_id and command line, and starts sshd again: controllers see the connection drop, a new
boot_id and the new /proc/cmdline, as after a real reboot. /proc/meminfo, diskstats, vmstat and
cgroups stay those of this machine (so a `mem=` boot is never proven: MemTotal cannot follow).
`python -m bench.lab.netns reboot NAME --cmdline C` does the same from another process: a test
inventory's `reboot.method = "command"` runs it (see `main`), so bench's proven reboot drives a
lab host for real. `kill_sshd(name, everything=False)` kills only the listening sshd, leaving
the host's detached runners alive.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError, InputError
from bench.hosts.inventory import Host, RebootSpec, SSHOptions, render_host_toml
from bench.lab import routes

SAFETY_ROUTE = "10.200.0.0/16"
DEFAULT_CMDLINE = "BOOT_IMAGE=/boot/vmlinuz-lab root=/dev/lab ro quiet"


class LabError(BenchError):
    """The lab could not be brought up, reached or torn down."""


def default_state_dir() -> Path:
    return Path(os.environ.get("BENCH_LAB_DIR") or "/run/bench-lab")


def missing_capabilities() -> list[str]:
    """What this machine lacks to run the lab (empty when it can)."""
    missing = []
    if os.geteuid() != 0:
        missing.append("root (network namespaces and sshd need it)")
    for tool, pkg in (("ip", "iproute2"), ("unshare", "util-linux"),
                      ("ssh-keygen", "openssh-client")):
        if shutil.which(tool) is None:
            missing.append(f"`{tool}` ({pkg})")
    if _sshd() is None:
        missing.append("sshd binary (openssh-server)")
    return missing


def _sshd() -> str | None:
    for p in ("/usr/sbin/sshd", "/usr/local/sbin/sshd"):
        if os.access(p, os.X_OK):
            return p
    return shutil.which("sshd")


def _sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(list(argv), capture_output=True, text=True)
    if check and p.returncode != 0:
        raise LabError(f"`{' '.join(argv)}` failed: {p.stderr.strip() or p.stdout.strip()}")
    return p


@dataclass
class LabHost:
    name: str
    index: int
    netns: str
    veth: str
    address: str
    dir: str
    sshd_pid: int | None = None
    boot_id: str = ""
    cmdline: str = DEFAULT_CMDLINE


class Lab:
    """One netns lab, persisted in <state_dir>/lab.json."""

    def __init__(self, state_dir: Path | None = None):
        self.state_dir = Path(state_dir) if state_dir else default_state_dir()
        self.state_file = self.state_dir / "lab.json"
        self.state: dict = {}
        if self.state_file.exists():
            self.state = json.loads(self.state_file.read_text())

    # state ----------------------------------------------------------------------------------
    @property
    def exists(self) -> bool:
        return bool(self.state)

    def hosts(self) -> list[LabHost]:
        return [LabHost(**h) for h in self.state.get("hosts", [])]

    def host(self, name: str) -> LabHost:
        for h in self.hosts():
            if h.name == name:
                return h
        raise InputError(f"no lab host {name!r} in {self.state_file}",
                         f"lab hosts: {', '.join(h.name for h in self.hosts()) or '(none)'}")

    def _save_host(self, h: LabHost) -> None:
        hosts = [x for x in self.state.get("hosts", []) if x["name"] != h.name]
        hosts.append(h.__dict__.copy())
        hosts.sort(key=lambda x: x["index"])
        self.state["hosts"] = hosts
        self._save()

    def reload(self) -> None:
        """Re-read lab.json after another process changed the lab (a host's `reboot.method =
        "command"` runs `python -m bench.lab.netns reboot` out of process), and reap the sshd
        processes this process started that the lab no longer records."""
        before = {h.name: h.sshd_pid for h in self.hosts()}
        self.state = json.loads(self.state_file.read_text()) if self.state_file.exists() else {}
        now = {h.name: h.sshd_pid for h in self.hosts()}
        for name, pid in before.items():
            if pid and now.get(name) != pid:
                _reap(pid)

    def _save(self) -> None:
        tmp = self.state_file.with_name("lab.json.tmp")
        tmp.write_text(json.dumps(self.state, indent=2) + "\n")
        tmp.replace(self.state_file)

    @property
    def hosts_dir(self) -> Path:
        return self.state_dir / "hosts"

    @property
    def known_hosts(self) -> Path:
        return self.state_dir / "known_hosts"

    @property
    def identity(self) -> Path:
        return self.state_dir / "id_ed25519"

    # up ---------------------------------------------------------------------------------------
    def up(self, count: int = 2, prefix: str = "blab", subnet: str = "10.200.0",
           host_prefix: str = "lab-netns") -> list[LabHost]:
        """Create the lab (idempotent when the same lab is already up and healthy)."""
        missing = missing_capabilities()
        if missing:
            raise LabError("cannot run the netns lab: missing " + ", ".join(missing))
        if not 1 <= count <= 200:
            raise InputError(f"--count must be 1..200, got {count}")
        if len(prefix) > 9 or not prefix.isalnum():
            raise InputError(f"lab prefix {prefix!r} must be alphanumeric, at most 9 characters")
        parts = subnet.split(".")
        if len(parts) != 3 or parts[:2] != ["10", "200"] or not parts[2].isdigit():
            raise InputError(f"lab subnet {subnet!r} must be 10.200.N (inside {SAFETY_ROUTE})")
        if self.exists:
            if len(self.hosts()) == count and all(s["sshd"] for s in self.status()["hosts"]):
                return self.hosts()
            raise LabError(f"a lab already exists in {self.state_dir}",
                           f"run `bench lab down --state-dir {self.state_dir}` first")
        created_dir = not self.state_dir.exists()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.state_dir, 0o700)
        self.state = {"kind": "netns", "prefix": prefix, "subnet": subnet,
                      "bridge": f"{prefix}br", "created_dir": created_dir, "route_added": False,
                      "bridge_created": False, "hosts": [], "created": time.time()}
        self._save()
        try:
            self._up(count, prefix, subnet, host_prefix)
        except BaseException:
            self.down()
            raise
        return self.hosts()

    def _up(self, count: int, prefix: str, subnet: str, host_prefix: str) -> None:
        routes.hold(SAFETY_ROUTE, self.state_dir, _sh)
        self.state["route_ref"] = True
        self._save()
        br = self.state["bridge"]
        if _sh("ip", "link", "show", br, check=False).returncode == 0:
            raise LabError(f"bridge {br} already exists (another lab with prefix {prefix}?)")
        _sh("ip", "link", "add", br, "type", "bridge")
        self.state["bridge_created"] = True
        self._save()
        _sh("ip", "addr", "add", f"{subnet}.1/24", "dev", br)
        _sh("ip", "link", "set", br, "up")
        if not self.identity.exists():
            _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bench-lab",
                "-f", str(self.identity))
        pub = (self.state_dir / "id_ed25519.pub").read_text()
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        self.hosts_dir.mkdir(exist_ok=True)
        known = []
        for i in range(1, count + 1):
            h = LabHost(name=f"{host_prefix}-{i}", index=i, netns=f"{prefix}-{i}",
                        veth=f"{prefix}{i}h", address=f"{subnet}.{10 + i}",
                        dir=str(self.state_dir / f"{host_prefix}-{i}"), boot_id=str(uuid.uuid4()))
            self._make_host(h, pub)
            key = (Path(h.dir) / "ssh_host_ed25519_key.pub").read_text().split()
            known.append(f"{h.address} {key[0]} {key[1]}\n")
            self._write_inventory(h)
        self.known_hosts.write_text("".join(known))
        for h in self.hosts():
            self.start_sshd(h.name)

    def _make_host(self, h: LabHost, pub: str) -> None:
        _sh("ip", "netns", "add", h.netns)
        self._save_host(h)
        peer = f"{h.veth[:-1]}n"
        _sh("ip", "link", "add", h.veth, "type", "veth", "peer", "name", peer)
        _sh("ip", "link", "set", peer, "netns", h.netns)
        _sh("ip", "link", "set", h.veth, "master", self.state["bridge"])
        _sh("ip", "link", "set", h.veth, "up")
        ns = ("ip", "netns", "exec", h.netns)
        _sh(*ns, "ip", "link", "set", peer, "name", "eth0")
        _sh(*ns, "ip", "addr", "add", f"{h.address}/24", "dev", "eth0")
        _sh(*ns, "ip", "link", "set", "eth0", "up")
        _sh(*ns, "ip", "link", "set", "lo", "up")
        d = Path(h.dir)
        (d / "work").mkdir(parents=True, exist_ok=True)
        (d / "pool").mkdir(exist_ok=True)
        _sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", h.name,
            "-f", str(d / "ssh_host_ed25519_key"))
        (d / "authorized_keys").write_text(pub)
        (d / "sshd_config").write_text("\n".join([
            "Port 22", f"ListenAddress {h.address}",
            f"HostKey {d / 'ssh_host_ed25519_key'}", f"PidFile {d / 'sshd.pid'}",
            f"AuthorizedKeysFile {d / 'authorized_keys'}",
            "PermitRootLogin prohibit-password", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
            "PrintMotd no", "MaxSessions 100", "MaxStartups 100:30:200",
            "Subsystem sftp internal-sftp", ""]))
        (d / "cmdline").write_text(h.cmdline + "\n")
        (d / "boot_id").write_text(h.boot_id + "\n")

    def _write_inventory(self, h: LabHost) -> None:
        host = Host(name=h.name, address=h.address, transport="ssh", port=22, user="root",
                    tags={"lab": "netns", "lab_state_dir": str(self.state_dir)},
                    ssh=SSHOptions(identity_file=str(self.identity),
                                   known_hosts=str(self.known_hosts), connect_timeout=5,
                                   banner_timeout=10, auth_timeout=10),
                    reboot=RebootSpec(allowed=False, method="none", down_timeout=10,
                                      up_timeout=20),
                    pool_dir=str(Path(h.dir) / "pool"), work_dir=str(Path(h.dir) / "work"))
        (self.hosts_dir / f"{h.name}.toml").write_text(
            "# written by `bench lab up` (netns lab); reboot with bench.lab.netns.reboot\n"
            + render_host_toml(host))

    # sshd ---------------------------------------------------------------------------------------
    def start_sshd(self, name: str, wait: float = 10.0) -> int:
        h = self.host(name)
        if h.sshd_pid and _alive(h.sshd_pid):
            raise LabError(f"{name}: sshd already running (pid {h.sshd_pid})")
        d = Path(h.dir)
        # A lab host is a clean machine: the controller's own shell start-up files (here root's
        # .bashrc runs `pyenv rehash`, whose lock a killed session leaves behind) are hidden
        # behind an empty file in the host's mount namespace.
        (d / "empty-rc").write_text("")
        script = ('hostname "$1" && mount --bind "$2" /proc/cmdline && '
                  'mount --bind "$3" /proc/sys/kernel/random/boot_id && '
                  'for f in "$HOME/.bashrc" "$HOME/.profile" "$HOME/.bash_profile"; do '
                  '[ -e "$f" ] && mount --bind "$6" "$f"; done; exec "$4" -D -e -f "$5"')
        argv = ["ip", "netns", "exec", h.netns, "unshare", "-m", "-u", "--propagation", "private",
                "sh", "-c", script, "lab-sshd", h.name, str(d / "cmdline"), str(d / "boot_id"),
                _sshd() or "sshd", str(d / "sshd_config"), str(d / "empty-rc")]
        with open(d / "sshd.log", "ab") as log:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                 start_new_session=True)
        h.sshd_pid = p.pid
        self._save_host(h)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if p.poll() is not None:
                raise LabError(f"{name}: sshd exited with {p.returncode}; see {d / 'sshd.log'}")
            try:
                with socket.create_connection((h.address, 22), timeout=0.5) as s:
                    s.settimeout(2)
                    if s.recv(4).startswith(b"SSH-"):
                        return p.pid
            except OSError:
                time.sleep(0.05)
        raise LabError(f"{name}: sshd did not answer on {h.address}:22 within {wait}s")

    def kill_sshd(self, name: str, *, everything: bool = True) -> list[int]:
        """Kill every process of the host's netns (sshd, its sessions, detached runners), as a
        crash would. everything=False kills only the listening sshd: new connections are
        refused while what runs there (a detached runner, open sessions) goes on, as when a
        host's sshd dies or its network goes away but the machine keeps running."""
        h = self.host(name)
        if everything:
            killed = _kill_netns(h.netns)
        else:
            killed = []
            if h.sshd_pid and _alive(h.sshd_pid):
                os.kill(h.sshd_pid, signal.SIGKILL)
                killed = [h.sshd_pid]
                deadline = time.monotonic() + 5
                while _alive(h.sshd_pid) and time.monotonic() < deadline:
                    _reap(h.sshd_pid)
                    time.sleep(0.02)
        if h.sshd_pid:
            _reap(h.sshd_pid)
        h.sshd_pid = None
        self._save_host(h)
        return killed

    def reboot(self, name: str, cmdline: str | None = None, down_seconds: float = 0.0) -> str:
        """Kill the host's processes, give it a new boot_id (and command line), start sshd
        again. Returns the new boot_id."""
        h = self.host(name)
        self.kill_sshd(name)
        h = self.host(name)
        h.boot_id = str(uuid.uuid4())
        if cmdline is not None:
            h.cmdline = cmdline
        d = Path(h.dir)
        (d / "cmdline").write_text(h.cmdline + "\n")
        (d / "boot_id").write_text(h.boot_id + "\n")
        self._save_host(h)
        if down_seconds:
            time.sleep(down_seconds)
        self.start_sshd(name)
        return h.boot_id

    # status / down ------------------------------------------------------------------------------
    def status(self) -> dict:
        """What lab.json records now, re-read: another process (a host's out-of-process
        reboot command) may have changed a host's boot_id and command line since this object
        loaded it, and a status must say what the hosts hold."""
        self.reload()
        rows: list[dict] = []
        out = {"state_dir": str(self.state_dir), "up": self.exists, "kind": "netns",
               "hosts_dir": str(self.hosts_dir), "hosts": rows}
        for h in self.hosts():
            ns_ok = _sh("ip", "netns", "pids", h.netns, check=False).returncode == 0
            alive = bool(h.sshd_pid and _alive(h.sshd_pid))
            answering = False
            if alive:
                try:
                    with socket.create_connection((h.address, 22), timeout=1):
                        answering = True
                except OSError:
                    pass
            rows.append({"name": h.name, "address": h.address, "netns": h.netns,
                         "netns_exists": ns_ok, "sshd_pid": h.sshd_pid,
                         "sshd": alive and answering, "boot_id": h.boot_id,
                         "cmdline": h.cmdline})
        return out

    def down(self) -> list[str]:
        """Remove exactly what lab.json records; returns what was removed."""
        if not self.exists:
            return []
        removed = []
        for h in self.hosts():
            pids = _kill_netns(h.netns)
            if h.sshd_pid:
                _reap(h.sshd_pid)
            if pids:
                removed.append(f"{h.name}: killed {len(pids)} processes")
            if _sh("ip", "netns", "del", h.netns, check=False).returncode == 0:
                removed.append(f"netns {h.netns}")
            _sh("ip", "link", "del", h.veth, check=False)
            shutil.rmtree(h.dir, ignore_errors=True)
        if self.state.get("bridge_created"):
            if _sh("ip", "link", "del", self.state["bridge"], check=False).returncode == 0:
                removed.append(f"bridge {self.state['bridge']}")
        if self.state.get("route_ref"):
            gone = routes.release(SAFETY_ROUTE, self.state_dir, _sh)
            if gone:
                removed.append(gone)
        elif self.state.get("route_added"):
            # a lab brought up by an older bench (no shared record): keep the safety route
            # while another device still has an address in the range
            addrs = _sh("ip", "-4", "-o", "addr", "show", check=False).stdout.splitlines()
            if not any(" inet 10.200." in line for line in addrs):
                _sh("ip", "route", "del", "unreachable", SAFETY_ROUTE, "metric", "4000",
                    check=False)
                removed.append(f"route unreachable {SAFETY_ROUTE}")
        for f in ("known_hosts", "id_ed25519", "id_ed25519.pub"):
            (self.state_dir / f).unlink(missing_ok=True)
        shutil.rmtree(self.hosts_dir, ignore_errors=True)
        self.state_file.unlink(missing_ok=True)
        if self.state.get("created_dir"):
            try:
                self.state_dir.rmdir()
            except OSError:
                pass
        self.state = {}
        return removed


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _netns_pids(netns: str) -> list[int]:
    p = _sh("ip", "netns", "pids", netns, check=False)
    return [int(x) for x in p.stdout.split()] if p.returncode == 0 else []


def _kill_netns(netns: str) -> list[int]:
    """SIGKILL every process in the namespace (all were started by the lab) and wait for them."""
    pids = _netns_pids(netns)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        for pid in pids:
            _reap(pid)
        if not any(_alive(pid) for pid in pids):
            break
        time.sleep(0.02)
    return pids


# module-level helpers (the fault tests and the reboot code call these) ------------------------

def reboot(host: str, cmdline: str | None = None, state_dir: Path | None = None) -> str:
    return Lab(state_dir).reboot(host, cmdline)


def kill_sshd(host: str, state_dir: Path | None = None) -> list[int]:
    return Lab(state_dir).kill_sshd(host)


def start_sshd(host: str, state_dir: Path | None = None) -> int:
    return Lab(state_dir).start_sshd(host)


# `python -m bench.lab.netns reboot NAME`: the lab host's "reboot" as a command ------------------

def _in_netns(netns: str) -> bool:
    try:
        return os.stat("/proc/self/ns/net").st_ino == os.stat(f"/run/netns/{netns}").st_ino
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.lab.netns reboot NAME [--cmdline C] [--state-dir D] [--delay S]`.

    What a test inventory's `reboot.method = "command"` runs for a netns lab host (its command
    line, "{cmdline}" included, goes to --cmdline): `Lab.reboot` (every process of the host's
    netns killed, a new boot_id and command line written, sshd started again). It touches
    nothing but the lab: this machine's own boot is never in play. It must run outside the
    host's network namespace (it kills every process in it), so the inventory's argv enters
    the controller's namespaces first (`setsid -f nsenter --net=... --mount=... --`); started
    inside it, it refuses. Its stdio goes to <host dir>/reboot.log at once, so the SSH session
    that started it ends normally; --delay waits before the kill."""
    p = argparse.ArgumentParser(prog="python -m bench.lab.netns",
                                description="netns lab helpers (root)")
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("reboot", help="reboot a lab host: new boot_id and command line, "
                                      "sshd restarted")
    r.add_argument("name")
    r.add_argument("--cmdline", default=None, help="the new /proc/cmdline (default: keep)")
    r.add_argument("--state-dir", type=Path, default=None)
    r.add_argument("--delay", type=float, default=0.0, help="seconds to wait first")
    a = p.parse_args(argv)
    lab = Lab(a.state_dir)
    h = lab.host(a.name)
    if _in_netns(h.netns):
        print(f"{a.name}: refusing to reboot from inside its own network namespace "
              f"{h.netns} (the reboot kills every process there); enter the controller's "
              "namespaces first (nsenter)", file=sys.stderr)
        return 2
    log = os.open(Path(h.dir) / "reboot.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(null)
    os.close(log)
    if a.delay > 0:
        time.sleep(a.delay)
    t0 = time.monotonic()
    boot_id = lab.reboot(a.name, a.cmdline)
    print(json.dumps({"t": time.time(), "host": a.name, "boot_id": boot_id,
                      "cmdline": lab.host(a.name).cmdline,
                      "seconds": round(time.monotonic() - t0, 3)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
