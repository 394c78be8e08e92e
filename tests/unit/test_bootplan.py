"""Pure parts of proven reboots (bench.hosts.bootplan), tested with data (no qemu, no SSH): command-line editing, the
MemTotal range mem= implies, the gate, the safety checks, the one-shot command builders.
Observed values come from the lab's Debian 6.1 guests (1536 MiB, x86_64, TCG)."""

from dataclasses import replace

import pytest

from bench.errors import InputError, SafetyError
from bench.hosts.bootplan import (GIB, MIB, Observation, check_reboot_allowed, evaluate_gate,
                                  grub_oneshot_plan, kexec_exec_argv, kexec_load_argv,
                                  memtotal_range, next_cmdline, normalize_lru, normalize_mem,
                                  observation_from_files, parse_mem, split_head_output,
                                  thp_repairs)
from bench.hosts.inventory import Host, RebootSpec, load_host_file
from bench.hosts.reboot import reboot_host
from tests.support import paths

ROOT = paths.REPO
DEFAULT = "root=/dev/vda rw console=ttyS0 panic=10 loglevel=4 bench.name=lab-a"
# seen in the lab: MemTotal of a 1536 MiB guest without mem= and with mem=768M (the kernel
# reads that as 768 MiB: bench writes the same boot as mem=805306368, its wish "768Mi")
FULL_MT, MEM768_MT = 1532182528, 741183488
MEM768 = "768Mi"


def obs(boot_id="b0", cmdline=DEFAULT, memtotal=FULL_MT, lru=0x0, arch="x86_64"):
    return Observation(boot_id, cmdline, memtotal, lru, arch, "6.1.0-50-amd64")


# mem= values ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text,value", [("768M", 768 * MIB), ("768m", 768 * MIB),
                                        ("64G", 64 * GIB), ("4096", 4096), ("1T", 1 << 40),
                                        ("102000000000", 102 * 10 ** 9)])
def test_parse_mem_reads_the_command_line_as_the_kernel_does(text, value):
    """/proc/cmdline's mem= is the kernel's memparse text: K/M/G/T are binary there."""
    assert parse_mem(text) == value


@pytest.mark.parametrize("bad", ["1.5G", "768MiB", "-1G", "0", "G", "768 M", "64GB"])
def test_parse_mem_refuses_what_the_kernel_would_misread(bad):
    with pytest.raises(InputError):
        parse_mem(bad)


def test_normalize_writes_the_wish_as_exact_bytes():
    """A wish is a bench size (decimal G, binary Gi); the kernel gets its exact bytes, which
    memparse reads back as the same number."""
    assert normalize_mem("93G") == "93000000000" and parse_mem("93000000000") == 93 * 10 ** 9
    assert normalize_mem("102g") == "102000000000"
    assert normalize_mem("768Mi") == "805306368" == str(parse_mem("768M"))
    assert normalize_mem(normalize_mem("1.5G")) == "1500000000"      # idempotent
    assert normalize_mem(4096) == "4096"
    assert normalize_mem("none") is None and normalize_mem(None) is None
    assert normalize_lru("ON") == "on" and normalize_lru(None) is None
    with pytest.raises(InputError):
        normalize_lru("maybe")


# command line --------------------------------------------------------------------------------

def test_next_cmdline_adds_wishes_and_panic():
    assert next_cmdline(DEFAULT, "768M", "off") == (
        "root=/dev/vda rw console=ttyS0 loglevel=4 bench.name=lab-a mem=768000000 "
        "bench.lru_gen=off panic=10")


def test_next_cmdline_replaces_old_values_and_loader_args():
    cur = ("BOOT_IMAGE=/vmlinuz-6.8.0 root=UUID=ab ro mem=512M quiet bench.lru_gen=on "
           "panic=0 mem=1G initrd=\\initrd.img")
    assert next_cmdline(cur, "64G", None) == "root=UUID=ab ro quiet mem=64000000000 panic=10"
    assert next_cmdline(cur, "64Gi", None) == "root=UUID=ab ro quiet mem=68719476736 panic=10"


def test_next_cmdline_none_restores_default():
    cur = next_cmdline(DEFAULT, MEM768, "off")
    assert next_cmdline(cur, None, None) == (
        "root=/dev/vda rw console=ttyS0 loglevel=4 bench.name=lab-a panic=10")


def test_next_cmdline_keeps_quoted_values_quoted():
    cur = 'root=/dev/sda1 dyndbg="file foo.c +p" mem=1G'
    assert next_cmdline(cur, "2G", "on") == (
        'root=/dev/sda1 dyndbg="file foo.c +p" mem=2000000000 bench.lru_gen=on panic=10')


def test_next_cmdline_refuses_bad_values():
    with pytest.raises(InputError):
        next_cmdline(DEFAULT, "1.5K5", None)
    with pytest.raises(InputError):
        next_cmdline(DEFAULT, "0.5", None)          # not a whole number of bytes
    with pytest.raises(InputError):
        next_cmdline(DEFAULT, None, "yes")


# MemTotal range ------------------------------------------------------------------------------

def test_range_holds_the_lab_measurement():
    lo, hi = memtotal_range(parse_mem(normalize_mem(MEM768)), "x86_64")
    assert lo <= MEM768_MT <= hi
    assert hi == 768 * MIB


def test_range_x86_allows_the_pci_hole_arm64_does_not():
    lo_x, hi_x = memtotal_range(64 * GIB, "x86_64")
    lo_a, hi_a = memtotal_range(64 * GIB, "aarch64")
    assert hi_x == hi_a == 64 * GIB
    assert lo_a - lo_x == 2 * GIB + MIB               # the allowed PCI hole + legacy hole
    assert lo_x <= 62 * GIB <= hi_x                   # a real x86 server with a 1.5 GiB hole
    assert not lo_a <= 60 * GIB <= hi_a               # arm64: only reservations come off


def test_range_small_x86_has_no_pci_hole():
    lo, _ = memtotal_range(1 * GIB, "x86_64")
    assert lo == 1 * GIB - 96 * MIB - MIB


def test_range_caps_at_the_machines_memory():
    lo, hi = memtotal_range(4 * GIB, "x86_64", full_memtotal=FULL_MT)
    assert hi == FULL_MT and lo < FULL_MT


def test_range_unknown_arch():
    with pytest.raises(InputError):
        memtotal_range(GIB, "riscv64")


# gate ----------------------------------------------------------------------------------------

AFTER = obs("b1", next_cmdline(DEFAULT, MEM768, "off"), MEM768_MT, 0x0)


def test_gate_passes_on_the_lab_boot():
    g = evaluate_gate(obs(), AFTER, MEM768, "off", full_memtotal=FULL_MT)
    assert g.ok, g.reason
    assert "mem=805306368" in AFTER.cmdline
    assert {c.name for c in g.checks} == {"boot_id changed", "cmdline mem=",
                                          "cmdline bench.lru_gen=", "MemTotal in range", "MGLRU"}


@pytest.mark.parametrize("after,why", [
    (obs("b0", AFTER.cmdline, MEM768_MT), "boot_id changed"),           # never rebooted
    (obs("b1", DEFAULT, FULL_MT), "cmdline mem="),                      # booted the default
    (obs("b1", AFTER.cmdline, FULL_MT), "MemTotal in range"),           # mem= ignored
    (obs("b1", AFTER.cmdline, MEM768_MT, lru=0x7), "MGLRU"),            # early script failed
    (obs("b1", AFTER.cmdline, MEM768_MT, lru=None), "MGLRU"),           # kernel w/o MGLRU
])
def test_gate_fails_with_a_named_reason(after, why):
    g = evaluate_gate(obs(), after, MEM768, "off")
    assert not g.ok
    assert why in g.reason


def test_gate_compares_mem_as_the_kernel_read_it():
    """A command line written mem=768M (the kernel's 768 MiB) proves a wish of 768Mi, not one
    of 768M (768 x 10^9 bytes): the gate compares bytes, not spellings."""
    binary = obs("b1", DEFAULT.replace("panic=10", "mem=768M bench.lru_gen=off panic=10"),
                 MEM768_MT, 0x0)
    assert evaluate_gate(obs(), binary, MEM768, "off").ok
    g = evaluate_gate(obs(), binary, "768M", "off")
    assert not g.ok and "cmdline mem=" in g.reason
    assert "wanted mem=768000000 (768M), /proc/cmdline has mem=768M (768Mi)" in g.reason


def test_gate_lru_on_checks_only_the_main_bit():
    after = obs("b1", next_cmdline(DEFAULT, None, "on"), FULL_MT, 0x7)
    assert evaluate_gate(obs(), after, None, "on", full_memtotal=FULL_MT).ok
    after = obs("b1", next_cmdline(DEFAULT, None, "on"), FULL_MT, 0x6)
    assert not evaluate_gate(obs(), after, None, "on").ok


def test_gate_restore_needs_memtotal_back():
    restored = obs("b2", next_cmdline(AFTER.cmdline, None, None), FULL_MT)
    assert evaluate_gate(AFTER, restored, None, None).ok
    stuck = obs("b2", next_cmdline(AFTER.cmdline, None, None), MEM768_MT)
    assert "MemTotal grew" in evaluate_gate(AFTER, stuck, None, None).reason


def test_observation_from_head_output():
    text = ("==> /proc/sys/kernel/random/boot_id <==\nb1\n\n==> /proc/cmdline <==\n"
            f"{AFTER.cmdline}\n\n==> /proc/meminfo <==\nMemTotal:         723812 kB\n"
            "MemFree:          600000 kB\n\n==> /sys/kernel/mm/lru_gen/enabled <==\n0x0007\n")
    o = observation_from_files(split_head_output(text), arch="x86_64")
    assert (o.boot_id, o.memtotal, o.lru_mask, o.mglru) == ("b1", MEM768_MT, 7, True)
    assert o.cmdline == AFTER.cmdline


# THP kept across a reboot ------------------------------------------------------------------------

THP_TEXT = ("==> /proc/sys/kernel/random/boot_id <==\nb1\n\n==> /proc/cmdline <==\n{cmd}\n\n"
            "==> /proc/meminfo <==\nMemTotal: {kb} kB\n\n"
            "==> /sys/kernel/mm/transparent_hugepage/enabled <==\n{enabled}\n\n"
            "==> /sys/kernel/mm/transparent_hugepage/defrag <==\n{defrag}\n")


def thp_obs(enabled, defrag="always defer defer+madvise [madvise] never", kb=1496272,
            cmd=DEFAULT, boot="b1"):
    text = THP_TEXT.format(cmd=cmd, kb=kb, enabled=enabled, defrag=defrag)
    return replace(observation_from_files(split_head_output(text), arch="x86_64"), boot_id=boot)


def test_thp_modes_parsed_from_the_choice_files():
    o = thp_obs("[always] madvise never")
    assert o.thp_modes == {"enabled": "always", "defrag": "madvise"}
    # a file without a selection, or a missing one, is no mode (nothing to pin)
    assert "enabled" not in thp_obs("always madvise never").thp_modes
    assert obs().thp_modes == {}


def test_small_boot_gets_the_thp_mode_back_and_the_gate_checks_it():
    """The lab's 6.1 guest boots THP `always`; with mem= under 512 MiB the kernel comes up
    `never` (hugepage_init), the campaign's other runs `always`: the repair writes `always`
    back, and a boot left at `never` fails the gate by name."""
    mem = "250M"
    before = thp_obs("[always] madvise never", boot="b0")
    small = next_cmdline(DEFAULT, mem, None)
    after = thp_obs("always madvise [never]", kb=190000, cmd=small)
    assert thp_repairs(before, after) == [("/sys/kernel/mm/transparent_hugepage/enabled",
                                           "always")]
    g = evaluate_gate(before, after, mem, None)
    assert not g.ok and "THP as before: enabled always -> never" in g.reason
    fixed = thp_obs("[always] madvise never", kb=190000, cmd=small)
    assert thp_repairs(before, fixed) == []
    assert evaluate_gate(before, fixed, mem, None).ok
    # defrag is pinned the same way
    other = thp_obs("[always] madvise never", defrag="[always] defer defer+madvise madvise never",
                    kb=190000, cmd=small)
    assert thp_repairs(before, other) == [("/sys/kernel/mm/transparent_hugepage/defrag",
                                           "madvise")]


def test_thp_not_checked_where_the_host_has_no_thp():
    """A kernel without THP (no sysfs files before the reboot): nothing to pin or check."""
    after = thp_obs("always madvise [never]", cmd=next_cmdline(DEFAULT, None, "off"))
    g = evaluate_gate(obs(), after, None, "off")
    assert "THP as before" not in {c.name for c in g.checks}
    assert thp_repairs(obs(), after) == []


# safety --------------------------------------------------------------------------------------

LAB = Host(name="lab-a", address="10.0.0.1", transport="ssh", mem_floor=512 * MIB,
           reboot=RebootSpec(allowed=True, method="kexec"))


def allowed(entry, mem="768M", local=None, host="b0", is_local=False):
    check_reboot_allowed(entry, mem, local_boot_id=local, host_boot_id=host,
                         transport_is_local=is_local)


def test_safety_allows_the_lab_host():
    allowed(LAB)
    allowed(LAB, mem=None)


@pytest.mark.parametrize("entry,kw,msg", [
    (replace(LAB, reboot=RebootSpec(allowed=False, method="kexec")), {},
     "not marked rebootable"),
    (LAB, {"mem": "256M"}, "below the host's floor"),
    (LAB, {"mem": "512M"}, "below the host's floor 512Mi"),     # 512 x 10^6 < 512 MiB
    (replace(LAB, mem_floor=None), {}, "no memory floor"),
    (LAB, {"is_local": True}, "controller's own machine"),
    (replace(LAB, transport="local"), {}, "controller's own machine"),
    (LAB, {"local": "b0", "host": "b0"}, "controller's boot_id"),
    (replace(LAB, reboot=RebootSpec(allowed=True, method="none")), {}, "cannot set a one-shot"),
])
def test_safety_refusals(entry, kw, msg):
    with pytest.raises(SafetyError, match=msg):
        allowed(entry, **kw)


def test_safety_on_inventory_files():
    a = load_host_file(ROOT / "hosts" / "gh200-a.toml")
    with pytest.raises(SafetyError, match="below the host's floor"):
        allowed(a, mem="64G")
    with pytest.raises(SafetyError, match="below the host's floor 96G"):
        allowed(a, mem="93G")           # the paper's memboot boots C + 9G, not C
    allowed(a, mem="102G")
    allowed(a, mem="128G")
    with pytest.raises(SafetyError, match="not marked rebootable"):
        allowed(load_host_file(ROOT / "hosts" / "local.toml"))


class _Untouchable:
    """A transport that fails the test if the reboot code uses it at all."""
    host = "lab-a"
    local = False

    def run(self, *a, **k):
        raise AssertionError("the host was touched")

    put = get = run

    def close(self):
        raise AssertionError("the host was touched")


def test_below_floor_refused_before_any_host_io():
    with pytest.raises(SafetyError, match="floor"):
        reboot_host(_Untouchable(), LAB, "256M", "off")


# one-shot command builders -------------------------------------------------------------------

def test_kexec_argv():
    assert kexec_load_argv("/boot/vmlinuz-6.1", "/boot/initrd.img-6.1", "root=/dev/vda mem=768M") \
        == ["kexec", "-l", "/boot/vmlinuz-6.1", "--initrd=/boot/initrd.img-6.1",
            "--append=root=/dev/vda mem=768M"]
    assert kexec_load_argv("/k", None, "x") == ["kexec", "-l", "/k", "--append=x"]
    argv = kexec_exec_argv(systemd=False)
    assert argv[:4] == ["setsid", "-f", "sh", "-c"] and argv[4].endswith("exec kexec -e")
    assert "systemctl kexec" in kexec_exec_argv(systemd=True)[4]


def test_grub_oneshot_plan():
    p = grub_oneshot_plan("bench-memboot", "/boot/vmlinuz-6.8.0-1013-nvidia-64k",
                          "/boot/initrd.img-6.8.0-1013-nvidia-64k",
                          "root=UUID=ab ro mem=93G panic=10")
    assert p["path"] == "/boot/grub/custom.cfg"
    assert p["entry_text"] in p["text"]
    assert p["entry_text"].splitlines() == [
        "menuentry 'bench-memboot' --id 'bench-memboot' {",
        "    search --no-floppy --file --set=root /boot/vmlinuz-6.8.0-1013-nvidia-64k",
        "    linux /boot/vmlinuz-6.8.0-1013-nvidia-64k root=UUID=ab ro mem=93G panic=10",
        "    initrd /boot/initrd.img-6.8.0-1013-nvidia-64k",
        "}"]
    assert p["argv"][0] == ["grub-reboot", "bench-memboot"]
    assert "systemctl reboot" in p["argv"][1][4]
    with pytest.raises(InputError):
        grub_oneshot_plan("bad\nentry", "/k", None, "x")


def test_arm64_small_limits_allow_swiotlb_and_the_kernel_image():
    """The twin's aarch64 6.12 16k kernel booted with mem=512Mi showed MemTotal 477,872,128 in
    one boot and 432,553,984 in another: both inside the range; x86 keeps its 96 MiB minimum."""
    lo, hi = memtotal_range(512 * MIB, "aarch64")
    assert lo <= 432_553_984 and 477_872_128 <= hi == 512 * MIB
    assert lo >= 512 * MIB - 160 * MIB
    assert memtotal_range(512 * MIB, "x86_64")[0] == 512 * MIB - 96 * MIB - MIB
