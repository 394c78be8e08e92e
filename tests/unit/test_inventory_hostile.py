"""Hostile inventories: every value later steps would crash on (or act wrongly on) is refused by
the loader and by `bench hosts check`, each problem naming the file and the dotted key, with no
traceback; the values at the edges of what is allowed still load."""

import dataclasses
import json
import math
import os
import re
import shutil

from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import InventoryError
from bench.hosts.inventory import (MAX_HOST_FILE, MAX_PROBLEMS, check_inventory, load_host_file,
                                   load_inventory, parse_host)
from bench.hosts.inventory_schema import MAX_SECONDS

SSH = """
name = "h1"
address = "10.0.0.1"
transport = "ssh"
[ssh]
connect_timeout = 10
[memory]
total = "480G"
floor = "96G"
[reboot]
allowed = true
method = "command"
command = ["/sbin/reboot-with", "{cmdline}"]
down_timeout = 300
[paths]
work_dir = "/var/lib/bench"
pool_dir = "/data/pool"
[expect]
page_size = 65536
"""


def write(d, text, name="h1"):
    p = d / f"{name}.toml"
    (p.write_bytes if isinstance(text, bytes) else p.write_text)(text)
    return p


def sub(old, new):
    def edit(t):
        assert old in t, old
        return t.replace(old, new)
    return edit


# (edit of SSH, dotted key, words the problem or its hint must carry)
REFUSED = [
    # timeouts: NaN, infinities, zero, negative, absurd (paramiko and monotonic deadlines use them)
    (sub("connect_timeout = 10", "connect_timeout = nan"), "ssh.connect_timeout", ["finite"]),
    (sub("connect_timeout = 10", "connect_timeout = inf"), "ssh.connect_timeout", ["finite"]),
    (sub("connect_timeout = 10", "connect_timeout = -inf"), "ssh.connect_timeout", ["finite"]),
    (sub("connect_timeout = 10", "connect_timeout = 0"), "ssh.connect_timeout", ["positive"]),
    (sub("connect_timeout = 10", "connect_timeout = -5"), "ssh.connect_timeout", ["positive"]),
    (sub("connect_timeout = 10", "connect_timeout = 1e300"), "ssh.connect_timeout",
     ["at most 86400"]),
    (sub("connect_timeout = 10", 'connect_timeout = "10"'), "ssh.connect_timeout",
     ["must be a number"]),
    (sub("down_timeout = 300", "down_timeout = nan"), "reboot.down_timeout", ["finite"]),
    (sub("down_timeout = 300", "up_timeout = inf"), "reboot.up_timeout", ["finite"]),
    (sub("connect_timeout = 10", "banner_timeout = 0.0"), "ssh.banner_timeout", ["positive"]),
    (sub("connect_timeout = 10", "auth_timeout = -1"), "ssh.auth_timeout", ["positive"]),
    # the address: what ssh would misread as a user, a port, an option or nothing
    (sub('address = "10.0.0.1"', 'address = ""'), "address", ["must not be empty"]),
    (sub('address = "10.0.0.1"', 'address = "   "'), "address", ["must not be empty"]),
    (sub('address = "10.0.0.1"', 'address = "root@h"'), "address",
     ["user goes in `user`", "address = 'h'", "user = 'root'"]),
    (sub('address = "10.0.0.1"', 'address = "h:2222"'), "address",
     ["port goes in `port`", "address = 'h'", "port = 2222"]),
    (sub('address = "10.0.0.1"', 'address = "[::1]:2222"'), "address", ["without brackets"]),
    (sub('address = "10.0.0.1"', 'address = "ssh://h"'), "address", ["URL"]),
    (sub('address = "10.0.0.1"', 'address = "-oProxyCommand=sh"'), "address",
     ["not a host name"]),
    (sub('address = "10.0.0.1"', 'address = "h h"'), "address", ["not a host name"]),
    (sub('address = "10.0.0.1"', 'address = "h\\u0000"'), "address", ["not a host name"]),
    (sub('address = "10.0.0.1"', 'address = "a:b:c"'), "address", ["not a host name"]),
    (sub('address = "10.0.0.1"', 'address = "' + "a" * 300 + '"'), "address",
     ["not a host name"]),
    # the user
    (sub('address = "10.0.0.1"', 'address = "10.0.0.1"\nuser = ""'), "user",
     ["must not be empty"]),
    (sub('address = "10.0.0.1"', 'address = "10.0.0.1"\nuser = "root@h"'), "user",
     ["not a user name", "`address`"]),
    (sub('address = "10.0.0.1"', 'address = "10.0.0.1"\nuser = "-oX"'), "user",
     ["not a user name"]),
    (sub('address = "10.0.0.1"', 'address = "10.0.0.1"\nport = 0'), "port", ["at least 1"]),
    (sub('address = "10.0.0.1"', 'address = "10.0.0.1"\nport = 65536'), "port",
     ["at most 65535"]),
    # absurd sizes
    (sub('total = "480G"', 'total = "99999999T"'), "memory.total", ["no host has"]),
    (sub('total = "480G"', "total = 480"), "memory.total", ["below 64M", "unit"]),
    (sub('floor = "96G"', 'floor = "0"'), "memory.floor", ["below 64M"]),
    (sub('total = "480G"', "total = -1"), "memory.total", ["negative"]),
    (sub('total = "480G"', 'total = "' + "9" * 5000 + '"'), "memory.total", []),
    (sub("page_size = 65536", "page_size = 3"), "expect.page_size", ["power of two"]),
    (sub("page_size = 65536", "page_size = 65537"), "expect.page_size", ["power of two"]),
    (sub("page_size = 65536", "page_size = 9223372036854775807"), "expect.page_size",
     ["power of two"]),
    # strings bench hands to a shell-free argv, a path or GRUB
    (sub('command = ["/sbin/reboot-with", "{cmdline}"]', "command = []"), "reboot.command",
     ["non-empty"]),
    (sub('command = ["/sbin/reboot-with", "{cmdline}"]', "command = [" + ", ".join(['"x"'] * 300)
         + "]"), "reboot.command", ["at most 256"]),
    (sub('"{cmdline}"]', '"a\\nb"]'), "reboot.command[1]", ["control character"]),
    (sub('method = "command"', 'method = "grub-reboot"\ngrub_entry = ""'), "reboot.grub_entry",
     ["must not be empty"]),
    (sub('work_dir = "/var/lib/bench"', 'work_dir = "/"'), "paths.work_dir", ["root directory"]),
    (sub('pool_dir = "/data/pool"', 'pool_dir = "/data/../etc"'), "paths.pool_dir", ["'..'"]),
    (sub('pool_dir = "/data/pool"', 'pool_dir = "/' + "p" * 5000 + '"'), "paths.pool_dir",
     ["at most 4096"]),
    (sub("[ssh]", '[ssh]\nknown_hosts = ""'), "ssh.known_hosts", ["must not be empty"]),
    (sub("[ssh]", '[ssh]\nproxy_jump = "a,,b"'), "ssh.proxy_jump", ["jump host"]),
    (sub("[ssh]", '[ssh]\nproxy_jump = "-oProxyCommand=x"'), "ssh.proxy_jump", ["jump host"]),
    (sub("[memory]", "[tags]\n" + "".join(f't{i} = "x"\n' for i in range(65)) + "[memory]"),
     "tags", ["at most 64"]),
    (sub("[memory]", "[tags]\n" + "k" * 300 + ' = "x"\n[memory]'), "tags." + "k" * 300,
     ["at most 256"]),
    (sub("[memory]", '[tags]\nmachine = "' + "x" * 5000 + '"\n[memory]'), "tags.machine",
     ["at most 4096"]),
    (sub("[memory]", '[tags]\nmachine = "a\\u001b[2J"\n[memory]'), "tags.machine",
     ["control character"]),
    # nesting: refused before validation, naming where
    (sub("[memory]", "[tags]\nx = " + "[" * 7 + "1" + "]" * 7 + "\n[memory]"),
     "tags.x[0][0][0][0]", ["nests more than 6"]),
]


@pytest.mark.parametrize("edit, key, words", REFUSED, ids=[r[1] + f"-{i}"
                                                           for i, r in enumerate(REFUSED)])
def test_refused_values_name_file_and_key(tmp_path, edit, key, words):
    p = write(tmp_path, edit(SSH))
    with pytest.raises(InventoryError) as e:
        load_host_file(p)
    text = e.value.message + " " + (e.value.hint or "")
    assert e.value.exit_code == 2
    first = e.value.message.splitlines()[0]
    m = re.match(rf"{re.escape(str(p))}(?::(\d+))?: key '{re.escape(key)}': ", first)
    assert m, text
    if m.group(1):      # the line named is where the key (or its table) is written
        written = edit(SSH).split("\n")[int(m.group(1)) - 1]
        assert any(part and part in written for part in re.split(r"[.\[\]]", key)), written
    for w in words:
        assert w in text, text
    # the same, through the real CLI: exit 2, the file and key in the JSON, no traceback
    assert main(["hosts", "check", "--json", "--hosts-dir", str(tmp_path)]) == 2


def test_edges_of_what_is_allowed_load(tmp_path):
    """IPv6 (with a zone), an ssh_config alias with '_', a timeout of exactly a day, the
    smallest and largest memory, a 4K and a 1M page: all accepted, as later steps take them."""
    text = (SSH.replace('address = "10.0.0.1"', 'address = "fe80::1%eth0"\nuser = "bench_ci"')
            .replace("connect_timeout = 10", f"connect_timeout = {MAX_SECONDS:.0f}")
            .replace('total = "480G"', 'total = "1000T"').replace('floor = "96G"', 'floor = "64M"')
            .replace("page_size = 65536", "page_size = 1048576"))
    h = load_host_file(write(tmp_path, text))
    assert (h.address, h.user, h.ssh.connect_timeout) == ("fe80::1%eth0", "bench_ci", 86400.0)
    assert (h.mem_total, h.mem_floor, h.expect["page_size"]) == (10 ** 15, 64 * 10 ** 6, 1 << 20)
    assert math.isfinite(h.reboot.down_timeout) and int(h.ssh.connect_timeout) == 86400
    alias = load_host_file(write(tmp_path, SSH.replace('"10.0.0.1"', '"gh200_a.lab"')))
    assert alias.address == "gh200_a.lab"


def test_every_problem_of_a_file_at_once(tmp_path):
    text = (SSH.replace('address = "10.0.0.1"', 'address = "root@h:22"')
            .replace("connect_timeout = 10", "connect_timeout = nan")
            .replace('total = "480G"', 'total = "5000T"'))
    with pytest.raises(InventoryError) as e:
        load_host_file(write(tmp_path, text))
    keys = [line.split("key '")[1].split("'")[0] for line in e.value.message.splitlines()]
    assert keys == ["address", "ssh.connect_timeout", "memory.total"]


def test_problems_are_capped(tmp_path):
    text = SSH + "".join(f"junk{i} = 1\n" for i in range(500))     # unknown keys of [expect]
    with pytest.raises(InventoryError) as e:
        load_host_file(write(tmp_path, text))
    lines = e.value.message.splitlines()
    assert len(lines) == MAX_PROBLEMS + 1 and lines[-1].endswith("... and 450 more problems")


# whole-file refusals: one line naming the file --------------------------------------------------

@pytest.mark.parametrize("content, words", [
    (b'name = "h1"\naddress = "caf\xe9"\n', [":2: not UTF-8 text", "byte 0xe9"]),
    (b"\xff\xfe" + 'transport = "local"\n'.encode("utf-16-le"), [":1: not UTF-8 text"]),
    (b"a = " + b"9" * 5000 + b"\n", ["not valid TOML", "digits"]),
    (b"a = " + b"[" * 5000 + b"]" * 5000 + b"\n", ["not valid TOML"]),
    (b"x = " + b"{a=" * 3000 + b"1" + b"}" * 3000 + b"\n", ["not valid TOML"]),
    (b"name = \n", ["not valid TOML"]),
    (b"# " + b"x" * MAX_HOST_FILE + b"\n", ["larger than 1 MiB"]),
])
def test_unreadable_files_are_one_line_naming_the_file(tmp_path, capsys, content, words):
    p = write(tmp_path, content)
    with pytest.raises(InventoryError) as e:
        load_host_file(p)
    assert e.value.message.startswith(str(p)) and "\n" not in e.value.message
    for w in words:
        assert w in e.value.message, e.value.message
    capsys.readouterr()
    assert main(["hosts", "list", "--hosts-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(p) in err
    assert main(["hosts", "check", "--json", "--hosts-dir", str(tmp_path)]) == 2
    (row,) = json.loads(capsys.readouterr().out)
    assert row["file"] == str(p) and not row["ok"] and words[0] in row["error"]


def test_a_utf8_bom_is_accepted(tmp_path):
    h = load_host_file(write(tmp_path, "\ufeff" + SSH))
    assert h.name == "h1"


def test_not_a_regular_file(tmp_path):
    (tmp_path / "d.toml").mkdir()
    os.mkfifo(tmp_path / "f.toml")          # opening a FIFO would block: never opened
    rows = check_inventory(tmp_path)
    assert [(r["host"], r["ok"]) for r in rows] == [("d", False), ("f", False)]
    assert all("not a regular file" in r["error"] for r in rows)


def test_hidden_toml_files_are_not_hosts(tmp_path):
    """An editor's lock (.#h1.toml, a dangling symlink) is no host and no error."""
    write(tmp_path, SSH)
    os.symlink("user@host.1234:1", tmp_path / ".#h1.toml")
    assert list(load_inventory(tmp_path)) == ["h1"]


# SSH files on the controller ---------------------------------------------------------------------

def test_known_hosts_that_is_a_directory_or_unreadable(tmp_path):
    inv = tmp_path / "inv"
    inv.mkdir()
    (tmp_path / "kh").mkdir()
    p = write(inv, SSH.replace("[ssh]", f'[ssh]\nknown_hosts = "{tmp_path / "kh"}"'))
    with pytest.raises(InventoryError) as e:
        load_host_file(p)
    assert e.value.message == f"{p}:6: key 'ssh.known_hosts': {tmp_path / 'kh'} is a " \
                              "directory, not a file"
    missing = write(inv, SSH.replace("[ssh]", f'[ssh]\nknown_hosts = "{tmp_path / "new"}"'))
    assert load_host_file(missing).known_hosts_path == str(tmp_path / "new")  # trust creates it
    os.mkfifo(tmp_path / "fifo")
    p = write(inv, SSH.replace("[ssh]", f'[ssh]\nknown_hosts = "{tmp_path / "fifo"}"'))
    with pytest.raises(InventoryError, match="ssh.known_hosts.*not a regular file"):
        load_host_file(p)


def test_known_hosts_below_a_file(tmp_path):
    (tmp_path / "f").write_text("")
    p = write(tmp_path, SSH.replace("[ssh]", f'[ssh]\nknown_hosts = "{tmp_path / "f" / "kh"}"'))
    with pytest.raises(InventoryError, match="ssh.known_hosts.*/f/kh: Not a directory"):
        load_host_file(p)


def _load_as(uid: int, path) -> str:
    """load_host_file(path) in a child process running as `uid` (root reads any file, so the
    permission check needs an unprivileged reader): the error message, or "" if it loaded."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:        # child: drop to uid for good, report through the pipe, never return
        code = 0
        try:
            os.close(r)
            os.environ["HOME"] = str(Path(path).parent)   # root's ~/.ssh is not nobody's
            if uid != os.geteuid():
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
            try:
                load_host_file(path)
                msg = ""
            except InventoryError as e:
                msg = e.message
            os.write(w, msg.encode())
        except BaseException:           # noqa: BLE001 - a child must never return into pytest
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        out = f.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return out


def test_unreadable_known_hosts():
    """A known_hosts the user cannot read is refused at load time. As root (CI), the load runs
    in a child as nobody (65534), since root reads a file whatever its mode."""
    import tempfile
    d = Path(tempfile.mkdtemp(prefix="bench-kh-"))
    try:
        d.chmod(0o755)
        kh = d / "kh"
        kh.write_text("")
        kh.chmod(0)
        p = write(d, SSH.replace("[ssh]", f'[ssh]\nknown_hosts = "{kh}"'))
        p.chmod(0o644)
        uid = 65534 if os.geteuid() == 0 else os.geteuid()
        msg = _load_as(uid, p)
        assert "ssh.known_hosts" in msg and "permission denied" in msg, msg
        kh.chmod(0o644)             # the same file, readable: loads (the check can pass)
        assert _load_as(uid, p) == ""
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_default_known_hosts_that_is_a_directory(tmp_path, monkeypatch):
    """No ssh.known_hosts: ~/.ssh/known_hosts is what paramiko reads, so it is checked too."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh" / "known_hosts").mkdir(parents=True)
    inv = tmp_path / "inv"
    inv.mkdir()
    with pytest.raises(InventoryError) as e:
        load_host_file(write(inv, SSH))
    assert "key 'ssh.known_hosts'" in e.value.message and "(the default)" in e.value.message
    # a local host does not use SSH: its known_hosts is never read
    assert load_host_file(write(inv, 'transport = "local"\n', "me")).transport == "local"


def test_ssh_config_and_identity_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    inv = tmp_path / "inv"
    inv.mkdir()
    p = write(inv, SSH.replace("[ssh]", '[ssh]\nconfig = "~/nope"'))
    with pytest.raises(InventoryError, match=r"key 'ssh.config': .*/nope does not exist"):
        load_host_file(p)
    (tmp_path / "cfg").write_text("Host *\n")
    (tmp_path / "key").mkdir()
    p = write(inv, SSH.replace("[ssh]", '[ssh]\nconfig = "~/cfg"\nidentity_file = "~/key"'))
    with pytest.raises(InventoryError) as e:
        load_host_file(p)
    assert e.value.message == f"{p}:7: key 'ssh.identity_file': {tmp_path / 'key'} is a " \
                              "directory, not a file"
    (tmp_path / "key").rmdir()
    assert load_host_file(p).ssh.config == "~/cfg"      # a missing key file: ssh says so later


def test_parse_host_is_pure(tmp_path):
    """parse_host (data already parsed) looks at no file: a known_hosts directory passes."""
    (tmp_path / "kh").mkdir()
    import tomllib
    data = tomllib.loads(SSH.replace("[ssh]", f'[ssh]\nknown_hosts = "{tmp_path / "kh"}"'))
    assert parse_host(data, tmp_path / "h1.toml").ssh.known_hosts == str(tmp_path / "kh")


def test_inventories_bench_writes_itself_load(tmp_path):
    """What the labs and the demo write (render_host_toml) passes the same checks: SSH hosts
    with their own identity and known_hosts files, a reboot spec, tags holding paths."""
    from bench.hosts.inventory import Host, RebootSpec, SSHOptions, render_host_toml
    (tmp_path / "id").write_text("key")
    (tmp_path / "kh").write_text("")
    netns = Host(name="bfa-1", address="10.200.81.2", transport="ssh", port=22, user="root",
                 tags={"lab": "netns", "lab_state_dir": str(tmp_path / ("s" * 300))},
                 ssh=SSHOptions(identity_file=str(tmp_path / "id"),
                                known_hosts=str(tmp_path / "kh"), connect_timeout=5,
                                banner_timeout=10, auth_timeout=10),
                 reboot=RebootSpec(allowed=False, method="none", down_timeout=10, up_timeout=20),
                 pool_dir=str(tmp_path / "pool"), work_dir=str(tmp_path / "work"))
    vm = Host(name="lab-a", address="127.0.0.1", transport="ssh", port=2222, user="root",
              ssh=SSHOptions(identity_file=str(tmp_path / "id"), known_hosts=str(tmp_path / "kh")),
              mem_total=1536 << 20, mem_floor=512 << 20,
              reboot=RebootSpec(allowed=True, method="kexec", down_timeout=120.0, up_timeout=300.0,
                                power_cycle=("/usr/bin/python3", "-m", "bench.lab.vm",
                                             "power-cycle", "lab-a")),
              pool_dir="/srv/bench/pool", work_dir="/var/lib/bench",
              expect={"arch": "aarch64", "page_size": 16384, "kernel": "6.12"})
    # every argument the schema allows survives the round trip; one it refuses (a control
    # character) is refused by the schema, naming the key, not by the TOML parser (a newline
    # used to be written raw: "not valid TOML")
    odd = ("quote \" and \\ back", "ünï©ode", "$(x) `y` ;z", "-f /tmp/a b/bmc.pass")
    bmc = dataclasses.replace(vm, name="lab-b", reboot=dataclasses.replace(
        vm.reboot, power_cycle=("/usr/bin/ipmitool", *odd)))
    for i, bad in enumerate(("line1\nline2", "tab\there", "del\x7f", "bell\x07")):
        h = dataclasses.replace(vm, name=f"bad-{i}", reboot=dataclasses.replace(
            vm.reboot, power_cycle=("/usr/bin/ipmitool", bad)))
        with pytest.raises(InventoryError, match=r"power_cycle\[1\]'?: contains a control"):
            load_host_file(write(tmp_path, render_host_toml(h), h.name))
    for h in (netns, vm, bmc):
        back = load_host_file(write(tmp_path, render_host_toml(h), h.name))
        assert (back.address, back.port, back.tags, back.ssh, back.reboot, back.mem_total,
                back.expect) == (h.address, h.port, h.tags, h.ssh, h.reboot, h.mem_total,
                                 h.expect)
