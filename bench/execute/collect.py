"""Bundles home: collect a finished run's bundle from its host into
`<data_dir>/bundles/<host>/<run_id>/` (tarred on the host; the archive's size, then its
members checked as they stream, every one counted against the caps; unpacked in a temp dir
and renamed into place once its manifest verifies and its spec names this run on this
host), its key figures, and its ingest into the store. A bundle is private (bench.paths):
its directories 0700 and files 0600 here, as the runner made them on the host, where the
archive sits in a 0700 collect/ for the copy.

The controller's own disk failing a write (full, over quota, read-only, an I/O error) is a
ControllerDiskError naming the local path: the host is not to blame, so it is never reported
as unreachable (the SSH transport words every failed copy as the connection's; the local
write error under it is looked for first), and the half-copied archive is removed. A campaign
meeting it spends no attempt of the run: it stops after the current runs, the run left on its
host, and `bench resume` collects it once there is room (bench.execute.campaign.executor)."""

from __future__ import annotations

import base64
import errno
import gzip
import shutil
import tarfile
import tempfile
import threading
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path

from bench.errors import BenchError, CommandFailed, HostError
from bench.execute.hostrun import runner_status
from bench.hosts.inventory import Host
from bench.hosts.ssh import transport_for as ssh_transport_for
from bench.hosts.transport import Transport
from bench.judge.bundle import BundleError, Caps, bind, check, load, read_dir, scan_dir
from bench.judge.bundle_files import ENV
from bench.judge.measured import devices, metrics
from bench.matrix.runspec import check_run_id
from bench.paths import default_data_dir, private_dir, private_tree
from bench.store.db import Store, open_store, resolve_url, sqlite_path
from bench.store.ingest import Prepared, prepare_bundle, write_batch


class ControllerDiskError(BenchError):
    """A write to the controller's own disk failed while collecting: names the local path."""


_DISK_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO}


def _disk_error(path: Path, exc: OSError) -> ControllerDiskError:
    where = exc.filename or path
    return ControllerDiskError(
        f"controller disk: {where}: {exc.strerror or exc} (while collecting a bundle)",
        hint=f"free space on the file system holding {path.parent} (df -h {path.parent}), "
             "then `bench resume` the campaign")


def _local_write_error(exc: BaseException) -> OSError | None:
    """The local disk error under a transport's error, if any (a failed copy that the
    transport worded as the connection's)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.errno in _DISK_ERRNOS:
            return cur
        cur = cur.__cause__ or cur.__context__
    return None


@contextmanager
def _local_disk(path: Path, only_disk: bool = False) -> Iterator[None]:
    """Local writes under `path`: an OSError (with `only_disk`, one of a disk's errnos: the
    same step also reads what the host sent) becomes a ControllerDiskError naming it."""
    try:
        yield
    except OSError as exc:
        if only_disk and exc.errno not in _DISK_ERRNOS:
            raise
        raise _disk_error(path, exc) from None
    except HostError as exc:
        local = _local_write_error(exc)
        if local is None:
            raise
        raise _disk_error(path, local) from None


def bundle_path(data_dir: Path, host: str, run_id: str) -> Path:
    return Path(data_dir) / "bundles" / host / run_id


# an extended header (pax, GNU long name) holds a path of at most MAX_PATH characters and a
# few times: tarfile reads one whole before it returns the member, so its size is bounded first
EXT_HEADER_MAX = 8 << 10
_EXT_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
              tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE)
_CAPS_HINT = "see docs/bundle.md, Limits (BENCH_BUNDLE_MAX_* variables)"


class _Refused(Exception):
    """A member of the archive refused while it is read (message, hint)."""

    def __init__(self, message: str, hint: str | None = _CAPS_HINT):
        super().__init__(message)
        self.hint = hint


class _BoundedInfo(tarfile.TarInfo):
    """tarfile's member reader with what it would read whole bounded: an extended header of at
    most EXT_HEADER_MAX bytes, no sparse member (its map is read whole; a bundle holds none)."""

    def _proc_member(self, tf):
        if self.type in _EXT_TYPES and self.size > EXT_HEADER_MAX:
            raise _Refused(f"an extended header of {self.size} bytes (at most "
                           f"{EXT_HEADER_MAX})")
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise _Refused(f"member {self.name!r} is sparse (a bundle holds none)", None)
        return super()._proc_member(tf)  # type: ignore[misc]  # private in typeshed

    def _proc_gnusparse_10(self, next, pax_headers, tf):
        raise _Refused(f"member {next.name!r} is sparse (a bundle holds none)", None)


def _members(tar: tarfile.TarFile, run_id: str, caps: Caps) -> Iterator[tarfile.TarInfo]:
    """The archive's members as they are read, each checked: a regular file or directory
    under run_id/, within the bundle caps. Every member counts against caps.files (a
    directory or a link costs the controller an entry as a file does), and tarfile's list of
    the members read is emptied as it goes: memory stays bounded, whatever the archive holds."""
    total = count = 0
    while (m := tar.next()) is not None:
        tar.members.clear()  # type: ignore[attr-defined]  # not in typeshed
        count += 1
        if count > caps.files:
            raise _Refused(f"more than {caps.files} members (files, directories and links "
                           f"count alike; {ENV['files']})")
        parts = Path(m.name).parts
        if not parts or parts[0] != run_id or m.name.startswith("/") or ".." in parts:
            raise _Refused(f"unexpected member {m.name!r}", None)
        if not (m.isfile() or m.isdir()):
            raise _Refused(f"member {m.name!r} is not a regular file or directory", None)
        total += m.size
        if m.size > caps.cap_for(m.name) or total > caps.total_bytes:
            raise _Refused(f"member {m.name!r} goes over the bundle caps ({m.size} bytes; "
                           f"{total} bytes and {count} members so far)")
        yield m


def _unpack(archive: Path, dest: Path, run_id: str, host: str, where: str) -> None:
    """Unpack the bundle archive: every member checked (_members) in a first pass that writes
    nothing, then extracted in a second, both streamed. A refused or damaged archive is the
    host's error, naming it."""
    caps = Caps.from_env()
    try:
        with tarfile.open(archive, "r|gz", tarinfo=_BoundedInfo) as tar:
            for _ in _members(tar, run_id, caps):
                pass
        with tarfile.open(archive, "r|gz", tarinfo=_BoundedInfo) as tar:
            for m in _members(tar, run_id, caps):
                tar.extract(m, dest, filter="data")
    except _Refused as exc:
        raise HostError(host, f"collect {where}: bundle archive refused: {exc}",
                        exc.hint) from None
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile, RecursionError) as exc:
        raise HostError(host, f"collect {where}: not a readable tar.gz archive "
                        f"({exc})") from None


def verified(bundle: Path, host: str, run_id: str, where: str) -> dict:
    """The manifest of a bundle that verifies (hashes streamed, sizes capped, spec and status
    validated) and is bound to this run on this host; BundleError otherwise."""
    c = check(scan_dir(bundle), where)
    bind(c.spec, where, run_id=run_id, host=host, what="collected")
    return c.manifest


NO_MANIFEST = 3
# one round trip: the bundle is final (manifest written), then archived in a directory only we
# can enter (the archive holds the bundle's private files); an archive of at most $5 bytes
# comes back base64 on the same command's stdout (after one header line) and is removed
# there, a larger one stays for a copy by file (SFTP), so what one command holds in memory
# is bounded
PACK_SCRIPT = ('test -f "$1/$2/manifest.json" || exit 3; '
               'install -d -m 700 "$3" && tar -czf "$4" -C "$1" "$2" || exit $?; '
               'n=$(wc -c < "$4") || exit $?; '
               'if [ "$n" -le "$5" ]; then echo "bench-collect inline $n"; '
               'base64 < "$4" && rm -f "$4"; else echo "bench-collect file $n"; fi')
# archive bytes sent on the command's stdout (larger: by file). Small: a command's output is
# held whole in memory (within the transport's bound, bench.hosts.sshio.RUN_OUTPUT_MAX); a lab
# run's bundle is some tens of KiB, and a run whose bundle is larger is long enough not to
# miss two round trips
INLINE_MAX = 256 << 10


def archive_max(caps: Caps) -> int:
    """The largest archive of a bundle within `caps` that collect copies: its files, up to
    1 KiB of tar header and padding per member, gzip's worst case on data that does not
    compress (under 1 %), and 1 MiB to spare."""
    return caps.total_bytes + caps.total_bytes // 100 + caps.files * 1024 + (1 << 20)


def _inline(out: str, host: str, remote_tar: str, limit: int) -> bytes | None:
    """The archive a PACK_SCRIPT run sent on its stdout; None when it left it in a file."""
    head, _, rest = out.partition("\n")
    words = head.split()
    if len(words) != 3 or words[:2] not in (["bench-collect", "inline"],
                                            ["bench-collect", "file"]) \
            or not words[2].isdigit():
        raise HostError(host, f"collect {remote_tar}: unexpected answer {head[:80]!r}")
    if int(words[2]) > limit:
        raise HostError(host, f"collect {remote_tar}: the bundle archive is {words[2]} bytes, "
                        f"more than the {limit} a bundle within the caps takes: refused",
                        _CAPS_HINT)
    if words[1] == "file":
        return None
    try:
        data = base64.b64decode(rest)
    except ValueError as exc:
        raise HostError(host, f"collect {remote_tar}: the archive sent is not base64 "
                        f"({exc})") from None
    if len(data) != int(words[2]):
        raise HostError(host, f"collect {remote_tar}: {len(data)} bytes of the archive came "
                        f"back, the host counted {words[2]}")
    return data


def collect(t: Transport, host: Host, run_id: str, data_dir: Path, *,
            inline_max: int = INLINE_MAX) -> dict:
    """Copy <work_dir>/runs/<run_id>/ to <data_dir>/bundles/<host>/<run_id>/ and verify its
    manifest. An already collected bundle that verifies is kept ('present'). A bundle whose
    spec names another run or host is refused: nothing is put in place. One command packs
    the bundle and (an archive of at most `inline_max` bytes) sends it back."""
    check_run_id(run_id)
    dest = bundle_path(data_dir, host.name, run_id)
    if dest.is_dir() and not dest.is_symlink():
        try:
            m = verified(dest, host.name, run_id, str(dest))
            private_tree(dest)
            return {"bundle": str(dest), "status": "present", "files": len(m["files"])}
        except BundleError:
            shutil.rmtree(dest)
    src = f"{host.work_dir}/runs/{run_id}"
    remote_tar = f"{host.work_dir}/collect/{run_id}.tar.gz"
    r = t.run(["sh", "-c", PACK_SCRIPT, "bench-collect", f"{host.work_dir}/runs", run_id,
               f"{host.work_dir}/collect", remote_tar, str(max(0, inline_max))],
              timeout=600, check=False)
    if r.rc == NO_MANIFEST:
        raise HostError(host.name, f"{src}/manifest.json does not exist: the run has not "
                        "finished writing its bundle (or no such run)",
                        f"check `runner.py status {run_id}` on the host; collect again later")
    if r.rc != 0:
        raise CommandFailed(host.name, ["tar", "-czf", remote_tar], r.rc, r.stderr)
    limit = archive_max(Caps.from_env())
    try:
        data = _inline(r.stdout, host.name, remote_tar, limit)
    except HostError:
        t.run(["rm", "-f", remote_tar], timeout=30, check=False)
        raise
    inline = data is not None
    with _local_disk(dest.parent):
        private_dir(dest.parent.parent)             # bundles/
        private_dir(dest.parent)                    # bundles/<host>/
        tmpdir = Path(tempfile.mkdtemp(prefix=f".{run_id}-", dir=dest.parent))
    try:
        local_tar = tmpdir / "bundle.tar.gz"
        with _local_disk(local_tar, only_disk=True):
            if data is None:
                t.get(remote_tar, local_tar, limit=limit)
            else:
                local_tar.write_bytes(data)
        data = None
        with _local_disk(tmpdir / run_id, only_disk=True):
            _unpack(local_tar, tmpdir, run_id, host.name, remote_tar)
        m = verified(tmpdir / run_id, host.name, run_id, f"{host.name}:{src}")
        with _local_disk(dest):
            private_tree(tmpdir / run_id)
            (tmpdir / run_id).rename(dest)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
        if not inline:          # an archive sent inline is already removed on the host
            t.run(["rm", "-f", remote_tar], timeout=30, check=False)
    return {"bundle": str(dest), "status": "collected", "files": len(m["files"])}


def figures(bundle_dir: Path) -> dict:
    """The key figures of a collected bundle."""
    b = load(read_dir(bundle_dir), str(bundle_dir))
    m = metrics(b)
    dev = m["device_bytes_per_iteration"]
    return {"iterations": m["iterations"], "iteration_median_s": m["iteration_median_s"],
            "device_gb_per_iteration": None if dev is None else dev / 1e9,
            "logical_gb_per_iteration": None if m["logical_bytes_per_iteration"] is None
            else m["logical_bytes_per_iteration"] / 1e9,
            "device": next(iter(devices(b)), None), "runner_ok": b.status.get("ok"),
            "runner_reason": b.status.get("reason")}


# Ingests of this process share one open store per database (opening one checks the schema
# against every migration script: about 35 ms of CPU, and a fresh engine compiles every
# statement again) and take a slot of that database for their write: one for SQLite, whose
# single writer they would otherwise queue for in its busy handler, a few for a server. A
# bundle is read, validated and derived (bench.store.ingest.prepare_bundle) before its slot,
# at most PREPARED_MAX at once (what they hold in memory is bounded); the ingest that gets a
# slot writes its own bundle and those queued behind it, up to BATCH_MAX, in one transaction
# (a savepoint each: bench.store.ingest.write_batch): a campaign of many hosts waits for one
# commit per batch instead of one per bundle.
INGEST_SLOTS = {"sqlite": 1}
INGEST_SLOTS_SERVER = 4
MAX_INGEST_STORES = 4
BATCH_MAX = 16
PREPARED_MAX = 16


class GroupWrite:
    """The ingests of one store: slots for the write, a queue of prepared bundles (see
    above)."""

    def __init__(self, store: Store, slots: threading.BoundedSemaphore):
        self.store = store
        self.slots = slots
        self.prepared = threading.BoundedSemaphore(PREPARED_MAX)
        self._mu = threading.Lock()
        self._queue: list[tuple[Prepared, Future]] = []
        self.batches: list[int] = []        # the size of each batch written (last 1000)

    def ingest(self, bundle_dir: Path, plan_path: Path | None) -> dict:
        with self.prepared:
            return self.write(prepare_bundle(bundle_dir, plan=plan_path))

    def write(self, p: Prepared) -> dict:
        """Write p (with the bundles queued behind it, or as part of another ingest's batch);
        its answer, or its error raised."""
        mine: tuple[Prepared, Future] = (p, Future())
        with self._mu:
            self._queue.append(mine)
        with self.slots:
            with self._mu:
                batch: list[tuple[Prepared, Future]] = []
                rest = [x for x in self._queue if x is not mine]
                if len(rest) < len(self._queue):    # not taken into another ingest's batch
                    batch = [mine] + rest[:BATCH_MAX - 1]
                    self._queue = rest[BATCH_MAX - 1:]
            if batch:
                self._write(batch)
        return mine[1].result()

    def _write(self, batch: list[tuple[Prepared, Future]]) -> None:
        try:
            res = write_batch(self.store, [p for p, _ in batch])
        except BaseException as exc:  # noqa: BLE001 - every waiting ingest hears it
            res = [exc] * len(batch)
        self.batches = self.batches[-999:] + [len(batch)]
        for (_, fut), r in zip(batch, res):
            if isinstance(r, BaseException):
                fut.set_exception(r)
            else:
                fut.set_result(r)


_STORES: dict[str, tuple[Store, tuple | None, GroupWrite]] = {}
_STORES_LOCK = threading.Lock()


def _identity(store: Store) -> tuple | None:
    """A SQLite store's file (device, inode), so that a file replaced or removed since it was
    opened is opened again; None for a server."""
    path = sqlite_path(store.engine)
    if path is None:
        return None
    try:
        st = path.stat()
    except OSError:
        return ("missing",)
    return (st.st_dev, st.st_ino)


def ingest_group(db_url: str | None) -> GroupWrite:
    """This process's ingests into `db_url`: its store, opened (and brought to head) once,
    with its slots and queue."""
    url = resolve_url(db_url)
    with _STORES_LOCK:
        hit = _STORES.get(url)
        if hit is not None and _identity(hit[0]) == hit[1]:
            return hit[2]
        if hit is not None:
            del _STORES[url]
            hit[0].close()
        while len(_STORES) >= MAX_INGEST_STORES:
            _STORES.pop(next(iter(_STORES)))[0].close()
        store = open_store(url)
        slots = threading.BoundedSemaphore(
            INGEST_SLOTS.get(store.engine.dialect.name, INGEST_SLOTS_SERVER))
        group = GroupWrite(store, slots)
        _STORES[url] = (store, _identity(store), group)
        return group


def ingest_store(db_url: str | None) -> tuple[Store, threading.BoundedSemaphore]:
    """This process's store for ingests into `db_url` and its write slots."""
    g = ingest_group(db_url)
    return g.store, g.slots


def ingest(db_url: str | None, bundle_dir: Path, plan_path: Path | None) -> dict:
    """Ingest one bundle into the process's shared store for db_url (see GroupWrite)."""
    return ingest_group(db_url).ingest(bundle_dir, plan_path)


def collect_run(host: Host, run_id: str, *,
                transport_for: Callable[[Host], Transport] | None = None,
                data_dir: Path | None = None) -> dict:
    """`bench hosts collect`: the runner's status, then the bundle if the run ended."""
    check_run_id(run_id)
    t = (transport_for or ssh_transport_for)(host)
    try:
        st = runner_status(t, host, run_id)
        if st is None:
            raise HostError(host.name, f"no run {run_id} in {host.work_dir}/runs",
                            "check the run id (`ls runs/` in the host's work_dir)")
        if st.get("phase") not in ("done", "failed"):
            return {"host": host.name, "run_id": run_id, "status": st, "bundle": None,
                    "collected": False, "figures": None}
        c = collect(t, host, run_id, Path(data_dir or default_data_dir()))
        return {"host": host.name, "run_id": run_id, "status": st, "bundle": c["bundle"],
                "collected": True, "figures": figures(Path(c["bundle"]))}
    finally:
        t.close()
