"""bench.lab.vm_image's image cache on real directories: an image of an older recipe is removed
only when no process holds its disk open and it is more than a day old (a running lab's overlays
are backed by it; another checkout may be about to boot it); a build publishes its image and
the next finds it cached; the guest's keys."""

from __future__ import annotations

import dataclasses
import json
import os
import time

import pytest

from bench.errors import BenchError
from bench.lab.vm_image import (OLD_IMAGE_SECONDS, Recipe, build_in_cache, cached_image,
                                collect_old_images, install_guest_keys, lab_key, publish_image)


def _image(cache, name, age_s):
    d = cache / name
    d.mkdir()
    (d / "base.img").write_bytes(b"\0" * 512)
    m = d / "manifest.json"
    m.write_text("{}")
    t = time.time() - age_s
    os.utime(m, (t, t))
    return d


def test_only_old_unused_images_of_other_recipes_go(tmp_path):
    keep = _image(tmp_path, "image-new", OLD_IMAGE_SECONDS * 3)   # the current one, however old
    stale = _image(tmp_path, "image-stale", OLD_IMAGE_SECONDS + 60)
    fresh = _image(tmp_path, "image-fresh", 60)
    busy = _image(tmp_path, "image-busy", OLD_IMAGE_SECONDS * 2)
    other = _image(tmp_path, "twin-image-x", OLD_IMAGE_SECONDS * 2)  # not this lab's pattern
    with open(busy / "base.img", "rb"):                  # as a running qemu holds its backing file
        removed = collect_old_images(tmp_path, "image-*", keep, "base.img")
    assert removed == [stale]
    assert not stale.exists()
    assert keep.exists() and fresh.exists() and busy.exists() and other.exists()


def test_an_image_without_a_manifest_is_left_alone(tmp_path):
    keep = _image(tmp_path, "image-new", 0)
    half = tmp_path / "image-half"      # a build in progress or a broken copy: not ours to judge
    half.mkdir()
    assert collect_old_images(tmp_path, "image-*", keep, "base.img") == []
    assert half.exists()


def test_a_published_image_replaces_its_old_build_and_is_found_cached(tmp_path):
    """publish_image (both labs' last build step) puts the built image at its key, over an
    older build of the same key, and collects the older recipes; cached_image then finds it."""
    d = tmp_path / "image-k"
    assert cached_image(d, None, "image") is None
    old = _image(tmp_path, "image-k", 0)                 # an earlier build of the same key
    (old / "stale").write_text("")
    other = _image(tmp_path, "image-older-recipe", OLD_IMAGE_SECONDS + 60)
    out = tmp_path / "build" / "out"
    out.mkdir(parents=True)
    (out / "base.img").write_bytes(b"\1" * 512)
    heard: list[str] = []
    publish_image(out, {"key": "k", "build_seconds": 1.5}, d, cache=tmp_path,
                  pattern="image-*", disk="base.img", log=heard.append, what="image")
    assert not out.exists() and not (d / "stale").exists() and not other.exists()
    assert (d / "base.img").read_bytes() == b"\1" * 512
    assert len(heard) == 1 and heard[0].endswith(f"lab: image built in 1.5s: {d}")
    assert cached_image(d, heard.append, "image") == {"key": "k", "build_seconds": 1.5,
                                                      "cached": True}


def test_guest_keys_are_fresh_and_root_logs_in_with_the_lab_key(tmp_path):
    ssh_dir = tmp_path / "etc/ssh"
    ssh_dir.mkdir(parents=True)
    (ssh_dir / "ssh_host_rsa_key").write_text("the debootstrap tree's key")
    install_guest_keys(tmp_path, "ssh-ed25519 AAAAlab bench\n", "bench-lab-guest")
    assert sorted(p.name for p in ssh_dir.iterdir()) == ["ssh_host_ed25519_key",
                                                         "ssh_host_ed25519_key.pub"]
    assert (ssh_dir / "ssh_host_ed25519_key.pub").read_text().strip().endswith("bench-lab-guest")
    keys = tmp_path / "root/.ssh/authorized_keys"
    assert keys.read_text() == "ssh-ed25519 AAAAlab bench\n"
    assert (os.stat(keys).st_mode & 0o777, os.stat(keys.parent).st_mode & 0o777) == (0o600, 0o700)


def test_an_image_is_built_once_from_its_recipe_then_found_in_the_cache(tmp_path, monkeypatch):
    """build_in_cache (both labs' build_image) with a toy recipe: the tree is made, copied, turned
    into the image with the lab's public key and published with its manifest; the next call
    finds it cached, and a missing capability stops a build before anything is made."""
    monkeypatch.setenv("BENCH_LAB_MIRROR", "http://mirror.invalid/debian")
    calls = []

    def make_tree(cache, url, log):
        calls.append(("tree", url))
        tree = cache / "tree"
        (tree / "etc").mkdir(parents=True, exist_ok=True)
        (tree / "etc/debian_version").write_text("12\n")
        return tree

    def make_image(root, out, pubkey, log):
        calls.append(("image", (root / "etc/debian_version").read_text(), pubkey))
        (out / "disk.img").write_text(pubkey)
        return "6.1.0-toy", 4096

    toy = Recipe("toy image", "toy", "toy-image-*", "disk.img", "bookworm", ["busybox"],
                 "tree_seconds", lambda: [], make_tree, make_image)
    d = tmp_path / "toy-image-k"
    m = build_in_cache(d, toy, None, False)
    pub = lab_key(tmp_path).with_suffix(".pub").read_text()
    assert calls == [("tree", "http://mirror.invalid/debian"), ("image", "12\n", pub)]
    assert (m["key"], m["kernel"], m["packages"], m["tree_bytes"], m["cached"]) == (
        "toy-image-k", "6.1.0-toy", ["busybox"], 4096, False)
    assert json.loads((d / "manifest.json").read_text())["mirror"] == m["mirror"]
    assert (d / "disk.img").read_text() == pub
    assert not list(tmp_path.glob("toy-build-*"))           # the work folder is gone
    again = build_in_cache(d, toy, None, False)
    assert again == dict(m, cached=True) and len(calls) == 2
    refused = dataclasses.replace(toy, missing=lambda: ["no mmdebstrap"])
    with pytest.raises(BenchError, match="cannot build the toy image: no mmdebstrap"):
        build_in_cache(tmp_path / "toy-image-other", refused, None, True)
