"""Inventory validation: every error names the file, the key and what is allowed."""

import json

import pytest

from bench.cli import main
from bench.errors import InventoryError
from bench.hosts.inventory import check_inventory, load_host_file, load_inventory, select
from tests.support import paths

REPO_HOSTS = paths.REPO / "hosts"

GOOD = """
name = "h1"
address = "10.0.0.1"
transport = "ssh"
[memory]
total = "480G"
floor = "96G"
[reboot]
allowed = true
method = "kexec"
[paths]
work_dir = "/var/lib/bench"
pool_dir = "/data/pool"
"""


def write(tmp_path, text, name="h1"):
    p = tmp_path / f"{name}.toml"
    p.write_text(text)
    return p


def test_shipped_inventory_validates():
    inv = load_inventory(REPO_HOSTS)
    assert {"gh200-a", "gh200-b", "local"} <= set(inv)
    a = inv["gh200-a"]
    assert a.transport == "ssh" and a.reboot.allowed and a.reboot.method == "grub-reboot"
    # the paper's 480 GB machines, in its decimal units
    assert a.mem_total == 480 * 10 ** 9 and a.mem_floor == 96 * 10 ** 9
    assert a.expect == {"arch": "aarch64", "page_size": 65536, "kernel": "6.8"}
    assert inv["gh200-b"].tags["machine"] == "B"
    assert inv["local"].transport == "local" and not inv["local"].reboot.allowed


def test_memory_sizes_decimal_or_binary_and_written_back_canonical(tmp_path):
    """memory.total: "480G" is 480 x 10^9 bytes as the paper writes it, "448Gi" binary as
    MemTotal counts; an inventory bench writes (labs, demo) says the same in canonical text."""
    from bench.hosts.inventory import render_host_toml
    h = load_host_file(write(tmp_path, GOOD.replace('total = "480G"', 'total = "448gi"')))
    assert (h.mem_total, h.mem_floor) == (448 << 30, 96 * 10 ** 9)
    text = render_host_toml(h)
    assert 'total = "448Gi"' in text and 'floor = "96G"' in text
    again = load_host_file(write(tmp_path, text))
    assert (again.mem_total, again.mem_floor) == (h.mem_total, h.mem_floor)


def test_good_file(tmp_path):
    h = load_host_file(write(tmp_path, GOOD))
    # port and user unset: ssh_config's Port/User apply, else 22/root (tests/unit/test_ssh_resolve)
    assert (h.name, h.port, h.user, h.reboot.method, h.pool_dir) == ("h1", None, None, "kexec",
                                                                     "/data/pool")


@pytest.mark.parametrize("edit, key, words", [
    (lambda t: t.replace('transport = "ssh"\n', ""), "transport", ["missing", "ssh, local"]),
    (lambda t: t.replace('address = "10.0.0.1"', 'address = 10'), "address", ["must be a string"]),
    (lambda t: t + "port = 22\n", None, None),  # (port under [paths]: unknown key, below)
    (lambda t: t.replace('method = "kexec"', 'method = "pxe"'), "reboot.method",
     ["'pxe' is not allowed", "grub-reboot, kexec, command, none"]),
    (lambda t: t.replace('name = "h1"', 'name = "h1"\ncolour = "red"'), "colour",
     ["unknown key", "allowed keys"]),
    (lambda t: t.replace('floor = "96G"', 'floor = "96G"\nhuge = 1'), "memory.huge",
     ["unknown key", "total, floor"]),
    (lambda t: t.replace('floor = "96G"', 'floor = "lots"'), "memory.floor", ["not a size"]),
    (lambda t: t.replace('floor = "96G"', 'floor = "512G"'), "memory.floor", ["above"]),
    (lambda t: t.replace('allowed = true', 'allowed = "yes"'), "reboot.allowed",
     ["true or false"]),
    (lambda t: t.replace('method = "kexec"', 'method = "command"'), "reboot.command",
     ["missing", "command"]),
    (lambda t: t.replace('method = "kexec"', 'method = "grub-reboot"'), "reboot.grub_entry",
     ["missing"]),
    (lambda t: t.replace('name = "h1"', 'name = "h2"'), "name", ["differs from the file name"]),
    (lambda t: t.replace('work_dir = "/var/lib/bench"', 'work_dir = "bench"'), "paths.work_dir",
     ["absolute"]),
    (lambda t: t.replace('address = "10.0.0.1"', 'address = "10.0.0.1"\nport = "22"'), "port",
     ["must be an integer"]),
])
def test_validation_errors_name_file_and_key(tmp_path, edit, key, words):
    if key is None:
        # port after the [paths] table header lands in [paths]: an unknown key there
        key, words = "paths.port", ["unknown key", "pool_dir, work_dir"]
    p = write(tmp_path, edit(GOOD))
    with pytest.raises(InventoryError) as e:
        load_host_file(p)
    text = e.value.message + " " + (e.value.hint or "")
    assert str(p) in e.value.message and f"key '{key}'" in e.value.message, text
    for w in words:
        assert w in text, text
    assert e.value.exit_code == 2


def test_local_host_is_never_rebootable(tmp_path):
    p = write(tmp_path, 'transport = "local"\n[reboot]\nallowed = true\nmethod = "kexec"\n', "me")
    with pytest.raises(InventoryError, match="never rebooted"):
        load_host_file(p)


def test_bad_toml_names_the_file(tmp_path):
    p = write(tmp_path, "name = \n")
    with pytest.raises(InventoryError, match="not valid TOML") as e:
        load_host_file(p)
    assert str(p) in e.value.message


def test_check_reports_every_file_and_cli_exit(tmp_path, capsys, monkeypatch):
    write(tmp_path, GOOD)
    write(tmp_path, GOOD.replace('"h1"', '"h2"').replace("kexec", "warp"), "h2")
    rows = check_inventory(tmp_path)
    assert [r["ok"] for r in rows] == [True, False] and "reboot.method" in rows[1]["error"]
    monkeypatch.setenv("BENCH_HOSTS", str(tmp_path))  # the env var selects the directory
    assert main(["hosts", "check", "--json"]) == 2
    out = json.loads(capsys.readouterr().out)
    assert out[1]["file"].endswith("h2.toml") and "warp" in out[1]["error"]
    assert main(["hosts", "list", "--json"]) == 2  # list refuses an invalid inventory
    assert "h2.toml" in capsys.readouterr().err


def test_select_unknown_host(tmp_path):
    write(tmp_path, GOOD)
    with pytest.raises(InventoryError, match="unknown host.*nope"):
        select(load_inventory(tmp_path), ["nope"])


def test_list_json(capsys):
    assert main(["hosts", "list", "--json", "--hosts-dir", str(REPO_HOSTS)]) == 0
    names = [h["name"] for h in json.loads(capsys.readouterr().out)]
    assert {"gh200-a", "gh200-b", "local"} <= set(names)
