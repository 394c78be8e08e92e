"""Data flows one way: pure modules import no I/O library; only views and the CLI import
rich and typer (checked statically per module, and at run time for transitive imports)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "bench"
IO_LIBS = {"fabric", "paramiko", "sqlalchemy", "alembic", "rich", "typer", "click", "subprocess",
           "socket"}
UI_LIBS = {"rich", "typer", "click"}
PURE = ["trace", "synth", "locality", "stackdist", "policies", "sim", "demand", "recall",
        "engine", "planfile", "pool", "units", "errors", "procfs", "cells", "bundle", "counters",
        "runfacts", "retention", "stats", "runspec", "matrix", "schedule"]
UI = {"views", "cli", "__main__"}  # and every cli_<area> module


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


MODULES = sorted(p.stem for p in PKG.glob("*.py"))


@pytest.mark.parametrize("mod", MODULES)
def test_only_views_and_cli_import_ui_libraries(mod):
    if mod in UI or mod.startswith("cli_"):
        return
    assert not (_imports(PKG / f"{mod}.py") & UI_LIBS)


@pytest.mark.parametrize("mod", [m for m in PURE if (PKG / f"{m}.py").exists()])
def test_pure_modules_import_no_io_library(mod):
    assert not (_imports(PKG / f"{mod}.py") & IO_LIBS)
    code = (f"import sys, bench.{mod}; bad = {sorted(IO_LIBS)!r}; "
            "print(','.join(m for m in bad if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PKG.parent, check=True).stdout.strip()
    assert out == "", f"bench.{mod} pulls in {out} (transitively)"


def test_the_check_would_catch_an_offender(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import os\nfrom rich.table import Table\n")
    assert _imports(bad) & UI_LIBS == {"rich"}


@pytest.mark.parametrize("libs, owners", [
    ({"fabric", "paramiko", "invoke"}, {"ssh"}),
    ({"sqlalchemy", "alembic"}, {"store"}),
])
def test_one_module_owns_each_io_library(libs, owners):
    """Only bench/ssh.py imports fabric and paramiko; only bench/store/ imports SQLAlchemy."""
    offenders = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG)
        owner = rel.parts[0].removesuffix(".py")
        if owner not in owners and _imports(path) & libs:
            offenders.append(str(rel))
    assert offenders == []
