"""Deploy the native agent's sources and the host-side agents to a host and build it there.

What travels: native/Makefile, native/*.c, native/*.h (never binaries or objects) and agents/
(without caches), as one tar.gz put into <work_dir>, extracted into fresh native/ and agents/
directories, then `make -C <work_dir>/native`. The build is proven by `bench-agent version`:
its source_sha256 must equal `source_hash(native_dir)` computed here over the same files
(recipe of native/Makefile: sha256 of the concatenated bytes of Makefile and every *.c and *.h
directly in native/, in byte order of their names). A host whose agent already reports the
local hash and whose agents/ carries the local agents hash is skipped ("current").
"""

from __future__ import annotations

import hashlib
import secrets
import io
import tarfile
import tempfile
import time
from pathlib import Path

from bench.errors import CommandFailed, FormatError, HostError, InputError, error_data
from bench.hosts.facts import parse_agent, run_parallel
from bench.hosts.ssh import transport_for as ssh_transport_for
from bench.hosts.transport import write_line


def _sources_root() -> Path:
    """Where native/ and agents/ are: next to bench/ in a checkout, inside the installed
    package otherwise (the wheel ships them as bench/native and bench/agents)."""
    pkg = Path(__file__).resolve().parents[1]
    return pkg.parent if (pkg.parent / "native" / "Makefile").exists() else pkg


REPO = _sources_root()
AGENTS_STAMP = ".bench-agents-sha256"


def native_sources(native_dir: Path) -> list[Path]:
    native_dir = Path(native_dir)
    files = [p for p in native_dir.iterdir() if p.is_file() and
             (p.name == "Makefile" or p.suffix in (".c", ".h"))]
    if not any(p.name == "Makefile" for p in files):
        raise InputError(f"{native_dir}: no Makefile; is this the native/ directory?")
    return sorted(files, key=lambda p: p.name.encode())


def source_hash(native_dir: Path) -> str:
    """sha256 over Makefile + *.c + *.h of native_dir, concatenated in byte order of names."""
    h = hashlib.sha256()
    for p in native_sources(native_dir):
        h.update(p.read_bytes())
    return h.hexdigest()


def agents_files(agents_dir: Path) -> list[Path]:
    agents_dir = Path(agents_dir)
    if not agents_dir.is_dir():
        return []
    return sorted((p for p in agents_dir.rglob("*") if p.is_file()
                   and "__pycache__" not in p.parts and p.suffix != ".pyc"),
                  key=lambda p: str(p.relative_to(agents_dir)).encode())


def agents_hash(agents_dir: Path) -> str:
    """sha256 over (relative path, NUL, bytes, NUL) of every file of agents/."""
    h = hashlib.sha256()
    for p in agents_files(agents_dir):
        h.update(str(p.relative_to(agents_dir)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def make_bundle(repo: Path = REPO, native: bool = True) -> bytes:
    """The tar.gz that is shipped: native/ sources (unless native=False) and agents/, files'
    mtimes set to now (so make always rebuilds what it extracts)."""
    now = time.time()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        entries = [(p, f"native/{p.name}") for p in native_sources(repo / "native")] \
            if native else []
        entries += [(p, f"agents/{p.relative_to(repo / 'agents')}")
                    for p in agents_files(repo / "agents")]
        for path, arc in entries:
            data = path.read_bytes()
            info = tarfile.TarInfo(arc)
            info.size = len(data)
            info.mtime = now
            info.mode = path.stat().st_mode & 0o755
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def remote_agent(transport, work_dir: str) -> dict | None:
    """What `<work_dir>/native/bench-agent version` reports, or None if it is absent/broken."""
    try:
        r = transport.run([f"{work_dir}/native/bench-agent", "version"], timeout=30, check=False)
    except CommandFailed:
        return None
    if r.rc != 0:
        return None
    try:
        return parse_agent(r.stdout)
    except FormatError:
        return None


CHECK_SCRIPT = ('"$1/native/bench-agent" version 2>/dev/null; echo "$2 $?"; '
                'cat "$1/agents/$3" 2>/dev/null; echo "$2 $?"')


def remote_state(transport, work_dir: str) -> tuple[dict | None, str | None]:
    """(what the host's agent reports, the host agents' stamp), each None when absent or
    broken: one round trip, both answers split by a random marker line."""
    mark = f"bench-check-{secrets.token_hex(8)}"
    try:
        r = transport.run(["sh", "-c", CHECK_SCRIPT, "bench-deploy", work_dir, mark,
                           AGENTS_STAMP], timeout=30, check=False)
    except CommandFailed:
        return None, None
    parts = r.stdout.split(mark)
    if r.rc != 0 or len(parts) != 3:
        return None, None
    agent_out, agent_rc = parts[0], parts[1].split("\n", 1)
    stamp_rc = parts[2].strip()
    agent = None
    if agent_rc[0].strip() == "0":
        try:
            agent = parse_agent(agent_out)
        except FormatError:
            agent = None
    stamp = agent_rc[1].strip() if len(agent_rc) > 1 and stamp_rc == "0" else None
    return agent, stamp or None


def deploy(transport, host, repo: Path = REPO, force: bool = False,
           build_timeout: float = 900.0) -> dict:
    """Ship, build and verify on one host. Returns {host, status: current|deployed, ...};
    raises CommandFailed (with the compiler output) when the build fails."""
    local_hash = source_hash(repo / "native")
    local_agents = agents_hash(repo / "agents")
    wd = host.work_dir
    before, remote_agents = remote_state(transport, wd)
    out = {"host": host.name, "source_sha256": local_hash, "agents_sha256": local_agents,
           "before": before["source_sha256"] if before else None}
    agent_current = bool(before and before["source_sha256"] == local_hash)
    if not force and agent_current and remote_agents == local_agents:
        return dict(out, status="current", seconds=0.0)
    t0 = time.monotonic()
    # only the host agents changed: ship them, keep the built agent (a build on a slow host
    # takes minutes)
    agents_only = agent_current and not force
    transport.run(["mkdir", "-p", wd], timeout=30)
    remote_tar = f"{wd}/.bench-deploy.tar.gz"
    with tempfile.NamedTemporaryFile(suffix=".tar.gz") as tmp:
        tmp.write(make_bundle(repo, native=not agents_only))
        tmp.flush()
        transport.put(Path(tmp.name), remote_tar)
    transport.run(["rm", "-rf", f"{wd}/agents"] + ([] if agents_only else [f"{wd}/native"]),
                  timeout=60)
    transport.run(["tar", "-xzf", remote_tar, "-C", wd], timeout=120)
    transport.run(["rm", "-f", remote_tar], timeout=30)
    if agents_only:
        write_line(transport, f"{wd}/agents/{AGENTS_STAMP}", local_agents)
        return dict(out, status="deployed", seconds=round(time.monotonic() - t0, 3),
                    agent=before, build_output="", shipped="agents")
    r = transport.run(["make", "-C", f"{wd}/native"], timeout=build_timeout, check=False)
    if r.rc != 0:
        output = (r.stdout + r.stderr).strip()
        raise CommandFailed(host.name, ["make", "-C", f"{wd}/native"], r.rc, output,
                            hint="the compiler output is above; fix native/ and deploy again")
    after = remote_agent(transport, wd)
    if after is None:
        raise HostError(host.name, f"{wd}/native/bench-agent version does not run after the build")
    if after["source_sha256"] != local_hash:
        raise HostError(host.name, f"built agent reports source_sha256 {after['source_sha256']}, "
                        f"local sources hash to {local_hash}",
                        "the Makefile's hash recipe and bench.hosts.deploy.source_hash disagree")
    write_line(transport, f"{wd}/agents/{AGENTS_STAMP}", local_agents)
    return dict(out, status="deployed", seconds=round(time.monotonic() - t0, 3),
                agent=after, build_output=(r.stdout + r.stderr)[-4000:],
                boot_hook=install_boot_hook(transport, host))


BOOT_UNIT = "/etc/systemd/system/bench-lru-gen.service"


def boot_hook_unit(work_dir: str) -> str:
    """The systemd unit that applies bench.lru_gen= early at boot (agents/lru_gen_boot.sh)."""
    return f"""[Unit]
Description=bench: apply bench.lru_gen= from the kernel command line (MGLRU state at boot)
DefaultDependencies=no
RequiresMountsFor={work_dir}/agents
Before=sysinit.target
ConditionPathExists=/sys/kernel/mm/lru_gen/enabled

[Service]
Type=oneshot
ExecStart=/bin/sh {work_dir}/agents/lru_gen_boot.sh

[Install]
WantedBy=sysinit.target
"""


NO_SYSTEMD = 3
# One round trip: the unit arrives as an argument (never over stdin: fabric holds a command's
# stdin open for about 15 s after the data, which every deploy to a rebootable host waited
# out), written beside its place and renamed into it, then systemd told.
# ends with sync: the unit and its enable link are written just before a campaign's reboot into
# MGLRU-at-boot, and a power cycle of a host that hangs soon after (the ladder's last rung)
# lost them on a twin, whose next boot then failed its MGLRU gate
BOOT_HOOK_SCRIPT = ('test -d "$4" || exit 3; '
                    'printf %s "$2" > "$1.tmp" && mv -f "$1.tmp" "$1" && '
                    'systemctl daemon-reload && systemctl enable "$3" && sync')


def boot_hook_argv(unit_path: str, unit_text: str,
                   systemd_dir: str = "/run/systemd/system") -> list[str]:
    """The one command that installs and enables the boot unit (BOOT_HOOK_SCRIPT); it exits
    NO_SYSTEMD where `systemd_dir` (systemd's runtime directory) is missing."""
    return ["sh", "-c", BOOT_HOOK_SCRIPT, "bench-deploy", unit_path, unit_text,
            Path(unit_path).name, systemd_dir]


def install_boot_hook(transport, host, *, unit_path: str = BOOT_UNIT,
                      systemd_dir: str = "/run/systemd/system") -> dict:
    """On a rebootable host with systemd, install and enable the MGLRU boot unit. Elsewhere say
    why not: without it `--lru-gen` reboots fail their gate, runtime toggles still work."""
    if not host.reboot.allowed:
        return {"installed": False, "reason": "host is not rebootable"}
    argv = boot_hook_argv(unit_path, boot_hook_unit(host.work_dir), systemd_dir)
    r = transport.run(argv, timeout=90, check=False)
    if r.rc == NO_SYSTEMD:
        return {"installed": False,
                "reason": "no systemd: run agents/lru_gen_boot.sh from the host's early init "
                          "(the lab guests' init applies bench.lru_gen itself)"}
    if r.rc != 0:
        raise CommandFailed(host.name, ["install", unit_path], r.rc, r.stderr)
    return {"installed": True, "unit": unit_path}


def deploy_hosts(hosts, transport_for=None, repo: Path = REPO, force: bool = False) -> list[dict]:
    """Deploy to every host in parallel; errors are returned per host as data."""
    transport_for = transport_for or ssh_transport_for

    def one(host) -> dict:
        t = None
        try:
            t = transport_for(host)
            return dict(deploy(t, host, repo, force), ok=True, error=None)
        except Exception as exc:  # noqa: BLE001 - one host's failure is data
            err = error_data(exc, output=0)
            return {"host": host.name, "ok": False, "status": "failed", "error": err}
        finally:
            if t is not None:
                t.close()

    return run_parallel(list(hosts), one)

