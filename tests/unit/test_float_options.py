"""Every float option of the CLI refuses a value that is not a finite number in its range
(click reads `nan`, `inf`, `-1` and `1e308` as floats): through the real command line, one
line naming the option and its fix, exit 2, nothing written. `bench ingest --nominal-gb` is
driven on a real bundle (bundlegen: real /proc and cgroup captures): a hostile value stores
nothing and leaves the bundle where it was, a good one stores the amplification it implies."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import typer.main

from bench.cli import main
from bench.cli.app import app
from tests.support.bundlegen import make_bundle

HOSTILE = ["nan", "inf", "-inf", "-1", "1e308", "-0"]


# the options whose 0 is refused too (a time, a size, a target): the others document their 0
POSITIVE = {("ingest", "--nominal-gb"), ("sizing", "--target-seconds"), ("run", "--timeout"),
            ("run", "--reconnect-timeout"), ("schedule", "--reconnect-timeout"),
            ("resume", "--reconnect-timeout"), ("watch", "--interval"),
            ("placement", "--target-seconds"), ("rules", "--target-seconds"),
            ("trace synth", "--phase"), ("hosts reboot", "--up-timeout"),
            ("hosts restore", "--up-timeout")}


def float_options() -> set[tuple[str, str]]:
    """(command, option) of every float option in the full command tree."""
    out = set()

    def walk(group, prefix=()):
        for name, cmd in group.commands.items():
            if hasattr(cmd, "commands"):
                walk(cmd, prefix + (name,))
                continue
            for p in cmd.params:
                d = getattr(p, "type_descriptor", None)
                if d is not None and d.annotation is float:
                    out.add((" ".join(prefix + (name,)), p.opts[0]))
    walk(typer.main.get_command(app))
    return out


def argv_for(command: str, option: str, value: str, tmp: Path) -> list[str]:
    """A command line that is complete but for the float option's value; files it names need
    not exist: the value must be refused before they are read."""
    trace = tmp / "t.jsonl"
    db = ["--db", str(tmp / "never.db")]
    lines = {
        "sim": ["sim", str(trace)],
        "ingest": ["ingest", str(tmp / "bundle"), *db],
        "sizing": ["sizing", *db],
        "run": ["run", "64Mi-cgroup-mglru", "--host", "h", "--trace", str(trace), *db,
                "--data-dir", str(tmp / "data"), "--hosts-dir", str(tmp / "hosts")],
        "schedule": ["schedule", "--matrix", "smoke", "--dry-run", *db,
                     "--hosts-dir", str(tmp / "hosts")],
        "resume": ["resume", "c1", *db, "--hosts-dir", str(tmp / "hosts")],
        "watch": ["watch", "c1", *db],
        "placement": ["placement", "--bandwidths", "paper-gh200", *db],
        "rules": ["rules", "--bandwidths", "paper-gh200", *db],
        "trace synth": ["trace", "synth", str(tmp / "out.jsonl")],
        "hosts reboot": ["hosts", "reboot", "h", "--hosts-dir", str(tmp / "hosts")],
        "hosts restore": ["hosts", "restore", "h", "--hosts-dir", str(tmp / "hosts")],
        "engine model make": ["engine", "model", "make", str(tmp / "m.gguf")],
    }[command]
    return [*lines, f"{option}={value}"]


def test_the_table_covers_every_float_option():
    """A float option added without a line here fails this test until it is checked."""
    commands = {c for c, _ in float_options()}
    for c in commands:
        argv_for(c, "--x", "1", Path("/nonexistent"))          # KeyError: not covered


@pytest.mark.parametrize("command,option,value", [
    (c, o, v) for c, o in sorted(float_options()) for v in HOSTILE
    if v != "-0" or (c, o) in POSITIVE])       # the others document what their 0 means
def test_a_float_option_refuses_a_non_finite_or_out_of_range_value(tmp_path, capsys, command,
                                                                    option, value):
    (tmp_path / "t.jsonl").write_text(json.dumps({"model": "m", "k": 1, "layers": 1,
                                                  "experts_per_layer": 2,
                                                  "expert_bytes": 64}) + "\n")
    before = sorted(tmp_path.rglob("*"))
    rc = main(argv_for(command, option, value, tmp_path))
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2, (rc, err)
    assert 1 <= len(err) <= 2 and err[0].startswith("error: "), err
    name = option.lstrip("-")
    assert name in err[0] or name.replace("-", "_") in err[0], err
    assert len(err) == 1 or err[1].startswith("fix: "), err
    assert sorted(tmp_path.rglob("*")) == before                # nothing written


@pytest.mark.parametrize("value", ["-1", "0", "inf", "1e308", "nan", "-nan", "1e6000"])
def test_ingest_refuses_a_hostile_nominal_gb_and_stores_nothing(tmp_path, capsys, value):
    bundle = make_bundle(tmp_path / "bundles", "r-nominal-1", "64Mi-cgroup-mglru",
                         campaign=None)
    db = tmp_path / "results.db"
    rc = main(["ingest", str(bundle), "--nominal-gb", value, "--db", str(db)])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert rc == 2, err
    assert err[0].startswith("error: --nominal-gb must be a finite number > 0"), err
    assert err[1:] == ["fix: e.g. --nominal-gb 0.75"]
    assert not db.exists() and (bundle / "manifest.json").exists()
    assert not (tmp_path / "bundles" / "rejected").exists()


def test_ingest_stores_the_amplification_of_a_good_nominal_gb(tmp_path, capsys):
    """The control: the same bundle and command with a finite, positive value is stored, and
    the amplification bench shows is the device bytes over that many GB, positive."""
    bundle = make_bundle(tmp_path / "bundles", "r-nominal-2", "64Mi-cgroup-mglru",
                         campaign=None)
    db = str(tmp_path / "results.db")
    assert main(["ingest", str(bundle), "--nominal-gb", "0.75", "--db", db]) == 0
    capsys.readouterr()
    assert main(["results", "--cell", "64Mi-cgroup-mglru", "--db", db, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = out if isinstance(out, list) else [out]
    res = rows[0]
    assert res["nominal_miss_gb_per_iteration"] == pytest.approx(0.75)
    amp = res["amplification"]
    assert math.isfinite(amp) and amp > 0
    assert amp == pytest.approx(res["device_gb_per_iteration"] / 0.75)
