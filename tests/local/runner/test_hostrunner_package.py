"""The host runner as a shipped package (agents/runner.py + agents/hostrunner/): standard
library only, Python 3.8 syntax, importable both as `hostrunner` (a host) and as
`bench.agents.hostrunner` (the controller) without side effects, small modules, the
runner_sha256 recipe of docs/bundle.md, and what deploy and a wheel ship. No root needed."""

from __future__ import annotations

import ast
import functools
import glob
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.support.runner import REPO, RUNNER

AGENTS = REPO / "agents"
PACKAGE = AGENTS / "hostrunner"
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
# stdlib modules new after 3.8: a host may run 3.8
NEWER_THAN_38 = {"zoneinfo", "graphlib", "tomllib"}
NEWER_ATTRS = {"removeprefix", "removesuffix", "is_relative_to", "with_stem", "bit_count"}


def agents_sources() -> list[Path]:
    return sorted(p for p in AGENTS.rglob("*.py") if "__pycache__" not in p.parts)


@functools.lru_cache(maxsize=None)
def python38() -> str | None:
    """A Python 3.8 to run the shipped runner with, if this machine has one ($BENCH_PYTHON38,
    python3.8 on PATH, a pyenv version)."""
    found = [os.environ.get("BENCH_PYTHON38"), shutil.which("python3.8")]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.8*/bin/python3")))
    for p in found:
        if p and os.access(p, os.X_OK) and subprocess.run(
                [p, "-c", "import sys; assert sys.version_info[:2] == (3, 8)"],
                capture_output=True).returncode == 0:
            return p
    return None


# --------------------------------------------------------------------------- static checks

def test_agents_import_only_the_standard_library():
    allowed = set(sys.stdlib_module_names) | {"__future__", "hostrunner"}
    bad = []
    for path in agents_sources():
        in_package = PACKAGE in path.parents
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in allowed or top in NEWER_THAN_38:
                    bad.append(f"{path.relative_to(REPO)}:{node.lineno}: {name}")
                if in_package and top == "hostrunner":      # would break bench.agents.hostrunner
                    bad.append(f"{path.relative_to(REPO)}:{node.lineno}: absolute {name}")
    assert not bad, "agents/ must import only the stdlib (and its own package, relatively):\n" \
        + "\n".join(bad)


def test_agents_parse_as_python_38_and_avoid_newer_methods():
    for path in agents_sources():
        src = path.read_text()
        tree = ast.parse(src, str(path), feature_version=(3, 8))
        assert "from __future__ import annotations" in src or path.name == "__init__.py", path
        newer = [f"{n.lineno}: .{n.attr}" for n in ast.walk(tree)
                 if isinstance(n, ast.Attribute) and n.attr in NEWER_ATTRS]
        assert not newer, f"{path}: 3.9+ methods {newer}"
        assert not any(isinstance(n, ast.Match) for n in ast.walk(tree)), path


def test_modules_and_functions_stay_small():
    """Every module well under 600 lines; no function over 60 lines unless its body starts
    with a comment saying why it must be long ("# long: ...")."""
    for path in agents_sources():
        lines = path.read_text().splitlines()
        assert len(lines) < 600, f"{path}: {len(lines)} lines"
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                body = "\n".join(lines[node.lineno - 1:node.end_lineno])
                assert n <= 60 or "# long:" in body, f"{path}:{node.lineno} {node.name}: {n}"


def test_no_bare_except_and_every_broad_except_says_why():
    for path in agents_sources():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.ExceptHandler):
                assert node.type is not None, f"{path}:{node.lineno}: bare except"
                if isinstance(node.type, ast.Name) and node.type.id in ("Exception",
                                                                        "BaseException"):
                    assert "#" in lines[node.lineno - 1], f"{path}:{node.lineno}: say why"


# --------------------------------------------------------------------------- importing

def _run(argv, timeout=60, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kw)


def test_imports_as_bench_agents_hostrunner_and_as_hostrunner_without_side_effects(tmp_path):
    """Each module imports alone under both names, prints nothing, writes nothing into the
    working directory, installs no signal handler and leaves sys.path alone."""
    check = ("import importlib, signal, sys, json; before = list(sys.path); "
             "hs = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, "
             "signal.SIGHUP)}; importlib.import_module(sys.argv[1]); "
             "assert sys.path == before, 'sys.path changed'; "
             "assert hs == {s: signal.getsignal(s) for s in hs}, 'signal handlers changed'")
    for prefix, env in (("bench.agents.hostrunner", None),
                        ("hostrunner", dict(os.environ, PYTHONPATH=str(AGENTS)))):
        for mod in ["__init__"] + MODULES:
            name = prefix if mod == "__init__" else f"{prefix}.{mod}"
            r = _run([sys.executable, "-B", "-c", check, name], cwd=tmp_path, env=env)
            assert r.returncode == 0 and not r.stdout and not r.stderr, (name, r.stderr)
    assert not list(tmp_path.iterdir())


def test_both_names_load_the_same_files():
    import bench.agents.hostrunner.spec as ctl
    sys.path.insert(0, str(AGENTS))
    try:
        import hostrunner.spec as host
    finally:
        sys.path.remove(str(AGENTS))
    assert Path(ctl.__file__).resolve() == Path(host.__file__).resolve()


# --------------------------------------------------------------------------- runner_sha256

def recipe_sha256(agents_dir: Path) -> str:
    """docs/bundle.md: (name relative to agents/, NUL, bytes, NUL) of runner.py, then each
    hostrunner/*.py in byte order of names."""
    files = [agents_dir / "runner.py"] + sorted((agents_dir / "hostrunner").glob("*.py"),
                                                 key=lambda p: p.name.encode())
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(agents_dir)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def test_runner_sha256_follows_the_documented_recipe(tmp_path):
    from bench.agents.hostrunner.bundle import runner_sha256
    assert runner_sha256() == recipe_sha256(AGENTS)
    # a copy with one module changed hashes differently, caches do not count
    copy = tmp_path / "agents"
    shutil.copytree(AGENTS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); "
             "from hostrunner.bundle import runner_sha256; print(runner_sha256())")
    first = _run([sys.executable, "-c", probe, str(copy)]).stdout.strip()
    assert first == recipe_sha256(AGENTS)
    (copy / "hostrunner" / "__pycache__").mkdir(exist_ok=True)
    (copy / "hostrunner" / "__pycache__" / "x.pyc").write_bytes(b"junk")
    assert _run([sys.executable, "-B", "-c", probe, str(copy)]).stdout.strip() == first
    with (copy / "hostrunner" / "kmsg.py").open("a") as f:
        f.write("# changed\n")
    assert _run([sys.executable, "-B", "-c", probe, str(copy)]).stdout.strip() != first


# --------------------------------------------------------------------------- what is shipped

def test_deploy_ships_the_package_and_it_runs_alone(tmp_path):
    """bench.hosts.deploy's tarball carries runner.py and every hostrunner module (no caches); run
    from the extracted tree in isolated mode without site-packages (a bare host), the
    runner answers its commands."""
    from bench.hosts.deploy import make_bundle
    _run([sys.executable, str(RUNNER), "status", "x", "--work-dir", str(tmp_path)])  # caches
    with tarfile.open(fileobj=io.BytesIO(make_bundle(REPO, native=False))) as tar:
        names = set(tar.getnames())
        tar.extractall(tmp_path / "host")
    assert {"agents/runner.py", "agents/hostrunner/__init__.py"} <= names
    assert {f"agents/hostrunner/{m}.py" for m in MODULES} <= names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    runner = tmp_path / "host" / "agents" / "runner.py"
    for python in filter(None, (sys.executable, python38())):
        r = _run([python, "-I", "-S", str(runner), "status", "nope", "--work-dir",
                  str(tmp_path / "wd")], cwd="/")
        assert r.returncode == 1 and json.loads(r.stdout) == {
            "ok": False, "run_id": "nope", "reason": "no such run"}, (python, r.stderr)
        r = _run([python, "-I", "-S", str(runner), "status", "../x"], cwd="/")
        assert r.returncode == 2 and "bad run id" in r.stdout, (python, r.stderr)


@pytest.mark.skipif(python38() is None, reason="no Python 3.8 on this machine")
def test_every_module_imports_on_python_38():
    r = _run([python38(), "-B", "-c", "import sys, importlib; sys.path.insert(0, sys.argv[1]); "
              "[importlib.import_module('hostrunner.' + m) for m in sys.argv[2:]]",
              str(AGENTS), *MODULES])
    assert r.returncode == 0, r.stderr


@pytest.mark.slow
def test_wheel_ships_the_package(tmp_path):
    p = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
              str(REPO)], timeout=600)
    assert p.returncode == 0, p.stderr
    names = set(zipfile.ZipFile(next(tmp_path.glob("bench-*.whl"))).namelist())
    want = {"bench/agents/__init__.py", "bench/agents/runner.py",
            "bench/agents/hostrunner/__init__.py"}
    want |= {f"bench/agents/hostrunner/{m}.py" for m in MODULES}
    assert want <= names, sorted(want - names)
