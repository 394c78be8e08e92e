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

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "procfs" / "debian12-x86_64-cgv1"


@pytest.mark.parametrize("name", ["64G-balloon-mglru", "64G-cgroup-classic", "93G-memboot-mglru",
                                  "256G-cgroup-mglru-pinned", "256G-cgroup-mglru-pilot-advice",
                                  "448G-none-mglru", "768M-cgroup-classic-hybrid-oracle-block"])
def test_paper_cell_names_round_trip(name):
    assert parse_cell(name.lower()).name == name.lower()


def test_fields():
    c = parse_cell("256g-cgroup-mglru-pilot-advice")
    assert (c.capacity_bytes, c.mechanism, c.reclaim, c.mode, c.prefetch) == (
        256 << 30, "cgroup", "mglru", "pagecache", "pilot-advice")


@pytest.mark.parametrize("name, words", [
    ("64g-balloon", "at least capacity"),
    ("64x-balloon-mglru", "not a size"),
    ("64g-ballon-mglru", "unknown mechanism 'ballon'"),
    ("64g-balloon-lru", "unknown reclaim"),
    ("64g-balloon-mglru-pagecache", "by omitting it"),
    ("64g-balloon-mglru-pilot", "unexpected 'pilot'"),
    ("64g-balloon-mglru-pilot-eager", "unknown delivery"),
    ("64g-balloon-mglru;rm -rf /", "only lower-case"),
    ("$(reboot)-cgroup-mglru", "only lower-case"),
    ("1024m-cgroup-mglru", "canonical form (that cell is written 1g-cgroup-mglru)"),
])
def test_bad_names_list_the_choices(name, words):
    with pytest.raises(InputError) as exc:
        parse_cell(name)
    assert words in str(exc.value)
    assert "mechanisms: cgroup, balloon, memboot, none" in exc.value.hint


@given(st.integers(1, 4096), st.sampled_from(["M", "G"]), st.sampled_from(MECHANISMS),
       st.sampled_from(RECLAIMS), st.sampled_from(MODES),
       st.one_of(st.none(), st.tuples(st.sampled_from(["oracle", "pilot", "prev_token"]),
                                      st.sampled_from(DELIVERIES))))
def test_format_then_parse_is_identity(n, unit, mech, reclaim, mode, pf):
    cell = Cell(n << (20 if unit == "M" else 30), mech, reclaim, mode,
                *(pf if pf else (None, None)))
    assert parse_cell(cell.name) == cell


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
