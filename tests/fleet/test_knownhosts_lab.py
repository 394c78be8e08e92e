"""`bench hosts trust --replace` on the netns lab (real sshd) edits the line it reports, in a
known_hosts file whose comment holds a form feed (a line break to str.splitlines(), not to
OpenSSH): the host's old key is gone, the line of the host after it stays, and OpenSSH
(`ssh-keygen -F`) then finds the new key where bench says it is. Needs root."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest

from bench.cli import main
from bench.hosts.inventory import render_host_toml
from bench.hosts.knownhosts import KnownHosts, fingerprint

pytestmark = pytest.mark.root


def _keygen(path: Path) -> tuple[str, str]:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    typ, b64 = Path(f"{path}.pub").read_text().split()[:2]
    return typ, b64


def _keygen_lines(kh: Path, name: str) -> list[str]:
    out = subprocess.run(["ssh-keygen", "-F", name, "-f", str(kh)], capture_output=True,
                         text=True).stdout
    return [x for x in out.splitlines() if not x.startswith("#")]


def test_trust_replace_edits_the_line_it_names_after_a_form_feed_comment(lab_inventory,
                                                                         tmp_path, capsys):
    h = lab_inventory["lab-netns-2"]
    kh = tmp_path / "known_hosts"
    old_type, old_b64 = _keygen(tmp_path / "old")      # not the host's key: "changed"
    c_type, c_b64 = _keygen(tmp_path / "c")
    comment = "# lab hosts\x0cpinned by hand\n"
    hostc = f"hostc.example.org {c_type} {c_b64}\n"
    kh.write_text(comment + f"{h.address} {old_type} {old_b64}\n" + hostc)
    d = tmp_path / "hosts"
    d.mkdir()
    (d / f"{h.name}.toml").write_text(render_host_toml(
        dataclasses.replace(h, ssh=dataclasses.replace(h.ssh, known_hosts=str(kh)))))

    rc = main(["hosts", "trust", h.name, "--hosts-dir", str(d), "--yes", "--json",
               "--replace", fingerprint(old_b64)])
    info = json.loads(capsys.readouterr().out)
    assert rc == 0 and info["replaced"] == [f"{old_type} {fingerprint(old_b64)}"]

    text = kh.read_text()
    assert text.startswith(comment + hostc)                 # the comment and hostc's line kept
    assert old_b64 not in text
    kept = KnownHosts.load(kh)
    assert kept.check("hostc.example.org", c_type, c_b64).status == "known"
    assert kept.check(h.address, old_type, old_b64).status == "changed"
    assert [(e.line, e.fingerprint) for e in kept.for_name(h.address)] == [
        (3, info["fingerprint"])]
    # OpenSSH reads the file as bench does: the host's one line is the new key
    assert _keygen_lines(kh, h.address) == [text.split("\n")[2]]
    assert _keygen_lines(kh, "hostc.example.org") == [hostc.rstrip("\n")]
    # and a connection now trusts the host
    rc = main(["hosts", "trust", h.name, "--hosts-dir", str(d), "--yes", "--json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["status"] == "known"
