"""The pools of one host (`runner.py pools`, `runner.py pool-rm`): several pools coexist under
the inventory's pool_dir, one directory per shape and seed, `<pool_dir>/<L>x<E>x<S>-s<seed>/`
(poolfmt.pool_key).

Old layout: before the keys, a host held one pool right in pool_dir (pool.json there). It stays
usable: `migrate_old_layout` moves it into its keyed directory (renames on one file system: the
expert files are not copied), data first and pool.json last, so an interrupted move is finished
by the next call. The runner's `pool` command does this before it makes or finds a pool; the
listing shows such a pool (layout "old") without moving it.

Removal refuses a pool that a live run on this host reads (a run whose runner holds its run lock
and whose spec names that directory), checked under the start lock so no run starts meanwhile;
the directory is renamed to `.rm-<key>-<pid>` first (no half-removed pool is ever seen under its
key), then deleted. The controller takes the host lock (bench/hosts/lock.py) around it, so no
other controller is making or using pools there."""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from . import poolfmt
from .locks import run_is_live, start_lock

RM_PREFIX = ".rm-"
REFUSED = 3
USAGE = 2


# ----------------------------------------------------------------------------- old layout

def _top_names(template: str, layers: int, experts: int) -> set[str]:
    """The first path components of every expert file (L000, L001, ... for the default)."""
    first = template.split("/", 1)[0]
    if "/" in template and "{expert" not in first:      # L{layer:03d}/...: one per layer
        return {poolfmt.relpath(first + "/{expert}", layer, 0).split("/", 1)[0]
                for layer in range(layers)}
    names = set()
    for layer in range(layers):
        for expert in range(experts):
            names.add(poolfmt.relpath(template, layer, expert).split("/", 1)[0])
    return names


def migrate_old_layout(root: str) -> dict[str, Any]:
    """Move a pool whose pool.json sits right in root into root/<its key>/. {} when there is
    none; {"migrated": True, "key", "to"} when moved; {"ok": False, "reason"} when it cannot
    be moved (unreadable manifest, or a keyed pool of that key already there)."""
    if not os.path.lexists(os.path.join(root, poolfmt.MANIFEST)):
        return {}
    try:
        f = poolfmt.parse_manifest(poolfmt.read_manifest(root))
    except (OSError, ValueError, KeyError, TypeError) as e:
        return {"ok": False, "reason": "%s/%s: an old-layout pool manifest that cannot be read "
                "(%s); move or remove it" % (root, poolfmt.MANIFEST, e)}
    if poolfmt.geometry_problem(f["layers"], f["experts_per_layer"], f["expert_bytes"]) \
            or poolfmt.template_problem(f["path"]):
        return {"ok": False, "reason": "%s/%s: an old-layout pool of an unusable shape; move "
                "or remove it" % (root, poolfmt.MANIFEST)}
    key = poolfmt.pool_key(f["layers"], f["experts_per_layer"], f["expert_bytes"], f["seed"])
    dest = os.path.join(root, key)
    if os.path.lexists(os.path.join(dest, poolfmt.MANIFEST)):
        return {"ok": False, "reason": "%s holds an old-layout pool %s and %s holds one of the "
                "same key; remove one of them (bench hosts pools HOST --rm %s removes the "
                "keyed one)" % (root, key, dest, key)}
    names = _top_names(f["path"], f["layers"], f["experts_per_layer"])
    if key in names:
        return {"ok": False, "reason": "%s: the old-layout pool's files are named like its key "
                "%s; move it by hand" % (root, key)}
    os.makedirs(dest, exist_ok=True)
    for name in sorted(names) + [poolfmt.SUMS, poolfmt.MANIFEST]:
        src = os.path.join(root, name)
        if not os.path.lexists(src):
            continue
        if os.path.lexists(os.path.join(dest, name)):
            return {"ok": False, "reason": "cannot move %s into %s: %s is there already"
                    % (src, dest, name)}
        os.rename(src, os.path.join(dest, name))
    return {"migrated": True, "key": key, "to": dest}


# ----------------------------------------------------------------------------- listing

def _disk_usage(d: str, only: set[str] | None = None) -> tuple[int, int]:
    """(allocated bytes, files) under d, not following symlinks; with `only`, just those
    entries of d (an old-layout pool shares its directory with the keyed ones)."""
    used = files = 0
    for top, dirs, names in os.walk(d):
        if only is not None and top == d:
            dirs[:] = [n for n in dirs if n in only]
            names = [n for n in names if n in only or n in (poolfmt.MANIFEST, poolfmt.SUMS)]
        for n in names:
            try:
                st = os.lstat(os.path.join(top, n))
            except OSError:
                continue
            used += st.st_blocks * 512
            files += 1
    return used, files


def _entry(d: str, key: str, layout: str) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "dir": d, "layout": layout}
    shape = poolfmt.parse_key(key)
    if shape:
        e.update(layers=shape[0], experts_per_layer=shape[1], expert_bytes=shape[2],
                 seed=shape[3])
    try:
        raw = poolfmt.read_manifest(d)
        f = poolfmt.parse_manifest(raw)
        why = poolfmt.geometry_problem(f["layers"], f["experts_per_layer"], f["expert_bytes"]) \
            or poolfmt.template_problem(f["path"])
        if why:
            raise ValueError(why)
    except FileNotFoundError:
        e.update(state="partial", reason="no pool.json yet (a write began and stopped)")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        e.update(state="unreadable", reason="pool.json: %s" % exc)
    else:
        e.update(layers=f["layers"], experts_per_layer=f["experts_per_layer"],
                 expert_bytes=f["expert_bytes"], seed=f["seed"], path=f["path"],
                 state="complete" if raw.get("complete") is True else "partial",
                 sums=isinstance(raw.get("sums"), dict))
        real = poolfmt.pool_key(f["layers"], f["experts_per_layer"], f["expert_bytes"],
                                f["seed"])
        if layout == "keyed" and real != key:
            e.update(state="mismatch", reason="pool.json describes %s" % real)
        e["key"] = real if layout == "old" else key
    if "layers" in e:
        e["bytes"] = e["layers"] * e["experts_per_layer"] * e["expert_bytes"]
    only = None
    if layout == "old":
        only = _top_names(e["path"], e["layers"], e["experts_per_layer"]) if "path" in e \
            else set()
    e["disk_bytes"], e["files"] = _disk_usage(d, only)
    return e


def live_pool_users(work_dir: str) -> dict[str, list[str]]:
    """realpath of a pool directory -> the live runs (run lock held) whose spec names it.
    The caller holds the start lock."""
    users: dict[str, list[str]] = {}
    locks = os.path.join(work_dir, "locks")
    try:
        names = sorted(os.listdir(locks))
    except OSError:
        return users
    for n in names:
        rid = n[:-len(".lock")]
        if not n.endswith(".lock") or not run_is_live(work_dir, rid):
            continue
        try:
            with open(os.path.join(work_dir, "runs", rid, "spec.json")) as fh:
                pool = json.load(fh).get("pool")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(pool, str) and pool:
            path = os.path.realpath(os.path.join(work_dir, pool))
            users.setdefault(path, []).append(rid)
    return users


def _locked_users(work_dir: str) -> dict[str, list[str]]:
    if not os.path.isdir(work_dir):
        return {}
    fd = start_lock(work_dir)
    try:
        return live_pool_users(work_dir)
    finally:
        os.close(fd)


def list_pools(root: str, work_dir: str) -> dict[str, Any]:
    """Every pool under root: keyed ones, an old-layout one, leftovers of a removal."""
    if not os.path.isdir(root):
        return {"ok": True, "root": root, "pools": [], "note": "%s does not exist" % root}
    users = _locked_users(work_dir)
    pools = []
    if os.path.lexists(os.path.join(root, poolfmt.MANIFEST)):
        pools.append(_entry(root, "?", "old"))
    for n in sorted(os.listdir(root)):
        d = os.path.join(root, n)
        if os.path.islink(d) or not os.path.isdir(d):
            continue
        if poolfmt.parse_key(n):
            pools.append(_entry(d, n, "keyed"))
        elif n.startswith(RM_PREFIX):
            used, files = _disk_usage(d)
            pools.append({"key": n, "dir": d, "layout": "keyed", "state": "removing",
                          "reason": "left by an interrupted removal; --rm its key again",
                          "disk_bytes": used, "files": files})
    for e in pools:
        e["in_use"] = users.get(os.path.realpath(e["dir"]), [])
    return {"ok": True, "root": root, "pools": pools}


# ----------------------------------------------------------------------------- removal

def remove_pool(root: str, key: str, work_dir: str) -> tuple[dict[str, Any], int]:
    """Remove the pool `key` under root (refused while a live run reads it)."""
    if poolfmt.parse_key(key) is None:
        return {"ok": False, "reason": "%r is not a pool key (<layers>x<experts>x<bytes>-s"
                "<seed>, as `bench hosts pools HOST` lists them)" % key}, USAGE
    if not os.path.isabs(root):
        return {"ok": False, "reason": "pool root %r is not an absolute path" % root}, USAGE
    d = os.path.join(root, key)
    leftovers = [os.path.join(root, n) for n in (os.listdir(root) if os.path.isdir(root)
                                                 else [])
                 if n.startswith(RM_PREFIX + key + "-")]
    os.makedirs(work_dir, exist_ok=True)
    fd = start_lock(work_dir)
    try:
        if not os.path.lexists(d):
            moved = migrate_old_layout(root) if os.path.isdir(root) else {}
            if moved.get("ok") is False:
                return dict(moved, key=key), REFUSED
        if not os.path.lexists(d) and not leftovers:
            return {"ok": False, "key": key, "reason": "no pool %s under %s" % (key, root)}, \
                REFUSED
        runs = live_pool_users(work_dir).get(os.path.realpath(d), [])
        if runs:
            return {"ok": False, "key": key, "in_use": runs, "reason": "pool %s is in use by "
                    "run %s; remove it once the run ended" % (key, ", ".join(runs))}, REFUSED
        used = 0
        if os.path.lexists(d):
            used = _disk_usage(d)[0]
            gone = os.path.join(root, "%s%s-%d" % (RM_PREFIX, key, os.getpid()))
            os.rename(d, gone)
            leftovers.append(gone)
    finally:
        os.close(fd)
    for g in leftovers:
        if os.path.islink(g) or not os.path.isdir(g):
            os.unlink(g)
        else:
            shutil.rmtree(g)
    return {"ok": True, "key": key, "dir": d, "removed": True, "disk_bytes": used}, 0
