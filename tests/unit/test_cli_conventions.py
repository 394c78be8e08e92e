"""Command-line conventions: `bench --version`, global -v/-q, help text that shows every
`[...]` of its source (no markup eaten), choices shown as choices, shell completion with
real choices, docs/environment.md listing every environment variable bench reads, and the lean
install (extras named by the error a command gives without them)."""

from __future__ import annotations

import ast
import logging
import os
import re
import subprocess
import sys
import tomllib

import pytest
import typer.main

from bench.cli import main
from bench.cli.app import app, command
from tests.support.paths import REPO


def run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_version_names_package_controller_and_agent(capsys):
    from bench import __version__
    from bench.hosts.deploy import source_hash
    from bench.version import controller_version
    rc, out, _ = run(capsys, "--version")
    assert rc == 0
    assert out.splitlines() == [f"bench {__version__}", f"controller {controller_version()}",
                                f"agent sources sha256 {source_hash(REPO / 'native')}"]
    # the agent's hash is the Makefile's recipe (what `bench-agent version` reports)
    recipe = subprocess.run("cat $(LC_ALL=C ls Makefile *.c *.h | LC_ALL=C sort) | sha256sum",
                            shell=True, cwd=REPO / "native", capture_output=True, text=True,
                            check=True).stdout.split()[0]
    assert out.splitlines()[2].endswith(recipe)
    assert run(capsys, "version")[1].strip() == __version__


@pytest.fixture
def levels():
    names = ("bench", "bench.ssh", "paramiko")
    saved = {n: logging.getLogger(n).level for n in names}
    yield
    for n, lv in saved.items():
        logging.getLogger(n).setLevel(lv)


def test_verbose_shows_ssh_logs_as_literal_text(capsys, levels):
    assert run(capsys, "version")[0] == 0
    logging.getLogger("bench.ssh").debug("connecting to h1")
    logging.getLogger("paramiko.transport").info("Connected (version 2.0)")
    assert capsys.readouterr().err == ""                       # quiet by default
    assert run(capsys, "-v", "version")[0] == 0
    logging.getLogger("bench.ssh").debug("connecting to h1 \x1b[31m[bold]x")
    logging.getLogger("paramiko.transport").info("Connected (version 2.0)")
    logging.getLogger("paramiko.transport").debug("kex details")     # -vv only
    err = capsys.readouterr().err
    assert "bench.ssh: debug: connecting to h1 \\x1b[31m[bold]x" in err
    assert "paramiko.transport: Connected (version 2.0)" in err and "kex" not in err
    assert run(capsys, "-vv", "version")[0] == 0
    logging.getLogger("paramiko.transport").debug("kex details")
    assert "kex details" in capsys.readouterr().err


def test_quiet_silences_messages_not_errors(capsys, tmp_path, levels):
    t = tmp_path / "t.jsonl"
    assert run(capsys, "trace", "synth", t, "--preset", "tiny", "--tokens", 20)[0] == 0
    rc, _, err = run(capsys, "trace", "check", t)
    assert rc == 0 and "ok: 1 traces" in err              # a message
    rc, _, err = run(capsys, "-q", "trace", "check", t)
    assert rc == 0 and err == ""
    rc, _, err = run(capsys, "-q", "trace", "parse", tmp_path / "nope.jsonl")
    assert rc == 2 and "no such trace file" in err         # errors still show
    rc, _, err = run(capsys, "-v", "-q", "version")
    assert rc == 2 and "exclude each other" in err
    rc, _, err = run(capsys, "trace", "check", t)
    assert "ok: 1 traces" in err                           # -q lasted one command only


# help text ----------------------------------------------------------------------------------

def _commands(group, prefix=()):
    yield prefix, group
    for name, cmd in (getattr(group, "commands", None) or {}).items():
        yield from _commands(cmd, prefix + (name,))


ALL = list(_commands(typer.main.get_command(app)))
BRACKETS = re.compile(r"\[[^\[\]\s]*(?: [^\[\]\s]+)*\]")


def _flat(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("path, cmd", ALL, ids=[" ".join(p) or "bench" for p, _ in ALL])
def test_help_shows_every_bracket_of_its_source(path, cmd, capsys):
    """`[scale.NAME]`, `[--k K]`: rich markup would eat them; every `[...]` of a command's
    help and its options' help must reach the rendered help."""
    texts = [cmd.help or ""] + [p.help or "" for p in cmd.params if getattr(p, "help", None)]
    wanted = {m for t in texts for m in BRACKETS.findall(_flat(t))}
    rc, out, _ = run(capsys, *path, "--help")
    assert rc == 0
    missing = [w for w in wanted if w not in _flat(out)]
    assert missing == [], f"bench {' '.join(path)} --help lost {missing}"


def test_the_bracket_check_can_fail():
    """The scale option's help, rendered as rich markup, loses its `[scale.NAME]`: the kind
    of loss the test above looks for."""
    from rich.console import Console
    from rich.text import Text
    [sched] = [c for p, c in ALL if p == ("schedule",)]
    [scale] = [p for p in sched.params if p.name == "scale"]
    assert "[scale.NAME]" in scale.help
    con = Console(record=True, width=200, file=open(os.devnull, "w"))
    con.print(Text.from_markup(scale.help))
    assert "[scale.NAME]" not in con.export_text()


def test_fixed_sets_are_choices(capsys):
    """Options with a fixed set of values show it in help and refuse anything else (exit 2)."""
    for argv, shown in ((("export",), "<runs|iterations|counters|timeline>"),
                        (("export",), "<csv|json>"), (("plot",), "<capacity|reclaim|equal-memory|prefetch|admission>"),
                        (("sizing",), "<mglru|classic>"),
                        (("results",), "<capacity|reclaim|equal-memory|prefetch|admission|end-to-end>")):
        rc, out, _ = run(capsys, *argv, "--help")
        assert rc == 0 and shown in _flat(out), (argv, shown)
    rc, _, err = run(capsys, "plot", "bogus", "-o", "x.png")
    assert rc == 2 and "bogus" in err


# completion -----------------------------------------------------------------------------------

def _complete(words: str, **env) -> list[str]:
    e = dict(os.environ, PYTHONPATH=str(REPO), _BENCH_COMPLETE="complete_bash",
             COMP_WORDS=words, COMP_CWORD=str(len(words.split(" ")) - 1), **env)
    p = subprocess.run([sys.executable, "-m", "bench"], env=e, capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout.split()


def _inventory(d, *names):
    d.mkdir()
    for n in names:
        (d / f"{n}.toml").write_text(f'name = "{n}"\naddress = "127.0.0.1"\n'
                                      'transport = "ssh"\n')
    return d


def test_completion_offers_hosts_matrices_and_choices(tmp_path):
    inv = _inventory(tmp_path / "hosts", "gpu-a", "gpu-b", "cpu-c")
    from bench.hosts.inventory import load_inventory
    assert sorted(load_inventory(inv)) == ["cpu-c", "gpu-a", "gpu-b"]
    env = {"BENCH_HOSTS": str(inv), "BENCH_DB": str(tmp_path / "none.db")}
    assert _complete("bench hosts probe gpu", **env) == ["gpu-a", "gpu-b"]
    assert _complete("bench schedule --matrix smoke --hosts gpu-a,", **env) == [
        "gpu-a,cpu-c", "gpu-a,gpu-b"]
    from bench.matrix.load import shipped_names
    assert _complete("bench schedule --matrix ", **env) == sorted(shipped_names())
    assert _complete("bench plot ", **env) == ["capacity", "reclaim", "equal-memory", "prefetch",
                                               "admission"]
    assert _complete("bench export --format ", **env) == ["csv", "json"]
    assert not (tmp_path / "none.db").exists()


def test_completion_scripts_are_offered(capsys):
    rc, out, _ = run(capsys, "--help")
    assert "--install-completion" in out and "--show-completion" in out
    # from a bash, as a user types it: typer names the shell from its parent process (a test
    # run with no shell above it, e.g. under nohup, would get "Shell not supported")
    p = subprocess.run(["bash", "-c", '"$0" -m bench --show-completion; exit $?', sys.executable],
                       env=dict(os.environ, PYTHONPATH=str(REPO)), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "_BENCH_COMPLETE" in p.stdout


def test_completers_are_attached_to_every_named_parameter():
    from bench.cli import complete
    attached = {(p, q.name) for p, c in _commands(command()) for q in c.params
                if q.name in complete.BY_NAME and q._custom_shell_complete is not None}
    assert {("hosts probe", "hosts"), ("hosts trust", "host"), ("run", "host"),
            ("schedule", "matrix"), ("schedule", "hosts"), ("matrix show", "matrix"),
            ("results", "cell"), ("runs", "campaign"), ("compare", "cell_a")} <= {
        (" ".join(p), n) for p, n in attached}


# environment variables ---------------------------------------------------------------------

ENV_NAME = re.compile(r"(?:BENCH|XDG)_[A-Z0-9_]*[A-Z0-9]")


def _env_reads() -> set[str]:
    """Every environment variable name bench's code spells (bench/, agents/): the names
    os.environ.get/getenv read, and those kept in constants and tables (the bundle caps)."""
    names: set[str] = set()
    for root in ("bench", "agents"):
        for path in (REPO / root).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                        and ENV_NAME.fullmatch(node.value):
                    names.add(node.value)
    return names


def test_docs_list_every_environment_variable():
    reads = _env_reads()
    assert {"BENCH_DB", "BENCH_HOSTS", "BENCH_DATA_DIR", "XDG_DATA_HOME",
            "BENCH_BUNDLE_MAX_FILES"} <= reads
    page = (REPO / "docs" / "environment.md").read_text()
    section = page.split("\n## Environment variables\n", 1)[1].split("\n## ", 1)[0]
    assert [n for n in sorted(reads) if f"`{n}`" not in section] == []


# lean install ---------------------------------------------------------------------------------

def test_main_install_is_lean_and_test_pulls_every_extra():
    meta = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    base = {re.split(r"[\[<>=]", d)[0].lower() for d in meta["dependencies"]}
    assert not base & {"psycopg", "matplotlib", "libcachesim"}
    extras = meta["optional-dependencies"]
    test = {re.split(r"[\[<>=]", d)[0].lower() for d in extras["test"]}
    for name in ("postgres", "plot"):
        assert {re.split(r"[\[<>=]", d)[0].lower() for d in extras[name]} <= test


def test_missing_extras_are_named(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "psycopg", None)          # as if not installed
    from bench.errors import BenchError
    from bench.store.db import make_engine
    with pytest.raises(BenchError) as exc:
        make_engine("postgresql://u@localhost/x")
    assert "bench[postgres]" in (exc.value.hint or "")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    import bench.results        # `from bench.results import plots` reads this attribute first
    for mod in ("plots", "figstyle"):       # the figures and their style import matplotlib
        monkeypatch.delitem(sys.modules, f"bench.results.{mod}", raising=False)
        monkeypatch.delattr(bench.results, mod, raising=False)
    from bench.cli.results import _plots
    with pytest.raises(BenchError) as exc:
        _plots()
    assert "bench[plot]" in (exc.value.hint or "")
