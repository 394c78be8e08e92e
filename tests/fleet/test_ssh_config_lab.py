"""SSH as OpenSSH users expect, on the netns lab (real sshd): an ssh_config alias that does not
resolve in DNS, with User, Port (sshd made to listen on 2222 too), IdentityFile and ProxyJump,
works for `bench hosts trust` (the key recorded as `[HostName]:2222`, the name paramiko and
OpenSSH look up) and `bench hosts probe`; the inventory's explicit user wins over ssh_config's;
a host whose key changed type (an RSA key generated and put in place of its ed25519 key, sshd
restarted) is refused by trust with both fingerprints until --replace names the old one; a
@revoked key is refused; @cert-authority lines never end in a traceback. Needs root."""

from __future__ import annotations

import dataclasses
import json
import re
import socket
import subprocess
from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import AuthError, ChangedHostKey, RevokedHostKey, UnknownHostKey
from bench.hosts.inventory import render_host_toml
from bench.hosts.knownhosts import KnownHosts, fingerprint
from bench.hosts.ssh import SSHTransport

pytestmark = pytest.mark.root
ALT_PORT = 2222


def _restart(lab, name: str) -> None:
    lab.kill_sshd(name, everything=False)
    lab.start_sshd(name)


@pytest.fixture
def sshd_alt_port(lab_host_up):
    """lab-netns-1's sshd listens on ALT_PORT as well as 22 (restored afterwards)."""
    lab = lab_host_up
    cfg = Path(lab.host("lab-netns-1").dir) / "sshd_config"
    before = cfg.read_text()
    cfg.write_text(before + f"Port 22\nPort {ALT_PORT}\n")
    _restart(lab, "lab-netns-1")
    try:
        yield lab
    finally:
        cfg.write_text(before)
        _restart(lab, "lab-netns-1")


@pytest.fixture
def rsa_host_key(lab_host_up):
    """lab-netns-2 offers a freshly generated RSA host key instead of its pinned ed25519 one
    (restored afterwards). Yields the new key's (type, base64)."""
    lab = lab_host_up
    d = Path(lab.host("lab-netns-2").dir)
    cfg = d / "sshd_config"
    before = cfg.read_text()
    (d / "ssh_host_rsa_key").unlink(missing_ok=True)
    subprocess.run(["ssh-keygen", "-q", "-t", "rsa", "-b", "3072", "-N", "", "-C", "changed",
                    "-f", str(d / "ssh_host_rsa_key")], check=True)
    cfg.write_text(before.replace(str(d / "ssh_host_ed25519_key"), str(d / "ssh_host_rsa_key")))
    _restart(lab, "lab-netns-2")
    try:
        yield tuple((d / "ssh_host_rsa_key.pub").read_text().split()[:2])
    finally:
        cfg.write_text(before)
        _restart(lab, "lab-netns-2")


def _inventory(tmp_path: Path, host, **changes) -> Path:
    d = tmp_path / "hosts"
    d.mkdir(parents=True, exist_ok=True)
    ssh = dataclasses.replace(host.ssh, **changes.pop("ssh", {}))
    h = dataclasses.replace(host, ssh=ssh, **changes)
    (d / f"{h.name}.toml").write_text(render_host_toml(h))
    return d


def _cli(capsys, *argv) -> tuple[int, dict | list | None, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out.strip() else None), err


def _lab_key(lab, address: str) -> tuple[str, str]:
    for line in lab.known_hosts.read_text().splitlines():
        addr, typ, b64 = line.split()[:3]
        if addr == address:
            return typ, b64
    raise AssertionError(address)


def test_alias_with_user_port_identity_works_for_trust_and_probe(sshd_alt_port, lab_inventory,
                                                                 tmp_path, capsys):
    lab = sshd_alt_port
    real = lab_inventory["lab-netns-1"]
    alias = "bench-alias.invalid"  # RFC 6761: never resolves
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo(alias, 22)
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host {alias}\n    HostName {real.address}\n    User root\n"
                   f"    Port {ALT_PORT}\n    IdentityFile {lab.identity}\n\n"
                   f"Host nouser-{alias}\n    HostName {real.address}\n"
                   f"    User bench-no-such-user\n    Port {ALT_PORT}\n"
                   f"    IdentityFile {lab.identity}\n")
    kh = tmp_path / "known_hosts"
    opts = {"config": str(cfg), "known_hosts": str(kh), "identity_file": None}
    # no user, no port in the inventory: ssh_config's apply
    d = _inventory(tmp_path, real, name="lab-alias", address=alias, user=None, port=None,
                   ssh=opts)
    text = (d / "lab-alias.toml").read_text()
    assert not re.search(r"^(port|user) =", text, re.MULTILINE)

    rc, rows, _ = _cli(capsys, "hosts", "probe", "lab-alias", "--hosts-dir", str(d), "--json")
    assert rc == 1 and rows[0]["error"]["type"] == "UnknownHostKey"
    assert f"[{real.address}]:{ALT_PORT}" in rows[0]["error"]["message"]
    assert not kh.exists()  # nothing added silently

    rc, info, _ = _cli(capsys, "hosts", "trust", "lab-alias", "--hosts-dir", str(d), "--yes",
                       "--json")
    assert rc == 0 and info["added"]
    name = f"[{real.address}]:{ALT_PORT}"
    assert (info["hostname"], info["port"], info["user"], info["known_hosts_name"]) == (
        real.address, ALT_PORT, "root", name)
    assert info["fingerprint"] == fingerprint(_lab_key(lab, real.address)[1])
    # recorded under the name OpenSSH looks up for HostName:2222
    found = subprocess.run(["ssh-keygen", "-F", name, "-f", str(kh)], capture_output=True,
                           text=True).stdout
    assert "found: line 1" in found

    rc, rows, _ = _cli(capsys, "hosts", "probe", "lab-alias", "--hosts-dir", str(d), "--json")
    assert rc == 0 and rows[0]["ok"], rows[0]["error"]
    assert rows[0]["facts"]["hostname"] == "lab-netns-1"
    t = SSHTransport(dataclasses.replace(real, name="lab-alias", address=alias, user=None,
                                         port=None, ssh=dataclasses.replace(real.ssh, **opts)))
    try:
        who = t.run(["sh", "-c", 'id -un; echo "$SSH_CONNECTION"']).stdout.split("\n")
    finally:
        t.close()
    assert who[0] == "root" and who[1].split()[2:] == [real.address, str(ALT_PORT)]
    assert main(["hosts", "trust", "lab-alias", "--hosts-dir", str(d), "--yes"]) == 0
    assert "already in" in capsys.readouterr().err

    # ssh_config's User is used: a user that does not exist is refused by sshd...
    d2 = _inventory(tmp_path / "b", real, name="lab-nouser", address=f"nouser-{alias}",
                    user=None, port=None, ssh=opts)
    rc, rows, _ = _cli(capsys, "hosts", "probe", "lab-nouser", "--hosts-dir", str(d2), "--json")
    assert rc == 1 and rows[0]["error"]["type"] == "AuthError"
    assert "bench-no-such-user@" in rows[0]["error"]["message"]
    # ...and the inventory's explicit user wins over it
    d3 = _inventory(tmp_path / "c", real, name="lab-nouser", address=f"nouser-{alias}",
                    user="root", port=None, ssh=opts)
    rc, rows, _ = _cli(capsys, "hosts", "probe", "lab-nouser", "--hosts-dir", str(d3), "--json")
    assert rc == 0 and rows[0]["ok"]


def test_proxy_jump_from_ssh_config_for_trust_and_probe(sshd_alt_port, lab_inventory, tmp_path,
                                                        capsys):
    lab = sshd_alt_port
    target, jump = lab_inventory["lab-netns-1"], lab_inventory["lab-netns-2"]
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host jump.invalid\n    HostName {jump.address}\n    User root\n"
                   f"    IdentityFile {lab.identity}\n\n"
                   f"Host via-jump.invalid\n    HostName {target.address}\n"
                   f"    Port {ALT_PORT}\n    ProxyJump jump.invalid\n"
                   f"    IdentityFile {lab.identity}\n")
    kh = tmp_path / "known_hosts"
    opts = {"config": str(cfg), "known_hosts": str(kh), "identity_file": None}
    d = _inventory(tmp_path, target, name="lab-via", address="via-jump.invalid", user=None,
                   port=None, ssh=opts)
    # the hop must be trusted first, and the message says which key is missing
    rc, info, err = _cli(capsys, "hosts", "trust", "lab-via", "--hosts-dir", str(d), "--yes")
    flat = " ".join(err.split())
    assert rc == 1 and f"ProxyJump hop root@{jump.address}:22" in flat and "not pinned" in flat
    assert "ssh-keyscan" in flat and "Traceback" not in err
    kh.write_text("{} {} {}\n".format(jump.address, *_lab_key(lab, jump.address)))
    rc, info, _ = _cli(capsys, "hosts", "trust", "lab-via", "--hosts-dir", str(d), "--yes",
                       "--json")
    assert rc == 0 and info["known_hosts_name"] == f"[{target.address}]:{ALT_PORT}"
    t = SSHTransport(dataclasses.replace(target, name="lab-via", address="via-jump.invalid",
                                         user=None, port=None,
                                         ssh=dataclasses.replace(target.ssh, **opts)))
    try:
        conn = t.run(["sh", "-c", 'echo "$SSH_CONNECTION"']).stdout.split()
    finally:
        t.close()
    # the connection arrives from the jump host, on the alias's port
    assert conn[0] == jump.address and conn[2:] == [target.address, str(ALT_PORT)]
    rc, rows, _ = _cli(capsys, "hosts", "probe", "lab-via", "--hosts-dir", str(d), "--json")
    assert rc == 0 and rows[0]["facts"]["hostname"] == "lab-netns-1"


def test_changed_key_type_is_refused_until_replace_names_the_old_key(rsa_host_key, lab,
                                                                      lab_inventory, tmp_path,
                                                                      capsys):
    h = lab_inventory["lab-netns-2"]
    kh = tmp_path / "known_hosts"
    old_type, old_b64 = _lab_key(lab, h.address)
    kh.write_text(f"{h.address} {old_type} {old_b64}\n")
    before = kh.read_text()
    old, new = f"{old_type} {fingerprint(old_b64)}", f"ssh-rsa {fingerprint(rsa_host_key[1])}"
    d = _inventory(tmp_path, h, ssh={"known_hosts": str(kh)})
    h = dataclasses.replace(h, ssh=dataclasses.replace(h.ssh, known_hosts=str(kh)))

    # trust refuses it, first-time prompt or not, showing both fingerprints
    for extra in ([], ["--yes"], ["--yes", "--json"]):
        rc, _, err = _cli(capsys, "hosts", "trust", h.name, "--hosts-dir", str(d), *extra)
        assert rc == 1, extra
        flat = " ".join(err.split())
        assert old in flat and new in flat and "does NOT match" in flat
        assert f"--replace {fingerprint(old_b64)}" in flat
        assert "Traceback" not in err
    assert kh.read_text() == before
    # a connection refuses it too, as a changed key (not an unknown one)
    with pytest.raises(ChangedHostKey) as e:
        SSHTransport(h).run(["true"])
    assert e.value.old == (old,) and e.value.new == new

    # --replace must name the pinned key
    rc, _, err = _cli(capsys, "hosts", "trust", h.name, "--hosts-dir", str(d), "--yes",
                      "--replace", fingerprint(rsa_host_key[1]))
    assert rc == 2 and "is not a key pinned" in " ".join(err.split())
    assert kh.read_text() == before
    rc, info, _ = _cli(capsys, "hosts", "trust", h.name, "--hosts-dir", str(d), "--yes",
                       "--json", "--replace", fingerprint(old_b64))
    assert rc == 0 and info["replaced"] == [old] and info["fingerprint"] == new.split()[1]
    kept = KnownHosts.load(kh)
    assert [(e.key_type, e.patterns) for e in kept.entries] == [("ssh-rsa", (h.address,))]
    t = SSHTransport(h)
    try:
        assert t.run(["uname", "-n"]).stdout.strip() == h.name
    finally:
        t.close()

    # a revoked key is refused by connections and by trust, whatever is pinned
    with open(kh, "a") as fh:
        fh.write(f"@revoked * ssh-rsa {rsa_host_key[1]}\n")
    with pytest.raises(RevokedHostKey, match="@revoked"):
        SSHTransport(h).run(["true"])
    rc, _, err = _cli(capsys, "hosts", "trust", h.name, "--hosts-dir", str(d), "--yes")
    assert rc == 1 and "@revoked" in err and "Traceback" not in err


def test_markers_never_end_in_a_traceback(lab, lab_inventory, tmp_path, capsys):
    h = lab_inventory["lab-netns-1"]
    kh = tmp_path / "known_hosts"
    ca = tmp_path / "ca"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(ca)], check=True)
    ca_line = "@cert-authority * " + " ".join(ca.with_suffix(".pub").read_text().split()[:2])
    typ, b64 = _lab_key(lab, h.address)
    # markers for other keys, a line OpenSSH skips, and the host's own key: it loads
    kh.write_text(f"{ca_line}\n@revoked 10.9.9.9 {typ} {b64}\n@bogus x {typ} {b64}\n"
                  f"{h.address} {typ} {b64}\n")
    h = dataclasses.replace(h, ssh=dataclasses.replace(h.ssh, known_hosts=str(kh)))
    t = SSHTransport(h)
    try:
        assert t.run(["uname", "-n"]).stdout.strip() == h.name
    finally:
        t.close()
    # only a CA for the host: refused as unknown, with one clear word on certificates
    kh.write_text(ca_line + "\n")
    with pytest.raises(UnknownHostKey) as e:
        SSHTransport(h).run(["true"])
    assert "cannot verify host certificates" in e.value.message
    d = _inventory(tmp_path, h)
    rc, rows, err = _cli(capsys, "hosts", "probe", h.name, "--hosts-dir", str(d), "--json")
    assert rc == 1 and rows[0]["error"]["type"] == "UnknownHostKey" and "Traceback" not in err
    assert re.search(r"trust .*" + re.escape(h.name), rows[0]["error"]["hint"])


def test_auth_error_names_the_resolved_user(lab_inventory, tmp_path):
    h = lab_inventory["lab-netns-1"]
    h = dataclasses.replace(h, user="bench-no-such-user")
    with pytest.raises(AuthError, match=f"bench-no-such-user@{re.escape(h.address)}:22"):
        SSHTransport(h).run(["true"])
