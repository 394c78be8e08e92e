"""Putting what a run reads onto its host, idempotently: the plan (and hint plan) as
content-addressed files (`<work_dir>/plans/<sha256>.bin`, skipped when a file of that name
already hashes to it) and the pool with the plan's geometry.

Pool writer: a small Python-stdlib program (`POOL_SCRIPT`) sent as `python3 -c` rather than a
new agent subcommand. Hosts already need python3 for the runner, the agent's source hash and
build stay untouched, and the writer is I/O bound either way (8 MiB chunks of getrandom bytes,
well above a GB/s, so a 1.45 TB pool is device-limited, not writer-limited). It follows
docs/formats.md (exact 32-byte header, then pseudo-random bytes that are really written), is
resumable (a file with the right size and header is kept; each file is written to a temp name
and renamed), marks pool.json complete only at the end, and refuses a directory holding a
different pool or anything that is not a pool.
"""

from __future__ import annotations

import os
from pathlib import Path

from bench.errors import CommandFailed, HostError
from bench.execute.hostrun import last_json
from bench.hosts.inventory import Host
from bench.hosts.transport import Transport


def remote_sha256(t: Transport, path: str) -> str | None:
    r = t.run(["sha256sum", path], timeout=300, check=False)
    return r.stdout.split()[0] if r.rc == 0 and r.stdout.strip() else None


def ensure_file(t: Transport, local: Path, remote: str, sha: str) -> str:
    """Put local to remote unless remote already hashes to sha: 'present' | 'sent'."""
    if remote_sha256(t, remote) == sha:
        return "present"
    t.run(["mkdir", "-p", os.path.dirname(remote)], timeout=30)
    tmp = f"{remote}.tmp"
    t.put(Path(local), tmp)
    if remote_sha256(t, tmp) != sha:
        t.run(["rm", "-f", tmp], timeout=30, check=False)
        raise HostError(t.host, f"{remote}: the copy does not hash to {sha} (transfer damaged)")
    t.run(["mv", "-f", tmp, remote], timeout=30)
    return "sent"


POOL_SCRIPT = r'''
import json, os, struct, sys, time
d, L, E, S, seed, tmpl = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
H = struct.Struct("<8sIIQQ"); MAGIC = b"BXPERT\0\0"; CHUNK = 8 << 20
want = {"layers": L, "experts_per_layer": E, "expert_bytes": S, "path": tmpl, "seed": seed, "format": 1}
man = os.path.join(d, "pool.json")
def out(o, rc=0):
    print(json.dumps(o)); sys.exit(rc)
def manifest(complete):
    tmp = man + ".tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(dict(want, complete=complete), sort_keys=True) + "\n")
    os.replace(tmp, man)
t0 = time.monotonic()
if os.path.exists(man):
    try:
        old = json.load(open(man))
        have = {"layers": int(old["layers"]), "experts_per_layer": int(old["experts_per_layer"]),
                "expert_bytes": int(old["expert_bytes"]), "path": old.get("path", "L{layer:03d}/E{expert:04d}.bin"),
                "seed": int(old.get("seed", 0)), "format": int(old.get("format", 1))}
    except (OSError, ValueError, KeyError, TypeError) as e:
        out({"ok": False, "reason": "%s: unreadable pool manifest (%s); refusing to touch it" % (man, e)}, 3)
    if have != want:
        out({"ok": False, "reason": "%s holds a different pool (%dx%dx%d B, seed %d, path %s); refusing to overwrite it"
             % (d, have["layers"], have["experts_per_layer"], have["expert_bytes"], have["seed"], have["path"]), "have": have}, 3)
    if old.get("complete") is True:
        out({"ok": True, "status": "present", "written": 0, "kept": L * E, "bytes": L * E * S, "seconds": 0.0})
elif os.path.isdir(d) and os.listdir(d):
    out({"ok": False, "reason": "%s is not empty and holds no pool.json; refusing to write into it" % d}, 3)
os.makedirs(d, exist_ok=True)
manifest(False)
written = kept = 0
for layer in range(L):
    for expert in range(E):
        p = os.path.join(d, tmpl.format(layer=layer, expert=expert))
        head = H.pack(MAGIC, layer, expert, S, seed)
        try:
            if os.path.getsize(p) == S:
                with open(p, "rb") as f:
                    if f.read(H.size) == head:
                        kept += 1
                        continue
        except OSError:
            pass
        os.makedirs(os.path.dirname(p), exist_ok=True)
        tmp = p + ".tmp"
        with open(tmp, "wb") as f:
            f.write(head)
            left = S - H.size
            while left > 0:
                n = min(left, CHUNK)
                f.write(os.urandom(n))
                left -= n
        os.replace(tmp, p)
        written += 1
os.sync()
manifest(True)
os.sync()
out({"ok": True, "status": "made" if not kept else "resumed", "written": written, "kept": kept,
     "bytes": L * E * S, "seconds": round(time.monotonic() - t0, 3)})
'''

POOL_TEMPLATE = "L{layer:03d}/E{expert:04d}.bin"


def ensure_pool(t: Transport, host: Host, geometry: tuple[int, int, int], seed: int = 0,
                timeout: float | None = None) -> dict:
    """Make (or resume, or find) the pool of `geometry` = (layers, experts, expert_bytes) in
    host.pool_dir. Raises HostError when the directory holds a different pool."""
    layers, experts, size = geometry
    if timeout is None:
        timeout = 120 + layers * experts * size / 50e6   # >= 50 MB/s
    r = t.run(["python3", "-c", POOL_SCRIPT, host.pool_dir, str(layers), str(experts), str(size),
               str(seed), POOL_TEMPLATE], timeout=timeout, check=False)
    res = last_json(r.stdout)
    if res is None:
        raise CommandFailed(host.name, ["python3", "-c", "<pool writer>", host.pool_dir], r.rc,
                            r.stderr or r.stdout)
    if not res.get("ok"):
        raise HostError(host.name, f"pool: {res.get('reason')}",
                        "point paths.pool_dir at another directory, or remove that pool "
                        "on the host if it is no longer needed")
    return res
