"""Inventory files as a new user gets them wrong, through the real CLI (a child `bench`): a
misspelt key is named with its file, line and "did you mean"; an identity file that is not
there is reported by `bench hosts check`; one broken host file does not stop `bench hosts
probe` of the other hosts (it is a failed row naming the file), and a command over every host
names the broken file and how to go on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.hosts.inventory import Host, SSHOptions, render_host_toml
from tests.support.paths import REPO


def bench(cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="400", PYTHONPATH=str(REPO), BENCH_DATA_DIR=str(cwd / "data"))
    env.pop("BENCH_HOSTS", None)
    return subprocess.run([sys.executable, "-m", "bench", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def inventory(tmp_path: Path) -> Path:
    """local (this machine) and gh200-b, an SSH host whose `transport` key is misspelt."""
    d = tmp_path / "hosts"
    d.mkdir()
    (d / "local.toml").write_text(render_host_toml(Host(
        name="local", address="localhost", transport="local", pool_dir=str(tmp_path / "pool"),
        work_dir=str(tmp_path / "work"))))
    ssh = render_host_toml(Host(name="gh200-b", address="10.0.0.22", transport="ssh"))
    assert ssh.count('transport = "ssh"') == 1
    (d / "gh200-b.toml").write_text(ssh.replace('transport = "ssh"', 'transprot = "ssh"'))
    return d


def _line(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().split("\n"), 1) if text in line)


def test_a_misspelt_key_gets_its_line_and_did_you_mean(tmp_path):
    d = inventory(tmp_path)
    bad = d / "gh200-b.toml"
    r = bench(tmp_path, "hosts", "check", "--hosts-dir", str(d), "--json")
    assert r.returncode == 2, r.stderr
    rows = {row["host"]: row for row in json.loads(r.stdout)}
    assert rows["local"]["ok"] and not rows["gh200-b"]["ok"]
    n = _line(bad, "transprot")
    assert f"{bad}:{n}: key 'transprot': unknown key, did you mean 'transport'?" in \
        rows["gh200-b"]["error"]
    assert {p["key"]: p["where"] for p in rows["gh200-b"]["problems"]}["transprot"] == \
        f"{bad}:{n}"
    assert "Traceback" not in r.stderr


def test_hosts_check_reports_a_missing_identity_file(tmp_path):
    d = tmp_path / "hosts"
    d.mkdir()
    key = tmp_path / "no-such-key"
    p = d / "gh200-a.toml"
    p.write_text(render_host_toml(Host(name="gh200-a", address="10.0.0.21", transport="ssh",
                                       ssh=SSHOptions(identity_file=str(key)))))
    r = bench(tmp_path, "hosts", "check", "--hosts-dir", str(d))
    assert r.returncode == 2
    flat = " ".join(r.stdout.split())
    assert f"{p}:{_line(p, 'identity_file')}: key 'ssh.identity_file': {key} does not exist" \
        in flat
    assert "ssh-keygen" in flat
    key.write_text("a private key")     # once it is there, the host checks ok
    r = bench(tmp_path, "hosts", "check", "--hosts-dir", str(d), "--json")
    assert r.returncode == 0 and json.loads(r.stdout)[0]["ok"]


def test_one_broken_file_does_not_block_probing_the_others(tmp_path):
    d = inventory(tmp_path)
    bad = d / "gh200-b.toml"
    # the host named is probed
    r = bench(tmp_path, "hosts", "probe", "local", "--hosts-dir", str(d), "--json")
    assert r.returncode == 0, r.stderr
    assert [(x["host"], x["ok"]) for x in json.loads(r.stdout)] == [("local", True)]
    # every host: local probed, gh200-b a failed row naming its file and line
    r = bench(tmp_path, "hosts", "probe", "--hosts-dir", str(d), "--json")
    assert r.returncode == 1
    rows = {x["host"]: x for x in json.loads(r.stdout)}
    assert rows["local"]["ok"] and rows["local"]["facts"]["kernel"]
    assert not rows["gh200-b"]["ok"]
    assert f"{bad}:{_line(bad, 'transprot')}: key 'transprot'" in \
        rows["gh200-b"]["error"]["message"]
    # the broken host named: its file's problems, one line each, no traceback
    r = bench(tmp_path, "hosts", "probe", "gh200-b", "--hosts-dir", str(d))
    assert r.returncode == 1 and "did you mean 'transport'" in r.stdout
    assert "Traceback" not in r.stderr


def test_a_command_over_every_host_names_the_broken_file_and_how_to_go_on(tmp_path):
    d = inventory(tmp_path)
    r = bench(tmp_path, "hosts", "deploy", "--hosts-dir", str(d))
    assert r.returncode == 2
    err = " ".join(r.stderr.split())
    assert "1 host file(s)" in err and "gh200-b" in err and "did you mean 'transport'" in err
    assert "name the hosts to use: local" in err and "bench hosts check" in err
    assert "Traceback" not in r.stderr
    r = bench(tmp_path, "hosts", "list", "--hosts-dir", str(d), "--json")
    assert r.returncode == 2 and [h["name"] for h in json.loads(r.stdout)] == ["local"]
    assert "gh200-b" in r.stderr


def test_resuming_a_campaign_on_a_broken_host_names_that_files_error(tmp_path):
    """The campaign executor (what `bench resume` builds) raises the broken host file's own
    error, with its line, rather than 'host not in the inventory'."""
    from bench.execute.campaign.executor import Executor
    from bench.hosts.inventory import InventoryError, load_inventory
    inv = load_inventory(inventory(tmp_path))
    assert "local" in inv and "gh200-b" in inv.broken
    with pytest.raises(InventoryError, match=r"gh200-b\.toml:\d+: key 'transprot'"):
        Executor(None, "c1", inventory=inv,  # type: ignore[arg-type]
                 record={"hosts": ["local", "gh200-b"]})
