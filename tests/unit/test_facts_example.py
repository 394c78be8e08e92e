"""Planning a GH200 campaign with no host reachable, as a new user would: the dry run's
unreachable-host error names `--facts` and the command printing an example; `bench hosts facts
--example gh200 A B` prints a facts file that `bench schedule --dry-run --facts FILE` takes
and plans with (runs, reboots, estimate), as it plans with the hand-written GH200 fixture it
was made from; an edited file with a value of the wrong type is refused with its key."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.hosts.facts_example import example_facts
from bench.hosts.inventory import load_host_file, render_host_toml
from tests.support.facts import GH200, default_boot, write_facts

ROOT = Path(__file__).resolve().parents[2]


def _inventory(tmp_path: Path) -> Path:
    """Hosts A and B: the reference fleet's GH200 files under those names, their SSH key a
    file that is not there (nothing is reached)."""
    d = tmp_path / "hosts"
    d.mkdir()
    for name, src in (("A", "gh200-a"), ("B", "gh200-b")):
        h = load_host_file(ROOT / "hosts" / f"{src}.toml")
        h = dataclasses.replace(h, name=name, ssh=dataclasses.replace(
            h.ssh, identity_file=str(tmp_path / "no-key"), connect_timeout=1.0))
        (d / f"{name}.toml").write_text(render_host_toml(h))
    return d


def _plan(capsys, d: Path, tmp_path: Path, *more: str) -> tuple[int, dict | str, str]:
    """(exit code, the plan: JSON with --json, else its text, stderr on one line)."""
    rc = main(["schedule", "--matrix", "reclaim", "--hosts", "A,B", "--hosts-dir", str(d),
               "--data-dir", str(tmp_path / "data"), "--seed", "7", "--dry-run", *more])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if rc == 0 and "--json" in more else out), " ".join(err.split())


def test_the_shipped_example_is_the_hand_written_gh200_fixture():
    doc = example_facts("gh200", ["x"])
    assert doc["x"] == default_boot(GH200) and "bench schedule" in doc["_about"]


def test_an_offline_dry_run_says_how_and_the_example_plans(tmp_path, capsys):
    d = _inventory(tmp_path)
    rc, _, err = _plan(capsys, d, tmp_path)
    assert rc == 1 and "cannot probe 2 host(s), nothing planned" in err
    assert "--facts facts.json" in err
    assert "`bench hosts facts --example gh200 A B > facts.json`" in err

    # the command the message names, through the CLI
    assert main(["hosts", "facts", "--example", "gh200", "A", "B"]) == 0
    facts = tmp_path / "facts.json"
    facts.write_text(capsys.readouterr().out)
    rc, plan, err = _plan(capsys, d, tmp_path, "--facts", str(facts), "--json")
    assert rc == 0, err
    assert plan["facts"]["sources"] == {"A": "file", "B": "file"}
    assert plan["runs"] > 0 and plan["reboots"] > 0 and plan["estimate_s"] > 0
    # the same plan as with the fixture the example was made from
    fixture = write_facts(tmp_path / "fixture.json", {"A": default_boot(GH200),
                                                      "B": default_boot(GH200)})
    rc, want, _ = _plan(capsys, d, tmp_path, "--facts", str(fixture), "--json")
    assert rc == 0
    assert (plan["runs"], plan["reboots"], plan["estimate_s"]) == \
        (want["runs"], want["reboots"], want["estimate_s"])
    assert plan["hosts"] == want["hosts"]
    # the text plan ends with the totals a user reads
    rc, text, _ = _plan(capsys, d, tmp_path, "--facts", str(facts))
    assert rc == 0 and f"total: {plan['runs']} runs, {plan['reboots']} reboots, estimate " in text


def test_an_edited_value_of_the_wrong_type_is_refused_with_its_key(tmp_path, capsys):
    d = _inventory(tmp_path)
    doc = example_facts("gh200", ["A", "B"])
    doc["B"]["mem_total_bytes"] = "480G"
    facts = tmp_path / "facts.json"
    facts.write_text(json.dumps(doc))
    rc, _, err = _plan(capsys, d, tmp_path, "--facts", str(facts))
    assert rc == 2 and f"{facts}: B: mem_total_bytes must be a whole number of bytes" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv, words", [
    (["hosts", "facts"], "name it with --example"),
    (["hosts", "facts", "--example", "h100"], "no example facts named 'h100'"),
])
def test_hosts_facts_without_a_known_example(argv, words, capsys):
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert words in err and "bench hosts probe --json" in err
