"""bench.lab.vm_image.collect_old_images on real directories: an image of an older recipe is
removed only when no process holds its disk open and it is more than a day old (a running lab's
overlays are backed by it; another checkout may be about to boot it)."""

from __future__ import annotations

import os
import time

from bench.lab.vm_image import OLD_IMAGE_SECONDS, collect_old_images


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
