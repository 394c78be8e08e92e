"""The GH200 twin lab for real: two aarch64 guests booted through UEFI and GRUB, 16 KiB pages,
systemd, cgroup v2, MGLRU, the pool disk, inventory in the shape of hosts/gh200-a.toml, a GRUB
one-shot entry that boots once, a BMC power cycle through ipmitool, and the agent's native tests
(cold and warm device bytes, the balloon's VmLck, O_DIRECT alignment, the pinned arena)
passing inside a guest. Timings are printed (run with -s to see them)."""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from bench.hosts.bootplan import grub_entry_text
from bench.lab import twin as lab_twin
from bench.lab.vm import wait_for_boot

pytestmark = [pytest.mark.twin, pytest.mark.slow, pytest.mark.root]

REPO = Path(__file__).resolve().parents[2]
NATIVE_TESTS = ["tests/local/native/test_agent_replay.py", "tests/local/native/test_balloon.py"]
# the native tests the issue names: device bytes cold then warm, the pinned arena (mlock),
# O_DIRECT and fadvise reads (alignment to the 16 KiB page), the balloon's VmLck
NATIVE_SELECT = ("cold_then_warm or pinned_arena or nocache_reads_everything "
                 "or balloon_locks_and_releases")


def _sh(t, script: str, timeout: float = 120) -> str:
    return t.run(["sh", "-c", script], timeout=timeout).stdout


def test_inventory_has_the_gh200_shape_and_passes_hosts_check(twin, twin_hosts):
    assert sorted(twin_hosts) == ["twin-a", "twin-b"]
    for h in twin_hosts.values():
        assert h.reboot.method == "grub-reboot" and h.reboot.grub_entry == "bench-memboot"
        pc = list(h.reboot.power_cycle or ())
        assert pc[:3] == ["ipmitool", "-I", "lanplus"] and pc[-3:] == ["chassis", "power",
                                                                      "cycle"]
        assert h.expect["arch"] == "aarch64" and h.expect["page_size"] == 16384
        assert h.pool_dir == "/srv/bench/pool"
    r = subprocess.run([sys.executable, "-m", "bench", "hosts", "check", "--hosts-dir",
                        twin["hosts_dir"], "--json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert '"ok": false' not in r.stdout


def test_guests_are_aarch64_16k_systemd_cgroup2_mglru_uefi(twin, twin_hosts, connect):
    for name, h in twin_hosts.items():
        out = _sh(connect(h), "uname -m; getconf PAGESIZE; cat /proc/1/comm; "
                  "stat -fc %T /sys/fs/cgroup; cat /sys/kernel/mm/lru_gen/enabled; "
                  "test -d /sys/firmware/efi && echo efi; hostname; "
                  "findmnt -no SOURCE,FSTYPE /srv/bench; uname -r; "
                  "systemctl is-system-running --wait || true")
        lines = out.split()
        assert lines[:4] == ["aarch64", "16384", "systemd", "cgroup2fs"], out
        assert re.fullmatch(r"0x[0-9a-f]{4}", lines[4]), out          # MGLRU is built in
        assert lines[5:7] == ["efi", name], out
        assert lines[7:9] == ["/dev/vdb", "ext4"], out
        assert lines[9].startswith("6.12") and lines[9].endswith("-arm64-16k"), out
        assert lines[10] in ("running", "degraded"), out
        print(f"{name}: {' '.join(lines)}")


def _ssh_argv(h) -> list[str]:
    return ["ssh", "-i", h.ssh.identity_file, "-p", str(h.port), "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=yes", "-o", f"UserKnownHostsFile={h.ssh.known_hosts}",
            f"root@{h.address}"]


def test_native_agent_tests_pass_in_a_twin_guest(twin, twin_hosts, connect, tmp_path):
    h = twin_hosts["twin-a"]
    t = connect(h)
    bundle = tmp_path / "src.tar.gz"
    with tarfile.open(bundle, "w:gz") as tar:
        for rel in ("bench", "native", "tests/conftest.py", "tests/support", "tests/local/native",
                    "pyproject.toml"):
            tar.add(REPO / rel, arcname=rel, filter=_no_build_outputs)
    t.run(["rm", "-rf", "/srv/bench/src", "/srv/bench/tmp"], timeout=60)
    t.run(["mkdir", "-p", "/srv/bench/src", "/srv/bench/tmp"], timeout=60)
    t.put(bundle, "/srv/bench/src.tar.gz")
    t.run(["tar", "-xzf", "/srv/bench/src.tar.gz", "-C", "/srv/bench/src"], timeout=300)
    t0 = time.monotonic()
    r = t.run(["env", "TMPDIR=/srv/bench/tmp", "python3", "-m", "pytest", "-q",
               "-p", "no:cacheprovider", "-rs", "-k", NATIVE_SELECT, *NATIVE_TESTS],
              timeout=1500, check=False)
    took = time.monotonic() - t0
    out = r.stdout + r.stderr
    print(f"native tests in twin-a ({took:.0f}s):\n{out[-3000:]}")
    assert r.rc == 0, out[-6000:]
    summary = out.strip().splitlines()[-1]
    m = re.search(r"(\d+) passed", summary)
    assert m and int(m.group(1)) >= 6, summary
    assert "skipped" not in summary and "failed" not in summary, summary


def _no_build_outputs(ti: tarfile.TarInfo) -> tarfile.TarInfo | None:
    name = Path(ti.name).name
    if name in ("__pycache__", ".venv") or name.endswith((".o", ".pyc")) or name == "bench-agent":
        return None
    return ti


def test_grub_reboot_boots_a_one_shot_entry_once(twin, twin_hosts, connect):
    h = twin_hosts["twin-b"]
    t = connect(h)
    kernel = _sh(t, "uname -r").strip()
    base = _sh(t, "cat /proc/cmdline").split()
    append = " ".join(a for a in base if not a.startswith("BOOT_IMAGE=")) + " bench.lab=oneshot"
    entry = grub_entry_text("bench-lab-oneshot", f"/boot/vmlinuz-{kernel}",
                            f"/boot/initrd.img-{kernel}", append)
    t.run(["sh", "-c", 'cat > /boot/grub/custom.cfg'], stdin=entry, timeout=60)
    t.run(["grub-reboot", "bench-lab-oneshot"], timeout=120)
    assert "next_entry=bench-lab-oneshot" in _sh(t, "grub-editenv list")
    times = []
    for want in (True, False):          # the one-shot entry, then the default again
        old = _sh(t, "cat /proc/sys/kernel/random/boot_id").strip()
        t0 = time.monotonic()
        t.run(["sh", "-c", "systemctl reboot >/dev/null 2>&1 &"], timeout=60)
        t = connect(h)
        wait_for_boot(t, old, h.reboot.up_timeout, None, None)
        times.append(round(time.monotonic() - t0, 1))
        cmdline = _sh(t, "cat /proc/cmdline")
        assert ("bench.lab=oneshot" in cmdline) is want, cmdline
        assert "next_entry=bench-lab-oneshot" not in _sh(t, "grub-editenv list")
    t.run(["rm", "-f", "/boot/grub/custom.cfg"], timeout=60)
    print(f"GRUB reboot to SSH: one-shot entry {times[0]}s, back to default {times[1]}s")


def test_bmc_power_cycle_restarts_the_guest(twin, twin_hosts, connect):
    h = twin_hosts["twin-a"]
    t = connect(h)
    g = twin["state"]["guests"]["twin-a"]
    status = subprocess.run(lab_twin.ipmitool_argv(g, "chassis", "power", "status"),
                            capture_output=True, text=True, timeout=60)
    assert "Chassis Power is on" in status.stdout, status.stdout + status.stderr
    old_pid = lab_twin.twin_bmc.qemu_pid(g)
    old = _sh(t, "cat /proc/sys/kernel/random/boot_id").strip()
    t0 = time.monotonic()
    r = subprocess.run(list(h.reboot.power_cycle or ()), capture_output=True, text=True,
                       timeout=60)                       # the inventory's own command
    assert r.returncode == 0, r.stdout + r.stderr
    t = connect(h)
    wait_for_boot(t, old, h.reboot.up_timeout, None, g["console"])
    took = round(time.monotonic() - t0, 1)
    new_pid = lab_twin.twin_bmc.qemu_pid(g)
    assert new_pid is not None and new_pid != old_pid    # a new qemu: power really went off
    print(f"BMC power cycle to SSH: {took}s (qemu pid {old_pid} -> {new_pid})")
