"""The terminal escaping (bench.results.views.visible) shows every invisible or look-alike code
point as an escape and is one-to-one: two different names never print alike. Property tests
over text made of exactly the characters that could collide (backslashes, the letters of an
escape, hex digits, controls, soft hyphens, tag characters, fillers, variation selectors,
bidi marks, lone surrogates), and a CLI case printing two hostile names."""

from __future__ import annotations

import re
import unicodedata

from hypothesis import example, given, settings
from hypothesis import strategies as st

from bench.cli import main
from bench.results.views import visible

# the list, one of each range's ends and middles included
INVISIBLE = ["\u00ad", "\U000e0000", "\U000e0001", "\U000e0041", "\U000e007f", "\u3164",
             "\u115f", "\u1160", "\uffa0", "\u2060", "\u2061", "\u2064", "\u200b", "\u200c",
             "\u200d", "\u200e", "\u200f", "\u202a", "\u202c", "\u202e", "\u2066", "\u2069",
             "\ufeff", "\ufe00", "\ufe0f", "\U000e0100", "\U000e01ef", "\u034f", "\u180e",
             "\u061c", "\u2028", "\u2029", "\u00a0", "\u2007", "\u3000", "\ue000",
             "\U000f0000", "\u0378", "\x85", "\x9b", "\x00", "\x1b", "\x7f"]
SURROGATES = ["\udcff", "\udc80", "\udc7f", "\ud800"]
# what an escape is spelt with, so that a name may contain an escape's text
SPELLING = ["\\", "x", "u", "U", "0", "1", "8", "a", "b", "d", "e", "f", "c", "3", "6", "4"]
ORDINARY = ["a", " ", "-", "é", "漢", "\t", "\n", "\u0301"]

hostile_text = st.lists(st.sampled_from(INVISIBLE + SURROGATES + SPELLING + ORDINARY)
                        | st.characters(), max_size=12).map("".join)


def unescape(shown: str) -> str:
    """The inverse of visible(), written from its documented rules (a test's own reading): a
    doubled backslash is one, \\xHH is ASCII below 0x80 or an undecodable byte above,
    \\uHHHH and \\UHHHHHHHH a code point, any other backslash itself."""
    out, i = [], 0
    while i < len(shown):
        c = shown[i]
        if c != "\\" or i + 1 == len(shown):
            out.append(c)
            i += 1
            continue
        n = shown[i + 1]
        if n == "\\":
            out.append("\\")
            i += 2
        elif n in "xuU":
            width = {"x": 2, "u": 4, "U": 8}[n]
            digits = shown[i + 2:i + 2 + width]
            assert re.fullmatch(f"[0-9a-f]{{{width}}}", digits), (shown, i)
            o = int(digits, 16)
            out.append(chr(o if n != "x" or o < 0x80 else 0xDC00 + o))
            i += 2 + width
        else:
            out.append("\\")
            i += 1
    return "".join(out)


@settings(max_examples=600, deadline=None)
@given(hostile_text, hostile_text)
@example("\\x1b", "\x1b")
@example("\\", "\\\\")
@example("\\\x1b", "\\\\x1b")
@example("\x85", "\udc85")
@example("\U000e0001", "\ue000" + "1")
@example("a\u00adb", "ab")
def test_two_different_names_never_print_alike(a, b):
    for lines in (True, False):
        if visible(a, lines=lines) == visible(b, lines=lines):
            assert a == b


@settings(max_examples=600, deadline=None)
@given(hostile_text)
def test_what_visible_shows_reads_back_as_the_name(a):
    """The strong form of one-to-one: the shown text determines the name."""
    assert unescape(visible(a, lines=False)) == a
    assert unescape(visible(a)) == a


@settings(max_examples=600, deadline=None)
@given(hostile_text)
def test_nothing_invisible_survives(a):
    shown = visible(a, lines=False)
    for ch in shown:
        assert ch == " " or unicodedata.category(ch)[0] not in "CZ", (a, shown)
        assert ch not in INVISIBLE and ch not in SURROGATES, (a, shown)


def test_each_listed_code_point_shows_as_its_escape():
    for ch in INVISIBLE:
        o = ord(ch)
        want = f"\\x{o:02x}" if o < 0x80 else f"\\u{o:04x}" if o <= 0xFFFF else f"\\U{o:08x}"
        assert visible(f"a{ch}b") == f"a{want}b", ch
    assert visible("caf\u00e9 漢字 C:\\dir") == "caf\u00e9 漢字 C:\\dir"   # printable: as is


def test_the_cli_prints_two_look_alike_names_differently(tmp_path, capsys):
    """`bench ingest` names what it refuses: two directories whose names print alike in a
    terminal (a soft hyphen, a tag character) show as different lines, escapes spelt out."""
    shown = []
    for name in ("evil", "ev\u00adil", "evil\U000e0041"):
        d = tmp_path / name
        d.mkdir()
        assert main(["ingest", str(d), "--db", str(tmp_path / "x.db")]) == 2
        err = capsys.readouterr().err
        assert not set(err) & set(INVISIBLE), repr(err)
        shown.append(err.splitlines()[0])
    assert len(set(shown)) == 3, shown
    assert "ev\\u00adil" in shown[1] and "evil\\U000e0041" in shown[2], shown
