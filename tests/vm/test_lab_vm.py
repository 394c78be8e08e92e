"""Tier 3: real reboots of qemu guests. mem= really changes MemTotal, MGLRU really toggles, the
boot is proven by boot_id, /proc/cmdline, MemTotal and the lru_gen mask. Bounded: about five
minutes with a cached image on a 2-core machine (each TCG boot is ~20-60 s there)."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from bench.errors import HostKeyError, SafetyError
from bench.hosts.bootplan import LRU_ENABLED
from bench.hosts.reboot import observe, read_boot_id, reboot_host, restore_host, set_mglru_runtime

pytestmark = [pytest.mark.vm, pytest.mark.root, pytest.mark.slow]

MIB = 1 << 20
TIMEOUTS = {"down_timeout": 90, "up_timeout": 240}


def _log(name):
    return lambda ev: print(f"[{name}] {ev.line()}", flush=True)


def test_guests_answer_with_their_own_kernel_and_disks(lab, lab_hosts, connect):
    assert set(lab_hosts) == {"lab-a", "lab-b"}
    for h in lab_hosts.values():
        assert h.reboot.allowed and h.reboot.method == "kexec" and h.mem_floor == 240 * MIB
        t = connect(h)
        o = observe(t)
        assert o.arch == "x86_64" and o.kernel.startswith("6.1")
        assert f"bench.name={h.name}" in o.cmdline
        assert o.lru_mask is not None                        # MGLRU built in
        r = t.run(["sh", "-c", "findmnt -no SOURCE /srv/bench; grep -c ' vdb ' /proc/diskstats;"
                              " grep -w memory /sys/fs/cgroup/cgroup.controllers | wc -l"])
        assert r.stdout.split() == ["/dev/vdb", "1", "1"]


def test_host_keys_are_verified_not_accepted(lab, lab_hosts, tmp_path):
    h = lab_hosts["lab-b"]
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    from dataclasses import replace

    from bench.hosts.ssh import SSHTransport
    t = SSHTransport(replace(h, ssh=replace(h.ssh, known_hosts=str(empty))))
    with pytest.raises(HostKeyError):
        t.run(["true"], timeout=60)
    assert empty.read_text() == ""                          # nothing learned silently


def test_mem_below_floor_is_refused_without_touching_the_host(lab, lab_hosts, connect):
    h = lab_hosts["lab-a"]
    t = connect(h)
    bid = read_boot_id(t)
    calls = []

    class Watch:
        host = t.host
        local = False

        def run(self, argv, **kw):
            calls.append(argv)
            return t.run(argv, **kw)

        def close(self):
            calls.append("close")

    with pytest.raises(SafetyError, match="below the host's floor"):
        reboot_host(Watch(), h, "128M", "off", _log(h.name))
    assert calls == []
    assert read_boot_id(t) == bid


def test_runtime_mglru_toggle_is_recorded_as_runtime(lab, lab_hosts, connect):
    t = connect(lab_hosts["lab-b"])
    on = set_mglru_runtime(t, True, _log("lab-b"))
    assert on["mode"] == "runtime" and on["mask_after"] & 1
    off = set_mglru_runtime(t, False, _log("lab-b"))
    assert not off["mask_after"] & 1 and off["boot_id"] == on["boot_id"]


def test_reboot_with_mem_and_lru_then_restore(lab, lab_hosts, connect):
    """lab-a: mem=768Mi (written mem=805306368: the kernel reads mem=768M as MiB, bench
    writes exact bytes) + bench.lru_gen=off; lab-b at the same time: bench.lru_gen=on. Then
    both restored to the default command line."""
    a, b = lab_hosts["lab-a"], lab_hosts["lab-b"]
    ta, tb = connect(a), connect(b)
    with ThreadPoolExecutor(2) as ex:
        fa = ex.submit(reboot_host, ta, a, "768Mi", "off", _log("lab-a"), **TIMEOUTS)
        fb = ex.submit(reboot_host, tb, b, None, "on", _log("lab-b"), **TIMEOUTS)
        ra, rb = fa.result(), fb.result()
    for r in (ra, rb):
        print(f"{r.host}: {r.verdict} ({r.reason}); down after {r.seconds_down}s, "
              f"SSH after {r.seconds_to_ssh}s")
    assert ra.ok, ra.reason
    assert ra.after.boot_id != ra.before.boot_id
    assert ra.after.memtotal < ra.before.memtotal and ra.after.memtotal <= 768 * MIB
    assert "mem=805306368" in ra.after.args and "bench.lru_gen=off" in ra.after.args
    assert ra.after.mglru is False
    assert [e.step for e in ra.events][:2] == ["before", "plan"] and ra.events[-1].step == "passed"
    assert rb.ok, rb.reason
    assert rb.after.mglru is True and "bench.lru_gen=on" in rb.after.args
    assert tb.run(["cat", LRU_ENABLED]).stdout.strip() != "0x0000"

    with ThreadPoolExecutor(2) as ex:
        fa = ex.submit(restore_host, ta, a, _log("lab-a"), **TIMEOUTS)
        fb = ex.submit(restore_host, tb, b, _log("lab-b"), **TIMEOUTS)
        qa, qb = fa.result(), fb.result()
    for q, r in ((qa, ra), (qb, rb)):
        print(f"{q.host}: restore {q.verdict}; SSH after {q.seconds_to_ssh}s")
        assert q.ok, q.reason
        assert not any(x.startswith(("mem=", "bench.lru_gen=")) for x in q.after.args)
        assert q.after.boot_id not in (r.before.boot_id, r.after.boot_id)
    assert abs(qa.after.memtotal - ra.before.memtotal) < 16 * MIB
    assert qb.after.mglru is False                          # Debian's default: off


def test_late_host_is_power_cycled_then_quarantined(lab, lab_hosts, connect):
    """A host that hangs right after the reboot is triggered (its qemu stopped with SIGSTOP
    before the delayed kexec runs, as a wedged machine would) never comes back on its own:
    the controller-side power_cycle of the inventory (the guest's qemu killed and started with
    the default command line) runs, and, with up_timeout far below a TCG boot, the host is
    quarantined with the reason. Deterministic: no timing decides whether the guest is back.
    Runs last: it leaves lab-b booting its default command line, and waits for it."""
    import os
    import signal

    from bench.lab.vm import lab_status, wait_for_boot
    b = lab_hosts["lab-b"]
    [qemu] = [g["pid"] for g in lab_status(probe=False) if g["name"] == "lab-b" and g["running"]]
    tb = connect(b)

    class HangsAfterTrigger:
        """lab-b's transport: the kexec trigger goes out, then the guest freezes."""

        def __init__(self, t):
            self.t = t

        def run(self, argv, **kw):
            r = self.t.run(argv, **kw)
            if argv[:2] == ["setsid", "-f"]:        # the detached `sleep 1; kexec -e`
                os.kill(qemu, signal.SIGSTOP)
            return r

        def __getattr__(self, name):
            return getattr(self.t, name)

    r = reboot_host(HangsAfterTrigger(tb), b, "768Mi", None, _log("lab-b"), down_timeout=90,
                    up_timeout=3)
    assert not r.ok and r.verdict == "quarantine" and r.power_cycled, r.reason
    assert "after a power cycle" in r.reason
    assert [e.step for e in r.events][-2:] == ["power-cycle", "quarantine"]
    wait_for_boot(tb, r.before.boot_id, 240)
    o = observe(tb)
    assert "mem=805306368" not in o.args                     # the power cycle booted the default
