"""Proven reboots, the pure half: the next command line, the MemTotal range `mem=` implies,
observations and the gate that proves a boot took, the safety checks, and the one-shot command
builders (kexec, grub-reboot, a command). bench.hosts.reboot does the I/O with them.

Conventions
-----------
* `mem`: the wished memory limit as bench writes sizes (bench.units: `93G` = 93 x 10^9 bytes,
  `102Gi` = 102 x 2^30, or bytes) or None = no `mem=` on the next boot. The kernel's memparse
  reads `mem=102G` as 102 GiB, so bench writes `mem=` as the exact bytes (`normalize_mem`:
  `93G` -> `mem=93000000000`) and compares what /proc/cmdline shows as bytes (`parse_mem`, the
  kernel's reading), whatever spelling the command line uses.
* `lru_gen`: "on" | "off" | None. The kernel has no boot switch for MGLRU; bench's convention is
  the parameter `bench.lru_gen=on|off`, applied early at boot by the host (the lab guests' init
  does it, bench/lab/guest/rcS; on real hosts a unit installed by bench). None = the kernel's
  default (CONFIG_LRU_GEN_ENABLED), not checked by the gate.
* The next command line is the current one minus `mem=`, `bench.lru_gen=`, `panic=` and the
  boot loader's `BOOT_IMAGE=`/`initrd=`, plus the wishes and `panic=10` (a panic reboots into
  the default kernel command line instead of hanging).
* Proof: a new boot_id, /proc/cmdline carrying exactly the requested mem= (or none) and
  bench.lru_gen=, MemTotal inside `memtotal_range`, the MGLRU main bit as requested, and the
  transparent-hugepage modes (`enabled`, `defrag`) the host had before the reboot.
* THP is pinned to the host's mode before the reboot, at run time (`thp_repairs`): the kernel
  turns THP off on a boot with under 512 MiB of RAM (mm/huge_memory.c, hugepage_init: "the
  admin can still enable it through /sys"), and it does so after parsing the command line, so
  `transparent_hugepage=` cannot pin it there. A small mem= boot would otherwise run with
  another THP mode than the campaign's other runs (a fingerprint difference the judge rejects).
  On a host whose boots keep its mode there is nothing to write.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from bench.errors import InputError, SafetyError
from bench.hosts.inventory import Host
from bench.hosts.procfs import cmdline_param, mglru_on, parse_cmdline, parse_lru_gen, parse_meminfo
from bench.units import format_size, kernel_size, parse_kernel_size, parse_size

LRU_PARAM = "bench.lru_gen"
LRU_VALUES = ("on", "off")
PANIC_SECONDS = 10
# replaced on every boot bench makes (BOOT_IMAGE/initrd= are the loader's, not the kernel's)
DROPPED_PARAMS = ("mem", LRU_PARAM, "panic", "BOOT_IMAGE", "initrd")
BOOT_ID = "/proc/sys/kernel/random/boot_id"
LRU_ENABLED = "/sys/kernel/mm/lru_gen/enabled"
THP_DIR = "/sys/kernel/mm/transparent_hugepage"
THP_KEYS = ("enabled", "defrag")
THP_FILES = tuple(f"{THP_DIR}/{k}" for k in THP_KEYS)
MIB = 1 << 20
GIB = 1 << 30


# pure: values ------------------------------------------------------------------------------------

def parse_mem(mem: str) -> int:
    """A `mem=` value as the kernel's memparse reads it (what /proc/cmdline shows: `102G` is
    102 GiB, `102000000000` bytes). Integers with an optional K/M/G/T suffix only."""
    b = parse_kernel_size(mem, "mem=")
    if b <= 0:
        raise InputError(f"mem={mem!r} must be positive")
    return b


def normalize_mem(mem: str | int | None) -> str | None:
    """A wished mem= (a bench size: `93G` = 93 x 10^9 bytes, `102Gi`, bytes) -> the text bench
    writes on the kernel command line: the exact bytes (`93000000000`); 'none'/''/None -> None.
    Idempotent (bytes read the same as a bench size and as a kernel size)."""
    if mem is None or str(mem).strip().lower() in ("", "none"):
        return None
    try:
        b = parse_size(mem, "mem=")
    except InputError:
        raise InputError(f"mem={mem!r} is not a size",
                         hint="write it as bench writes sizes: 93G (93 x 10^9 bytes), 102Gi "
                              "(102 x 2^30) or bytes; or 'none' for no mem=") from None
    if b <= 0:
        raise InputError(f"mem={mem!r} must be positive")
    return kernel_size(b)


def mem_text(mem: str | None) -> str:
    """A kernel mem= text for people: `102000000000` -> `102000000000 (102G)`."""
    if mem is None:
        return "no mem="
    b = parse_mem(mem)
    canon = format_size(b)
    return f"mem={mem}" if canon == mem else f"mem={mem} ({canon})"


def normalize_lru(lru_gen: str | None) -> str | None:
    if lru_gen is None or str(lru_gen).lower() in ("", "default", "none"):
        return None
    v = str(lru_gen).lower()
    if v not in LRU_VALUES:
        raise InputError(f"lru_gen {lru_gen!r} is not one of on, off",
                         hint="use on, off, or leave it out for the kernel's default")
    return v


def next_cmdline(current: str | list[str], mem: str | None, lru_gen: str | None,
                 panic: int = PANIC_SECONDS) -> str:
    """The command line of the next boot: `current` minus every mem=, bench.lru_gen=, panic=,
    BOOT_IMAGE= and initrd=, plus mem=/bench.lru_gen= as wished and panic=N. Order of the kept
    arguments is preserved; the new ones go last (the kernel uses the last value anyway)."""
    args = parse_cmdline(current) if isinstance(current, str) else list(current)
    kept = [a for a in args if a.partition("=")[0] not in DROPPED_PARAMS]
    mem = normalize_mem(mem)
    lru_gen = normalize_lru(lru_gen)
    if mem is not None:
        kept.append(f"mem={mem}")
    if lru_gen is not None:
        kept.append(f"{LRU_PARAM}={lru_gen}")
    if panic:
        kept.append(f"panic={int(panic)}")
    for a in kept:
        if any(c.isspace() for c in a) or '"' in a:
            # quoted arguments survive /proc/cmdline -> kexec --append only if we re-quote
            kept = [_requote(x) for x in kept]
            break
    return " ".join(kept)


def _requote(arg: str) -> str:
    key, eq, value = arg.partition("=")
    if eq and (any(c.isspace() for c in value)):
        return f'{key}="{value}"'
    return arg


# Tolerances of the MemTotal range (documented, explicit):
#  * RESERVE: what the kernel keeps out of MemTotal below the mem= limit: its own image, early
#    allocations (memmap/struct page ~1.6 % on 4 KiB pages, page tables, crash kernel, firmware
#    reservations). max(RESERVE_MIN, RESERVE_FRACTION * limit).
#  * x86: mem= caps the highest physical address, so memory-mapped I/O holes below the cap also
#    come off: the legacy hole below 1 MiB (always) and the PCI hole below 4 GiB, which starts at
#    2-3.5 GiB on PCs and servers. We allow X86_PCI_HOLE_MAX once the cap passes X86_HOLE_START.
#  * arm64: mem= limits the linear map to about the value; only reservations come off, and
#    more of them at a small limit: swiotlb's 64 MiB bounce buffer and the kernel image are
#    taken below it (the twin's 6.12 16 KiB kernel at mem=512Mi kept 56 to 100 MiB out of
#    MemTotal over two boots), so ARM_RESERVE_MIN.
RESERVE_MIN = 96 * MIB
ARM_RESERVE_MIN = 160 * MIB
RESERVE_FRACTION = 0.06
X86_HOLE_START = 2 * GIB
X86_PCI_HOLE_MAX = 2 * GIB
X86_ARCHES = ("x86_64", "amd64", "i686", "i386")
ARM_ARCHES = ("aarch64", "arm64")


def memtotal_range(mem_bytes: int, arch: str, full_memtotal: int | None = None) -> tuple[int, int]:
    """The [lo, hi] bytes MemTotal may show after booting with mem=mem_bytes on `arch`.

    hi: mem= is an upper bound on both architectures (MemTotal counts usable RAM below it); when
    the machine has less RAM than mem= (full_memtotal, MemTotal of a boot without mem=, given),
    hi is that full MemTotal instead.
    lo: the limit minus the reservations (RESERVE_*) and, on x86, minus the part of the PCI hole
    that can lie below the cap (X86_*). Never below 0."""
    if mem_bytes <= 0:
        raise InputError(f"mem= must be positive, got {mem_bytes}")
    a = arch.lower()
    if a not in X86_ARCHES + ARM_ARCHES:
        raise InputError(f"no MemTotal model for architecture {arch!r}",
                         hint=f"known: {', '.join(X86_ARCHES + ARM_ARCHES)}")
    limit = mem_bytes
    if full_memtotal is not None and full_memtotal < mem_bytes:
        limit = full_memtotal
    hi = limit
    reserve = max(ARM_RESERVE_MIN if a in ARM_ARCHES else RESERVE_MIN,
                  int(RESERVE_FRACTION * limit))
    hole = 0
    if a in X86_ARCHES:
        hole = min(max(0, mem_bytes - X86_HOLE_START), X86_PCI_HOLE_MAX) + MIB
    lo = max(0, limit - reserve - hole)
    return lo, hi


# pure: observations and the gate -----------------------------------------------------------------

@dataclass(frozen=True)
class Observation:
    """What one look at the host saw (parsed from its /proc and /sys files)."""
    boot_id: str
    cmdline: str
    memtotal: int
    lru_mask: int | None          # None: no /sys/kernel/mm/lru_gen (kernel without MGLRU)
    arch: str = ""
    kernel: str = ""
    thp: tuple[tuple[str, str], ...] = ()   # (key, mode) of THP_KEYS the host has

    @property
    def args(self) -> list[str]:
        return parse_cmdline(self.cmdline)

    @property
    def thp_modes(self) -> dict[str, str]:
        return dict(self.thp)

    @property
    def mglru(self) -> bool | None:
        return mglru_on(self.lru_mask)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Gate:
    ok: bool
    checks: tuple[Check, ...]

    @property
    def reason(self) -> str:
        bad = [f"{c.name}: {c.detail}" for c in self.checks if not c.ok]
        return "; ".join(bad) if bad else "all checks passed"


def split_head_output(text: str) -> dict[str, str]:
    """Output of `head -n N FILE1 FILE2 ...` -> {path: content} (missing files are absent)."""
    out: dict[str, list[str]] = {}
    cur = None
    for line in text.splitlines():
        m = re.fullmatch(r"==> (.*) <==", line)
        if m:
            cur = m.group(1)
            out[cur] = []
        elif cur is not None:
            out[cur].append(line)
    return {k: "\n".join(v).strip("\n") + "\n" for k, v in out.items()}


def parse_thp_mode(text: str) -> str | None:
    """A THP choice file -> its [selected] word ('always [madvise] never' -> 'madvise'); None
    when nothing is selected or the word is not a plain name (bounded: 32 characters)."""
    m = re.search(r"\[([a-z+_-]{1,32})\]", text)
    return m.group(1) if m else None


def observation_from_files(files: Mapping[str, str], arch: str = "",
                           kernel: str = "") -> Observation:
    """Build an Observation from the raw files (keys: BOOT_ID, /proc/cmdline, /proc/meminfo,
    LRU_ENABLED, THP_FILES, the last two optional)."""
    for need in (BOOT_ID, "/proc/cmdline", "/proc/meminfo"):
        if need not in files:
            raise InputError(f"{need} missing from the host's answer")
    mem = parse_meminfo(files["/proc/meminfo"])
    lru = files.get(LRU_ENABLED)
    thp = tuple((k, mode) for k, path in zip(THP_KEYS, THP_FILES)
                if (mode := parse_thp_mode(files.get(path) or "")) is not None)
    return Observation(boot_id=files[BOOT_ID].strip(), cmdline=files["/proc/cmdline"].strip(),
                       memtotal=mem["MemTotal"],
                       lru_mask=parse_lru_gen(lru) if lru is not None else None,
                       arch=arch, kernel=kernel, thp=thp)


def thp_repairs(before: Observation, after: Observation) -> list[tuple[str, str]]:
    """(sysfs path, mode) to write so the new boot keeps the THP modes the host had before it
    (module doc: a boot under 512 MiB comes up with THP off whatever the command line says).
    Only keys both boots have; [] when nothing differs."""
    was, now = before.thp_modes, after.thp_modes
    return [(path, was[k]) for k, path in zip(THP_KEYS, THP_FILES)
            if k in was and k in now and now[k] != was[k]]


def evaluate_gate(before: Observation, after: Observation, mem: str | None,
                  lru_gen: str | None, arch: str | None = None,
                  full_memtotal: int | None = None) -> Gate:
    """The proof that the wished boot took. `full_memtotal` (MemTotal without mem=) tightens the
    range when mem= is above the machine's RAM and is used to check a boot without mem= (then
    MemTotal must be within the reservation tolerance of it)."""
    mem = normalize_mem(mem)
    lru_gen = normalize_lru(lru_gen)
    arch = arch or after.arch or before.arch
    checks = []
    checks.append(Check("boot_id changed", after.boot_id != before.boot_id,
                        f"{before.boot_id} -> {after.boot_id}"))
    seen_mem = cmdline_param(after.args, "mem")
    checks.append(Check("cmdline mem=", _same_mem(seen_mem, mem),
                        f"wanted {mem_text(mem)}, /proc/cmdline has {_seen_text(seen_mem)}"))
    seen_lru = cmdline_param(after.args, LRU_PARAM)
    checks.append(Check(f"cmdline {LRU_PARAM}=", seen_lru == lru_gen,
                        f"wanted {lru_gen or '(absent)'}, found {seen_lru or '(absent)'}"))
    if mem is not None:
        lo, hi = memtotal_range(parse_mem(mem), arch, full_memtotal)
        checks.append(Check("MemTotal in range", lo <= after.memtotal <= hi,
                            f"{after.memtotal} bytes, expected [{lo}, {hi}] for "
                            f"{mem_text(mem)} on {arch}"))
    elif cmdline_param(before.args, "mem") is not None:
        checks.append(Check("MemTotal grew", after.memtotal > before.memtotal,
                            f"{before.memtotal} -> {after.memtotal} bytes (mem= dropped)"))
    elif full_memtotal is not None:
        lo = full_memtotal - max(RESERVE_MIN, int(RESERVE_FRACTION * full_memtotal))
        checks.append(Check("MemTotal full", lo <= after.memtotal <= full_memtotal + RESERVE_MIN,
                            f"{after.memtotal} bytes, expected about {full_memtotal} (no mem=)"))
    was, now = before.thp_modes, after.thp_modes
    if was:
        checks.append(Check("THP as before", all(now.get(k) == v for k, v in was.items()),
                            ", ".join(f"{k} {v} -> {now.get(k) or '(absent)'}"
                                      for k, v in was.items())))
    if lru_gen is not None:
        want = lru_gen == "on"
        if after.lru_mask is None:
            checks.append(Check("MGLRU", False, "kernel has no /sys/kernel/mm/lru_gen"))
        else:
            checks.append(Check("MGLRU", after.mglru == want,
                                f"wanted main bit {'on' if want else 'off'}, "
                                f"mask {after.lru_mask:#06x}"))
    return Gate(all(c.ok for c in checks), tuple(checks))


def _same_mem(seen: str | None, want: str | None) -> bool:
    """Whether the command line's mem= (kernel text) is the wished one, compared as bytes."""
    if seen is None or want is None:
        return seen is None and want is None
    try:
        return parse_mem(seen) == parse_mem(want)
    except InputError:
        return False


def _seen_text(seen: str | None) -> str:
    try:
        return mem_text(seen)
    except InputError:
        return f"mem={seen} (not a kernel size)"


# pure: safety ------------------------------------------------------------------------------------

def check_reboot_allowed(host: Host, mem: str | None, *, local_boot_id: str | None,
                         host_boot_id: str | None, transport_is_local: bool) -> None:
    """Raise SafetyError unless this reboot may happen. Needs no host I/O beyond the boot_id
    already read, so a refused mem= never touches the host."""
    name = host.name
    if not host.reboot.allowed:
        raise SafetyError(f"{name}: not marked rebootable in the inventory; refusing to reboot it",
                          hint="set [reboot] allowed = true in its hosts/*.toml if it may be")
    if transport_is_local or host.transport == "local":
        raise SafetyError(f"{name}: is the controller's own machine (local transport); "
                          "bench never reboots it")
    if local_boot_id and host_boot_id and local_boot_id.strip() == host_boot_id.strip():
        raise SafetyError(f"{name}: has the controller's boot_id {local_boot_id.strip()}: it is "
                          "the machine bench runs on; refusing to reboot it")
    method = host.reboot.method
    if method not in ("kexec", "grub-reboot", "command"):
        raise SafetyError(f"{name}: reboot method {method!r} cannot set a one-shot command line")
    mem = normalize_mem(mem)
    if mem is not None:
        want = parse_mem(mem)
        floor = host.mem_floor
        if floor is None:
            raise SafetyError(f"{name}: no memory floor in the inventory; refusing "
                              f"{mem_text(mem)}",
                              hint="set [memory] floor = \"...\" (lowest mem= that is safe)")
        if want < floor:
            raise SafetyError(f"{name}: {mem_text(mem)} is below the host's floor "
                              f"{format_size(floor)} ({floor} bytes); refusing",
                              hint="pick a mem= at or above [memory] floor")
        total = host.mem_total
        if total is not None and want > 2 * total:
            raise SafetyError(f"{name}: {mem_text(mem)} is far above the host's memory "
                              f"({format_size(total)}, {total} bytes)")


# pure: one-shot command builders -----------------------------------------------------------------

def kexec_load_argv(kernel: str, initrd: str | None, append: str) -> list[str]:
    argv = ["kexec", "-l", kernel]
    if initrd:
        argv.append(f"--initrd={initrd}")
    argv.append(f"--append={append}")
    return argv


# the detached shell lets go of the SSH session's pipes at once, so the session can close
_DETACH = "exec </dev/null >/dev/null 2>&1; "


def kexec_exec_argv(systemd: bool, delay: float = 1.0) -> list[str]:
    """Start the staged kernel detached from the SSH session (the session sees the command
    return, then the connection drops). The sh -c script is a constant: no user text in it."""
    inner = "systemctl kexec" if systemd else "sync; exec kexec -e"
    return ["setsid", "-f", "sh", "-c", f"{_DETACH}sleep {delay:g}; {inner}", "bench-kexec"]


def reboot_exec_argv(systemd: bool, delay: float = 1.0) -> list[str]:
    inner = "systemctl reboot" if systemd else "sync; reboot -f || echo b > /proc/sysrq-trigger"
    return ["setsid", "-f", "sh", "-c", f"{_DETACH}sleep {delay:g}; {inner}", "bench-reboot"]


# GRUB one-shot boots: bench's entry lives in a marked block of /boot/grub/custom.cfg (sourced at
# boot by grub.d's 41_custom, so no update-grub is needed and the rest of the file is kept);
# `grub-reboot ENTRY` sets next_entry in grubenv, which the generated grub.cfg boots once and
# clears. The restore takes the block out, unsets next_entry and reboots into GRUB's default.
GRUB_CFG = "/boot/grub/grub.cfg"
GRUB_CUSTOM = "/boot/grub/custom.cfg"
GRUB_ENV = "/boot/grub/grubenv"
GRUB_MAX_TEXT = 256 * 1024          # bytes of grub.cfg / custom.cfg bench reads
_GRUB_ENTRY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_GRUB_BARE = re.compile(r"^[A-Za-z0-9_.,:/=+@%-]+$")


def _grub_quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def grub_word(arg: str) -> str:
    """One kernel argument as a word of a GRUB `linux` line: bare when it holds only plain
    characters, else single-quoted (GRUB's lexer takes `$`, `;`, `{`, spaces and quotes as
    syntax; inside single quotes nothing is). A single quote in an argument is refused."""
    if _GRUB_BARE.fullmatch(arg):
        return arg
    if "'" in arg or "\n" in arg or "\\" in arg:
        raise InputError(f"kernel argument {arg!r} cannot be written into a GRUB entry")
    return "'" + arg + "'"


def check_grub_entry(entry: str) -> str:
    if not isinstance(entry, str) or not _GRUB_ENTRY.fullmatch(entry):
        raise InputError(f"bad GRUB entry name {entry!r}",
                         hint="letters, digits, '.', '_' and '-' (at most 64), as "
                              "[reboot] grub_entry in the host's file")
    return entry


def grub_boot_path(path: str, mountpoint: str) -> str:
    """The path GRUB sees for `path` (absolute on the host) on the file system mounted at
    `mountpoint` (`stat -c %m`): /boot/vmlinuz-X on / is /boot/vmlinuz-X, on a separate /boot
    it is /vmlinuz-X."""
    if not path.startswith("/") or not mountpoint.startswith("/"):
        raise InputError(f"{path!r} on {mountpoint!r}: absolute paths only")
    mp = mountpoint.rstrip("/") or "/"
    if mp == "/":
        return path
    if not path.startswith(mp + "/"):
        raise InputError(f"{path} is not under its mount point {mountpoint}")
    return path[len(mp):]


def grub_entry_text(entry: str, kernel: str, initrd: str | None, append: str) -> str:
    """A GRUB menu entry booting `kernel` with `append`. kernel/initrd are paths as GRUB sees
    them on their file system (grub_boot_path); `search --file` finds that file system."""
    check_grub_entry(entry)
    words = " ".join(grub_word(_requote(a)) for a in parse_cmdline(append))
    lines = [f"menuentry {_grub_quote(entry)} --id {_grub_quote(entry)} {{",
             f"    search --no-floppy --file --set=root {grub_word(kernel)}",
             f"    linux {grub_word(kernel)} {words}"]
    if initrd:
        lines.append(f"    initrd {grub_word(initrd)}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _grub_marks(entry: str) -> tuple[str, str]:
    return f"### BEGIN bench {entry} ###", f"### END bench {entry} ###"


def grub_custom_with(existing: str, entry: str, block: str | None) -> str:
    """custom.cfg with bench's block for `entry` replaced by `block` (None: taken out); every
    other line is kept as it was. An unterminated block of ours is refused, not guessed."""
    begin, end = _grub_marks(check_grub_entry(entry))
    kept: list[str] = []
    inside = False
    for line in existing.splitlines():
        if line.strip() == begin:
            inside = True
        elif line.strip() == end and inside:
            inside = False
        elif not inside:
            kept.append(line)
    if inside:
        raise InputError(f"{GRUB_CUSTOM}: '{begin}' without its END line; fix the file by hand")
    while kept and not kept[-1].strip():
        kept.pop()
    text = "".join(ln + "\n" for ln in kept)
    if block is not None:
        text += ("\n" if text else "") + begin + "\n" + block.rstrip("\n") + "\n" + end + "\n"
    return text


def grub_cfg_problems(text: str) -> list[str]:
    """Why a generated grub.cfg would not boot bench's one-shot entry (empty: it would): it
    must boot next_entry once (00_header's block) and source custom.cfg (41_custom)."""
    problems = []
    if "next_entry" not in text:
        problems.append(f"{GRUB_CFG} never reads next_entry: grub-reboot cannot take effect "
                        "(regenerate it with update-grub)")
    if "custom.cfg" not in text:
        problems.append(f"{GRUB_CFG} does not source custom.cfg (/etc/grub.d/41_custom "
                        "missing or not executable; run update-grub after restoring it)")
    return problems


def parse_grubenv(text: str) -> dict[str, str]:
    """`grub-editenv FILE list` output (NAME=VALUE lines) -> dict."""
    out: dict[str, str] = {}
    for line in text.splitlines()[:1000]:
        key, eq, value = line.partition("=")
        if eq and key and not key.startswith("#"):
            out[key] = value
    return out


def grub_oneshot_plan(entry: str, kernel: str, initrd: str | None, append: str,
                      existing_custom: str = "", systemd: bool = True,
                      custom_cfg: str = GRUB_CUSTOM) -> dict:
    """What the grub-reboot method does: write custom.cfg with bench's entry block (the rest
    of the file kept), `grub-reboot ENTRY` (next boot only: GRUB's default stays the normal
    kernel, so a failed boot falls back on the next reset), check grubenv, reboot. Returns
    {'path', 'text', 'entry_text', 'argv', 'check'}: `argv` lists the commands in order (the
    last one takes the host down), `check` is the grubenv listing to verify next_entry."""
    block = grub_entry_text(entry, kernel, initrd, append)
    return {"path": custom_cfg, "text": grub_custom_with(existing_custom, entry, block),
            "entry_text": block, "argv": [["grub-reboot", entry], reboot_exec_argv(systemd)],
            "check": ["grub-editenv", GRUB_ENV, "list"]}


def grub_restore_plan(entry: str, existing_custom: str, systemd: bool = True,
                      custom_cfg: str = GRUB_CUSTOM) -> dict:
    """Back to GRUB's default entry: custom.cfg without bench's block ('text' None: the file
    held nothing else, remove it), no pending next_entry, reboot."""
    text = grub_custom_with(existing_custom, entry, None)
    return {"path": custom_cfg, "text": text or None,
            "argv": [["grub-editenv", GRUB_ENV, "unset", "next_entry"],
                     reboot_exec_argv(systemd)],
            "check": ["grub-editenv", GRUB_ENV, "list"]}


def command_argv(template: tuple[str, ...] | list[str], append: str) -> list[str]:
    return [a.replace("{cmdline}", append) for a in template]
