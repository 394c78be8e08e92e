"""A run id, host name, cell, campaign id or sha256 with a trailing newline (or any other
trailing character) is refused everywhere: Python's re.match(r"...$") accepts "id\\n", so
every validator matches the whole text. Through the real command line for each id kind, in a
real bundle (bundlegen: real /proc and cgroup captures) for each id a bundle carries, and in
the validators the host side runs (agents/hostrunner)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import BenchError
from tests.support.bundlegen import ensure_campaigns, make_bundle

TRAILING = ["\n", "\r\n", " ", "\x00", "\t", "/x"]
CELL = "64Mi-cgroup-mglru"


def cli_cases(bad: str, tmp: Path) -> list[tuple[list[str], str]]:
    """(argv, what the refusal names) for every id option and argument, each given `bad`."""
    db = ["--db", str(tmp / "never.db")]
    hd = ["--hosts-dir", str(tmp / "hosts")]
    trace = str(tmp / "t.jsonl")
    return [
        # run ids
        (["run", CELL, "--host", "h", "--trace", trace, "--run-id", f"r1{bad}", *db, *hd],
         "--run-id"),
        (["hosts", "collect", "h", f"r1{bad}", *hd], "RUN_ID"),
        # host names
        (["runs", "--host", f"h{bad}", *db], "--host"),
        (["results", "--host", f"h{bad}", *db], "--host"),
        (["export", "--host", f"h{bad}", *db], "--host"),
        (["sizing", "--target-seconds", "2", "--host", f"h{bad}", *db], "--host"),
        (["run", CELL, "--host", f"a,h{bad}", "--trace", trace, *db, *hd], "--host"),
        (["schedule", "--matrix", "smoke", "--dry-run", "--hosts", f"a,h{bad}", *db, *hd],
         "--hosts"),
        (["placement", "--bandwidths", "paper-gh200", "--host", f"h{bad}", *db], "--host"),
        (["hosts", "probe", f"h{bad}", *hd], "HOSTS"),
        (["hosts", "collect", f"h{bad}", "r1", *hd], "HOST"),
        (["hosts", "reboot", f"h{bad}", *hd], "HOST"),
        (["hosts", "pools", f"h{bad}", *hd], "HOST"),
        # cells
        (["run", f"{CELL}{bad}", "--host", "h", "--trace", trace, *db, *hd], "cell"),
        (["runs", "--cell", f"{CELL}{bad}", *db], "cell"),
        (["results", "--cell", f"{CELL}{bad}", *db], "cell"),
        # campaigns
        (["runs", "--campaign", f"c1{bad}", *db], "--campaign"),
        (["results", "--campaign", f"c1{bad}", *db], "--campaign"),
        (["resume", f"c1{bad}", *db, *hd], "CAMPAIGN"),
        (["watch", f"c1{bad}", *db], "CAMPAIGN"),
        (["campaigns", "hide", f"c1{bad}", *db], "CAMPAIGN"),
        (["campaigns", "rm", f"c1{bad}", "--yes", *db], "CAMPAIGN"),
        (["schedule", "--matrix", "smoke", "--dry-run", "--campaign", f"c1{bad}", *db, *hd],
         "--campaign"),
        (["hosts", "probe", "--campaign", f"c1{bad}", *hd, *db], "--campaign"),
        # workload digests (a sha256 prefix)
        (["sizing", "--target-seconds", "2", "--workload", f"abc{bad}", *db], "--workload"),
        (["results", "--workload", f"abc{bad}", *db], "--workload"),
        (["placement", "--bandwidths", "paper-gh200", "--workload", f"abc{bad}", *db],
         "--workload"),
    ]


@pytest.mark.parametrize("bad", TRAILING, ids=repr)
def test_every_id_option_refuses_trailing_characters(tmp_path, capsys, bad):
    for argv, named in cli_cases(bad, tmp_path):
        before = sorted(tmp_path.rglob("*"))
        rc = main(argv)
        err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
        assert rc == 2, (argv, rc, err)
        assert err and err[0].startswith("error: ") and named in err[0], (argv, err)
        assert len(err) <= 2 and (len(err) == 1 or err[1].startswith("fix: ")), (argv, err)
        assert sorted(tmp_path.rglob("*")) == before, argv      # nothing written


def test_the_same_ids_without_the_trailing_character_get_past_the_check(tmp_path, capsys):
    """The control: the ids themselves are fine, so each refusal above is the trailing
    character's (these fail later, for want of a host, a database or a campaign, or pass)."""
    for argv, _ in cli_cases("", tmp_path):
        main(argv)
        err = capsys.readouterr().err
        first = err.strip().splitlines()[0] if err.strip() else ""
        assert "is not a" not in first and "bad cell name" not in first, (argv, err)


def _append(where: tuple[str, ...], bad: str):
    def edit(parts):
        d = parts["spec.json"]
        for k in where[:-1]:
            d = d[k]
        d[where[-1]] += bad
        if where == ("run_id",):                        # the status agrees with the spec,
            parts["status.json"]["run_id"] += bad       # so only the id's own check refuses
        if where == ("host",):
            parts["host.json"]["hostname"] += bad
    return edit


@pytest.mark.parametrize("where", [("run_id",), ("host",), ("campaign",), ("cell",),
                                   ("plan_sha256",), ("workload", "trace_sha256"),
                                   ("agent", "source_sha256")], ids="-".join)
@pytest.mark.parametrize("bad", ["\n", " "], ids=repr)
def test_a_bundle_id_with_trailing_characters_is_refused(tmp_path, capsys, where, bad):
    bundle = make_bundle(tmp_path / "bundles", "r-trailing-1", CELL, campaign="c1",
                         edit=_append(where, bad))
    db = tmp_path / "results.db"
    from bench.store.db import open_store
    ensure_campaigns(open_store(str(db), write=True), "c1")
    rc = main(["ingest", str(bundle), "--db", str(db)])
    err = capsys.readouterr().err
    assert rc == 1, err
    assert f"key '{'.'.join(where)}'" in err and "is not a" in err or "bad cell name" in err, err
    assert (tmp_path / "bundles" / "rejected" / "r-trailing-1").exists()
    assert main(["runs", "--db", str(db), "--json"]) == 0
    assert capsys.readouterr().out.strip() in ("[]", "")       # nothing stored


def test_the_library_validators_match_whole_text():
    from bench.hosts.inventory_schema import HOST_RE, NAME_RE
    from bench.judge.identity import select_workload
    from bench.matrix.runspec import check_run_id
    for ok in ("r1", "a.b_c-d"):
        check_run_id(ok)
        with pytest.raises(BenchError):
            check_run_id(ok + "\n")
    assert NAME_RE.fullmatch("h1") and not NAME_RE.fullmatch("h1\n")
    assert HOST_RE.fullmatch("10.0.0.1") and not HOST_RE.fullmatch("10.0.0.1\n")
    with pytest.raises(BenchError, match="not a hex digest prefix"):
        select_workload([], "abc\n")


def test_the_host_side_validators_match_whole_text():
    """agents/hostrunner runs on the host (Python 3.8+): a unit name and a cell label with a
    trailing newline are refused there too."""
    from bench.agents.hostrunner import grammar, systemd
    assert grammar.LABEL.fullmatch("oracle") and not grammar.LABEL.fullmatch("oracle\n")
    with pytest.raises(ValueError):
        systemd.wall_unit("r1\n")
    assert systemd.wall_unit("r1") == "bench-wall-r1.scope"
