"""GRUB one-shot boots, the pure half: the entry's words, paths as GRUB sees them, bench's block
in custom.cfg (the rest kept), the checks of grub.cfg and grubenv. The grub.cfg fixture is what
Debian 12's grub-common 2.06-13+deb12u2 generates (its 00_header with GRUB_DEFAULT=0, then
41_custom); the real boot runs in tests/twin/test_grub_boot_twin.py."""

from __future__ import annotations

import shlex

import pytest

from bench.errors import InputError
from bench.hosts.bootplan import (GRUB_ENV, check_grub_entry, grub_boot_path, grub_cfg_problems,
                                  grub_custom_with, grub_entry_text, grub_oneshot_plan,
                                  grub_restore_plan, grub_word, next_cmdline, parse_grubenv)
from bench.hosts.procfs import parse_cmdline
from tests.support import paths

HEADER = (paths.FIXTURES / "grub" / "debian12-header-41custom.cfg").read_text()
KERNEL = "/boot/vmlinuz-6.12.9+bpo-arm64-16k"
INITRD = "/boot/initrd.img-6.12.9+bpo-arm64-16k"
# /proc/cmdline of a twin guest booted by GRUB's default entry
CMDLINE = f"BOOT_IMAGE={KERNEL} root=UUID=0b6f-11 ro console=ttyAMA0,115200 quiet"


@pytest.mark.parametrize("arg,word", [
    ("root=UUID=0b6f-11", "root=UUID=0b6f-11"),
    ("console=ttyAMA0,115200", "console=ttyAMA0,115200"),
    ("mem=1073741824", "mem=1073741824"),
    ('dyndbg="file x +p"', "'dyndbg=\"file x +p\"'"),
    ("x=$HOME;reboot", "'x=$HOME;reboot'"),
    ("{a}", "'{a}'"),
])
def test_grub_word(arg, word):
    assert grub_word(arg) == word


@pytest.mark.parametrize("bad", ["it's", "a\nb", "a\\b"])
def test_grub_word_refuses_what_cannot_be_quoted(bad):
    with pytest.raises(InputError):
        grub_word(bad)


@pytest.mark.parametrize("bad", ["", "a b", "x'y", "-x", "a\nb", "x" * 65, "a;b", "a/b"])
def test_entry_names(bad):
    assert check_grub_entry("bench-memboot") == "bench-memboot"
    with pytest.raises(InputError):
        check_grub_entry(bad)


def test_grub_boot_path():
    assert grub_boot_path(KERNEL, "/") == KERNEL
    assert grub_boot_path(KERNEL, "/boot") == "/vmlinuz-6.12.9+bpo-arm64-16k"
    assert grub_boot_path(KERNEL, "/boot/") == "/vmlinuz-6.12.9+bpo-arm64-16k"
    for path, mp in ((KERNEL, "/bootx"), ("vmlinuz", "/"), (KERNEL, "boot")):
        with pytest.raises(InputError):
            grub_boot_path(path, mp)


def test_entry_boots_the_next_cmdline_word_for_word():
    append = next_cmdline(CMDLINE + ' dyndbg="file x +p"', "1G", "on")
    text = grub_entry_text("bench-memboot", KERNEL, INITRD, append)
    lines = text.splitlines()
    assert lines[0] == "menuentry 'bench-memboot' --id 'bench-memboot' {"
    assert lines[1] == f"    search --no-floppy --file --set=root {KERNEL}"
    linux = shlex.split(lines[2])     # GRUB's lexer takes single quotes as sh does
    assert linux[:2] == ["linux", KERNEL]
    assert parse_cmdline(" ".join(linux[2:])) == parse_cmdline(append)
    assert "mem=1000000000" in linux and "bench.lru_gen=on" in linux and "panic=10" in linux
    assert not any(w.startswith("BOOT_IMAGE=") for w in linux)
    assert lines[3] == f"    initrd {INITRD}" and lines[4] == "}"
    assert "initrd" not in grub_entry_text("bench-memboot", KERNEL, None, append)


def test_custom_cfg_keeps_the_rest_and_replaces_only_our_block():
    user = "# the admin's entries\nmenuentry 'rescue' {\n  linux /vmlinuz single\n}\n"
    b1 = grub_entry_text("bench-memboot", KERNEL, INITRD, "root=/dev/vda2 mem=1000000000")
    b2 = grub_entry_text("bench-memboot", KERNEL, INITRD, "root=/dev/vda2 mem=2000000000")
    once = grub_custom_with(user, "bench-memboot", b1)
    assert once.startswith(user) and b1 in once
    twice = grub_custom_with(once, "bench-memboot", b2)
    assert twice.startswith(user) and b2 in twice and b1 not in twice
    assert twice.count("### BEGIN bench bench-memboot ###") == 1
    other = grub_custom_with(twice, "bench-other", b1)
    assert b2 in other and other.count("### BEGIN bench") == 2
    assert grub_custom_with(twice, "bench-memboot", None) == user
    assert grub_custom_with(grub_custom_with("", "bench-memboot", b1), "bench-memboot",
                            None) == ""


def test_custom_cfg_refuses_a_broken_block():
    broken = "### BEGIN bench bench-memboot ###\nmenuentry 'x' {\n"
    with pytest.raises(InputError, match="without its END"):
        grub_custom_with(broken, "bench-memboot", None)


def test_debian_grub_cfg_boots_a_custom_one_shot():
    assert grub_cfg_problems(HEADER) == []
    no_custom = HEADER.replace("custom.cfg", "other.cfg")
    assert [p for p in grub_cfg_problems(no_custom) if "41_custom" in p]
    assert len(grub_cfg_problems("set default=0\nmenuentry 'x' { true }\n")) == 2


def test_parse_grubenv():
    # `grub-editenv /boot/grub/grubenv list` after `grub-reboot bench-memboot`
    assert parse_grubenv("next_entry=bench-memboot\n") == {"next_entry": "bench-memboot"}
    assert parse_grubenv("saved_entry=0\nnext_entry=\n# x=y\nnoise\n") == {
        "saved_entry": "0", "next_entry": ""}
    assert parse_grubenv("") == {}


def test_oneshot_and_restore_plans():
    p = grub_oneshot_plan("bench-memboot", KERNEL, INITRD, "root=/dev/vda2 mem=1000000000",
                          "# mine\n", systemd=True)
    assert p["path"] == "/boot/grub/custom.cfg" and p["text"].startswith("# mine\n")
    assert p["argv"][0] == ["grub-reboot", "bench-memboot"]
    assert "systemctl reboot" in p["argv"][-1][4]
    assert p["check"] == ["grub-editenv", GRUB_ENV, "list"]
    assert "reboot -f" in grub_oneshot_plan("bench-memboot", KERNEL, None, "ro",
                                            systemd=False)["argv"][-1][4]
    r = grub_restore_plan("bench-memboot", p["text"])
    assert r["text"] == "# mine\n"
    assert r["argv"][0] == ["grub-editenv", GRUB_ENV, "unset", "next_entry"]
    only_ours = grub_oneshot_plan("bench-memboot", KERNEL, None, "ro")["text"]
    assert grub_restore_plan("bench-memboot", only_ours)["text"] is None
