"""The figure style's pure parts (bench.results.figstyle): log-axis ticks in plain numbers
over any range, the files `-o` names, and how a supplied name shows in a figure."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.errors import InputError
from bench.results import figstyle


@pytest.mark.parametrize("lo, hi", [(8, 32), (0.021, 0.034), (1e-3, 1e3), (0.9, 1.1),
                                    (3e-5, 2e2), (24, 448), (0.5, 0.51)])
def test_log_ticks_lie_in_range_read_plainly_and_are_few(lo, hi):
    ticks = figstyle.log_ticks(lo, hi)
    assert 2 <= len(ticks) <= 8, ticks
    assert ticks == sorted(set(ticks))
    assert all(lo * (1 - 1e-9) <= t <= hi * (1 + 1e-9) for t in ticks)
    for t in ticks:
        text = figstyle.plain(t)
        assert "e" not in text and "^" not in text and float(text) == pytest.approx(t)


def test_log_ticks_prefer_decades_then_one_two_five():
    assert figstyle.log_ticks(1e-3, 1e3) == [10.0 ** e for e in range(-3, 4)]
    assert figstyle.log_ticks(0.01, 0.1) == [0.01, 0.02, 0.05, 0.1]
    got = figstyle.log_ticks(8, 32)
    assert all(math.log10(t) % 1 == 0 or str(t)[0] in "12345" for t in got)


@pytest.mark.parametrize("v, text", [(32.0, "32"), (0.05, "0.05"), (2e-5, "0.00002"),
                                     (1500.0, "1500"), (0.0, "0"), (0.125, "0.125")])
def test_plain_numbers(v, text):
    assert figstyle.plain(v) == text


def test_outputs_default_to_svg_and_png_and_refuse_unknown_suffixes(tmp_path):
    assert figstyle.outputs(tmp_path / "fig") == [tmp_path / "fig.svg", tmp_path / "fig.png"]
    assert figstyle.outputs(tmp_path / "fig.PDF") == [tmp_path / "fig.PDF"]
    with pytest.raises(InputError, match=r"^-o .*c\.xyz: matplotlib cannot write \.xyz"):
        figstyle.outputs(Path(tmp_path / "c.xyz"), "-o")


def test_shown_escapes_what_does_not_print_and_keeps_the_rest():
    assert figstyle.shown("lab-a") == "lab-a"
    assert figstyle.shown("a$b\x1b[2J\u202e") == "a$b\\x1b[2J\\u202e"
    assert figstyle.short_list(["a", "b", "c", "d", "e"]) == "a, b, c +2 more"
