"""The GH200 twin's guest image (test tier 4): Debian 12 arm64 built offline from Debian's
packages with mmdebstrap (foreign architecture through qemu-user-static and binfmt_misc), the
16 KiB-page 6.12 kernel from bookworm-backports (`linux-image-arm64-16k`) with a small
initramfs, systemd as PID 1 (needless units masked), openssh with the lab key and a host key
made at build time, gcc/make/python3/pytest for the agent's native tests, GRUB for arm64 EFI
(BOOTAA64.EFI on an EFI system partition, /boot/grub with a grubenv so `grub-reboot` one-shot
entries work). The disk is one raw GPT file (ESP + ext4 root) made without loop devices
(sfdisk, mkfs.vfat --offset, mtools, mkfs.ext4 -E offset -d). Cached in $BENCH_LAB_CACHE as
twin-image-KEY, KEY a hash of everything that goes into it; the mmdebstrap tree is cached apart
(twin-tree-KEY) so a change of the guest files rebuilds in a minute without downloading."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from bench.errors import BenchError
from bench.lab.vm_image import GUEST_DIR as X86_GUEST_DIR
from bench.lab.vm_image import (Recipe, build_in_cache, cache_dir, install_guest_keys, lab_key,
                                mirror, run_cmd, say)

GUEST_DIR = Path(__file__).resolve().parent / "guest_twin"
SUITE = "bookworm"
IMAGE_VERSION = 1          # bump when the build recipe changes
KERNEL_PACKAGE = "linux-image-arm64-16k"     # from bookworm-backports: 6.12, 16 KiB pages
PACKAGES = ["systemd", "systemd-sysv", "udev", "dbus", "openssh-server", "python3",
            "python3-pytest", "python3-numpy", "gcc", "make", "libc6-dev", "iproute2",
            "grub-efi-arm64-bin", "grub2-common", "initramfs-tools", "zstd", "kmod", "procps",
            "e2fsprogs", "util-linux"]
# the initramfs holds only what finds the root disk (MODULES=most would take minutes to unpack
# under TCG); written before the kernel is installed so its postinst builds it once
INITRAMFS_CONF = "MODULES=list\nCOMPRESS=zstd\n"
INITRAMFS_MODULES = "virtio_pci\nvirtio_blk\nvirtio_net\next4\n"
FIRMWARE_CODE = Path("/usr/share/AAVMF/AAVMF_CODE.fd")
FIRMWARE_VARS = Path("/usr/share/AAVMF/AAVMF_VARS.fd")
HOST_TOOLS = {"qemu-system-aarch64": "qemu-system-arm", "qemu-img": "qemu-utils",
              "mmdebstrap": "mmdebstrap", "qemu-aarch64-static": "qemu-user-static",
              "mkfs.ext4": "e2fsprogs", "mkfs.vfat": "dosfstools", "mcopy": "mtools",
              "sfdisk": "fdisk", "ipmi_sim": "openipmi", "ipmitool": "ipmitool",
              "ssh": "openssh-client", "ssh-keygen": "openssh-client"}
# units a bench guest never needs; masked so a TCG boot reaches sshd sooner and nothing runs
# behind a measurement (systemd-firstboot would prompt on the console: the image's
# machine-id is empty so each guest makes its own)
MASKED = ["apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer",
          "e2scrub_all.timer", "e2scrub_reap.service", "fstrim.timer",
          "systemd-networkd-wait-online.service", "systemd-firstboot.service",
          "getty@tty1.service", "systemd-pstore.service", "remote-fs.target",
          "systemd-timesyncd.service", "man-db.timer", "cron.service",
          "dev-hugepages.mount", "dev-mqueue.mount", "sys-kernel-debug.mount",
          "sys-kernel-tracing.mount", "sys-fs-fuse-connections.mount", "sys-kernel-config.mount",
          "modprobe@drm.service", "modprobe@fuse.service", "modprobe@configfs.service",
          "modprobe@efi_pstore.service", "modprobe@dm_mod.service", "systemd-fsckd.socket",
          "systemd-binfmt.service", "proc-sys-fs-binfmt_misc.automount"]
GRUB_MODULES = ["part_gpt", "fat", "ext2", "normal", "linux", "search", "search_label",
                "search_fs_uuid", "configfile", "echo", "loadenv", "test", "gzio", "boot",
                "reboot", "halt", "efi_gop", "ls", "cat"]
ESP_MIB = 64


def binfmt_ok() -> bool:
    """Whether this kernel runs arm64 binaries through qemu-user (needed to build, not to boot)."""
    f = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")
    try:
        return f.read_text().splitlines()[0].strip() == "enabled"
    except (OSError, IndexError):
        return False


def missing_capabilities(build: bool = True) -> list[str]:
    """Why the twin lab cannot run here (empty when it can), each naming the fix."""
    why = []
    if os.geteuid() != 0:
        why.append("not root (mmdebstrap and the guest image need root)")
    build_only = {"mmdebstrap", "qemu-aarch64-static", "mkfs.vfat", "mcopy", "sfdisk"}
    need_build = build and not cached_image_ok()
    for tool, pkg in HOST_TOOLS.items():
        if tool in build_only and not need_build:
            continue
        if shutil.which(tool) is None:
            why.append(f"no {tool} (Debian package {pkg})")
    for fw in (FIRMWARE_CODE, FIRMWARE_VARS):
        if not fw.exists():
            why.append(f"no UEFI firmware {fw} (Debian package qemu-efi-aarch64)")
    if need_build and not binfmt_ok():
        why.append("binfmt_misc has no enabled qemu-aarch64 entry (install qemu-user-static "
                   "and binfmt-support, then `update-binfmts --enable qemu-aarch64`)")
    if need_build and mirror() is None:
        why.append("no Debian mirror in the apt sources (set BENCH_LAB_MIRROR)")
    return why


def _recipe() -> str:
    return (f"{SUITE} {KERNEL_PACKAGE} {' '.join(PACKAGES)}\n{INITRAMFS_CONF}"
            f"{INITRAMFS_MODULES}")


def tree_key() -> str:
    return hashlib.sha256(_recipe().encode()).hexdigest()[:16]


def _guest_files() -> list[Path]:
    return [*sorted(p for p in GUEST_DIR.iterdir() if p.is_file()),
            X86_GUEST_DIR / "sshd_config"]


def image_key(pubkey: str) -> str:
    h = hashlib.sha256(f"twin {IMAGE_VERSION}\n{_recipe()}\n{' '.join(MASKED)}\n"
                       f"{' '.join(GRUB_MODULES)}\n{pubkey}\n".encode())
    for f in _guest_files():
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def image_dir(cache: Path | None = None) -> Path:
    cache = cache or cache_dir()
    pub = lab_key(cache).with_suffix(".pub").read_text()
    return cache / f"twin-image-{image_key(pub)}"


def cached_image_ok() -> bool:
    try:
        return (image_dir() / "manifest.json").exists()
    except (BenchError, OSError):
        return False


def _mmdebstrap_tree(cache: Path, url: str | None, log) -> Path:
    """The pristine arm64 tree with every package and the kernel (its initramfs built by the
    kernel's postinst under qemu-user), cached apart from the image."""
    assert url is not None          # missing_capabilities checked it
    tree = cache / f"twin-tree-{tree_key()}"
    if (tree / "etc/debian_version").exists():
        return tree
    tmp = cache / f"twin-tree-{tree_key()}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    say(log, f"mmdebstrap {SUITE} arm64 from {url} (minutes: network, then qemu-user)")
    base = url.rstrip("/")
    excl = [f"--dpkgopt=path-exclude=/usr/share/{d}/*" for d in ("man", "doc", "locale", "info")]
    argv = ["mmdebstrap", "--mode=root", "--variant=apt", "--architectures=arm64",
            "--components=main", f"--include={','.join(PACKAGES)}", *excl,
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            "--customize-hook=printf %s " + _sh_quote(INITRAMFS_CONF)
            + ' > "$1/etc/initramfs-tools/conf.d/bench.conf"',
            "--customize-hook=printf %s " + _sh_quote(INITRAMFS_MODULES)
            + ' >> "$1/etc/initramfs-tools/modules"',
            '--customize-hook=chroot "$1" env DEBIAN_FRONTEND=noninteractive apt-get install '
            f"-y --no-install-recommends -t {SUITE}-backports {KERNEL_PACKAGE}",
            "--customize-hook=rm -rf \"$1\"/var/cache/apt/archives/*.deb "
            "\"$1\"/var/lib/apt/lists/*",
            SUITE, str(tmp), f"deb {base} {SUITE} main", f"deb {base} {SUITE}-backports main"]
    run_cmd(["nice", "-n", "19", *argv], timeout=3600)
    tmp.rename(tree)
    return tree


def _sh_quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


def build_image(log: Callable[[str], None] | None = None, force: bool = False) -> dict:
    """Build (or find cached) the twin image. Returns its manifest (paths, kernel release,
    build seconds, whether it came from the cache)."""
    recipe = Recipe("twin image", "twin", "twin-image-*", "disk.img", SUITE,
                    PACKAGES + [KERNEL_PACKAGE], "tree_seconds",
                    lambda: missing_capabilities(build=True), _mmdebstrap_tree, _make_image)
    return build_in_cache(image_dir(cache_dir()), recipe, log, force)


def _make_image(root: Path, out: Path, pubkey: str, log: Callable[[str], None] | None
                ) -> tuple[str, int]:
    release = _kernel_release(root)
    _configure_tree(root, pubkey, release)
    used = _write_disk(root, out, log)
    shutil.copy2(root / "etc/ssh/ssh_host_ed25519_key.pub", out / "host_key.pub")
    return release, used


def _kernel_release(root: Path) -> str:
    kernels = sorted((root / "boot").glob("vmlinuz-*-16k"))
    if not kernels:
        raise BenchError(f"no 16k kernel in the twin tree ({KERNEL_PACKAGE} not installed?)")
    release = kernels[-1].name[len("vmlinuz-"):]
    if not (root / "boot" / f"initrd.img-{release}").exists():
        raise BenchError(f"no initramfs for {release} in the twin tree")
    return release


def _install(src: Path, dest: Path, mode: int = 0o644) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest)
    os.chmod(dest, mode)


def _configure_tree(root: Path, pubkey: str, release: str) -> None:
    g = GUEST_DIR
    etc = root / "etc"
    _install(X86_GUEST_DIR / "sshd_config", etc / "ssh/sshd_config")
    for conf in (etc / "ssh/sshd_config.d").glob("*"):
        conf.unlink()
    _install(g / "20-lab.network", etc / "systemd/network/20-lab.network")
    _install(g / "bench-hostname.service", etc / "systemd/system/bench-hostname.service")
    _install(g / "tmpfiles-bench.conf", etc / "tmpfiles.d/bench.conf")
    _install(g / "fstab", etc / "fstab")
    _install(g / "ssh-after-pool.conf", etc / "systemd/system/ssh.service.d/bench-pool.conf")
    _install(g / "default-grub", etc / "default/grub")
    for d in ("srv/bench", "var/lib/bench"):
        (root / d).mkdir(parents=True, exist_ok=True)
    install_guest_keys(root, pubkey, "bench-twin-guest")
    (etc / "hostname").write_text("bench-twin\n")
    (etc / "hosts").write_text("127.0.0.1 localhost\n")
    (etc / "machine-id").write_text("")
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    for unit in MASKED:
        link = etc / "systemd/system" / unit
        link.unlink(missing_ok=True)
        link.symlink_to("/dev/null")
    run_cmd(["chroot", str(root), "systemctl", "enable", "systemd-networkd.service",
             "bench-hostname.service", "ssh.service"], timeout=300)
    run_cmd(["chroot", str(root), "systemctl", "set-default", "multi-user.target"])
    _configure_grub(root, release)


def _configure_grub(root: Path, release: str) -> None:
    """/boot/grub (modules, grub.cfg with the one-shot logic, an empty grubenv) and the EFI
    binary, made by the guest's own grub-mkimage under qemu-user."""
    grub = root / "boot/grub"
    grub.mkdir(parents=True, exist_ok=True)
    shutil.copytree(root / "usr/lib/grub/arm64-efi", grub / "arm64-efi", dirs_exist_ok=True)
    cfg = (GUEST_DIR / "grub.cfg.in").read_text().replace("@RELEASE@", release)
    (grub / "grub.cfg").write_text(cfg)
    run_cmd(["chroot", str(root), "grub-editenv", "/boot/grub/grubenv", "create"])
    # early.cfg (no comments: GRUB's embedded-config reader rejects them) finds the root by label
    _install(GUEST_DIR / "early.cfg", root / "tmp/bench-early.cfg")
    run_cmd(["chroot", str(root), "grub-mkimage", "-O", "arm64-efi", "-d",
             "/usr/lib/grub/arm64-efi", "-p", "/boot/grub", "-c", "/tmp/bench-early.cfg",
             "-o", "/tmp/BOOTAA64.EFI", *GRUB_MODULES], timeout=300)
    (root / "tmp/bench-early.cfg").unlink()


def _write_disk(root: Path, out: Path, log: Callable[[str], None] | None) -> int:
    """One raw GPT disk: ESP (FAT, EFI/BOOT/BOOTAA64.EFI) and the ext4 root from the tree.
    Returns the tree's bytes."""
    efi = root / "tmp/BOOTAA64.EFI"
    efi_bin = out / "BOOTAA64.EFI"
    shutil.move(str(efi), efi_bin)
    used = int(run_cmd(["du", "-sb", str(root)]).stdout.split()[0])
    root_mib = (int(used * 1.3) >> 20) + 1024      # room for the agent's builds and logs
    esp_start, root_start = 1, 1 + ESP_MIB
    disk = out / "disk.img"
    total_mib = root_start + root_mib + 1           # + the backup GPT
    with open(disk, "wb") as fh:
        fh.truncate(total_mib << 20)
    table = ("label: gpt\n"
             f"start={esp_start << 11}, size={ESP_MIB << 11}, "
             "type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=esp\n"
             f"start={root_start << 11}, size={root_mib << 11}, "
             "type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root\n")
    run_cmd(["sfdisk", "-q", str(disk)], input=table)
    run_cmd(["mkfs.vfat", f"--offset={esp_start << 11}", "-F", "16", "-n", "BENCHESP",
             str(disk), str(ESP_MIB << 10)])
    img = f"{disk}@@{esp_start << 20}"
    run_cmd(["mmd", "-i", img, "::/EFI", "::/EFI/BOOT"])
    run_cmd(["mcopy", "-i", img, str(efi_bin), "::/EFI/BOOT/BOOTAA64.EFI"])
    efi_bin.unlink()
    say(log, f"mkfs.ext4 -d ({used >> 20} MiB tree, {root_mib} MiB root partition)")
    run_cmd(["mkfs.ext4", "-q", "-F", "-L", "benchroot", "-E", f"offset={root_start << 20}",
             "-d", str(root), str(disk), f"{root_mib}M"], timeout=900)
    return used
