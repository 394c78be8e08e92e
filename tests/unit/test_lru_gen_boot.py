"""The MGLRU boot hook: bench.lru_gen=on|off on the command line becomes lru_gen/enabled."""

import os
import subprocess
from pathlib import Path

import pytest

from bench.hosts.deploy import boot_hook_unit

SCRIPT = Path(__file__).resolve().parents[2] / "agents" / "lru_gen_boot.sh"


def run(tmp_path, cmdline, knob_exists=True):
    (tmp_path / "cmdline").write_text(cmdline + "\n")
    knob = tmp_path / "enabled"
    if knob_exists:
        knob.write_text("0x0007\n")
    env = dict(os.environ, BENCH_CMDLINE=str(tmp_path / "cmdline"), BENCH_LRU_GEN=str(knob))
    p = subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, text=True)
    return p, (knob.read_text().strip() if knob.exists() else None)


@pytest.mark.parametrize("cmdline, want", [
    ("root=/dev/vda mem=768M bench.lru_gen=off quiet", "n"),
    ("root=/dev/vda bench.lru_gen=on", "y"),
    ("bench.lru_gen=on bench.lru_gen=off", "n"),     # the last token wins
    ("root=/dev/vda quiet", "0x0007"),                # no wish: untouched
    ("bench.lru_gen=maybe", "0x0007"),                # bad value: ignored, said on stderr
])
def test_the_wish_is_applied(tmp_path, cmdline, want):
    p, value = run(tmp_path, cmdline)
    assert p.returncode == 0, p.stderr
    assert value == want


def test_a_kernel_without_mglru_fails_loudly(tmp_path):
    p, _ = run(tmp_path, "bench.lru_gen=off", knob_exists=False)
    assert p.returncode == 1 and "no MGLRU" in p.stderr


def test_unit_runs_the_deployed_script_before_sysinit():
    unit = boot_hook_unit("/var/lib/bench")
    assert "ExecStart=/bin/sh /var/lib/bench/agents/lru_gen_boot.sh" in unit
    assert "DefaultDependencies=no" in unit and "WantedBy=sysinit.target" in unit
    # a work_dir on a file system of its own is mounted before the script runs
    assert "RequiresMountsFor=/var/lib/bench/agents" in unit.splitlines()
