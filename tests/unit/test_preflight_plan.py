"""Planning with the hosts' probed facts as data (bench.matrix.expand, bench.matrix.schedule),
the facts from the fixture hosts of tests/fixtures/facts (a captured Debian host: cgroup v1
memory, no MGLRU; a hand-written GH200: cgroup v2, MGLRU, a mem=96G boot), parsed by the
probe's own parsers: planning-time skips with their reasons, relative capacities from the
probed MemTotal, the probed boot as the schedule's current boot; and the pure parts of the
preflight (facts files, the cache) and of a campaign's end (which failures are final, the
final line)."""

from __future__ import annotations

import json
import re
import tomllib
from types import SimpleNamespace

import pytest

from bench.errors import CommandFailed, FormatError, HostError, InputError, SafetyError
from bench.execute.campaign import preflight as pf
from bench.execute.campaign.record import deterministic, outcome, outcome_line
from bench.execute.hostrun import SpecRefused
from bench.matrix.expand import BootConfig, expand
from bench.matrix.load import parse_matrix
from bench.matrix.schedule import HostState, schedule
from bench.units import MB, parse_size
from tests.support.facts import (DEBIAN, GH200, NO_MEMORY_CGROUP, _text, default_boot,
                                 fixture_facts, write_facts)

GiB = 1 << 30


def host(name="h", mem=None, floor=None, reboot=False, transport="ssh", **tags):
    return SimpleNamespace(name=name, tags=tags, mem_total=None if mem is None else parse_size(mem),
                           mem_floor=None if floor is None else parse_size(floor),
                           reboot=SimpleNamespace(allowed=reboot), transport=transport,
                           address=f"{name}.example", port=22, user="root")


def matrix(cells: str, protocol: str = "", extra: str = ""):
    return parse_matrix(tomllib.loads(f"""
name = "t"
description = "t"
repetitions = 2
{extra}
[workload]
trace = "tiny"
{protocol}
[cells]
{cells}
"""), "t.toml")


def meminfo_kb(name: str, key: str) -> int:
    """A /proc/meminfo value of a fixture host, read independently of the probe's parser."""
    m = re.search(rf"^{key}:\s+(\d+) kB$", _text(name, "memory") or "", re.M)
    assert m, key
    return int(m.group(1)) * 1024


def planned(exp) -> list[str]:
    return sorted({c.cell for r in exp.requests for c in r.candidates})


def skipped(exp) -> dict[str, str]:
    return {f"{s.point}@{s.host}": s.reason for s in exp.skipped}


# planning-time skips ------------------------------------------------------------------------

def test_a_host_without_a_memory_cgroup_skips_the_cgroup_cells_with_the_reason():
    m = matrix('capacities = ["64M"]\nmechanisms = ["cgroup", "balloon", "none"]\n'
               'reclaims = ["classic"]')
    f = fixture_facts(DEBIAN, cgroup=NO_MEMORY_CGROUP)
    assert f["cgroup"]["backend"] == "none"
    exp = expand(m, [host()], {"h": f})
    assert planned(exp) == ["64M-balloon-classic", "64M-none-classic"]
    assert list(skipped(exp)) == ["64M-cgroup-classic@h"]
    assert "needs a memory cgroup" in skipped(exp)["64M-cgroup-classic@h"]
    assert exp.skipped[0].cell == "64M-cgroup-classic"
    assert exp.skipped_runs == 2                     # its two repetitions
    # the captured host has its memory controller on cgroup v1: the same cell runs there
    assert "64M-cgroup-classic" in planned(expand(m, [host()], {"h": fixture_facts(DEBIAN)}))


def test_mglru_cells_are_skipped_on_a_kernel_without_lru_gen_and_run_where_it_is():
    m = matrix('capacities = ["64M"]\nmechanisms = ["cgroup"]\nreclaims = ["mglru", "classic"]')
    deb, gh = fixture_facts(DEBIAN), default_boot(GH200)
    assert deb["mglru"] is None and gh["mglru"] == "0x0003"
    exp = expand(m, [host("deb"), host("gh")], {"deb": deb, "gh": gh})
    why = skipped(exp)
    assert list(why) == ["64M-cgroup-mglru@deb"]
    assert "no /sys/kernel/mm/lru_gen" in why["64M-cgroup-mglru@deb"] and deb["kernel"] in \
        why["64M-cgroup-mglru@deb"]
    assert {(c.host, c.cell) for r in exp.requests for c in r.candidates} == {
        ("deb", "64M-cgroup-classic"), ("gh", "64M-cgroup-classic"), ("gh", "64M-cgroup-mglru")}


def test_a_fact_the_probe_could_not_read_skips_nothing():
    m = matrix('capacities = ["64M"]\nmechanisms = ["cgroup"]\nreclaims = ["mglru"]')
    f = fixture_facts(DEBIAN)
    del f["cgroup"], f["mglru"]         # as when the probe recorded errors for those facts
    assert planned(expand(m, [host()], {"h": f})) == ["64M-cgroup-mglru"]


def test_relative_capacities_resolve_from_the_probed_memtotal_when_the_inventory_has_none():
    smoke = matrix('capacities = ["0.125mem", "0.25mem"]\nmechanisms = ["cgroup"]\n'
                   'reclaims = ["classic"]')
    total = meminfo_kb(DEBIAN, "MemTotal")
    want = sorted(f"{int(total * x) // MB}M-cgroup-classic" for x in (0.125, 0.25))
    exp = expand(smoke, [host()], {"h": fixture_facts(DEBIAN)})
    assert planned(exp) == want and not exp.skipped
    # without facts (or an inventory memory.total) nothing resolves, saying what is missing
    exp = expand(smoke, [host()])
    assert not exp.requests and all("memory.total" in r for r in skipped(exp).values())
    # the inventory's memory.total wins over the probe
    exp = expand(smoke, [host(mem="3Gi")], {"h": fixture_facts(DEBIAN)})
    assert planned(exp) == sorted(f"{int(3 * GiB * x) // MB}M-cgroup-classic"
                                  for x in (0.125, 0.25))


def test_under_a_mem_boot_the_probed_memtotal_is_not_the_hosts_memory():
    m = matrix('capacities = ["0.5mem", "200G"]\nmechanisms = ["none"]\nreclaims = ["mglru"]')
    gh = fixture_facts(GH200)                     # booted mem=96G
    assert gh["mem"] == "96G"
    exp = expand(m, [host()], {"h": gh})
    assert planned(exp) == ["200G-none-mglru"]    # no bound known: the run's preflight checks
    assert "mem=96G boot" in skipped(exp)["0.5mem-none-mglru@h"]
    # with the inventory's memory.total both resolve, and the bound is the inventory's
    exp = expand(m, [host(mem="150G")], {"h": gh})
    assert planned(exp) == ["75G-none-mglru"]
    assert "above the host's memory 150G" in skipped(exp)["200G-none-mglru@h"]


def test_a_capacity_above_the_probed_memtotal_is_skipped():
    total = meminfo_kb(DEBIAN, "MemTotal")
    above, below = (total // MB + 1) * MB, total // MB * MB
    m = matrix(f'capacities = ["{above}B", "{below}B"]\nmechanisms = ["none"]\n'
               'reclaims = ["classic"]')
    # the inventory says more, but the probe of a boot without mem= is what the run checks
    exp = expand(m, [host(mem="1T")], {"h": fixture_facts(DEBIAN)})
    assert len(exp.requests) == 2 and len(planned(exp)) == 1
    (why,) = skipped(exp).values()
    assert "is above the host's memory" in why


def test_a_balloon_above_the_protocols_cap_is_skipped_from_the_probed_memavailable():
    avail = meminfo_kb(DEBIAN, "MemAvailable")
    fits = (avail - 2 * 10 ** 9) // MB * MB + MB          # locks just under 2G
    m = matrix(f'capacities = ["1G", "{fits}B"]\nmechanisms = ["balloon", "none"]\n'
               'reclaims = ["classic"]', protocol='[protocol]\nballoon_max = "2G"')
    exp = expand(m, [host()], {"h": fixture_facts(DEBIAN)})
    assert list(skipped(exp)) == ["1G-balloon-classic@h"]
    assert "above protocol.balloon_max 2G" in skipped(exp)["1G-balloon-classic@h"]
    assert any(c.endswith("-balloon-classic") for c in planned(exp))
    # no cap, no skip
    m2 = matrix('capacities = ["1G"]\nmechanisms = ["balloon"]\nreclaims = ["classic"]')
    assert planned(expand(m2, [host()], {"h": fixture_facts(DEBIAN)})) == ["1G-balloon-classic"]


def test_a_host_without_python3_runs_nothing_and_says_why():
    m = matrix('capacities = ["64M"]\nmechanisms = ["none", "cgroup"]\nreclaims = ["classic"]')
    f = fixture_facts(DEBIAN)
    f["python3"] = None
    exp = expand(m, [host("a"), host("b")], {"a": f, "b": fixture_facts(DEBIAN)})
    assert {c.host for r in exp.requests for c in r.candidates} == {"b"}
    assert all("python3" in why for k, why in skipped(exp).items() if k.endswith("@a"))
    assert len(skipped(exp)) == 2


def test_skip_reasons_group_points_by_host_and_reason_and_count_the_runs_taken_out():
    m = matrix('capacities = ["64M", "128M"]\nmechanisms = ["cgroup"]\nreclaims = ["mglru"]',
               extra="")
    nocg = fixture_facts(DEBIAN, cgroup=NO_MEMORY_CGROUP)
    exp = expand(m, [host("a"), host("b")], {"a": nocg, "b": nocg})
    lines = exp.skip_reasons()
    assert len(lines) == 2 and all(line.startswith("64M-cgroup-mglru, 128M-cgroup-mglru on ")
                                   for line in lines)
    assert exp.skipped_runs == 2 * 2 * 2             # points x hosts x repetitions
    # placement one: a cell another host runs takes no run out
    one = matrix('capacities = ["64M"]\nmechanisms = ["cgroup"]\nreclaims = ["classic"]',
                 extra='[hosts]\nplacement = "one"')
    exp = expand(one, [host("a"), host("b")], {"a": nocg, "b": fixture_facts(DEBIAN)})
    assert len(exp.skipped) == 1 and exp.skipped_runs == 0 and len(exp.requests) == 2


# the schedule starts from the probed boot ---------------------------------------------------

def test_the_schedule_starts_from_the_boot_the_host_was_probed_under():
    gh = fixture_facts(GH200)                                   # mem=96G on its command line
    hs = HostState.from_facts(host(reboot=True), gh)
    assert hs.current == BootConfig(96 * GiB, None)
    lru = fixture_facts(GH200, cmdline="ro bench.lru_gen=off quiet")
    assert HostState.from_facts(host(), lru).current == BootConfig(None, "off")
    assert HostState.from_facts(host(), None).current == BootConfig()
    m = matrix('capacities = ["64M"]\nmechanisms = ["none"]\nreclaims = ["mglru"]')
    exp = expand(m, [host(reboot=True)], {"h": gh})
    # the default-boot runs need a reboot away from mem=96G; from the default boot they do not
    assert schedule(exp.requests, [hs], 1).reboots == 1
    assert schedule(exp.requests, [HostState.from_facts(host(), default_boot(GH200))],
                    1).reboots == 0


# facts files and the cache ---------------------------------------------------------------

def test_a_facts_file_in_the_probes_json_shape_or_as_an_object(tmp_path):
    f = fixture_facts(DEBIAN)
    p = write_facts(tmp_path / "f.json", {"a": f})
    assert pf.load_facts_file(p) == {"a": json.loads(json.dumps(f))}
    data = json.loads(p.read_text()) + [{"host": "b", "error": {"message": "x"}, "facts": {}}]
    p.write_text(json.dumps(data))
    assert list(pf.load_facts_file(p)) == ["a"]            # a host the probe failed is left out
    (tmp_path / "o.json").write_text(json.dumps({"c": {"kernel": "6.8"}}))
    assert pf.load_facts_file(tmp_path / "o.json") == {"c": {"kernel": "6.8"}}
    for bad, msg in (("{", "not JSON"), ("[1]", "entry 0"), ('"x"', "expected a list"),
                     ("[" * 100000, "not JSON")):
        (tmp_path / "bad.json").write_text(bad)
        with pytest.raises(InputError, match=msg) as e:
            pf.load_facts_file(tmp_path / "bad.json")
        assert str(tmp_path / "bad.json") in e.value.message
    with pytest.raises(InputError, match="cannot read"):
        pf.load_facts_file(tmp_path / "missing.json")


def test_cached_facts_are_reused_while_young_and_for_the_same_target_only(tmp_path):
    h, f = host("a"), fixture_facts(DEBIAN)
    t = [1000.0]
    pf.write_cached(tmp_path, h, f, now=lambda: t[0])
    p = tmp_path / "facts" / "a.json"
    assert p.stat().st_mode & 0o777 == 0o600 and p.parent.stat().st_mode & 0o777 == 0o700
    t[0] += 299
    assert pf.read_cached(tmp_path, h, 300, now=lambda: t[0]) == json.loads(json.dumps(f))
    t[0] += 2
    assert pf.read_cached(tmp_path, h, 300, now=lambda: t[0]) is None         # too old
    assert pf.read_cached(tmp_path, h, 0, now=lambda: 1000.0) is None         # 0: never reuse
    moved = host("a")
    moved.address = "elsewhere"
    assert pf.read_cached(tmp_path, moved, 300, now=lambda: 1000.0) is None    # another target
    p.write_text("{not json")
    assert pf.read_cached(tmp_path, h, 300, now=lambda: 1000.0) is None
    p.write_text(" " * (pf.MAX_CACHE_FILE + 1))
    assert pf.read_cached(tmp_path, h, 300, now=lambda: 1000.0) is None


def test_given_and_cached_facts_are_used_without_probing(tmp_path):
    a, b = host("a"), host("b")
    pf.write_cached(tmp_path, b, {"kernel": "cached"})
    hf = pf.host_facts([a, b], data_dir=tmp_path, dry_run=True, given={"a": {"kernel": "file"}},
                       transport_for=lambda h: pytest.fail("probed " + h.name))
    assert hf.facts == {"a": {"kernel": "file"}, "b": {"kernel": "cached"}}
    assert hf.sources == {"a": "file", "b": "cached"}
    assert pf.facts_note(hf).startswith("host facts: a file; b cached")


def test_the_unreachable_error_names_every_host_once():
    exc = pf.HostsUnreachable({"a": {"message": "a: no route"}, "b": {"message": "refused"}},
                              dry_run=False)
    assert exc.message == "cannot probe 2 host(s), no campaign created: a: no route; b: refused"
    assert exc.exit_code == 1 and "leave them out of --hosts" in exc.hint


# the end of a campaign -------------------------------------------------------------------

def test_which_failures_are_final():
    assert deterministic(InputError("cell needs a memory cgroup"))
    assert deterministic(SafetyError("capacity above the host's memory"))
    assert deterministic(SpecRefused("h", "the runner refused the spec: bad spec: ..."))
    assert not deterministic(FormatError("bundle manifest is not JSON"))  # may come back whole
    assert not deterministic(HostError("h", "connection reset"))
    assert not deterministic(CommandFailed("h", ["make"], 2, "no space left"))
    assert not deterministic(RuntimeError("bug"))


def test_the_final_line_counts_validated_rejected_failed_and_skipped_runs():
    c = outcome(["validated"] * 4 + ["rejected", "failed", "failed"], refused=1,
                skipped_runs=12)
    assert c == {"validated": 4, "rejected": 1, "failed": 2, "refused": 1, "skipped": 12,
                 "left": 0}
    assert outcome_line(c) == ("4 validated, 1 rejected, 2 failed (1 not retried: input "
                               "refused), 12 skipped at planning")
    assert outcome_line(outcome(["validated"], left=3)) == (
        "1 validated, 0 rejected, 0 failed, 0 skipped at planning, 3 left")


# bench run's protocol options ------------------------------------------------------------

def test_bench_run_takes_the_protocol_of_a_matrix_and_records_it_in_the_spec():
    from bench.execute.campaign.onerun import with_protocol
    from bench.matrix.cells import parse_cell
    from bench.matrix.runspec import RunOptions, build_spec
    from bench.plan.planinfo import PlanInfo
    plan = PlanInfo("a" * 64, 4, 32, 65536, 10, "t")
    h = SimpleNamespace(name="h", pool_dir="/p", work_dir="/w", mem_total=None, mem_floor=None,
                        source="")
    cg = parse_cell("64M-cgroup-classic")
    o = with_protocol(RunOptions(), cg, cgroup_headroom="16mi")
    assert build_spec(cg, h, plan, run_id="r", options=o)["cgroup_headroom_bytes"] == 16 << 20
    bl = parse_cell("64M-balloon-classic")
    spec = build_spec(bl, h, plan, run_id="r", options=with_protocol(RunOptions(), bl,
                                                                    balloon_max="2G"))
    assert spec["balloon_max_bytes"] == 2 * 10 ** 9
    assert "balloon_max_bytes" not in build_spec(bl, h, plan, run_id="r")
    with pytest.raises(InputError, match="--balloon-max applies to balloon cells"):
        with_protocol(RunOptions(), cg, balloon_max="2G")
    with pytest.raises(InputError, match="--cgroup-headroom applies to cgroup cells"):
        with_protocol(RunOptions(), bl, cgroup_headroom="6Gi")
    with pytest.raises(InputError, match="--cgroup-headroom 'lots' is not a size"):
        with_protocol(RunOptions(), cg, cgroup_headroom="lots")


# bench schedule with facts handed in -----------------------------------------------------

def _inventory(tmp_path, **hosts: str):
    d = tmp_path / "hosts"
    d.mkdir(exist_ok=True)
    for name, extra in hosts.items():
        (d / f"{name}.toml").write_text(f'name = "{name}"\naddress = "{name}.example"\n'
                                        f'transport = "ssh"\n{extra}')
    return d


def test_smoke_plans_runs_on_a_host_whose_inventory_has_no_memory_total(tmp_path, capsys):
    from bench.cli import main
    inv = _inventory(tmp_path, box="")
    facts = write_facts(tmp_path / "f.json", {"box": fixture_facts(DEBIAN)})
    args = ["schedule", "--matrix", "smoke", "--hosts", "box", "--hosts-dir", str(inv),
            "--seed", "3", "--dry-run", "--facts", str(facts), "--data-dir", str(tmp_path)]
    assert main(args + ["--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    total = meminfo_kb(DEBIAN, "MemTotal")
    assert sorted({r["cell"] for r in d["hosts"][0]["runs"]}) == sorted(
        f"{int(total * x) // MB}M-{mech}-classic" for x, mech in (
            (0.125, "cgroup"), (0.25, "cgroup"), (0.125, "balloon"), (0.25, "balloon"),
            (0.5, "none")))
    assert d["skipped"] == [] and d["facts"]["sources"] == {"box": "file"}
    assert main(args) == 0
    out = capsys.readouterr()
    assert "host facts: box file" in out.err and "5 runs" in out.out


def test_a_plan_with_no_run_is_an_error_saying_why_each_cell_was_skipped(tmp_path, capsys):
    from bench.cli import main
    inv = _inventory(tmp_path, a="", b="")
    nocg = fixture_facts(DEBIAN, cgroup=NO_MEMORY_CGROUP)
    (tmp_path / "m.toml").write_text('name = "cg"\ndescription = "cgroup cells"\n'
                                     'repetitions = 3\n[workload]\ntrace = "tiny"\n[cells]\n'
                                     'capacities = ["0.25mem"]\nmechanisms = ["cgroup"]\n'
                                     'reclaims = ["classic", "mglru"]\n')
    facts = write_facts(tmp_path / "f.json", {"a": nocg, "b": nocg})
    rc = main(["schedule", "--matrix", str(tmp_path / "m.toml"), "--hosts-dir", str(inv),
               "--seed", "1", "--dry-run", "--facts", str(facts), "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "matrix cg plans no run on a, b" in err
    assert err.count("needs a memory cgroup") == 2
    assert err.count("has no /sys/kernel/mm/lru_gen") == 2
    # facts are for dry runs only: a campaign probes its hosts itself
    rc = main(["schedule", "--matrix", "smoke", "--hosts-dir", str(inv), "--facts", str(facts),
               "--db", f"sqlite:///{tmp_path / 'x.db'}"])
    assert rc == 2 and "--facts is for --dry-run only" in capsys.readouterr().err
    assert not (tmp_path / "x.db").exists()


def test_the_facts_age_is_a_finite_number_of_seconds(tmp_path, capsys):
    from bench.cli import main
    inv = _inventory(tmp_path, box="")
    for bad in ("-1", "nan", "inf"):
        rc = main(["schedule", "--matrix", "smoke", "--hosts-dir", str(inv), "--dry-run",
                   "--facts-max-age", bad, "--data-dir", str(tmp_path)])
        assert rc == 2 and "--facts-max-age must be a finite number" in capsys.readouterr().err
