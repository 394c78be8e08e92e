"""known_hosts parsing (bench.hosts.knownhosts) on a captured file (tests/fixtures/ssh/
known_hosts: markers, hashed names, ports, patterns with negation, blank-separated fields and
lines OpenSSH skips), checked against OpenSSH's own reading of it (`ssh-keygen -F NAME` and
`ssh-keygen -l`), then the verdicts (known, unknown, changed of any type, revoked) and the
edits `bench hosts trust` makes (append; replace naming the old key)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.hosts import knownhosts
from bench.hosts.knownhosts import KnownHosts, KnownHostsError

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "ssh"
NAMES = ["gh200-a.lab.example.org", "10.0.0.21", "10.0.0.22", "[bastion.example.org]:2222",
         "bastion.example.org", "a.pool.example.org", "bad.pool.example.org",
         "x.certs.example.org", "revoked.example.org", "tabs.example.org",
         "changed.example.org", "nowhere.example.org"]
needs_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None,
                                  reason="needs OpenSSH's ssh-keygen")


def key(name: str) -> tuple[str, str]:
    typ, b64 = (FIX / f"offered_{name}.pub").read_text().split()[:2]
    return typ, b64


@pytest.fixture
def kh() -> KnownHosts:
    return KnownHosts.load(FIX / "known_hosts")


@needs_keygen
@pytest.mark.parametrize("name", NAMES)
def test_lines_for_a_name_are_those_openssh_finds(kh, name):
    out = subprocess.run(["ssh-keygen", "-F", name, "-f", str(FIX / "known_hosts")],
                         capture_output=True, text=True).stdout
    want = {(int(m.group(1)), {"": None, "CA": "cert-authority", "REVOKED": "revoked"}[
        m.group(2)]) for m in re.finditer(r"found: line (\d+) ?(\w*)", out)}
    assert {(e.line, e.marker) for e in kh.for_name(name)} == want


@needs_keygen
def test_fingerprints_are_openssh_fingerprints(tmp_path):
    for name in ("rsa", "ed25519", "ecdsa", "old"):
        typ, b64 = key(name)
        out = subprocess.run(["ssh-keygen", "-lf", str(FIX / f"offered_{name}.pub")],
                             capture_output=True, text=True, check=True).stdout
        assert out.split()[1] == knownhosts.fingerprint(b64)


def test_bad_lines_are_skipped_and_the_rest_load(kh):
    skipped = dict(kh.skipped)
    assert set(skipped) == {11, 12, 13, 14}
    assert "unknown marker @unknown-marker" in skipped[11]
    assert "base64" in skipped[12]
    assert "'ssh-ed25519' key, the line says 'ssh-rsa'" in skipped[13]
    assert "expected" in skipped[14]
    assert len(kh.entries) == 11  # every other line, the tab-separated one included
    assert {e.marker for e in kh.entries} == {None, "cert-authority", "revoked"}


@pytest.mark.parametrize("name, offered, status, pinned_lines", [
    ("gh200-a.lab.example.org", "ed25519", "known", [3]),
    ("10.0.0.22", "rsa", "known", [5]),                       # a hashed name
    ("10.0.0.22", "ed25519", "changed", [5]),                 # RSA pinned, ed25519 offered
    ("[bastion.example.org]:2222", "ecdsa", "known", [4]),
    ("bastion.example.org", "ecdsa", "unknown", []),          # port 22 is another name
    ("a.pool.example.org", "old", "revoked", []),             # @revoked * holds it
    ("bad.pool.example.org", "ed25519", "unknown", []),       # negated in the pattern
    ("x.certs.example.org", "ed25519", "unknown", []),        # only a CA: not trusted
    ("revoked.example.org", "rsa", "revoked", []),            # pinned AND revoked: revoked
    ("changed.example.org", "rsa", "changed", [18, 19]),      # an RSA key where ed25519 and
    ("changed.example.org", "ecdsa", "known", [18, 19]),      # ECDSA are pinned: changed
    ("tabs.example.org", "ed25519", "known", [15]),
])
def test_verdicts(kh, name, offered, status, pinned_lines):
    typ, b64 = key(offered)
    v = kh.check(name, typ, b64)
    assert v.status == status
    assert [e.line for e in v.pinned] == pinned_lines
    assert v.offered == (typ, knownhosts.fingerprint(b64))
    if status == "revoked":
        assert v.revoked is not None and v.revoked.marker == "revoked"
    if name.startswith("x.certs"):
        assert [e.line for e in v.authorities] == [7]


def test_pinned_leaves_revoked_keys_out(kh):
    assert [e.line for e in kh.pinned("revoked.example.org")] == []
    assert [e.line for e in kh.pinned("a.pool.example.org")] == []
    assert [e.line for e in kh.pinned("changed.example.org")] == [18, 19]


def test_missing_directory_and_huge_files(tmp_path, monkeypatch):
    assert KnownHosts.load(tmp_path / "none").entries == ()
    with pytest.raises(KnownHostsError, match="is a directory"):
        KnownHosts.load(tmp_path)
    monkeypatch.setattr(knownhosts, "MAX_BYTES", 100)
    with pytest.raises(KnownHostsError, match="larger than"):
        KnownHosts.load(FIX / "known_hosts")


def test_append_creates_a_private_file(tmp_path):
    p = tmp_path / "sub" / "known_hosts"
    typ, b64 = key("ed25519")
    line = knownhosts.append(p, "[10.0.0.9]:2222", typ, b64)
    assert line == f"[10.0.0.9]:2222 {typ} {b64}\n" and p.read_text() == line
    assert os.stat(p).st_mode & 0o777 == 0o600
    assert KnownHosts.load(p).check("[10.0.0.9]:2222", typ, b64).status == "known"


@needs_keygen
def test_replace_removes_only_the_name_and_the_old_key(tmp_path, kh):
    p = tmp_path / "known_hosts"
    shutil.copy(FIX / "known_hosts", p)
    os.chmod(p, 0o640)
    typ, b64 = key("rsa")
    # 10.0.0.21 shares line 3 with gh200-a: that name stays pinned to the old key
    old = kh.pinned("10.0.0.21")
    knownhosts.replace(p, "10.0.0.21", old, typ, b64)
    now = KnownHosts.load(p)
    assert now.check("10.0.0.21", typ, b64).status == "known"
    assert now.check("10.0.0.21", *key("ed25519")).status == "changed"  # the old one is gone
    assert now.check("gh200-a.lab.example.org", *key("ed25519")).status == "known"
    assert os.stat(p).st_mode & 0o777 == 0o640
    # a hashed line naming only that host goes; OpenSSH agrees on what is left
    knownhosts.replace(p, "10.0.0.22", now.pinned("10.0.0.22"), *key("ecdsa"))
    out = subprocess.run(["ssh-keygen", "-F", "10.0.0.22", "-f", str(p)],
                         capture_output=True, text=True).stdout
    assert out.count("found: line") == 2  # the new line and `@revoked *`
    assert KnownHosts.load(p).check("10.0.0.22", *key("rsa")).status == "changed"
    assert [why for _, why in KnownHosts.load(p).skipped] == [why for _, why in kh.skipped]


def test_replace_refuses_a_pattern_line_and_a_stale_read(tmp_path, kh):
    p = tmp_path / "known_hosts"
    shutil.copy(FIX / "known_hosts", p)
    before = p.read_bytes()
    # line 6 pins *.pool.example.org: removing one name from a wildcard is not possible
    pattern_line = [e for e in kh.entries if e.line == 6]
    with pytest.raises(KnownHostsError, match="pattern"):
        knownhosts.replace(p, "a.pool.example.org", pattern_line, *key("rsa"))
    assert p.read_bytes() == before
    p.write_bytes(b"\n" + before)  # every line moved: the entries read before are stale
    with pytest.raises(KnownHostsError, match="changed while"):
        knownhosts.replace(p, "10.0.0.21", kh.pinned("10.0.0.21"), *key("rsa"))


def test_pin_host_key_appends_replaces_and_refuses(tmp_path):
    """What `bench hosts trust` writes for each verdict (the offer made from data: the network
    side is tests/fleet/test_ssh_config_lab.py)."""
    from bench.errors import ChangedHostKey, InputError, RevokedHostKey, UnknownHostKey
    from bench.hosts.inventory import Host, SSHOptions
    from bench.hosts.ssh import HostKeyOffer, pin_host_key, refuse
    from bench.hosts.sshconfig import Endpoint
    p = tmp_path / "known_hosts"
    h = Host(name="h", address="alias", transport="ssh", ssh=SSHOptions(known_hosts=str(p)))
    ep = Endpoint(alias="alias", hostname="10.0.0.9", port=2222, user="root")

    def offer(kind: str) -> HostKeyOffer:
        typ, b64 = key(kind)
        return HostKeyOffer("h", ep, typ, b64, knownhosts.fingerprint(b64), str(p),
                            KnownHosts.load(p).check(ep.key_name, typ, b64))

    first = offer("ed25519")
    assert first.verdict.status == "unknown" and isinstance(refuse(h, first), UnknownHostKey)
    with pytest.raises(InputError):
        pin_host_key(first, replace="SHA256:nothing-pinned")
    pin_host_key(first)
    assert p.read_text().startswith("[10.0.0.9]:2222 ssh-ed25519 ")
    assert offer("ed25519").verdict.status == "known"
    changed = offer("rsa")
    err = refuse(h, changed)
    assert isinstance(err, ChangedHostKey)
    assert err.old == (f"ssh-ed25519 {first.fingerprint}",) and err.new.startswith("ssh-rsa ")
    with pytest.raises(InputError, match="already has pinned keys"):
        pin_host_key(changed)
    with pytest.raises(InputError, match="is not a key pinned"):
        pin_host_key(changed, replace=changed.fingerprint)
    pin_host_key(changed, replace=first.fingerprint)
    assert [e.key_type for e in KnownHosts.load(p).entries] == ["ssh-rsa"]
    with open(p, "a") as fh:
        fh.write("@revoked * {} {}\n".format(*key("rsa")))
    revoked = offer("rsa")
    assert isinstance(refuse(h, revoked), RevokedHostKey)
    with pytest.raises(InputError, match="revoked"):
        pin_host_key(revoked)
