"""The probe's pure parsers on captured real outputs (debian12-x86_64-cgv1) and hand-written
realistic ones (gh200-aarch64-cgv2-handwritten: cgroup v2, lru_gen, LVM on md on NVMe)."""

import hashlib
from pathlib import Path

import pytest

from bench.errors import FormatError
from bench.hosts import facts
from bench.hosts.deploy import source_hash
from tests.support import paths

FIX = paths.FIXTURES
CAP = FIX / "facts" / "debian12-x86_64-cgv1"
GH = FIX / "facts" / "gh200-aarch64-cgv2-handwritten"
PROC = FIX / "procfs" / "debian12-x86_64-cgv1"


def read(p: Path) -> str:
    return p.read_text()


def test_captured_debian_host():
    assert facts.parse_line(read(CAP / "arch.txt")) == "x86_64"
    assert facts.parse_int(read(CAP / "page_size.txt")) == 4096
    assert facts.parse_line(read(CAP / "kernel.txt")) == read(PROC / "uname_r").strip()
    assert facts.parse_systemd_pid1(read(CAP / "systemd_pid1.txt")) is False
    cg = facts.parse_cgroup(read(CAP / "cgroup.txt"))
    assert cg == {"backend": "v1", "path": "/sys/fs/cgroup/memory",
                  "v2_mount": "/sys/fs/cgroup/unified", "v1_memory_mount": "/sys/fs/cgroup/memory"}
    dev = facts.resolve_block_device(read(CAP / "pool_device.txt"))
    assert dev["name"] == "vda" and dev["devno"] == "254:0" and dev["leaves"] == ["vda"]
    assert facts.parse_python(read(CAP / "python3.txt")).startswith("3.")
    agent = facts.parse_agent(read(CAP / "agent.txt"))
    assert len(agent["source_sha256"]) == 64


def test_captured_proc_files():
    mem = facts.parse_memory(read(PROC / "meminfo"))
    assert mem["mem_total_bytes"] > mem["mem_available_bytes"] > 0
    assert mem["swap_total_bytes"] >= 0
    assert facts.parse_boot_id(read(PROC / "boot_id"))
    c = facts.parse_cmdline_fact(read(PROC / "cmdline"))
    assert c["cmdline"] and c["mem"] is None


def test_gh200_cgroup_v2_mglru_and_cmdline():
    cg = facts.parse_cgroup(read(GH / "cgroup.txt"))
    assert cg["backend"] == "v2" and cg["path"] == "/sys/fs/cgroup" and cg["v1_memory_mount"] is None
    assert facts.parse_mglru(read(GH / "mglru.txt")) == "0x0003"
    assert facts.parse_int(read(GH / "page_size.txt")) == 65536
    assert facts.parse_systemd_pid1(read(GH / "systemd_pid1.txt")) is True
    assert facts.parse_cmdline_fact(read(GH / "cmdline.txt"))["mem"] == "96G"


def test_no_memory_controller_anywhere():
    text = "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n@@controllers\n/sys/fs/cgroup cpu io pids\n"
    assert facts.parse_cgroup(text)["backend"] == "none"


def test_pool_on_lvm_over_md_over_nvme_partitions():
    dev = facts.resolve_block_device(read(GH / "pool_device_dm_md.txt"))
    assert dev["name"] == "dm-2" and dev["devno"] == "253:2"
    assert dev["slaves"] == ["md0"] and dev["leaves"] == ["nvme1n1", "nvme2n1"]


def test_pool_on_partition_resolves_to_disk():
    dev = facts.resolve_block_device(read(GH / "pool_device_partition.txt"))
    assert (dev["name"], dev["disk"], dev["leaves"], dev["stack"]) == (
        "nvme0n1p3", "nvme0n1", ["nvme0n1"], ["nvme0n1p3", "nvme0n1"])


def test_pool_on_tmpfs_has_no_device():
    assert facts.resolve_block_device("path /run\ndev 25\nmount tmpfs\nblk vda 254:0 - -\n") is None


@pytest.mark.parametrize("major, minor", [(8, 1), (253, 2), (259, 300), (4095, 1 << 19)])
def test_decode_dev_inverts_the_kernel_encoding(major, minor):
    st_dev = (minor & 0xFF) | (major << 8) | ((minor & ~0xFF) << 12)
    assert facts.decode_dev(st_dev) == (major, minor)


def test_bad_outputs_are_format_errors():
    for fn, text in ((facts.parse_boot_id, "nope"), (facts.parse_int, "4k"),
                     (facts.parse_agent, "bench-agent 1.0"), (facts.parse_mglru, "y")):
        with pytest.raises(FormatError):
            fn(text)


def test_source_hash_recipe(tmp_path):
    for name, data in (("b.c", b"int b;\n"), ("Makefile", b"all:\n"), ("a.h", b"//h\n"),
                       ("README.md", b"not hashed"), ("B.c", b"int B;\n")):
        (tmp_path / name).write_bytes(data)
    # byte order of names: B.c < Makefile < a.h < b.c
    expected = hashlib.sha256(b"int B;\n" + b"all:\n" + b"//h\n" + b"int b;\n").hexdigest()
    assert source_hash(tmp_path) == expected


def test_batched_probe_framing_is_byte_exact():
    import subprocess
    cmds = [("a", ["printf", "%s", "x\n\ny"]), ("b", ["sh", "-c", "echo err >&2; exit 4"]),
            ("c", ["printf", "%s", "@@fake 1\n"])]
    script = facts.batch_script(cmds, "N0")
    p = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    assert facts.split_batch(p.stdout, p.stderr, "N0") == {
        "a": (0, "x\n\ny", ""), "b": (4, "", "err\n"), "c": (0, "@@fake 1\n", "")}
