"""Where the inventory is found (--hosts-dir, $BENCH_HOSTS, ./hosts, $XDG_CONFIG_HOME/bench/hosts),
what an empty one says, and `bench hosts init` then `bench hosts list` through the real CLI, in
temporary directories standing for the user's home, configuration and working directory."""

import json
import os

import pytest

from bench.cli import main
from bench.hosts import templates
from bench.hosts.inventory import (config_hosts_dir, find_hosts_dir, init_hosts_dir,
                                   load_host_file, load_inventory)
from bench.hosts.procfs import parse_meminfo
from bench.units import MB


@pytest.fixture
def user(tmp_path, monkeypatch):
    """A user with nothing configured: HOME, XDG_CONFIG_HOME and an empty working directory
    in tmp_path, BENCH_HOSTS unset."""
    home, cwd = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("BENCH_HOSTS", raising=False)
    monkeypatch.chdir(cwd)
    return tmp_path


def local_host(d, name):
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.toml").write_text('transport = "local"\n')


def listed(capsys, *args):
    capsys.readouterr()
    assert main(["hosts", "list", "--json", *args]) == 0
    return [h["name"] for h in json.loads(capsys.readouterr().out)]


def test_search_order(user, capsys, monkeypatch):
    """Each place holds a host named after it: the one listed says which place won."""
    xdg, cwd_hosts = user / "config" / "bench" / "hosts", user / "work" / "hosts"
    env, flag = user / "env-hosts", user / "flag-hosts"
    for d, name in ((xdg, "from-xdg"), (env, "from-env"), (flag, "from-flag")):
        local_host(d, name)
    assert listed(capsys) == ["from-xdg"]
    assert find_hosts_dir().origin == "$XDG_CONFIG_HOME/bench/hosts"
    (user / "work" / "hosts").write_text("an Ansible inventory file, not a directory")
    assert listed(capsys) == ["from-xdg"]                  # ./hosts only when a directory
    (user / "work" / "hosts").unlink()
    local_host(cwd_hosts, "from-cwd")
    assert listed(capsys) == ["from-cwd"]
    assert find_hosts_dir() == find_hosts_dir().__class__(cwd_hosts, "./hosts")
    monkeypatch.setenv("BENCH_HOSTS", str(env))
    assert listed(capsys) == ["from-env"]
    assert listed(capsys, "--hosts-dir", str(flag)) == ["from-flag"]


def test_xdg_default_and_relative_xdg_ignored(user, monkeypatch):
    home = user / "home"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert config_hosts_dir() == home / ".config" / "bench" / "hosts"
    assert find_hosts_dir().origin == "~/.config/bench/hosts"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/config")   # the XDG rule: ignored
    assert config_hosts_dir() == home / ".config" / "bench" / "hosts"
    monkeypatch.setenv("XDG_CONFIG_HOME", "")
    assert config_hosts_dir() == home / ".config" / "bench" / "hosts"
    monkeypatch.setenv("BENCH_HOSTS", str(user / "mine"))
    assert init_hosts_dir() == user / "mine"


def test_removed_working_directory_falls_through(user, monkeypatch):
    gone = user / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    assert find_hosts_dir().path == user / "config" / "bench" / "hosts"


def test_no_hosts_is_a_message_not_an_error(user, capsys):
    """Missing or empty: `hosts list` and `hosts check` say where they looked and the fix, exit
    0; a command needing a host exits 2 naming it."""
    for _ in ("missing", "empty"):
        capsys.readouterr()
        assert main(["hosts", "list"]) == 0
        out, err = capsys.readouterr()
        assert out == "" and "no hosts: " in err and "bench hosts init" in err
        assert "BENCH_HOSTS" in err and str(user / "config" / "bench" / "hosts") in err
        assert "Traceback" not in err and "error" not in err
        assert listed(capsys) == []
        assert main(["hosts", "check"]) == 0
        assert "no hosts" in capsys.readouterr().err
        assert main(["hosts", "probe", "nosuch"]) == 2
        err = capsys.readouterr().err
        assert "unknown host(s): nosuch" in err and "bench hosts init" in err
        assert main(["hosts", "probe"]) == 2       # every host of none: nothing to do
        assert "no hosts" in capsys.readouterr().err
        (user / "config" / "bench" / "hosts").mkdir(parents=True, exist_ok=True)


def test_empty_working_directory_hosts_names_its_own_init(user, capsys):
    """An empty ./hosts is the inventory in use: the fix writes there, not to the XDG one."""
    (user / "work" / "hosts").mkdir()
    assert main(["hosts", "list"]) == 0
    err = capsys.readouterr().err
    assert "holds no host files" in err and "(./hosts)" in err
    assert f"bench hosts init --dir {user / 'work' / 'hosts'}" in err


def test_inventory_that_is_a_file(user, capsys):
    (user / "f").write_text("")
    assert main(["hosts", "list", "--hosts-dir", str(user / "f")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_init_then_list_then_plan(user, capsys):
    """The first use: init, list, check, and the smoke matrix plans runs on the local host
    from the MemTotal init wrote (so 0.125mem resolves)."""
    capsys.readouterr()
    assert main(["hosts", "init"]) == 0
    err = capsys.readouterr().err
    d = user / "config" / "bench" / "hosts"
    assert f"wrote {d / 'local.toml'}" in err and "bench reads this inventory" in err
    assert sorted(p.name for p in d.iterdir()) == ["gh200.toml.example", "local.toml"]
    capsys.readouterr()
    assert main(["hosts", "list", "--json"]) == 0
    (local,) = json.loads(capsys.readouterr().out)
    with open("/proc/meminfo") as f:
        mem = parse_meminfo(f.read())["MemTotal"]
    assert (local["name"], local["transport"], local["mem_total"]) == ("local", "local",
                                                                       mem // MB * MB)
    assert not local["reboot"]["allowed"]
    assert main(["hosts", "check"]) == 0
    capsys.readouterr()
    assert main(["schedule", "--matrix", "smoke", "--hosts", "local", "--dry-run", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["runs"] == 5 and plan["skipped"] == []


def test_init_refuses_to_overwrite_without_force(user, capsys):
    d = user / "config" / "bench" / "hosts"
    assert main(["hosts", "init"]) == 0
    (d / "local.toml").write_text('transport = "local"   # mine\n')
    capsys.readouterr()
    assert main(["hosts", "init"]) == 2
    err = capsys.readouterr().err
    assert "local.toml, gh200.toml.example already there; nothing written" in err
    assert "--force" in err
    assert (d / "local.toml").read_text() == 'transport = "local"   # mine\n'
    (d / "gh200.toml.example").unlink()             # one present is enough to refuse all
    assert main(["hosts", "init"]) == 2
    assert not (d / "gh200.toml.example").exists()
    assert main(["hosts", "init", "--force"]) == 0
    assert "# mine" not in (d / "local.toml").read_text()
    assert (d / "gh200.toml.example").exists()


def test_init_force_replaces_a_symlink_not_its_target(user):
    d, target = user / "config" / "bench" / "hosts", user / "elsewhere.toml"
    d.mkdir(parents=True)
    target.write_text("keep me")
    os.symlink(target, d / "local.toml")
    assert main(["hosts", "init"]) == 2             # a dangling or live link counts as there
    assert main(["hosts", "init", "--force"]) == 0
    assert target.read_text() == "keep me" and not (d / "local.toml").is_symlink()


def test_init_dir_and_bench_hosts(user, capsys, monkeypatch):
    other = user / "other"
    capsys.readouterr()
    assert main(["hosts", "init", "--dir", str(other), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["dir"] == str(other) and not res["active"]
    assert res["written"] == [str(other / "local.toml"), str(other / "gh200.toml.example")]
    assert main(["hosts", "init", "--dir", str(user / "more")]) == 0
    assert f"--hosts-dir {user / 'more'} or set BENCH_HOSTS={user / 'more'}" in \
        capsys.readouterr().err
    monkeypatch.setenv("BENCH_HOSTS", str(user / "env"))
    assert main(["hosts", "init"]) == 0
    assert (user / "env" / "local.toml").is_file()
    assert not (user / "config" / "bench" / "hosts").exists()
    assert listed(capsys) == ["local"]


def test_init_into_a_file_is_refused(user, capsys):
    (user / "f").write_text("")
    assert main(["hosts", "init", "--dir", str(user / "f")]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_the_example_becomes_a_host_when_copied(user, monkeypatch):
    """gh200.toml.example is not read as a host; copied to NAME.toml it validates as is (the
    name is the file's), an SSH host with every section the reference fleet uses."""
    d = user / "inv"
    templates.init_inventory(d, mem_total=8 << 30)
    assert list(load_inventory(d)) == ["local"]
    (d / "box1.toml").write_text((d / "gh200.toml.example").read_text())
    h = load_inventory(d)["box1"]
    assert (h.transport, h.user, h.mem_total, h.reboot.method) == ("ssh", "root", 480 * 10 ** 9,
                                                                   "grub-reboot")
    assert h.expect == {"arch": "aarch64", "page_size": 65536, "kernel": "6.8"}


@pytest.mark.parametrize("mem, written", [(8 << 30, "8589M"), (None, None), (1000, None),
                                          (10 ** 16, None)])
def test_local_template_memory(tmp_path, mem, written):
    """MemTotal fills memory.total (whole MB, rounded down); unknown or out of bounds, the line
    is a comment and the file still validates."""
    text = templates.render_templates(mem)["local.toml"]
    p = tmp_path / "local.toml"
    p.write_text(text)
    h = load_host_file(p)
    if written:
        assert f'total = "{written}"' in text and h.mem_total == 8589 * MB
    else:
        assert h.mem_total is None and '# total = "64G"' in text
