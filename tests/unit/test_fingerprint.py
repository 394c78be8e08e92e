"""The fingerprint on data: the settings record from captured files (the runner's and the
probe's paths give the same record), its flattening, the fingerprint of host.json as the runner
writes it (old bundles without settings included), the differences the campaign rule names, and
the controller version."""

import json
from pathlib import Path

import pytest

from bench.agents.hostrunner import settings as hs
from bench.hosts import facts
from bench.judge.measured import (FINGERPRINT_DEFINITION, fingerprint_diff, fingerprint_of,
                                  settings_fingerprint)
from tests.support import paths

FIX = paths.FIXTURES
CAP = FIX / "facts" / "debian12-x86_64-cgv1"
GH = FIX / "facts" / "gh200-aarch64-cgv2-handwritten"
CAPTURED_SETTINGS = json.loads((FIX / "bundles" / "captured" / "settings.json").read_text())


def probed(dirname: Path, pool_device_file: str) -> dict:
    """The probe's path: the settings script's output narrowed to the captured pool device."""
    dev = facts.resolve_block_device((dirname / pool_device_file).read_text())
    return facts.settings_for(facts.parse_settings_files((dirname / "settings.txt").read_text()),
                              dev)


# the settings record -----------------------------------------------------------------------

def test_captured_host_probe_and_runner_records_agree():
    """The script output and the runner's own read were captured on one machine (pool on
    vda): the probe's parse of the one is the other."""
    got = probed(CAP, "pool_device.txt")
    assert got == CAPTURED_SETTINGS
    assert got["block"] == {"vda": {"read_ahead_kb": 8192, "max_sectors_kb": 4096,
                                    "scheduler": "mq-deadline"}}
    assert got["thp"] == {"enabled": "madvise", "defrag": "madvise"}
    assert got["vm"]["swappiness"] == 60 and got["vm"]["dirty_bytes"] == 0
    assert got["numa"]["online"] == "0" and list(got["numa"]["nodes"]) == ["0"]
    assert got["cpufreq"] == {"policies": 0, "governors": {}}      # a VM without cpufreq


def test_gh200_lvm_on_md_nvme_numa_gpu_node_and_governors():
    got = probed(GH, "pool_device_dm_md.txt")
    # the LVM volume and the NVMe disks under the md array; md0 in between does not count
    assert got["block"] == {
        "dm-2": {"read_ahead_kb": 4096, "max_sectors_kb": 128, "scheduler": "none"},
        "nvme1n1": {"read_ahead_kb": 128, "max_sectors_kb": 256, "scheduler": "none"},
        "nvme2n1": {"read_ahead_kb": 128, "max_sectors_kb": 256, "scheduler": "none"}}
    assert got["vm"]["min_free_kbytes"] == 2949120
    assert got["numa"]["online"] == "0-9"
    assert list(got["numa"]["nodes"]) == [str(n) for n in range(10)]   # numeric order
    assert got["numa"]["nodes"]["0"] == 480 << 30 and got["numa"]["nodes"]["1"] == 96 << 30
    assert got["numa"]["nodes"]["9"] == 0
    assert got["cpufreq"] == {"policies": 72, "governors": {"performance": 72}}


def test_a_partition_counts_as_its_disk():
    got = probed(GH, "pool_device_partition.txt")
    assert list(got["block"]) == ["nvme0n1"]


def test_missing_files_are_null_never_a_failure():
    got = hs.settings_from_files({}, ["sda"])
    assert got["block"] == {"sda": {"read_ahead_kb": None, "max_sectors_kb": None,
                                    "scheduler": None}}
    assert set(got["vm"].values()) == {None} and got["thp"] == {"enabled": None, "defrag": None}
    assert got["numa"] == {"online": None, "nodes": {}}
    assert hs.settings_from_files({}, [])["block"] == {}
    # a node or policy whose file the runner found but could not read is left out, as the
    # probe's grep (which prints nothing for it) leaves it out
    node = "/sys/devices/system/node/node3/meminfo"
    gov = "/sys/devices/system/cpu/cpufreq/policy0/scaling_governor"
    got = hs.settings_from_files({node: None, gov: None}, [])
    assert got["numa"]["nodes"] == {} and got["cpufreq"]["policies"] == 0


@pytest.mark.parametrize("text, want", [
    ("always [madvise] never\n", "madvise"), ("[none] mq-deadline kyber bfq \n", "none"),
    ("none\n", "none"), ("", None), (None, None), ("mq-deadline\n", "mq-deadline")])
def test_choice_files(text, want):
    assert hs.parse_choice(text) == want


def test_mixed_governors_are_counted():
    g = "/sys/devices/system/cpu/cpufreq/policy{}/scaling_governor"
    files = {g.format(i): ("performance\n" if i < 3 else "schedutil\n") for i in range(5)}
    got = hs.settings_from_files(files, [])["cpufreq"]
    assert got == {"policies": 5, "governors": {"performance": 3, "schedutil": 2}}
    flat = settings_fingerprint({"cpufreq": got})
    assert flat["cpufreq.governors"] == "performance,schedutil"


def test_runner_queue_devices_resolve_partitions_and_dedupe():
    disk = {"nvme1n1p1": "nvme1n1", "nvme2n1p1": "nvme2n1", "nvme1n1p2": "nvme1n1"}.get
    dev = {"name": "dm-2", "leaves": ["nvme1n1p1", "nvme2n1p1", "nvme1n1p2"]}
    assert hs.queue_devices(dev, lambda n: disk(n) or n) == ["dm-2", "nvme1n1", "nvme2n1"]
    assert hs.queue_devices({"name": None, "leaves": []}) == []


def test_grep_output_reassembles_multi_line_files():
    text = "/a/b:one\n/a/b:two\n/c:x:y\nnot a path line\n"
    assert hs.parse_grep(text) == {"/a/b": "one\ntwo\n", "/c": "x:y\n"}


# the fingerprint ------------------------------------------------------------------------------

def host(**over) -> dict:
    h = {"kernel_release": "6.8.0-49-generic-64k", "arch": "aarch64",
         "cmdline": "BOOT_IMAGE=/vmlinuz root=/dev/nvme0n1p2 ro quiet",
         "agent_source_sha256": "a" * 64, "settings": probed(GH, "pool_device_dm_md.txt")}
    h.update(over)
    return h


SPEC = {"controller_version": "0.1.0+src.0123456789ab"}


def test_fingerprint_reads_what_the_runner_writes():
    fp = fingerprint_of(host(), SPEC)
    assert fp["definition"] == FINGERPRINT_DEFINITION
    assert fp["kernel"] == "6.8.0-49-generic-64k" and fp["agent_sha256"] == "a" * 64
    assert fp["cmdline"] == "quiet ro root=/dev/nvme0n1p2"        # sorted, BOOT_IMAGE gone
    assert fp["controller_version"] == SPEC["controller_version"]
    s = fp["settings"]
    assert s["read_ahead_kb[dm-2]"] == 4096 and s["scheduler[nvme1n1]"] == "none"
    assert s["numa.node0_gib"] == 480 and s["numa.node1_gib"] == 96
    assert s["cpufreq.governors"] == "performance" and s["thp.enabled"] == "madvise"
    # the controller's `kernel` fact name is not host.json's: the runner never wrote it
    assert fingerprint_of({"kernel": "6.8.0"}, SPEC)["kernel"] is None


def test_old_bundles_without_settings_get_a_fingerprint_that_differs():
    old = host()
    del old["settings"]
    a, b = fingerprint_of(old, SPEC), fingerprint_of(host(), SPEC)
    assert a["settings"] is None and a["digest"] != b["digest"]
    assert fingerprint_diff(a, b) == ["settings absent vs recorded"]
    # a host.json without agent_source_sha256 falls back to the spec's agent hash
    del old["agent_source_sha256"]
    assert fingerprint_of(old, {"agent": {"source_sha256": "f" * 64}})["agent_sha256"] == "f" * 64


def test_the_diff_names_each_field_with_both_values():
    s = host()["settings"]
    s2 = json.loads(json.dumps(s))
    s2["block"]["dm-2"]["read_ahead_kb"] = 128
    s2["numa"]["nodes"].pop("1")                     # the GPU memory node went away
    got = fingerprint_of(host(kernel_release="6.1.0", cmdline="root=/dev/nvme0n1p2 ro loud",
                              settings=s2), SPEC)
    want = fingerprint_of(host(), SPEC)
    assert fingerprint_diff(got, want) == [
        "kernel 6.1.0 vs 6.8.0-49-generic-64k", "cmdline +loud -quiet",
        "read_ahead_kb[dm-2] 128 vs 4096", "numa.node1_gib absent vs 96"]
    assert fingerprint_diff(want, want) == []


def test_block_devices_in_any_order_are_one_fingerprint():
    s = host()["settings"]
    flipped = dict(s, block=dict(reversed(list(s["block"].items()))))
    assert fingerprint_of(host(settings=flipped), SPEC)["digest"] == \
        fingerprint_of(host(), SPEC)["digest"]


def test_settings_a_mem_boot_moves_are_compared_only_at_the_same_mem():
    """min_free_kbytes and node memory follow the memory a kernel booted with: across the
    campaign's own mem= boots they are not compared (and mem= itself is never part of the
    digest), at the same mem= they are."""
    s = host()["settings"]
    small = json.loads(json.dumps(s))
    small["vm"]["min_free_kbytes"] = 1048576
    small["numa"]["nodes"]["0"] = 93 << 30
    full = fingerprint_of(host(), SPEC)
    booted = fingerprint_of(host(cmdline=host()["cmdline"] + " mem=102G", settings=small), SPEC)
    assert booted["boot_mem"] == "102G" and fingerprint_diff(booted, full) == []
    same_boot = fingerprint_of(host(settings=small), SPEC)
    assert fingerprint_diff(same_boot, full) == ["vm.min_free_kbytes 1048576 vs 2949120",
                                                 "numa.node0_gib 93 vs 480"]
    without = {k: v for k, v in host().items() if k != "settings"}
    assert fingerprint_of(dict(without, cmdline=without["cmdline"] + " mem=102G"), SPEC)[
        "digest"] == fingerprint_of(without, SPEC)["digest"]


def test_node_memory_is_compared_in_whole_gib():
    s = host()["settings"]
    wobble = json.loads(json.dumps(s))
    wobble["numa"]["nodes"]["0"] -= 40 << 20      # a boot's reservations moved by 40 MiB
    assert fingerprint_of(host(settings=wobble), SPEC)["digest"] == \
        fingerprint_of(host(), SPEC)["digest"]


def test_an_older_reference_definition_is_named():
    old_ref = {"kernel": None, "arch": "aarch64", "cmdline": "quiet ro root=/dev/nvme0n1p2",
               "agent_sha256": "a" * 64, "controller_version": SPEC["controller_version"]}
    diff = fingerprint_diff(fingerprint_of(host(), SPEC), old_ref)
    assert diff[0] == f"definition {FINGERPRINT_DEFINITION} vs 1"


# the controller version -------------------------------------------------------------------------

def test_controller_version_is_the_package_version_and_a_source_digest():
    import bench
    from bench.version import controller_version
    v = controller_version()
    assert v.startswith(bench.__version__ + "+src.") and len(v.split("+src.")[1]) == 12
    assert controller_version() is v                         # computed once


def test_controller_version_changes_with_any_source_file(tmp_path):
    """A wheel lays agents/ out inside bench/, an editable checkout beside it: both name the
    files alike, so both give one digest; changing any file changes it."""
    from bench.version import source_files, source_sha256
    wheel = tmp_path / "wheel" / "bench"
    (wheel / "agents" / "hostrunner").mkdir(parents=True)
    (wheel / "judge").mkdir()
    for rel, text in (("__init__.py", "v"), ("judge/measured.py", "m"),
                      ("agents/hostrunner/run.py", "r")):
        (wheel / rel).write_text(text)
    checkout = tmp_path / "checkout"
    (checkout / "bench" / "judge").mkdir(parents=True)
    (checkout / "agents" / "hostrunner").mkdir(parents=True)
    (checkout / "bench" / "__init__.py").write_text("v")
    (checkout / "bench" / "judge" / "measured.py").write_text("m")
    (checkout / "agents" / "hostrunner" / "run.py").write_text("r")
    (checkout / "agents" / "hostrunner" / "__pycache__").mkdir()
    (checkout / "agents" / "hostrunner" / "__pycache__" / "x.py").write_text("cache")
    a = source_files(wheel, {"agents": wheel / "agents"})
    b = source_files(checkout / "bench", {"agents": checkout / "agents"})
    assert [n for n, _ in a] == [n for n, _ in b] == [
        "__init__.py", "agents/hostrunner/run.py", "judge/measured.py"]
    assert source_sha256(a) == source_sha256(b)
    (checkout / "agents" / "hostrunner" / "run.py").write_text("r2")
    assert source_sha256(source_files(checkout / "bench", {"agents": checkout / "agents"})) \
        != source_sha256(a)


def test_the_installed_controller_hashes_its_agents_and_migrations():
    from bench.version import source_files
    names = [n for n, _ in source_files()]
    assert "judge/measured.py" in names and "agents/hostrunner/settings.py" in names
    assert "agents/runner.py" in names and "migrations/env.py" in names
    assert not any("__pycache__" in n for n in names)
