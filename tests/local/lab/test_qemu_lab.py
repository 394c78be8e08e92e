"""What the vm and twin labs share (bench.lab.qemu_lab), without booting a guest: the state
file (the twin's private from its creation), the runtime files lab_down removes, and both labs'
command lines run as `python3 -m bench.lab.vm|twin` on an empty state directory."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest

from bench.lab.qemu_lab import (keep_consoles, load_state, remove_runtime_files, save_state,
                                write_known_hosts)


def test_state_round_trips_and_the_twins_is_private(tmp_path):
    sd = tmp_path / "lab"
    assert load_state(sd) == {"guests": {}}
    save_state(sd, {"guests": {"lab-a": {"port": 1}}})
    assert load_state(sd) == {"guests": {"lab-a": {"port": 1}}}
    save_state(tmp_path / "twin", {"guests": {"twin-a": {"bmc_password": "p"}}}, private=True)
    mode = stat.S_IMODE(os.stat(tmp_path / "twin" / "state.json").st_mode)
    assert mode & 0o077 == 0, oct(mode)
    assert sorted(os.listdir(sd)) == ["state.json"]         # the temp file was renamed over it


def test_runtime_files_go_and_consoles_stay(tmp_path):
    guests = [{"name": n, "port": p, "console": str(tmp_path / f"{n}.log")}
              for n, p in (("lab-a", 40022), ("lab-b", 40023))]
    for g in guests:
        (tmp_path / f"{g['name']}.log").write_text(f"console of {g['name']}\n")
    write_known_hosts(tmp_path / "known_hosts", guests, "ssh-ed25519 AAAAkey comment\n")
    assert (tmp_path / "known_hosts").read_text().splitlines() == [
        "[127.0.0.1]:40022 ssh-ed25519 AAAAkey", "[127.0.0.1]:40023 ssh-ed25519 AAAAkey"]
    save_state(tmp_path, {"guests": {}})
    (tmp_path / "hosts").mkdir()
    (tmp_path / "hosts" / "lab-a.toml").write_text("")
    keep_consoles(tmp_path, guests)
    remove_runtime_files(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["failed-lab-a-console.log", "failed-lab-b-console.log",
                                            "lab-a.log", "lab-b.log"]
    assert (tmp_path / "failed-lab-b-console.log").read_text() == "console of lab-b\n"


@pytest.mark.parametrize("lab, env", [("vm", "BENCH_LAB_DIR"), ("twin", "BENCH_TWIN_DIR")])
def test_the_command_line_on_an_empty_lab(tmp_path, lab, env):
    def run(*argv):
        return subprocess.run([sys.executable, "-m", f"bench.lab.{lab}", *argv],
                              capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, **{env: str(tmp_path / "state")}))
    for cmd in ("status", "down"):
        p = run(cmd)
        assert (p.returncode, json.loads(p.stdout)) == (0, []), p.stderr
    p = run("power-cycle", "nosuch")
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.startswith("error: no ") and "'nosuch'" in p.stderr
    # the vm lab's own option (a kernel command line for the restarted guest); the twin has none
    p = run("power-cycle", "nosuch", "--append", "quiet")
    assert p.returncode == 2
    assert ("error: no lab guest" in p.stderr) if lab == "vm" else (
        "unrecognized arguments: --append" in p.stderr), p.stderr
