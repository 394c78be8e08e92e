"""Matrices: the shipped files validate and carry the paper's values; bad files name file, key
and allowed values; expansion resolves capacities per host and lists skipped cells with reasons."""

import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import InputError
from bench.hosts.inventory import Host, RebootSpec
from bench.matrix.expand import BootConfig, expand
from bench.matrix.load import MatrixError, list_matrices, load_matrix, parse_matrix, shipped_names
from bench.units import MB, GiB, MiB

ROOT = Path(__file__).resolve().parents[2]
G = 10 ** 9             # capacities are in the paper's decimal units (bench.units)


def host(name, mem="480G", floor="96G", reboot=True, **tags):
    from bench.units import parse_size
    return Host(name=name, address=name, transport="ssh", tags=tags,
                mem_total=parse_size(mem) if mem else None,
                mem_floor=parse_size(floor) if floor else None,
                reboot=RebootSpec(allowed=reboot, method="kexec" if reboot else "none"))


GH = [host("gh200-a", machine="A"), host("gh200-b", machine="B")]


def doc(**over):
    d = {"name": "t", "description": "test", "repetitions": 2,
         "workload": {"trace": "k3", "domain": "prose"},
         "cells": {"capacities": ["64G"], "mechanisms": ["cgroup"], "reclaims": ["mglru"]}}
    d.update(over)
    return d


def cells_of(exp, host=None):
    return sorted({c.cell for r in exp.requests for c in r.candidates
                   if host is None or c.host == host})


def test_seven_matrices_are_shipped_and_valid():
    assert shipped_names() == ["admission", "capacity", "end-to-end", "equal-memory",
                               "prefetch", "reclaim", "smoke"]
    assert {r["name"] for r in list_matrices()} == set(shipped_names())


def test_capacity_matrix_is_the_papers_sweep():
    m = load_matrix("capacity")
    exp = expand(m, GH)
    assert cells_of(exp) == ["128G-balloon-mglru", "256G-balloon-mglru", "448G-balloon-mglru",
                             "64G-balloon-mglru"]
    # the paper's GB: 448G is 448 x 10^9 bytes and fits the 480 GB machine (448 GiB would not)
    assert max(c.capacity.value for c in m.points) == 448 * G < GH[0].mem_total
    assert m.repetitions == 3 and m.randomize and m.interleave
    assert {c.host for r in exp.requests for c in r.candidates} == {"gh200-a"}


def test_reclaim_matrix_runs_every_cell_on_a_and_b_with_the_93g_memboot():
    m = load_matrix("reclaim")
    exp = expand(m, GH)
    want = ["339G-memboot-mglru", "448G-balloon-mglru", "448G-cgroup-mglru",
            "64G-balloon-classic", "64G-balloon-mglru", "64G-cgroup-classic", "64G-cgroup-mglru",
            "93G-balloon-classic", "93G-balloon-mglru", "93G-memboot-classic",
            "93G-memboot-mglru"]
    assert cells_of(exp, "gh200-a") == want and cells_of(exp, "gh200-b") == want
    boots = {c.cell: c.boot for r in exp.requests for c in r.candidates}
    assert boots["93G-memboot-mglru"] == BootConfig(102 * G)        # 102G visible, ~93G effective
    assert boots["93G-memboot-mglru"].label == "mem=102G"
    assert boots["339G-memboot-mglru"] == BootConfig(348 * G)
    assert boots["64G-balloon-mglru"] == BootConfig()
    assert m.protocol["cgroup_headroom"] == 6 * GiB                # Algorithm 1: C + 6 GiB
    assert len(exp.requests) == 2 * 11 * 3 and not exp.skipped


def test_equal_memory_prefetch_admission_smoke_values():
    assert cells_of(expand(load_matrix("equal-memory"), GH)) == [
        "128G-cgroup-mglru", "128G-cgroup-mglru-hybrid", "128G-cgroup-mglru-pinned",
        "256G-cgroup-mglru", "256G-cgroup-mglru-hybrid", "256G-cgroup-mglru-pinned",
        "256G-cgroup-mglru-random"]
    assert load_matrix("equal-memory").repetitions == 2
    assert cells_of(expand(load_matrix("prefetch"), GH)) == [
        "256G-cgroup-mglru", "256G-cgroup-mglru-oracle-advice", "256G-cgroup-mglru-oracle-block",
        "256G-cgroup-mglru-pilot-advice", "256G-cgroup-mglru-pilot-block"]
    adm = load_matrix("admission")
    assert cells_of(expand(adm, GH)) == ["448G-none-mglru", "448G-none-mglru-nocache"]
    assert adm.workload["fixed_set_bytes"] == 11_200_000_000
    smoke = load_matrix("smoke")
    exp = expand(smoke, [host("lab-a", mem="3G", floor=None, reboot=False)])
    assert cells_of(exp) == ["1500M-none-classic", "375M-balloon-classic",
                             "375M-cgroup-classic", "750M-balloon-classic",
                             "750M-cgroup-classic"]
    # a binary host memory resolves to whole decimal MB: 1/8 of 1536Mi is 201.3 MB -> 201M
    exp = expand(smoke, [host("lab-a", mem="1536Mi", floor=None, reboot=False)])
    assert cells_of(exp) == ["201M-balloon-classic", "201M-cgroup-classic",
                             "402M-balloon-classic", "402M-cgroup-classic",
                             "805M-none-classic"]
    assert all(c.boot.is_default for r in exp.requests for c in r.candidates)


def test_relative_capacities_resolve_per_host_rounded_down_to_whole_mb():
    m = parse_matrix(doc(cells={"capacities": ["0.044pool", "0.3mem"], "mechanisms": ["cgroup"],
                                "reclaims": ["classic"]}), "t.toml")
    pool = 92 * 896 * 17_550_000
    exp = expand(m, [host("h", mem="1000G")])
    caps = cells_of(exp)
    assert f"{int(0.044 * pool) // MB}M-cgroup-classic" in caps
    assert "300G-cgroup-classic" in caps                     # 0.3 x 1000G


def test_absolute_capacities_keep_their_exact_bytes_and_binary_ones_say_so():
    m = parse_matrix(doc(cells={"capacities": ["64g", "64Gi", "1.5G", "1000001B"],
                                "mechanisms": ["cgroup"], "reclaims": ["classic"]}), "t.toml")
    assert [p.capacity.text for p in m.points] == ["64G", "64Gi", "1500M", "1000001B"]
    assert [p.capacity.value for p in m.points] == [64 * G, 64 * GiB, 1_500_000_000, 1_000_001]
    assert cells_of(expand(m, [host("h")])) == ["1000001B-cgroup-classic", "1500M-cgroup-classic",
                                                "64G-cgroup-classic", "64Gi-cgroup-classic"]
    with pytest.raises(MatrixError, match="below 1M"):
        parse_matrix(doc(cells={"capacities": ["4096B"], "mechanisms": ["cgroup"],
                                "reclaims": ["classic"]}), "t.toml")


def test_skips_are_listed_with_reasons_not_dropped():
    d = doc(cells={"capacities": ["64G", "512G", "0.5mem"], "mechanisms": ["memboot"],
                   "reclaims": ["mglru"]})
    m = parse_matrix(d, "t.toml")
    hosts = [host("big"), host("norb", reboot=False), host("nomem", mem=None, floor=None)]
    exp = expand(m, hosts)
    why = {(s.point, s.host): s.reason for s in exp.skipped}
    assert "below the host's floor 96G" in why[("64G-memboot-mglru", "big")]
    assert "above the host's memory" in why[("512G-memboot-mglru", "big")]
    assert "reboot.allowed is false" in why[("0.5mem-memboot-mglru", "norb")]
    assert "memory.total" in why[("0.5mem-memboot-mglru", "nomem")]
    assert cells_of(exp, "big") == ["240G-memboot-mglru"]
    assert {c.boot for r in exp.requests for c in r.candidates
            if c.host == "big"} == {BootConfig(249 * G)}


def test_same_cell_twice_on_a_host_is_skipped():
    m = parse_matrix(doc(cells={"capacities": ["240G", "0.5mem"], "mechanisms": ["cgroup"],
                                "reclaims": ["mglru"]}), "t.toml")
    exp = expand(m, [host("h")])
    assert [s.reason for s in exp.skipped] == [
        "resolves to 240G-cgroup-mglru, the same cell as 240G-cgroup-mglru on this host"]


def test_mglru_at_boot_and_memboot_overhead_make_boot_configs():
    m = parse_matrix(doc(mglru_at_boot=True, memboot_overhead="10G",
                         cells={"capacities": ["100G"], "mechanisms": ["memboot", "cgroup"],
                                "reclaims": ["mglru", "classic"]}), "t.toml")
    boots = {c.cell: c.boot for r in expand(m, [host("h")]).requests for c in r.candidates}
    assert boots["100G-memboot-classic"] == BootConfig(110 * G, "off")
    assert boots["100G-cgroup-mglru"] == BootConfig(None, "on")


def test_tags_and_missing_machines_are_warned():
    m = load_matrix("reclaim")
    exp = expand(m, [GH[0], host("local", machine="controller")])
    assert any("machine = 'B'" in w for w in exp.warnings)
    assert any("host local matches no cell" in w for w in exp.warnings)


@pytest.mark.parametrize("over, key, needle", [
    ({"repetitions": 0}, "repetitions", "at least 1"),
    ({"colour": 1}, "colour", "allowed keys"),
    ({"cells": {"capacities": ["64G"], "mechanisms": ["baloon"], "reclaims": ["mglru"]}},
     "cells.mechanisms[0]", "cgroup, balloon, memboot, none"),
    ({"cells": {"capacities": ["64Q"], "mechanisms": ["cgroup"], "reclaims": ["mglru"]}},
     "cells.capacities[0]", "0.044pool"),
    ({"cells": {"capacities": ["64"], "mechanisms": ["cgroup"], "reclaims": ["mglru"]}},
     "cells.capacities[0]", "64G = 64 x 10^9"),                # a bare number has no unit
    ({"protocol": {"cgroup_headroom": "16"}}, "protocol.cgroup_headroom", "has no unit"),
    ({"cells": {"capacities": ["1.5mem"], "mechanisms": ["cgroup"], "reclaims": ["mglru"]}},
     "cells.capacities[0]", "fraction <= 1"),
    ({"cells": {"capacities": ["64G"], "mechanisms": ["cgroup"], "reclaims": ["mglru"],
                "prefetch": ["oracle-push"]}}, "cells.prefetch[0]", "advice, block"),
    ({"cells": {"capacities": ["64G"], "mechanisms": ["cgroup"], "reclaims": ["mglru"],
                "exclude": [{"mechanism": "balloon"}]}}, "cells.exclude[0]", "check the spelling"),
    ({"hosts": {"placement": "some"}}, "hosts.placement", "each, one"),
    ({"workload": {"trace": "k4"}}, "workload.trace", "k3, qwen3, dsv3, tiny"),
    ({"cells": {"extra": [{"cell": "64G-cgroup-lru"}]}}, "cells.extra[0].cell", "reclaim"),
    ({"name": "Bad Name"}, "name", "a-z"),
])
def test_bad_matrix_names_file_key_and_allowed_values(over, key, needle):
    with pytest.raises(MatrixError) as e:
        parse_matrix(doc(**over), "my.toml")
    text = e.value.message + " " + (e.value.hint or "")
    assert e.value.message.startswith(f"my.toml: key '{key}'"), e.value.message
    assert needle in text


def test_user_file_and_unknown_name(tmp_path):
    p = tmp_path / "mine.toml"
    p.write_text('name = "mine"\ndescription = "d"\nrepetitions = 1\n[workload]\ntrace = "tiny"\n'
                 '[cells]\ncapacities = ["0.5pool"]\nmechanisms = ["none"]\nreclaims = ["classic"]\n')
    assert load_matrix(str(p)).name == "mine"
    with pytest.raises(InputError, match="neither a shipped name nor a file"):
        load_matrix("nope")
    p.write_text("name = \n")
    with pytest.raises(MatrixError, match="not valid TOML"):
        load_matrix(str(p))


def test_cli_matrix_list_and_show(capsys):
    assert main(["matrix", "list", "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 7
    assert main(["matrix", "show", "reclaim", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["memboot_overhead"] == "9G" and len(d["points"]) == 11
    assert main(["matrix", "show", "reclaim"]) == 0
    assert "93G-memboot-classic" in capsys.readouterr().out
    assert main(["matrix", "show", "nope"]) == 2
    assert "shipped matrices" in capsys.readouterr().err


# scales and protocol -----------------------------------------------------------------------------

LAB = [host("lab-a", mem="1536Mi", floor="240Mi", machine="A", lab="vm"),
       host("lab-b", mem="1536Mi", floor="240Mi", machine="B", lab="vm")]


def test_reclaim_at_lab_scale_keeps_every_cell_and_resizes_it_for_the_guests():
    full, lab = load_matrix("reclaim"), load_matrix("reclaim", "lab")
    assert full.scales == lab.scales == ("lab", "twin") and lab.scale == "lab" and full.scale is None
    # the same cells (mechanism x reclaim), each capacity mapped
    assert [(p.mechanism, p.reclaim) for p in full.points] == \
        [(p.mechanism, p.reclaim) for p in lab.points]
    assert [p.capacity.text for p in lab.points][:2] == ["110M", "110M"]
    assert lab.protocol["cgroup_headroom"] == 16 * MiB
    assert full.protocol["cgroup_headroom"] == 6 * GiB
    assert lab.repetitions == 1 and lab.memboot_overhead == 100 * MB
    # the re-sized preset: 4 x 96 x 1 MiB, 16 tokens (the capacity matrix's lab trace)
    assert lab.pool_bytes == 4 * 96 * MiB and lab.workload["tokens"] == 16
    exp = expand(lab, LAB)
    # 93G's memboot (C = 135M, mem = 235M) is below the guests' floor (one panicked at 191M): skipped
    # with the reason on both guests, not run at an overhead that would leave it out of regime
    assert sorted((s.host, s.cell) for s in exp.skipped) == [
        (h, f"135M-memboot-{r}") for h in ("lab-a", "lab-b") for r in ("classic", "mglru")]
    assert all("below the host's floor" in s.reason for s in exp.skipped)
    a = cells_of(exp, "lab-a")
    assert a == cells_of(exp, "lab-b") and len(a) == 9
    assert a == ["110M-balloon-classic", "110M-balloon-mglru", "110M-cgroup-classic",
                 "110M-cgroup-mglru", "135M-balloon-classic", "135M-balloon-mglru",
                 "235M-memboot-mglru", "265M-balloon-mglru", "265M-cgroup-mglru"]
    caps = sorted({int(c.split("M-")[0]) for c in a})
    assert caps[-1] * MB < lab.pool_bytes                       # every cell below the pool
    assert lab.workload["trace"] == "k3"                        # the same trace family, smaller
    # a memboot's page cache is about C, as the paper's (mem=102G, effective 93G): mem = C plus
    # the guest's own measured use, so the boots are under 512 MiB (where the kernel turns THP
    # off: the reboot writes the host's THP mode back), above the vm lab's floor (240Mi: the
    # guests' initramfs needs it)
    from bench.lab.vm import MEM_FLOOR
    boots = {c.boot.mem for r in exp.requests for c in r.candidates if c.boot.mem
             and "memboot" in c.cell}
    assert boots == {335 * MB}
    assert MEM_FLOOR <= min(boots) and max(boots) < 512 * MiB
    assert all(lab.memboot_overhead < 0.5 * (m - lab.memboot_overhead) for m in boots)
    # the production matrix on lab hosts: every cell skipped with its reason, nothing run
    assert not expand(full, LAB).requests


def test_reclaim_lab_workload_fills_the_deepest_cgroup_wall():
    """A wall the replay never reaches is rejected (timeline_reaches_wall): the lab trace's
    distinct experts per pass must exceed the deepest cgroup cell's C + headroom."""
    from bench.plan.prepared import workload_plan  # noqa: F401 - the executor's own generator
    from bench.trace.parse import accesses, parse_lines
    from bench.trace.synth import generate, preset
    lab = load_matrix("reclaim", "lab")
    w = lab.workload
    tr = parse_lines(generate(preset(w["trace"], layers=w["layers"], experts_per_layer=w["experts"],
                                     expert_bytes=w["expert_bytes"], tokens=w["tokens"])))
    a = accesses(tr)
    distinct = len(set(zip(a.layer.tolist(), a.expert.tolist()))) * w["expert_bytes"]
    # every wall, the ample 448G one (265M + 16Mi) included: 8 tokens (230 MB distinct) would
    # let that wall hold the whole pass
    widest = max(int(p.capacity.value) for p in lab.points if p.mechanism == "cgroup")
    assert distinct > widest + lab.protocol["cgroup_headroom"], (distinct, widest)


def test_scale_without_a_mapping_for_an_absolute_capacity_is_refused():
    d = doc(scale={"small": {"capacities": {"128G": "0.1mem"}}})
    with pytest.raises(MatrixError, match=r"scale\.small\.capacities.*no entry for 64G"):
        from bench.matrix.load import apply_scale
        parse_matrix(apply_scale(d, "small", "m.toml"), "m.toml")


def test_unknown_scale_and_bad_scale_keys(tmp_path):
    import tomllib  # noqa: F401 - the file is TOML
    p = tmp_path / "m.toml"
    p.write_text('name = "m"\ndescription = "d"\nrepetitions = 1\n[workload]\ntrace = "tiny"\n'
                 '[cells]\ncapacities = ["1G"]\nmechanisms = ["cgroup"]\nreclaims = ["classic"]\n'
                 '[scale.small]\ncapacities = { "1G" = "0.1mem" }\ncolour = "red"\n')
    with pytest.raises(MatrixError, match=r"key 'scale\.small\.colour': unknown key"):
        load_matrix(p)      # every scale validates when the matrix loads
    p.write_text(p.read_text().replace('colour = "red"\n', ""))
    assert load_matrix(p, "small").points[0].capacity.text == "0.1mem"
    with pytest.raises(MatrixError, match="has no scale 'big'") as e:
        load_matrix(p, "big")
    assert "small" in e.value.hint


def test_workload_resize_only_for_presets_and_pool_follows_it():
    m = parse_matrix(doc(workload={"trace": "tiny", "layers": 2, "expert_bytes": "1Mi"}), "m")
    assert m.pool_bytes == 2 * 32 * MiB
    m = parse_matrix(doc(workload={"trace": "tiny", "layers": 2, "expert_bytes": "1M"}), "m")
    assert m.pool_bytes == 2 * 32 * MB
    with pytest.raises(MatrixError, match=r"workload\.layers.*only a synth preset"):
        parse_matrix(doc(workload={"trace": "/data/k3.jsonl", "pool": "1T", "layers": 2}), "m")


def test_preset_geometry_matches_the_synth_presets():
    from bench.matrix.load import PRESET_GEOMETRY
    from bench.trace.synth import PRESETS
    assert PRESET_GEOMETRY == {k: (p.layers, p.experts_per_layer, p.expert_bytes)
                               for k, p in PRESETS.items()}


def test_protocol_reaches_the_run_options():
    from bench.matrix.load import DEFAULT_CGROUP_HEADROOM
    m = parse_matrix(doc(protocol={"cgroup_headroom": "32Mi", "balloon_max": "1G"}), "m")
    assert m.protocol == {"cgroup_headroom": 32 * MiB, "balloon_max": G}
    assert DEFAULT_CGROUP_HEADROOM == 6 * GiB             # Algorithm 1's 6 GiB, binary
    assert parse_matrix(doc(), "m").protocol == {"cgroup_headroom": DEFAULT_CGROUP_HEADROOM,
                                                 "balloon_max": None}
    with pytest.raises(MatrixError, match=r"protocol\.headroom.*unknown key"):
        parse_matrix(doc(protocol={"headroom": "1G"}), "m")
