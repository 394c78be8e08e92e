"""The vm lab's guest image: built offline from Debian's packages with debootstrap (minbase +
sshd, python3, kexec, gcc/make, the Debian kernel 6.1 with its initramfs), configured (busybox
init with bench/lab/guest/rcS, the lab key, a host key made at build time), slimmed, turned
into an ext4 disk with `mkfs.ext4 -d`, and cached in $BENCH_LAB_CACHE (default
/var/cache/bench-lab) under a key that hashes everything that goes into it. Also the host's
capabilities to build and boot it, and the small helpers the lab shares."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.errors import BenchError, CommandFailed, CommandTimeout

GUEST_DIR = Path(__file__).resolve().parent / "guest"


SUITE = "bookworm"


IMAGE_VERSION = 3          # bump when the build recipe changes


PACKAGES = ["openssh-server", "python3", "kexec-tools", "make", "gcc", "libc6-dev",
            "iproute2", "linux-image-amd64", "initramfs-tools", "busybox", "kmod", "procps",
            "zstd", "e2fsprogs", "util-linux"]


HOST_TOOLS = {"qemu-system-x86_64": "qemu-system-x86", "qemu-img": "qemu-utils",
              "debootstrap": "debootstrap", "mkfs.ext4": "e2fsprogs", "ssh": "openssh-client",
              "ssh-keygen": "openssh-client"}


def cache_dir() -> Path:
    return Path(os.environ.get("BENCH_LAB_CACHE", "/var/cache/bench-lab"))


def say(log: Callable[[str], None] | None, msg: str) -> None:
    if log:
        log(f"{time.strftime('%H:%M:%S')} lab: {msg}")


def run_cmd(argv: Sequence[str], timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    try:
        p = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired:
        raise CommandTimeout("lab", f"`{' '.join(argv)}` ran past {timeout}s") from None
    except FileNotFoundError:
        raise CommandFailed("lab", list(argv), 127, f"{argv[0]}: not found") from None
    if p.returncode != 0:
        raise CommandFailed("lab", list(argv), p.returncode, p.stderr or p.stdout)
    return p


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A free local port on 127.0.0.1 (TCP by default; socket.SOCK_DGRAM for UDP)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def is_our_process(pid: int, exe: str, marker: str) -> bool:
    """Whether `pid` is a live process of program `exe` whose command line holds `marker` (a
    path only this lab uses): the check before a lab signals a PID from its state file."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return False
    return bool(cmd) and cmd[0].endswith(exe.encode()) and marker.encode() in b" ".join(cmd)


def stop_process(pid: int, exe: str, marker: str, wait: float = 15.0) -> None:
    """SIGTERM the lab's process `pid` (only if is_our_process), SIGKILL after `wait` s, and
    return only once it has exited. A frozen (SIGSTOPped) process is continued after the
    SIGTERM, so it handles it now rather than after the full wait. The process is usually not
    our child (a `power-cycle` runs in a new process), so waitpid cannot wait for it: poll until
    it is gone or a zombie, because a dying qemu frees its memory before it closes its sockets,
    and a new qemu started before then cannot bind the guest's forwarded port."""
    if not is_our_process(pid, exe, marker):
        return
    os.kill(pid, signal.SIGTERM)
    os.kill(pid, signal.SIGCONT)
    if not _wait_exited(pid, wait):
        os.kill(pid, signal.SIGKILL)
        if not _wait_exited(pid, 30.0):
            raise BenchError(f"lab process {pid} ({exe}) did not exit 30 s after SIGKILL")


def _wait_exited(pid: int, wait: float) -> bool:
    """Whether `pid` has exited (gone, or a zombie: its files are closed) within `wait` s; our
    own child is reaped on the way."""
    t = time.monotonic() + wait
    while True:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return True
        except ChildProcessError:
            pass
        try:
            # the state follows the parenthesised comm, which may itself hold spaces
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        if state in ("Z", "X"):
            try:                # our child: reap it now rather than leave a zombie
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            return True
        if time.monotonic() >= t:
            return False
        time.sleep(0.05)


OLD_IMAGE_SECONDS = 86400


def _open_files() -> set[str]:
    """Every path some process holds open (from /proc/*/fd)."""
    out = set()
    for fd_dir in Path("/proc").glob("[0-9]*/fd"):
        try:
            fds = list(fd_dir.iterdir())
        except OSError:
            continue
        for fd in fds:
            try:
                out.add(os.readlink(fd))
            except OSError:
                pass
    return out


def collect_old_images(cache: Path, pattern: str, keep: Path, disk: str) -> list[Path]:
    """Remove the images of older recipes (`pattern` under `cache`), but never one a qemu still
    has open (a running lab's overlays are backed by its `disk` and a power cycle restarts qemu
    from it) nor one made in the last day (another checkout of bench, with the older recipe,
    may be about to boot it). Returns what it removed."""
    in_use = _open_files()
    removed = []
    for old in cache.glob(pattern):
        if old == keep or str(old / disk) in in_use:
            continue
        try:
            age = time.time() - (old / "manifest.json").stat().st_mtime
        except OSError:
            continue
        if age > OLD_IMAGE_SECONDS:
            shutil.rmtree(old, ignore_errors=True)
            removed.append(old)
    return removed


def missing_capabilities(build: bool = True) -> list[str]:
    """Why the lab cannot run here (empty when it can): not root, missing tools (with the Debian
    package that has them), no mirror for debootstrap (only when an image must be built)."""
    why = []
    if os.geteuid() != 0:
        why.append("not root (debootstrap and mkfs of the guest image need root)")
    for tool, pkg in HOST_TOOLS.items():
        if shutil.which(tool) is None and not (build is False and tool == "debootstrap"):
            why.append(f"no {tool} (Debian package {pkg})")
    if build and not _cached_image_ok() and mirror() is None:
        why.append("no Debian mirror in the apt sources for debootstrap (set BENCH_LAB_MIRROR)")
    return why


def mirror() -> str | None:
    """The Debian mirror this machine's apt uses ($BENCH_LAB_MIRROR wins)."""
    env = os.environ.get("BENCH_LAB_MIRROR")
    if env:
        return env
    files = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    for f in files:
        try:
            text = f.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            urls = []
            if parts[0] == "URIs:":
                urls = parts[1:]
            elif parts[0] == "deb":
                urls = [p for p in parts[1:] if "://" in p][:1]
            for u in urls:
                if u.rstrip("/").endswith("/debian") and "security" not in u:
                    return u
    return None


def lab_key(cache: Path | None = None) -> Path:
    """The lab's SSH identity (ed25519, made once per cache); .pub next to it."""
    cache = cache or cache_dir()
    key = cache / "lab_ed25519"
    if not key.exists():
        cache.mkdir(parents=True, exist_ok=True)
        run_cmd(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bench-lab", "-f", str(key)])
    return key


def image_key(pubkey: str) -> str:
    h = hashlib.sha256()
    h.update(f"{IMAGE_VERSION} {SUITE} {' '.join(PACKAGES)}\n{pubkey}\n".encode())
    for f in sorted(GUEST_DIR.iterdir()):
        if f.is_file():
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def _image_dir(cache: Path | None = None) -> Path:
    cache = cache or cache_dir()
    pub = (lab_key(cache).with_suffix(".pub")).read_text()
    return cache / f"image-{image_key(pub)}"


def _cached_image_ok() -> bool:
    try:
        d = _image_dir()
    except BenchError:
        return False
    return (d / "manifest.json").exists()


_SLIM = ["usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
         "var/cache/apt/archives", "var/lib/apt/lists"]


_SLIM_MODULES = ["drivers/gpu", "drivers/net/wireless", "drivers/media", "drivers/infiniband",
                 "drivers/staging", "drivers/bluetooth", "drivers/iio", "sound", "net/wireless",
                 "net/mac80211", "drivers/net/ethernet"]


Log = Callable[[str], None] | None


@dataclass(frozen=True)
class Recipe:
    """How a lab's image is made, for build_in_cache: its names, how its package tree comes
    about (cached apart) and how a copy of that tree becomes the image."""
    what: str                       # the log's name for it: "image", "twin image"
    lab: str                        # the error's: "lab", "twin"
    pattern: str                    # this lab's images in the cache (older recipes collected)
    disk: str                       # the image's disk file (an image a qemu holds open stays)
    suite: str
    packages: list[str]
    tree_seconds_key: str           # the manifest's name for the seconds the tree took
    missing: Callable[[], list[str]]
    make_tree: Callable[[Path, str | None, Log], Path]
    # (copy of the tree, the image's folder, lab public key, log) -> (kernel release, tree bytes)
    make_image: Callable[[Path, Path, str, Log], tuple[str, int]]


def build_in_cache(d: Path, recipe: Recipe, log: Log, force: bool) -> dict:
    """The image `d` (a folder of the cache) as `recipe` makes it: the cached one unless
    `force`, else built in a work folder beside it and published. Returns its manifest (paths,
    kernel release, build seconds, whether it came from the cache)."""
    if not force and (m := cached_image(d, log, recipe.what)) is not None:
        return m
    why = recipe.missing()
    if why:
        raise BenchError(f"cannot build the {recipe.lab} image: " + "; ".join(why))
    cache = d.parent
    t0 = time.monotonic()
    url = mirror()
    cache.mkdir(parents=True, exist_ok=True)
    tree = recipe.make_tree(cache, url, log)
    t_tree = time.monotonic() - t0
    # beside the images: build-* for image-*, twin-build-* for twin-image-*
    work = Path(tempfile.mkdtemp(prefix=recipe.pattern.replace("image-*", "build-"), dir=cache))
    root = work / "root"
    try:
        run_cmd(["cp", "-a", str(tree), str(root)], timeout=900)
        say(log, f"tree ready after {t_tree:.0f}s; configuring")
        out = work / "out"
        out.mkdir()
        release, used = recipe.make_image(root, out, lab_key(cache).with_suffix(".pub")
                                          .read_text(), log)
        manifest = {"key": d.name, "kernel": release, "suite": recipe.suite, "mirror": url,
                    "packages": recipe.packages, "build_seconds": round(time.monotonic() - t0, 1),
                    recipe.tree_seconds_key: round(t_tree, 1), "tree_bytes": used,
                    "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        publish_image(out, manifest, d, cache=cache, pattern=recipe.pattern, disk=recipe.disk,
                      log=log, what=recipe.what)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    manifest["cached"] = False
    return manifest


def cached_image(d: Path, log: Callable[[str], None] | None, what: str) -> dict | None:
    """The manifest of the image cached in `d`, marked cached; None when none is there."""
    man = d / "manifest.json"
    if not man.exists():
        return None
    m = json.loads(man.read_text())
    m["cached"] = True
    say(log, f"{what} cached in {d}")
    return m


def publish_image(out: Path, manifest: dict, d: Path, *, cache: Path, pattern: str, disk: str,
                  log: Callable[[str], None] | None, what: str) -> None:
    """Write the manifest beside the image built in `out`, move it to its place `d` (over an
    older build of the same key) and collect the cache's older images."""
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    if d.exists():
        shutil.rmtree(d)
    out.rename(d)
    collect_old_images(cache, pattern, d, disk)
    say(log, f"{what} built in {manifest['build_seconds']}s: {d}")


def install_guest_keys(root: Path, pubkey: str, comment: str) -> None:
    """A fresh ed25519 host key in the tree (the lab's known_hosts records its public half)
    and the lab key as root's authorized key."""
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    run_cmd(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment,
             "-f", str(root / "etc/ssh/ssh_host_ed25519_key")])
    ssh = root / "root/.ssh"
    ssh.mkdir(parents=True, exist_ok=True)
    os.chmod(ssh, 0o700)
    (ssh / "authorized_keys").write_text(pubkey)
    os.chmod(ssh / "authorized_keys", 0o600)


def tree_key() -> str:
    return hashlib.sha256(f"{SUITE} {' '.join(PACKAGES)}".encode()).hexdigest()[:16]


def _debootstrap_tree(cache: Path, url: str | None, log) -> Path:
    """The pristine debootstrap result, cached apart from the image (so a change of the guest
    files rebuilds the image in seconds without downloading again). `url`: the mirror, None
    when there is none (enough when the tree is cached)."""
    tree = cache / f"tree-{tree_key()}"
    if (tree / "etc/debian_version").exists():
        return tree
    if url is None:         # missing_capabilities lets this through when the image is cached
        raise BenchError("cannot build the lab image: no Debian mirror in the apt sources for "
                         "debootstrap (set BENCH_LAB_MIRROR)")
    tmp = cache / f"tree-{tree_key()}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    say(log, f"debootstrap {SUITE} from {url} (minutes, network bound)")
    run_cmd(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE,
          str(tmp), url], timeout=1800)
    shutil.rmtree(tmp / "var/cache/apt/archives", ignore_errors=True)
    (tmp / "var/cache/apt/archives/partial").mkdir(parents=True, exist_ok=True)
    tmp.rename(tree)
    return tree


def build_image(log: Callable[[str], None] | None = None, force: bool = False) -> dict:
    """Build (or find cached) the guest image. Returns its manifest (paths, kernel release,
    build seconds, whether it came from the cache)."""
    return build_in_cache(_image_dir(cache_dir()), _RECIPE, log, force)


def _make_image(root: Path, out: Path, pubkey: str, log: Log) -> tuple[str, int]:
    _configure_tree(root, pubkey)
    release = _kernel_and_slim(root)
    return release, _write_image(root, release, out, log)


def _kernel_and_slim(root: Path) -> str:
    """The guest kernel's release, its initramfs rebuilt, the tree slimmed (docs, locales,
    unneeded modules). Returns the release."""
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise BenchError("no kernel in the guest tree (linux-image-amd64 not installed?)")
    release = kernels[-1].name[len("vmlinuz-"):]
    run_cmd(["chroot", str(root), "update-initramfs", "-u", "-k", release], timeout=600)
    for sub in _SLIM:
        shutil.rmtree(root / sub, ignore_errors=True)
        (root / sub).mkdir(parents=True, exist_ok=True)
    for sub in _SLIM_MODULES:
        shutil.rmtree(root / "lib/modules" / release / "kernel" / sub, ignore_errors=True)
    run_cmd(["chroot", str(root), "depmod", release], timeout=300)
    return release


def _write_image(root: Path, release: str, out: Path, log: Callable[[str], None] | None) -> int:
    """Kernel, initrd, host key and the ext4 root image into out/; returns the tree's bytes."""
    shutil.copy2(root / "boot" / f"vmlinuz-{release}", out / "vmlinuz")
    shutil.copy2(root / "boot" / f"initrd.img-{release}", out / "initrd.img")
    shutil.copy2(root / "etc/ssh/ssh_host_ed25519_key.pub", out / "host_key.pub")
    used = int(run_cmd(["du", "-sb", str(root)]).stdout.split()[0])
    size_mib = (int(used * 1.3) >> 20) + 1024   # room for builds and logs in the guest
    say(log, f"mkfs.ext4 -d ({used >> 20} MiB tree, {size_mib} MiB image)")
    run_cmd(["mkfs.ext4", "-q", "-F", "-L", "benchroot", "-d", str(root),
          str(out / "base.img"), f"{size_mib}M"], timeout=900)
    return used


def _configure_tree(root: Path, pubkey: str) -> None:
    g = GUEST_DIR
    (root / "etc/bench").mkdir(parents=True, exist_ok=True)
    for f, dest, mode in (("rcS", "etc/bench/rcS", 0o755),
                          ("rc.shutdown", "etc/bench/rc.shutdown", 0o755),
                          ("inittab", "etc/inittab", 0o644),
                          ("sshd_config", "etc/ssh/sshd_config", 0o644),
                          ("initramfs-modules", "etc/initramfs-tools/modules", 0o644)):
        shutil.copyfile(g / f, root / dest)
        os.chmod(root / dest, mode)
    for conf in (root / "etc/ssh/sshd_config.d").glob("*"):
        conf.unlink()
    for link in ("sbin/init", "sbin/reboot", "sbin/poweroff", "sbin/halt"):
        p = root / link
        if p.exists() or p.is_symlink():
            p.unlink()
        p.symlink_to("/bin/busybox")
    install_guest_keys(root, pubkey, "bench-lab-guest")
    (root / "etc/hostname").write_text("bench-guest\n")
    (root / "etc/hosts").write_text("127.0.0.1 localhost\n")
    (root / "etc/fstab").write_text("/dev/vda / ext4 rw,noatime 0 1\n")


_RECIPE = Recipe("image", "lab", "image-*", "base.img", SUITE, PACKAGES, "debootstrap_seconds",
                 missing_capabilities, _debootstrap_tree, _make_image)
