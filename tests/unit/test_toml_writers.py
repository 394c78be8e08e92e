"""Every TOML file bench writes (host files of the labs, the demo and `bench hosts init`, the
demo's matrix) is written by tomli_w: any value, quotes, backslashes, newlines, control
characters and unicode included, reads back through tomllib as the value that was written."""

from __future__ import annotations

import tomllib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.execute.demo import matrix_text
from bench.hosts.inventory import Host, RebootSpec, SSHOptions, render_host_toml
from bench.hosts import templates
from bench.hosts.templates import LOCAL, render_templates
from bench.lab import twin as lab_twin
from bench.units import MB, parse_size

# any text TOML can hold (every code point but the surrogates), hostile characters weighted in
HOSTILE = st.sampled_from(['"', "'", "\\", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "\u2028",
                           "é", "€", "😀", "[x]", "a = 1", '"""', "#"])
TEXT = st.lists(st.one_of(HOSTILE, st.text(max_size=4)), max_size=6).map("".join)
SETTINGS = settings(max_examples=150, deadline=None)


@st.composite
def hosts(draw) -> Host:
    argv = st.none() | st.lists(TEXT, min_size=1, max_size=4).map(tuple)
    return Host(
        name=draw(TEXT), address=draw(TEXT), transport=draw(TEXT),
        port=draw(st.none() | st.integers(1, 65535)), user=draw(st.none() | TEXT),
        tags=draw(st.dictionaries(TEXT, TEXT, max_size=4)),
        ssh=SSHOptions(identity_file=draw(st.none() | TEXT), known_hosts=draw(st.none() | TEXT),
                       connect_timeout=draw(st.floats(0.5, 1e4))),
        mem_total=draw(st.none() | st.integers(1, 1 << 50)),
        mem_floor=draw(st.none() | st.integers(1, 1 << 50)),
        reboot=RebootSpec(allowed=draw(st.booleans()), method=draw(TEXT),
                          grub_entry=draw(st.none() | TEXT), command=draw(argv),
                          power_cycle=draw(argv), up_timeout=draw(st.floats(1.0, 1e5))),
        pool_dir=draw(TEXT), work_dir=draw(TEXT),
        expect=draw(st.dictionaries(TEXT, TEXT | st.integers(-(1 << 63), (1 << 63) - 1),
                                    max_size=3)))


def given_only(d: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items() if v is not None}


@given(hosts())
@SETTINGS
def test_a_host_file_reads_back_as_the_host_written(h):
    data = tomllib.loads(render_host_toml(h))
    assert (data["name"], data["address"], data["transport"]) == (h.name, h.address, h.transport)
    assert (data.get("port"), data.get("user")) == (h.port, h.user)
    assert data.get("tags", {}) == h.tags and data.get("expect", {}) == h.expect
    assert data["ssh"] == given_only(vars(h.ssh))
    assert data["reboot"] == given_only(vars(h.reboot))
    assert data["paths"] == {"pool_dir": h.pool_dir, "work_dir": h.work_dir}
    memory = data.get("memory", {})
    # sizes are written as bench's canonical text: exact whole units, else bytes
    assert parse_size(memory["total"]) == h.mem_total if h.mem_total else "total" not in memory
    assert parse_size(memory["floor"]) == h.mem_floor if h.mem_floor else "floor" not in memory


@given(TEXT.filter(lambda s: s not in ("", ".", "..") and "/" not in s and "\x00" not in s))
@settings(max_examples=40, deadline=None)
def test_the_twin_inventory_reads_back_whatever_its_paths_hold(tmp_path_factory, odd):
    """The twin's [expect] and its BMC password file (in power_cycle's argv) come back as
    written, in a directory whose name holds anything a file name may."""
    d = tmp_path_factory.mktemp("twin") / odd
    g = {"name": "twin-a", "port": 40022, "bmc_port": 40623, "mem_mib": 1536,
         "identity_file": str(d / "key"), "known_hosts": str(d / "known_hosts"),
         "bmc_password_file": str(d / "bmc.pass")}
    data = tomllib.loads(lab_twin._write_inventory(g, d / "hosts").read_text())
    assert data["expect"] == lab_twin.EXPECT
    assert data["ssh"]["identity_file"] == g["identity_file"]
    assert data["reboot"]["power_cycle"] == lab_twin.ipmitool_argv(g, "chassis", "power",
                                                                   "cycle")


@given(TEXT.filter(lambda s: "\x00" not in s and "/" not in s and s not in ("", ".", "..")))
@settings(max_examples=100, deadline=None)
def test_the_demo_matrix_reads_back_whatever_the_trace_path_holds(odd):
    trace = Path("/tmp") / odd / "trace.jsonl"
    data = tomllib.loads(matrix_text(trace, 22_480 * MB, 2000 * MB, 21_000 * MB))
    assert data["workload"]["trace"] == str(trace.resolve())
    assert data["cells"]["capacities"] == ["21G"]


@given(st.none() | st.integers(0, 1 << 52)
       | st.integers(templates.MIN_MEMORY, templates.MIN_MEMORY + (1 << 40)))   # in bounds
@settings(max_examples=100, deadline=None)
def test_the_local_template_reads_back_its_memory_total(mem_total):
    data = tomllib.loads(render_templates(mem_total)[LOCAL])
    total = data.get("memory", {}).get("total")
    if mem_total is None or not templates.MIN_MEMORY <= mem_total <= templates.MAX_MEMORY:
        assert total is None        # unknown or out of bounds: the line stays commented out
    else:
        assert parse_size(total) == mem_total // MB * MB
