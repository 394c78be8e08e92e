"""known_hosts lines end at "\\n" only, for the parser and the editor alike (OpenSSH reads the
file with getline(3)): property tests over files whose comments and trailing comments hold every
character Python's str.splitlines() breaks at (and "\\r\\n" line ends). The line numbers bench
finds are the ones `ssh-keygen -F` prints, and `replace` edits exactly the line it was asked to:
the old key is gone, every other host keeps its key, every other byte stays."""

from __future__ import annotations

import base64
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.hosts import knownhosts
from bench.hosts.knownhosts import KnownHosts, split_lines

# every character str.splitlines() ends a line at, found by asking it (not listed by hand)
PY_BREAKS = [c for c in map(chr, range(0x110000)) if len(f"a{c}b".splitlines()) == 2]
BREAKS = [c for c in PY_BREAKS if c != "\n"]     # inside lines; "\r\n" ends them too
HOSTS = ["hosta", "hostb", "hostc", "hostd"]


def test_the_breaks_are_those_python_documents():
    assert PY_BREAKS == ["\n", "\x0b", "\x0c", "\r", "\x1c", "\x1d", "\x1e", "\x85", "\u2028",
                         "\u2029"]


def blob(seed: int) -> str:
    t = b"ssh-ed25519"
    return base64.b64encode(struct.pack(">I", len(t)) + t + struct.pack(">I", seed) * 8).decode()


noise = st.text(alphabet=st.sampled_from(["a", " ", "#", "=", "\t", *BREAKS]), max_size=12)
ends = st.sampled_from(["\n", "\r\n"])


@st.composite
def known_hosts_files(draw) -> tuple[str, dict[str, str]]:
    """(file text, host -> its pinned key): one line per host, in a random order, between
    comment lines; comments and the hosts' trailing comments hold line-break characters."""
    hosts = draw(st.permutations(HOSTS))
    keys = {h: blob(i) for i, h in enumerate(HOSTS)}
    out = []
    for h in hosts:
        for _ in range(draw(st.integers(0, 2))):
            out.append("#" + draw(noise))
        trailing = draw(st.sampled_from(["", " "])) + draw(noise)
        out.append(f"{h} ssh-ed25519 {keys[h]}{' ' + trailing if trailing else ''}")
    last = draw(st.booleans())          # the last line may lack its "\n"
    text = "".join(line + draw(ends) for line in out)
    return (text if last else text.rstrip("\r\n")), keys


def _line_of(text: str, host: str) -> int:
    """Where a host's line is, counting "\\n" only (what OpenSSH counts)."""
    return next(i for i, line in enumerate(text.split("\n"), 1) if line.startswith(host + " "))


@given(known_hosts_files())
def test_parser_numbers_lines_by_newlines_only(f):
    text, keys = f
    kh = KnownHosts.parse(text)
    assert {e.patterns[0]: e.line for e in kh.entries} == {h: _line_of(text, h) for h in keys}
    assert {e.patterns[0]: e.key_b64 for e in kh.entries} == keys
    assert "".join(split_lines(text)) == text


@given(known_hosts_files(), st.sampled_from(HOSTS))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=150)
def test_replace_edits_the_line_it_was_asked_to(tmp_path, f, target):
    text, keys = f
    p = tmp_path / "known_hosts"
    p.write_bytes(text.encode())
    new = blob(99)
    v = KnownHosts.load(p).check(target, "ssh-ed25519", new)
    assert v.status == "changed" and [e.line for e in v.pinned] == [_line_of(text, target)]
    knownhosts.replace(p, target, list(v.pinned), "ssh-ed25519", new)
    after = KnownHosts.load(p)
    assert after.check(target, "ssh-ed25519", keys[target]).status == "changed"
    assert after.check(target, "ssh-ed25519", new).status == "known"
    for h in HOSTS:
        if h != target:
            assert after.check(h, "ssh-ed25519", keys[h]).status == "known", h
    # every other line is kept byte for byte, the new key is the last line
    lines = p.read_bytes().decode().split("\n")
    before = text.split("\n")
    del before[_line_of(text, target) - 1]
    if before[-1] == "":
        before.pop()
    assert lines == before + [f"{target} ssh-ed25519 {new}", ""]


needs_keygen = pytest.mark.skipif(shutil.which("ssh-keygen") is None,
                                  reason="needs OpenSSH's ssh-keygen")


@needs_keygen
@given(known_hosts_files())
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40,
          deadline=None)
def test_line_numbers_are_those_ssh_keygen_finds(tmp_path, f):
    text, keys = f
    p = tmp_path / "known_hosts"
    p.write_bytes(text.encode())
    kh = KnownHosts.load(p)
    for h in keys:
        out = subprocess.run(["ssh-keygen", "-F", h, "-f", str(p)], capture_output=True,
                             text=True).stdout
        lines = [int(n) for n in re.findall(r"^# Host \S+ found: line (\d+)", out, re.M)]
        assert [e.line for e in kh.for_name(h)] == lines, (h, out)


def test_a_last_line_without_newline_is_not_joined_by_append(tmp_path):
    p = tmp_path / "known_hosts"
    p.write_text(f"hostb ssh-ed25519 {blob(1)}")
    knownhosts.append(p, "hosta", "ssh-ed25519", blob(2))
    kh = KnownHosts.load(Path(p))
    assert [(e.line, e.patterns) for e in kh.entries] == [(1, ("hostb",)), (2, ("hosta",))]
