"""Tier 4: a real GRUB one-shot boot of twin-b (aarch64 UEFI, GRUB, systemd): the inventory's
method is grub-reboot; bench writes its entry into custom.cfg, `grub-reboot` sets next_entry,
the guest boots it once with mem= and bench.lru_gen=, the deployed bench-lru-gen.service
applies MGLRU at boot, and the gate proves it (boot_id, /proc/cmdline, MemTotal in the aarch64
range, the MGLRU mask). Then the restore boots GRUB's default entry and proves that too; the
admin's lines in custom.cfg survive both."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.hosts.bootplan import GRUB_CFG, GRUB_CUSTOM, GRUB_ENV, grub_cfg_problems, parse_grubenv
from bench.hosts.deploy import install_boot_hook
from bench.hosts.reboot import observe, reboot_host, restore_host

pytestmark = [pytest.mark.twin, pytest.mark.root, pytest.mark.slow]

HOST = "twin-b"
TIMEOUTS = {"down_timeout": 180, "up_timeout": 600}
ADMIN = "# the admin's own entry: bench must keep it\nmenuentry 'admin-rescue' { true }\n"
BOOT_SCRIPT = Path(__file__).resolve().parents[2] / "agents" / "lru_gen_boot.sh"


def _log(name):
    return lambda ev: print(f"[{name}] {ev.line()}", flush=True)


def _prepare(t, host) -> dict:
    """The MGLRU boot unit as `bench hosts deploy` installs it (only its script copied: the
    agent build is the other tests' business), the admin's custom.cfg, and a grub.cfg that
    sources it (update-grub when the image's own does not, as on an installed Debian)."""
    wd = host.work_dir
    t.run(["mkdir", "-p", f"{wd}/agents"], timeout=30)
    t.run(["sh", "-c", 'cat > "$1"', "bench-test", f"{wd}/agents/lru_gen_boot.sh"],
          stdin=BOOT_SCRIPT.read_text(), timeout=30)
    hook = install_boot_hook(t, host)
    assert hook["installed"], hook
    t.run(["sh", "-c", 'cat > "$1"', "bench-test", GRUB_CUSTOM], stdin=ADMIN, timeout=30)
    cfg = t.run(["cat", GRUB_CFG], timeout=30).stdout
    if grub_cfg_problems(cfg):
        print(f"{host.name}: {grub_cfg_problems(cfg)}: update-grub")
        t.run(["update-grub"], timeout=600)
    assert grub_cfg_problems(t.run(["cat", GRUB_CFG], timeout=30).stdout) == []
    return hook


def test_mglru_at_boot_without_the_boot_unit_is_refused_before_any_change(twin_hosts, connect):
    """bench.lru_gen= works only through the deployed unit: on a systemd host without it the
    reboot is refused before anything changes, naming the unit and the deploy that installs it
    (a fresh twin's first campaign boot used to reboot and then fail its MGLRU gate)."""
    from bench.errors import HostError
    from bench.hosts.deploy import BOOT_UNIT
    host = twin_hosts[HOST]
    unit = Path(BOOT_UNIT).name
    t = connect(host)
    try:
        t.run(["systemctl", "disable", unit], timeout=60, check=False)
        before = observe(t)
        with pytest.raises(HostError) as e:
            reboot_host(t, host, None, "off", _log(HOST), **TIMEOUTS)
        assert unit in e.value.message and "bench hosts deploy twin-b" in (e.value.hint or "")
        assert observe(t).boot_id == before.boot_id
        assert t.run(["grub-editenv", "/boot/grub/grubenv", "list"], timeout=30).stdout \
            .find("next_entry=bench") < 0                   # nothing staged
    finally:
        t.close()


def test_grub_one_shot_boot_with_mem_and_mglru_then_restore(twin_hosts, connect):
    host = twin_hosts[HOST]
    assert host.reboot.method == "grub-reboot" and host.reboot.grub_entry
    t = connect(host)
    try:
        _prepare(t, host)
        before = observe(t)
        assert before.arch == "aarch64"
        want_lru = "off" if before.mglru else "on"        # the unit must change it at boot
        mem = str(host.mem_floor)
        r = reboot_host(t, host, mem, want_lru, _log(HOST), **TIMEOUTS)
        print(f"{HOST}: {r.verdict} ({r.reason}); down after {r.seconds_down}s, SSH after "
              f"{r.seconds_to_ssh}s")
        assert r.ok, r.reason
        assert {c.name for c in r.gate.checks} >= {"boot_id changed", "cmdline mem=",
                                                   "cmdline bench.lru_gen=",
                                                   "MemTotal in range", "MGLRU"}
        assert f"mem={mem}" in r.after.args and f"bench.lru_gen={want_lru}" in r.after.args
        assert r.after.memtotal < before.memtotal and r.after.mglru is (want_lru == "on")
        assert not r.power_cycled
        custom = t.run(["cat", GRUB_CUSTOM], timeout=30).stdout
        assert custom.startswith(ADMIN) and f"menuentry '{host.reboot.grub_entry}'" in custom
        env = parse_grubenv(t.run(["grub-editenv", GRUB_ENV, "list"], timeout=30).stdout)
        assert not env.get("next_entry"), env                 # one shot: GRUB cleared it
        j = t.run(["journalctl", "-b", "--no-pager", "-o", "cat", "-u",
                   "bench-lru-gen.service"], check=False, timeout=60).stdout
        assert "lru_gen/enabled=" in j, j

        q = restore_host(t, host, _log(HOST), **TIMEOUTS)
        print(f"{HOST}: restore {q.verdict} ({q.reason}); SSH after {q.seconds_to_ssh}s")
        assert q.ok, q.reason
        assert not any(a.startswith(("mem=", "bench.lru_gen=")) for a in q.after.args)
        assert q.after.boot_id not in (before.boot_id, r.after.boot_id)
        assert q.after.memtotal > r.after.memtotal
        assert t.run(["cat", GRUB_CUSTOM], timeout=30).stdout == ADMIN
    finally:
        t.close()
