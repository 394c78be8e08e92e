"""Size options through the real CLI (bench.cli.main): a bare number where a size is expected
is refused with the fix, never read as bytes (issue 23: `bench demand --capacity 64` printed
pool keys 0 and hit rate 0.0% for 64 bytes); every unit spelling reads as the same size and
the canonical form is what bench echoes. (Options that say bytes, --max-bytes and
--max-file-bytes, keep reading a bare number as bytes: test_recall_demand_units.)"""

from __future__ import annotations

import json

import pytest

from bench.cli import main
from bench.units import parse_size


def run(capsys, *argv):
    rc = main(list(map(str, argv)))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_demand_refuses_a_capacity_without_a_unit(capsys, tiny_traces):
    rc, out, err = run(capsys, "demand", tiny_traces[0], "--capacity", "64")
    assert rc == 2 and out == ""
    assert "--capacity 64 has no unit" in err
    assert "write 64G (decimal: 64 x 10^9 bytes" in err and "64Gi (binary" in err
    assert "Traceback" not in err
    # one bare number in a list is enough to refuse the list
    rc, _, err = run(capsys, "demand", tiny_traces[0], "--capacity", "64M,128")
    assert rc == 2 and "--capacity 128 has no unit" in err


def test_demand_reads_every_spelling_and_echoes_the_canonical_one(capsys, tiny_traces):
    spellings = ["64M", "64mb", "64000K", "64MiB", "64mi", "67108864B"]
    rc, out, err = run(capsys, "demand", tiny_traces[0], "--capacity", ",".join(spellings),
                       "--json")
    assert rc == 0, err
    rows = json.loads(out)
    got = [r["capacity_bytes"] for r in rows]
    assert got == [parse_size(s) for s in spellings]
    assert got == [64 * 10 ** 6] * 3 + [64 << 20] * 3
    # the same bytes give the same answer, whatever the spelling
    assert len({json.dumps({k: v for k, v in r.items() if k != "capacity"}, sort_keys=True)
                for r in rows[:3]}) == 1
    rc, out, _ = run(capsys, "demand", tiny_traces[0], "--capacity", "64mb,64mib")
    assert rc == 0
    assert "64M" in out and "64Mi" in out and "64mb" not in out and "64mib" not in out


@pytest.mark.parametrize("option, value", [("--mem", "93"), ("--cgroup-headroom", "16"),
                                           ("--balloon-max", "2")])
def test_run_refuses_bare_sizes_before_anything_else(capsys, tmp_path, option, value):
    """Checked right after the cell name, before the hosts are looked up (none exist here)."""
    cell = {"--mem": "93G-memboot-mglru", "--cgroup-headroom": "64G-cgroup-mglru",
            "--balloon-max": "64G-balloon-mglru"}[option]
    rc, _, err = run(capsys, "run", cell, "--host", "nosuch", "--trace", tmp_path / "t.jsonl",
                     "--hosts-dir", tmp_path, option, value)
    assert rc == 2 and f"{option} {value} has no unit" in err and "nosuch" not in err
    rc, _, err = run(capsys, "run", cell, "--host", "nosuch", "--trace", tmp_path / "t.jsonl",
                     "--hosts-dir", tmp_path, option, value + "G")
    assert rc == 2 and "unknown host(s): nosuch" in err


def test_hosts_reboot_refuses_a_bare_mem(capsys, tmp_path):
    """mem=93 would boot the host with 93 bytes: refused before the host is even looked up;
    `none` still clears mem=."""
    rc, _, err = run(capsys, "hosts", "reboot", "nosuch", "--mem", "93", "--hosts-dir", tmp_path)
    assert rc == 2 and "--mem 93 has no unit" in err and "nosuch" not in err
    rc, _, err = run(capsys, "hosts", "reboot", "nosuch", "--mem", "none", "--hosts-dir",
                     tmp_path)
    assert rc != 0 and "has no unit" not in err and "nosuch" in err

