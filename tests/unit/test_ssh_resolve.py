"""ssh_config resolution (bench.hosts.sshconfig through bench.hosts.ssh.resolve_endpoint) on a
captured ~/.ssh/config (tests/fixtures/ssh/config), checked against OpenSSH's own resolution
(`ssh -G -F FILE ALIAS`): HostName, Port, User, IdentityFile, ProxyJump, HostKeyAlias, Include
inside a Host block; then the inventory's explicit values winning over ssh_config, the
defaults applying only when neither sets a value, and bad files refused with one line."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bench.errors import InputError
from bench.hosts.inventory import Host, SSHOptions
from bench.hosts.ssh import resolve_endpoint
from bench.hosts.sshconfig import SSHConfigError, host_matches, parse_jumps

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "ssh"
ALIASES = ["lab-alias", "inner", "bastion", "pinned", "proxied", "a.wild.example.org",
           "no.wild.example.org", "from-include", "plain.example.org"]


@pytest.fixture
def config(tmp_path):
    """The captured config with @DIR@ pointing at a copy of the fixture directory."""
    d = tmp_path / "ssh"
    shutil.copytree(FIX, d)
    (d / "config").write_text((FIX / "config").read_text().replace("@DIR@", str(d)))
    return d / "config"


def host(address: str, config: Path | str | None, **kw) -> Host:
    ssh = {k: kw.pop(k) for k in ("identity_file", "proxy_jump") if k in kw}
    return Host(name="h", address=address, transport="ssh",
                ssh=SSHOptions(config=str(config) if config else None, **ssh), **kw)


def openssh(config: Path, alias: str) -> dict[str, list[str]]:
    """What OpenSSH resolves for alias (ssh -G prints the final configuration)."""
    out = subprocess.run(["ssh", "-G", "-F", str(config), alias], capture_output=True,
                         text=True, check=True).stdout
    got: dict[str, list[str]] = {}
    for line in out.splitlines():
        k, _, v = line.partition(" ")
        got.setdefault(k, []).append(v)
    return got


@pytest.mark.skipif(shutil.which("ssh") is None, reason="needs OpenSSH's ssh client (ssh -G)")
@pytest.mark.parametrize("alias", ALIASES)
def test_resolution_matches_openssh(config, alias):
    want = openssh(config, alias)
    ep = resolve_endpoint(host(alias, config))
    assert ep.hostname == want["hostname"][0]
    assert ep.port == int(want["port"][0])
    assert ep.user == want["user"][0]
    # OpenSSH lists IdentityFiles whether they exist or not; bench keeps those that exist
    assert list(ep.identity_files) == [f for f in want["identityfile"] if Path(f).is_file()]
    assert ep.host_key_alias == want.get("hostkeyalias", [None])[0]
    jump = want.get("proxyjump", [None])[0]
    assert [f"{j.user}@{j.alias}:{j.port}" for j in ep.jumps] == (
        [] if jump is None else
        [f"{h.user or openssh(config, h.host)['user'][0]}@{h.host}:"
         f"{h.port or openssh(config, h.host)['port'][0]}" for h in parse_jumps(jump, "x")])
    if "proxycommand" in want:
        assert ep.proxy_command == want["proxycommand"][0].replace(
            "%h", ep.hostname).replace("%p", str(ep.port))


def test_jump_hops_resolve_through_ssh_config(config):
    ep = resolve_endpoint(host("inner", config))
    bastion, jump2 = ep.jumps
    # the hop's spec (admin@...:2200) wins over its Host block; HostName comes from it
    assert (bastion.hostname, bastion.user, bastion.port) == ("bastion.example.org", "admin",
                                                              2200)
    assert bastion.identity_files[0].endswith("id_bastion")
    assert (jump2.hostname, jump2.port, jump2.key_name) == ("10.0.0.1", 2022,
                                                            "[10.0.0.1]:2022")


def test_known_hosts_name_is_what_openssh_looks_up(config):
    assert resolve_endpoint(host("lab-alias", config)).key_name == "[10.200.82.11]:2222"
    assert resolve_endpoint(host("pinned", config)).key_name == "pinned-alias"
    assert resolve_endpoint(host("plain.example.org", config)).key_name == "plain.example.org"


def test_inventory_values_win_and_defaults_apply_last(config, tmp_path):
    key = tmp_path / "inv_key"
    key.write_text("x")
    ep = resolve_endpoint(host("lab-alias", config, user="bench", port=22,
                               identity_file=str(key)))
    assert (ep.hostname, ep.user, ep.port) == ("10.200.82.11", "bench", 22)
    assert ep.identity_files[0] == str(key) and len(ep.identity_files) == 3
    assert ep.origins == {"hostname": "ssh_config", "user": "inventory", "port": "inventory"}
    # with no ssh_config at all, the defaults: root and 22, HostName = the address
    ep = resolve_endpoint(host("lab-alias", "none"))
    assert (ep.hostname, ep.user, ep.port, ep.jumps) == ("lab-alias", "root", 22, ())
    assert ep.origins == {"hostname": "inventory", "user": "default", "port": "default"}
    # the inventory's proxy_jump replaces ssh_config's
    ep = resolve_endpoint(host("inner", config, proxy_jump="root@jump2"))
    assert [(j.hostname, j.user, j.port) for j in ep.jumps] == [("10.0.0.1", "root", 2022)]


def test_env_names_the_file_and_inventory_beats_env(config, monkeypatch):
    monkeypatch.setenv("BENCH_SSH_CONFIG", str(config))
    assert resolve_endpoint(host("lab-alias", None)).port == 2222
    assert resolve_endpoint(host("lab-alias", "none")).port == 22
    monkeypatch.setenv("BENCH_SSH_CONFIG", "none")
    assert resolve_endpoint(host("lab-alias", None)).port == 22


@pytest.mark.parametrize("text, words", [
    ("Host badport\n    Port twenty-two\n", ["Port 'twenty-two' is not a port number"]),
    ("Host badport\n    Port 70000\n", ["Port '70000'"]),
    ("Host badport\n    ProxyJump jumper:notaport\n", ["ProxyJump", "not a port number"]),
    ("Host badport\n    ProxyJump badport\n", ["loops"]),
    ("Host badport\n= no keyword\n", ["Unparsable line"]),
    ('Host "badport\n', ["Unparsable host"]),
    ("Host badport\n    Include /nonexistent/*.conf\n    User u\n", None),
])
def test_bad_config_is_one_line_naming_the_file(tmp_path, text, words):
    f = tmp_path / "cfg"
    f.write_text(text)
    if words is None:  # an Include that matches nothing is nothing (as OpenSSH)
        assert resolve_endpoint(host("badport", f)).user == "u"
        return
    with pytest.raises(SSHConfigError) as e:
        resolve_endpoint(host("badport", f))
    assert str(f) in e.value.message and "\n" not in e.value.message
    for w in words:
        assert w in e.value.message


def test_fixture_bad_port_file_is_refused_as_openssh_refuses_it():
    with pytest.raises(SSHConfigError, match="twenty-two"):
        resolve_endpoint(host("badport", FIX / "config-badport"))
    if shutil.which("ssh"):
        p = subprocess.run(["ssh", "-G", "-F", str(FIX / "config-badport"), "badport"],
                           capture_output=True, text=True)
        assert p.returncode != 0 and "twenty-two" in p.stderr


def test_missing_not_utf8_and_looping_files(tmp_path):
    with pytest.raises(SSHConfigError, match="does not exist"):
        resolve_endpoint(host("x", tmp_path / "nope"))
    bad = tmp_path / "latin1"
    bad.write_bytes(b"Host x\n    User caf\xe9\n")
    with pytest.raises(SSHConfigError, match="not UTF-8"):
        resolve_endpoint(host("x", bad))
    loop = tmp_path / "loop"
    loop.write_text(f"Include {loop}\n")
    with pytest.raises(SSHConfigError, match="nested"):
        resolve_endpoint(host("x", loop))
    assert issubclass(SSHConfigError, InputError)  # exit 2 in the CLI


@pytest.mark.parametrize("patterns, name, hit", [
    ("lab-*", "lab-1", True), ("*.example.org !no.example.org", "no.example.org", False),
    ("a? b", "a", False), ("a? b", "b", True), ("LAB", "lab", True), ("!x", "y", False),
])
def test_host_patterns(patterns, name, hit):
    assert host_matches(patterns, name) is hit


def test_paramiko_log_reaches_bench_ssh_as_one_line(caplog, config):
    """paramiko's records go to the `bench.ssh` logger (what `bench -v` shows), never above
    INFO and without tracebacks; with that logger quiet, paramiko makes no records at all."""
    import logging

    from bench.hosts import ssh
    caplog.set_level(logging.DEBUG, logger="bench.ssh")
    ssh._sync_logging()
    plog = logging.getLogger("paramiko.transport")
    plog.debug("kex algos: %s", "curve25519-sha256")
    try:
        raise OSError("connection reset")
    except OSError:
        plog.error("Exception (client): Error reading SSH protocol banner", exc_info=True)
    resolve_endpoint(host("lab-alias", config))
    recs = [r for r in caplog.records if r.name == "bench.ssh"]
    msgs = [(r.levelno, r.getMessage()) for r in recs]
    assert (logging.DEBUG, "paramiko.transport: kex algos: curve25519-sha256") in msgs
    assert (logging.INFO, "paramiko.transport: Exception (client): Error reading SSH protocol "
            "banner (OSError: connection reset)") in msgs
    assert all(r.exc_info is None for r in recs)
    assert any("lab-alias:" in m and "port 2222 from ssh_config" in m for _, m in msgs)
    caplog.clear()
    caplog.set_level(logging.WARNING, logger="bench.ssh")
    ssh._sync_logging()
    plog.error("quiet")
    assert not logging.getLogger("paramiko").isEnabledFor(logging.CRITICAL)
    assert [r for r in caplog.records if "quiet" in r.getMessage()] == []
