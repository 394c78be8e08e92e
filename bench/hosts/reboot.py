"""Proven reboots: boot a host with a new `mem=` / MGLRU wish and prove the boot took.

The pure planning and gating (command-line editing, the MemTotal range, the gate, the safety
checks, the one-shot command builders) is bench.hosts.bootplan; this module does the I/O steps,
through a bench.hosts.transport.Transport only (the power-cycle argv runs on the controller
through `LocalTransport`).

Methods: `kexec` (kexec -l KERNEL --initrd=... --append=..., then `systemctl kexec` where
systemd runs, else `kexec -e` detached so the SSH session can close), `grub-reboot` (a menu
entry in a marked block of /boot/grub/custom.cfg, the rest of the file kept, then `grub-reboot
ENTRY`, checked in grubenv: next boot only; a restore takes the block out, unsets next_entry and
reboots into GRUB's default entry; proven on the twin lab's aarch64 guests, tests/twin),
`command` (an argv run on the host, "{cmdline}" replaced by the new command line).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from bench.errors import BenchError, CommandTimeout, HostError, SafetyError, Unreachable
from bench.hosts.deploy import BOOT_UNIT
from bench.hosts.bootplan import (BOOT_ID, GRUB_CFG, GRUB_CUSTOM, GRUB_MAX_TEXT, LRU_ENABLED, Gate,
                                  Observation, check_grub_entry, check_reboot_allowed,
                                  command_argv, evaluate_gate, grub_boot_path, grub_cfg_problems,
                                  grub_oneshot_plan, grub_restore_plan, kexec_exec_argv,
                                  kexec_load_argv, next_cmdline, normalize_lru, normalize_mem,
                                  observation_from_files, parse_grubenv, split_head_output,
                                  thp_repairs, THP_FILES)
from bench.hosts.inventory import Host
from bench.hosts.procfs import cmdline_param, mglru_on, parse_lru_gen
from bench.hosts.transport import LocalTransport, Transport, quote_argv, write_line


@dataclass
class Event:
    at: str            # UTC ISO timestamp
    t: float           # seconds since the start of this reboot
    step: str
    detail: str

    def line(self) -> str:
        return f"{self.at} +{self.t:7.1f}s {self.step}: {self.detail}"


@dataclass
class RebootResult:
    host: str
    ok: bool
    verdict: str                     # "passed" | "quarantine"
    reason: str
    method: str
    cmdline: str                     # the command line asked for
    mem: str | None
    lru_gen: str | None
    before: Observation | None = None
    after: Observation | None = None
    gate: Gate | None = None
    events: list[Event] = field(default_factory=list)
    seconds_down: float | None = None      # from the trigger command to the host seen down
    seconds_to_ssh: float | None = None    # from the trigger command to SSH with a new boot_id
    power_cycled: bool = False

    def as_dict(self) -> dict:
        return asdict(self)

    def raise_for_status(self) -> None:
        if not self.ok:
            raise HostError(self.host, f"reboot not proven, host quarantined: {self.reason}")


class _Log:
    def __init__(self, host: str, callback: Callable[[Event], None] | None):
        self.host = host
        self.t0 = time.monotonic()
        self.events: list[Event] = []
        self.callback = callback
        self.t_trigger: float | None = None

    def __call__(self, step: str, detail: str = "") -> Event:
        ev = Event(datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                   round(time.monotonic() - self.t0, 3), step, detail)
        self.events.append(ev)
        if self.callback:
            self.callback(ev)
        return ev


def observe(transport: Transport, timeout: float = 30.0) -> Observation:
    """One round trip: boot_id, cmdline, meminfo, lru_gen mask and THP modes (if present), arch,
    kernel."""
    files = [BOOT_ID, "/proc/cmdline", "/proc/meminfo", LRU_ENABLED, *THP_FILES,
             "/proc/sys/kernel/osrelease"]
    r = transport.run(["head", "-n", "200", *files], timeout=timeout, check=False)
    got = split_head_output(r.stdout)
    if BOOT_ID not in got:
        raise HostError(transport.host, f"cannot read {BOOT_ID}: {r.stderr.strip()[-200:]}")
    arch = transport.run(["uname", "-m"], timeout=timeout).stdout.strip()
    return observation_from_files(got, arch=arch,
                                  kernel=got.get("/proc/sys/kernel/osrelease", "").strip())


def read_boot_id(transport: Transport, timeout: float = 15.0) -> str:
    return transport.run(["cat", BOOT_ID], timeout=timeout).stdout.strip()


def local_boot_id() -> str | None:
    try:
        return Path(BOOT_ID).read_text().strip()
    except OSError:
        return None


def _poll_boot_id(transport: Transport, old: str, deadline: float, *, want_down: bool,
                  log: _Log, interval: float = 2.0, probe_timeout: float = 15.0) -> str | None:
    """want_down: return 'down' when the host stops answering, or the new boot_id if it is
    already back; else return the first boot_id different from `old`. None on deadline."""
    while time.monotonic() < deadline:
        try:
            bid = read_boot_id(transport, timeout=min(probe_timeout,
                                                      max(1.0, deadline - time.monotonic())))
        except (HostError, OSError) as exc:
            if want_down:
                log("down", f"host stopped answering ({type(exc).__name__})")
                return "down"
            bid = None
        if bid and bid != old:
            return bid
        try:
            transport.close()
        except Exception:  # noqa: BLE001 - a dead connection may fail to close; nothing to do
            pass
        time.sleep(interval)
    return None


def _host_has_systemd(transport: Transport) -> bool:
    r = transport.run(["test", "-d", "/run/systemd/system"], check=False, timeout=30)
    return r.rc == 0


def _trigger(transport: Transport, argv: list[str], log: _Log) -> None:
    """Run the command that takes the host down; losing the connection here is expected (the
    polling that follows decides), a command that fails outright is not."""
    log.t_trigger = time.monotonic()
    try:
        transport.run(argv, timeout=60)
    except (Unreachable, CommandTimeout) as exc:
        log("trigger", f"connection ended: {exc}")


def _boot_files(host: Host, before: Observation) -> tuple[str, str]:
    """Kernel and initrd to boot: the inventory's, else the running release's under /boot."""
    kernel = host.reboot.kexec_kernel or f"/boot/vmlinuz-{before.kernel}"
    initrd = host.reboot.kexec_initrd or f"/boot/initrd.img-{before.kernel}"
    return kernel, initrd


def _read_text(transport: Transport, path: str, missing_ok: bool) -> str:
    """A text file of the host, at most GRUB_MAX_TEXT bytes ('' when absent and missing_ok)."""
    r = transport.run(["head", "-c", str(GRUB_MAX_TEXT + 1), path], check=False, timeout=30)
    if r.rc != 0:
        if missing_ok and "No such file" in r.stderr:
            return ""
        raise HostError(transport.host, f"cannot read {path}: {r.stderr.strip()[-200:]}")
    if len(r.stdout.encode()) > GRUB_MAX_TEXT:
        raise HostError(transport.host, f"{path} is over {GRUB_MAX_TEXT} bytes; bench will not "
                        "rewrite it")
    return r.stdout


def _write_text(transport: Transport, path: str, text: str | None) -> None:
    """Replace a host file by text (a temporary file beside it, renamed over it); None
    removes it."""
    if text is None:
        transport.run(["rm", "-f", "--", path], timeout=30)
        return
    tmp = f"{path}.bench-tmp"
    transport.run(["sh", "-c", 'cat > "$1"', "bench-grub", tmp], stdin=text, timeout=30)
    transport.run(["mv", "-f", "--", tmp, path], timeout=30)


def _grub_path(transport: Transport, path: str) -> str:
    r = transport.run(["stat", "-c", "%m", "--", path], check=False, timeout=30)
    if r.rc != 0:
        raise HostError(transport.host, f"{path}: {r.stderr.strip()[-200:] or 'not found'}")
    return grub_boot_path(path, r.stdout.strip())


def _grub_stage(transport: Transport, host: Host, append: str, before: Observation,
                systemd: bool, log: _Log, default_boot: bool) -> None:
    """grub-reboot: check grub.cfg honours a one-shot custom entry, write bench's block into
    custom.cfg (or take it out for the default boot), set (or unset) next_entry, check grubenv,
    then reboot. Nothing is changed before the checks pass."""
    entry = check_grub_entry(host.reboot.grub_entry or "")
    problems = grub_cfg_problems(_read_text(transport, GRUB_CFG, missing_ok=False))
    if problems:
        raise HostError(transport.host, "; ".join(problems))
    kernel, initrd = _boot_files(host, before)
    if default_boot:
        plan = grub_restore_plan(entry, _read_text(transport, GRUB_CUSTOM, True), systemd)
        log("stage", f"{plan['path']}: bench's {entry!r} block taken out; GRUB's default entry")
    else:
        r = transport.run(["test", "-e", initrd], check=False, timeout=30)
        g_initrd = _grub_path(transport, initrd) if r.rc == 0 else None
        existing = _read_text(transport, GRUB_CUSTOM, True)
        plan = grub_oneshot_plan(entry, _grub_path(transport, kernel), g_initrd, append,
                                 existing, systemd)
        log("stage", f"write {plan['path']} entry {entry!r}: "
                     f"{plan['entry_text'].splitlines()[2].strip()}")
    _write_text(transport, plan["path"], plan["text"])
    *stage, trigger = plan["argv"]
    for argv in stage:
        log("stage", quote_argv(argv))
        transport.run(argv, timeout=60)
    env = parse_grubenv(transport.run(plan["check"], timeout=30).stdout)
    want = None if default_boot else entry
    log("stage", f"grubenv next_entry={env.get('next_entry') or '(unset)'}")
    if (env.get("next_entry") or None) != want:
        raise HostError(transport.host, f"grubenv next_entry is {env.get('next_entry')!r} "
                        f"after {quote_argv(stage[-1])}, not {want!r}: grubenv not writable "
                        "here (on MD/LVM?), no one-shot boot")
    log("trigger", quote_argv(trigger))
    _trigger(transport, trigger, log)


def _stage_and_trigger(transport: Transport, entry: Host, method: str, append: str,
                       before: Observation, log: _Log, default_boot: bool = False) -> None:
    systemd = _host_has_systemd(transport)
    if method == "kexec":
        kernel, boot_initrd = _boot_files(entry, before)
        r = transport.run(["test", "-e", boot_initrd], check=False, timeout=30)
        initrd = boot_initrd if r.rc == 0 else None
        argv = kexec_load_argv(kernel, initrd, append)
        log("stage", quote_argv(argv))
        transport.run(argv, timeout=120)
        argv = kexec_exec_argv(systemd)
        log("trigger", quote_argv(argv))
        _trigger(transport, argv, log)
    elif method == "grub-reboot":
        _grub_stage(transport, entry, append, before, systemd, log, default_boot)
    elif method == "command":
        argv = command_argv(entry.reboot.command or (), append)
        log("trigger", quote_argv(argv))
        _trigger(transport, argv, log)
    else:
        raise SafetyError(f"{transport.host}: reboot method {method!r} not supported")


def reboot_host(transport: Transport, host_entry: Host, mem: str | None,
                lru_gen: str | None, log: Callable[[Event], None] | None = None, *,
                down_timeout: float | None = None, up_timeout: float | None = None,
                poll_interval: float = 2.0, default_boot: bool = False) -> RebootResult:
    """Boot the host once with mem= / bench.lru_gen= as wished and prove it (see module doc).

    Raises SafetyError (before any change on the host) for a refused reboot; returns a
    RebootResult: verdict "passed", or "quarantine" with the reason (host did not go down, did
    not come back in up_timeout even after a power cycle, or the gate failed). `log` gets each
    Event as it happens; result.events holds them all."""
    name = host_entry.name
    L = _Log(name, log)
    mem = normalize_mem(mem)
    lru_gen = normalize_lru(lru_gen)
    method = host_entry.reboot.method
    down_timeout = down_timeout or host_entry.reboot.down_timeout
    up_timeout = up_timeout or host_entry.reboot.up_timeout
    # safety checks that need no host I/O first: not rebootable / local / floor
    check_reboot_allowed(host_entry, mem, local_boot_id=None, host_boot_id=None,
                         transport_is_local=transport.local)
    before = observe(transport)
    L("before", f"boot_id={before.boot_id} MemTotal={before.memtotal} "
                f"lru_gen={before.lru_mask if before.lru_mask is None else hex(before.lru_mask)} "
                f"cmdline={before.cmdline!r}")
    check_reboot_allowed(host_entry, mem, local_boot_id=local_boot_id(),
                         host_boot_id=before.boot_id, transport_is_local=False)
    if lru_gen is not None:
        require_boot_hook(transport, name)
    append = next_cmdline(before.cmdline, mem, lru_gen)
    L("plan", f"method={method} append={append!r}" + (" (default boot)" if default_boot else ""))
    res = RebootResult(name, False, "quarantine", "", method, append, mem, lru_gen,
                       before=before, events=L.events)
    _stage_and_trigger(transport, host_entry, method, append, before, L, default_boot)
    t_trigger = L.t_trigger or time.monotonic()
    new_id = _await_new_boot(transport, host_entry, before, res, L, t_trigger, down_timeout,
                             up_timeout, poll_interval)
    if new_id is None:
        L("quarantine", res.reason)
        return res
    res.seconds_to_ssh = round(time.monotonic() - t_trigger, 3)
    L("up", f"new boot_id={new_id} after {res.seconds_to_ssh:.1f}s")
    after = _keep_thp(transport, before, observe(transport), L)
    res.after = after
    full = before.memtotal if cmdline_param(before.args, "mem") is None else None
    gate = evaluate_gate(before, after, mem, lru_gen, arch=before.arch, full_memtotal=full)
    res.gate = gate
    for c in gate.checks:
        L("gate", f"{'ok  ' if c.ok else 'FAIL'} {c.name}: {c.detail}")
    if res.power_cycled:
        # a power cycle boots the default entry: the gate decides, but say so
        L("note", "booted after a power cycle")
    res.ok = gate.ok
    res.verdict = "passed" if gate.ok else "quarantine"
    res.reason = gate.reason
    L(res.verdict, res.reason)
    return res


# exits 1 on a systemd host whose unit is not enabled; 0 where systemd is not PID 1 (the lab
# guests' own init applies bench.lru_gen=) or the unit is enabled
_HOOK_CHECK = 'test -d /run/systemd/system || exit 0; systemctl is-enabled --quiet "$1"'


def require_boot_hook(transport: Transport, name: str) -> None:
    """bench.lru_gen= takes effect only through the boot unit `bench hosts deploy` installs: without
    it the host would boot with the MGLRU it had and the gate would quarantine it after a
    wasted reboot (a fresh twin did, in its campaign's first boot). Refused before any change."""
    unit = BOOT_UNIT.rsplit("/", 1)[-1]
    r = transport.run(["sh", "-c", _HOOK_CHECK, "bench-hook-check", unit], timeout=30,
                      check=False)
    if r.rc != 0:
        raise HostError(name, f"MGLRU at boot (bench.lru_gen=) needs the boot unit {unit}, "
                              "which is not enabled on this systemd host",
                        f"`bench hosts deploy {name}` installs it")


def write_sysfs(transport: Transport, path: str, value: str, check: bool = True):
    """Write `value` to a sysfs file in one write(2) (bench.hosts.transport.write_line)."""
    return write_line(transport, path, value, check=check)


def _keep_thp(transport: Transport, before: Observation, after: Observation,
              L: _Log) -> Observation:
    """Write back the THP modes the host had before the reboot where the new boot differs
    (bootplan module doc: under 512 MiB the kernel turns THP off), then look again; the gate
    checks the result."""
    fixes = thp_repairs(before, after)
    if not fixes:
        return after
    for path, mode in fixes:
        r = write_sysfs(transport, path, mode, check=False)
        L("thp", f"{path}: booted {after.thp_modes.get(path.rsplit('/', 1)[-1])}, wrote "
                 f"{mode} (the mode before the reboot)" + ("" if r.rc == 0 else
                                                          f"; write failed: rc {r.rc}"))
    return observe(transport)


def _await_new_boot(transport: Transport, host: Host, before: Observation, res: RebootResult,
                    L: _Log, t_trigger: float, down_timeout: float, up_timeout: float,
                    poll_interval: float) -> str | None:
    """The new boot_id once the host went down and came back, power-cycling it (when the
    inventory says how) if it does not come back in time; None with res.reason when not."""
    try:
        transport.close()
    except Exception:  # noqa: BLE001 - the trigger may have killed the connection already
        pass
    got = _poll_boot_id(transport, before.boot_id, time.monotonic() + down_timeout,
                        want_down=True, log=L, interval=min(poll_interval, 1.0))
    if got is None:
        res.reason = (f"host never went down within {down_timeout:.0f}s "
                      f"(still boot_id {before.boot_id})")
        return None
    res.seconds_down = round(time.monotonic() - t_trigger, 3)
    if got != "down":
        return got
    new_id = _poll_boot_id(transport, before.boot_id, time.monotonic() + up_timeout,
                           want_down=False, log=L, interval=poll_interval)
    if new_id is not None:
        return new_id
    pc = host.reboot.power_cycle
    if not pc:
        res.reason = f"no new boot_id within {up_timeout:.0f}s and no power_cycle configured"
        return None
    L("power-cycle", quote_argv(list(pc)))
    res.power_cycled = True
    failed = ""
    try:
        LocalTransport("controller").run(list(pc), timeout=120)
    except BenchError as exc:
        # a BMC often reports an error although the cycle happened (or the chassis was off):
        # the new boot_id decides, as in the campaign's recovery ladder
        failed = " ".join(str(exc).split())[:300]
        L("power-cycle", f"the command failed ({failed}); waiting for a new boot anyway")
    new_id = _poll_boot_id(transport, before.boot_id, time.monotonic() + up_timeout,
                           want_down=False, log=L, interval=poll_interval)
    if new_id is None:
        res.reason = (f"no new boot_id within {up_timeout:.0f}s after a power cycle"
                      + (f" whose command failed: {failed}" if failed else ""))
    return new_id


def restore_host(transport: Transport, host_entry: Host,
                 log: Callable[[Event], None] | None = None, **kw) -> RebootResult:
    """Boot the default command line again (no mem=, no bench.lru_gen=) and prove it."""
    return reboot_host(transport, host_entry, None, None, log, default_boot=True, **kw)


def set_mglru_runtime(transport: Transport, on: bool,
                      log: Callable[[Event], None] | None = None) -> dict:
    """Toggle MGLRU without a reboot ('y'/'n' to lru_gen/enabled), read it back. Recorded as a
    runtime toggle (mode 'runtime'), with the boot_id it happened in and the masks."""
    L = _Log(transport.host, log)
    r = transport.run(["cat", LRU_ENABLED], check=False, timeout=30)
    if r.rc != 0:
        raise HostError(transport.host, "kernel has no /sys/kernel/mm/lru_gen (built without "
                        "MGLRU): cannot toggle it")
    before = parse_lru_gen(r.stdout)
    write_sysfs(transport, LRU_ENABLED, "y" if on else "n")
    after = parse_lru_gen(transport.run(["cat", LRU_ENABLED], timeout=30).stdout)
    boot_id = read_boot_id(transport)
    ok = mglru_on(after) == on
    L("mglru-runtime", f"{before:#06x} -> {after:#06x} (wanted main bit {'on' if on else 'off'})")
    if not ok:
        raise HostError(transport.host, f"MGLRU still {after:#06x} after writing "
                        f"{'y' if on else 'n'}")
    return {"host": transport.host, "mode": "runtime", "wanted": "on" if on else "off",
            "mask_before": before, "mask_after": after, "boot_id": boot_id, "ok": ok,
            "events": [asdict(e) for e in L.events]}
