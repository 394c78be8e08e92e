"""Cell names parse and format as exact inverses; /proc parsers read captured real files."""

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.errors import InputError
from bench.hosts.procfs import (cmdline_param, mglru_on, parse_cgroup_value, parse_cmdline,
                                parse_diskstats, parse_flat_keyed, parse_lru_gen, parse_meminfo,
                                parse_psi, parse_status, parse_vmstat, status_bytes)
from bench.matrix.cells import DELIVERIES, MECHANISMS, MODES, RECLAIMS, Cell, parse_cell
from bench.units import parse_size

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "procfs" / "debian12-x86_64-cgv1"


@pytest.mark.parametrize("name", ["64G-balloon-mglru", "64G-cgroup-classic", "93G-memboot-mglru",
                                  "256G-cgroup-mglru-pinned", "256G-cgroup-mglru-pilot-advice",
                                  "448G-none-mglru", "768M-cgroup-classic-hybrid-oracle-block",
                                  "64Gi-cgroup-mglru", "1000001B-none-classic"])
def test_paper_cell_names_round_trip(name):
    assert parse_cell(name).name == name


@pytest.mark.parametrize("spelling", ["64G-balloon-mglru", "64g-balloon-mglru",
                                      "64G-BALLOON-MGLRU", "64g-Balloon-mglru"])
def test_input_is_case_insensitive_and_output_canonical(spelling):
    """One cell, whatever the case: the unit letter upper case on output, the rest lower."""
    c = parse_cell(spelling)
    assert c.name == "64G-balloon-mglru" and c.capacity_bytes == 64 * 10 ** 9


def test_fields_decimal_and_binary_capacities():
    c = parse_cell("256g-cgroup-mglru-pilot-advice")
    assert (c.capacity_bytes, c.mechanism, c.reclaim, c.mode, c.prefetch) == (
        256 * 10 ** 9, "cgroup", "mglru", "pagecache", "pilot-advice")
    assert c.name == "256G-cgroup-mglru-pilot-advice"
    b = parse_cell("64gi-cgroup-mglru")
    assert (b.capacity_bytes, b.name) == (64 << 30, "64Gi-cgroup-mglru")
    assert parse_cell("768m-cgroup-classic").capacity_bytes == 768 * 10 ** 6


@pytest.mark.parametrize("spelling, canonical", [
    ("64GB-balloon-mglru", "64G-balloon-mglru"), ("64gib-balloon-mglru", "64Gi-balloon-mglru"),
    ("64000M-cgroup-classic", "64G-cgroup-classic"), ("1000m-cgroup-mglru", "1G-cgroup-mglru"),
    ("1024mi-cgroup-mglru", "1Gi-cgroup-mglru"), ("1.5G-none-mglru", "1500M-none-mglru"),
    ("4097b-none-mglru", "4097B-none-mglru")])
def test_names_take_every_spelling_an_option_takes(spelling, canonical):
    """A cell name's capacity reads as a size option reads it (bench.units.parse_size), and
    the cell shows its one canonical name."""
    c = parse_cell(spelling)
    assert c.capacity_bytes == parse_size(spelling.split("-")[0], unit_required=True)
    assert c.name == canonical and parse_cell(canonical) == c


def test_legacy_names_read_their_binary_capacity():
    """Names stored before capacities were decimal: lower case, K/M/G/T binary."""
    from bench.matrix.cells import legacy_cell
    assert legacy_cell("64g-balloon-mglru") == parse_cell("64Gi-balloon-mglru")
    assert legacy_cell("204m-cgroup-mglru").name == "204Mi-cgroup-mglru"
    assert legacy_cell("1000m-cgroup-mglru").capacity_bytes == 1000 << 20
    assert legacy_cell("4k-none-classic") == parse_cell("4Ki-none-classic")
    for name in ("64G-balloon-mglru", "e2e-prose-admit", "64gi-cgroup-mglru", "bad"):
        assert legacy_cell(name) is None


@pytest.mark.parametrize("name, words", [
    ("64g-balloon", "at least capacity"),
    ("64x-balloon-mglru", "not a size"),
    ("64-balloon-mglru", "capacity 64 has no unit: write 64G"),
    ("64g-ballon-mglru", "unknown mechanism 'ballon'"),
    ("64g-balloon-lru", "unknown reclaim"),
    ("64g-balloon-mglru-pagecache", "by omitting it"),
    ("64g-balloon-mglru-pilot", "unexpected 'pilot'"),
    ("64g-balloon-mglru-pilot-eager", "unknown delivery"),
    ("64g-balloon-mglru;rm -rf /", "only letters, digits"),
    ("$(reboot)-cgroup-mglru", "only letters, digits"),
    ("64000000000-cgroup-mglru", "capacity 64000000000 has no unit"),
])
def test_bad_names_list_the_choices(name, words):
    with pytest.raises(InputError) as exc:
        parse_cell(name)
    assert words in str(exc.value)
    assert "mechanisms: cgroup, balloon, memboot, none" in exc.value.hint


PREFETCH = st.one_of(st.none(), st.tuples(st.sampled_from(["oracle", "pilot", "prev_token"]),
                                          st.sampled_from(DELIVERIES)))


@given(st.one_of(st.integers(1, 10 ** 13),
                 st.builds(lambda n, u: n * u, st.integers(1, 4096),
                           st.sampled_from([10 ** 3, 10 ** 6, 10 ** 9, 10 ** 12, 1 << 10,
                                            1 << 20, 1 << 30, 1 << 40]))),
       st.sampled_from(MECHANISMS), st.sampled_from(RECLAIMS), st.sampled_from(MODES), PREFETCH)
def test_format_then_parse_is_identity(capacity, mech, reclaim, mode, pf):
    cell = Cell(capacity, mech, reclaim, mode, *(pf if pf else (None, None)))
    assert parse_cell(cell.name) == cell
    assert parse_cell(cell.name.lower()) == cell == parse_cell(cell.name.upper())
    assert parse_cell(cell.name).name == cell.name


@given(st.from_regex(r"[0-9]{1,5}([kKmMgGtT][iI]?)?[bB]?-(cgroup|balloon|memboot|none)-"
                     r"(mglru|classic)(-(pinned|hybrid|nocache|random))?", fullmatch=True))
def test_parse_then_format_is_identity_on_names_that_parse(name):
    """Every name that parses names the cell of its capacity's bytes, and the canonical name
    reads back to that cell; only a bare number or zero is refused."""
    cap, rest = name.split("-", 1)
    try:
        cell = parse_cell(name)
    except InputError as exc:
        assert ("no unit" in exc.message and cap.isdigit()) or "positive" in exc.message
        return
    assert cell.capacity_bytes == parse_size(cap) and parse_cell(cell.name) == cell
    assert cell.name.split("-", 1)[1] == rest.lower()


def test_captured_proc_files_parse():
    mem = parse_meminfo((FIX / "meminfo").read_text())
    assert mem["MemTotal"] > 1 << 30 and mem["MemTotal"] % 1024 == 0
    assert "Mlocked" in mem and "Cached" in mem
    vm = parse_vmstat((FIX / "vmstat").read_text())
    assert {"pgscan_kswapd", "pgsteal_kswapd", "workingset_refault_file", "oom_kill"} <= set(vm)
    disks = parse_diskstats((FIX / "diskstats").read_text())
    assert disks and all(d.bytes_read == d.sectors_read * 512 for d in disks.values())
    psi = parse_psi((FIX / "pressure_memory").read_text())
    assert set(psi) == {"some", "full"} and isinstance(psi["some"]["total"], int)
    st_ = parse_status((FIX / "status").read_text())
    assert status_bytes(st_, "VmLck") == 0 and status_bytes(st_, "Nope") is None
    assert parse_flat_keyed((FIX / "cgv1_memory.oom_control").read_text())["oom_kill"] >= 0
    assert "total_cache" in parse_flat_keyed((FIX / "cgv1_memory.stat").read_text())
    assert parse_cgroup_value((FIX / "cgv1_memory.limit_in_bytes").read_text()) > 0


def test_small_parsers():
    assert parse_lru_gen("0x0007\n") == 7 and mglru_on(7) and not mglru_on(0x6)
    assert mglru_on(None) is None
    args = parse_cmdline('BOOT_IMAGE=/vmlinuz root=/dev/vda mem=4G quiet mem=768M x="a b"\n')
    assert cmdline_param(args, "mem") == "768M" and cmdline_param(args, "x") == "a b"
    assert cmdline_param(args, "quiet") is None
    assert parse_cgroup_value("max\n") is None
    with pytest.raises(Exception):
        parse_lru_gen("y")
