"""The folder tree is the data flow (docs/design.md, Layout): one package per stage, and a stage
imports only the stages before it (plus the root modules and the shipped host agents). Checked
statically on every import statement of every module, function-level ones included; the I/O
and UI library rules are checked statically per module and, for pure modules, at run time for
transitive imports."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "bench"
# the stages in import order (README, Layout: plan comes before sim because the demand model
# and recall simulate over replay plans; engine, the built-in llama.cpp path, reads traces and
# plans and is driven by the executor)
STAGES = ["trace", "plan", "sim", "engine", "matrix", "hosts", "lab", "judge", "store", "execute",
          "results", "cli"]
ROOT = {"errors", "units", "paths", "version", "__init__", "__main__"}
BASE = {"errors", "units", "paths", "version", "agents"}     # importable from every stage
IO_LIBS = {"fabric", "paramiko", "invoke", "sqlalchemy", "alembic", "rich", "typer", "click",
           "subprocess", "socket", "matplotlib"}
UI_LIBS = {"rich", "typer", "click"}
# data in, data out (file reads allowed): no I/O library, not even transitively
PURE = ["trace.parse", "trace.synth", "trace.locality", "plan.planfile", "plan.pool",
        "plan.planinfo",
        "sim.stackdist", "sim.policies", "sim.simulate", "sim.demand", "sim.recall", "sim.kernels",
        "matrix.cells", "matrix.load", "matrix.expand", "matrix.schedule", "matrix.runspec",
        "matrix.engine_cells", "matrix.matrix_schema", "hosts.procfs", "hosts.bootplan",
        "hosts.knownhosts", "hosts.sshconfig", "judge.bundle",
        "judge.bundle_files", "judge.bundle_schema", "judge.bundle_check",
        "judge.bundle_snapshots", "judge.counters", "judge.measured", "judge.retention",
        "judge.stats", "judge.engine_gates", "judge.identity", "judge.judgement",
        "judge.prefetch_conditions", "execute.progress",
        "errors", "units", "version"]


def imports(path: Path) -> set[str]:
    """Every module an import statement of the file names (absolute, dotted)."""
    tree = ast.parse(path.read_text())
    rel = path.relative_to(PKG.parent).with_suffix("")
    here = list(rel.parts[:-1]) if rel.name != "__init__" else list(rel.parts[:-1])
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            names.add(mod)
            if mod in ("bench",) or mod.startswith("bench."):
                names |= {f"{mod}.{a.name}" for a in node.names}
    return names


def stage_of(module: str) -> str | None:
    """The stage (or root name) of a bench module name, None for other packages."""
    parts = module.split(".")
    if parts[0] != "bench" or len(parts) < 2:
        return None
    return parts[1]


def order_violations(path: Path) -> list[str]:
    own = stage_of(".".join(path.relative_to(PKG.parent).with_suffix("").parts))
    if own in ROOT or own is None:
        # units is the controller's face of the host runner's grammar (bench.agents)
        allowed = {"errors", "units", "paths", "agents"} if own in ("units", "paths") else set()
        if own in ("__init__", "__main__"):
            return []
    else:
        allowed = set(STAGES[:STAGES.index(own) + 1]) | BASE if own in STAGES else BASE
    bad = []
    for mod in imports(path):
        st = stage_of(mod)
        if st is None or st == own:
            continue
        if st not in allowed and st not in (STAGES + sorted(BASE)):
            continue            # a name imported from the bench root (e.g. __version__)
        if st not in allowed:
            bad.append(f"{mod} (stage {st})")
    return sorted(bad)


MODULES = sorted(str(p.relative_to(PKG)) for p in PKG.rglob("*.py"))


def test_every_module_lives_in_a_stage_or_the_root():
    loose = [m for m in MODULES if "/" not in m and Path(m).stem not in ROOT]
    assert loose == []
    packages = {Path(m).parts[0] for m in MODULES if "/" in m}
    assert packages == set(STAGES), packages


@pytest.mark.parametrize("mod", MODULES)
def test_imports_follow_the_stage_order(mod):
    assert order_violations(PKG / mod) == []


@pytest.mark.parametrize("mod", MODULES)
def test_only_views_and_cli_import_ui_libraries(mod):
    if mod.startswith("cli/") or mod == "__main__.py" or (mod.startswith("results/")
                                                              and mod.endswith("views.py")):
        return
    assert not ({m.split(".")[0] for m in imports(PKG / mod)} & UI_LIBS)


@pytest.mark.parametrize("mod", PURE)
def test_pure_modules_import_no_io_library(mod):
    path = PKG / (mod.replace(".", "/") + ".py")
    assert path.exists(), f"{path} is listed as pure but does not exist"
    assert not ({m.split(".")[0] for m in imports(path)} & IO_LIBS)
    code = (f"import sys, bench.{mod}; bad = {sorted(IO_LIBS)!r}; "
            "print(','.join(m for m in bad if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PKG.parent, check=True).stdout.strip()
    assert out == "", f"bench.{mod} pulls in {out} (transitively)"


@pytest.mark.parametrize("libs, owners", [
    ({"fabric", "paramiko", "invoke"}, {"hosts/ssh.py"}),
    ({"sqlalchemy", "alembic"}, {"store/"}),
    ({"matplotlib"}, {"results/plots.py", "results/figstyle.py"}),
])
def test_one_module_owns_each_io_library(libs, owners):
    """Only bench/hosts/ssh.py imports fabric and paramiko; only bench/store/ SQLAlchemy."""
    offenders = []
    for mod in MODULES:
        if any(mod == o or (o.endswith("/") and mod.startswith(o)) for o in owners):
            continue
        if {m.split(".")[0] for m in imports(PKG / mod)} & libs:
            offenders.append(mod)
    assert offenders == []


def test_the_checks_would_catch_offenders(tmp_path, monkeypatch):
    """A judge module importing the executor, a sim module importing matrix, and a UI
    import are all reported (the checks are not vacuous)."""
    fake = tmp_path / "bench"
    (fake / "judge").mkdir(parents=True)
    (fake / "sim").mkdir()
    (fake / "judge" / "bad.py").write_text(
        "import os\nfrom bench.execute.campaign import x\nfrom bench.store import db\n"
        "def f():\n    from bench.trace.parse import y\n")
    (fake / "sim" / "bad.py").write_text("from ..matrix.cells import Cell\n"
                                         "from rich.table import Table\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", fake)
    assert order_violations(fake / "judge" / "bad.py") == [
        "bench.execute.campaign (stage execute)", "bench.execute.campaign.x (stage execute)",
        "bench.store (stage store)", "bench.store.db (stage store)"]
    assert order_violations(fake / "sim" / "bad.py") == [
        "bench.matrix.cells (stage matrix)", "bench.matrix.cells.Cell (stage matrix)"]
    assert {m.split(".")[0] for m in imports(fake / "sim" / "bad.py")} & UI_LIBS == {"rich"}


def module_graph() -> dict[str, set[str]]:
    """bench module -> the bench modules its import statements name (function-level ones
    included); `from pkg import sub` is an edge to the submodule, not to the package."""
    names = {"bench." + m[:-3].replace("/", ".").removesuffix(".__init__") for m in MODULES}
    graph = {}
    for m in MODULES:
        path = PKG / m
        own = "bench." + m[:-3].replace("/", ".").removesuffix(".__init__")
        pkg = own if m.endswith("__init__.py") else own.rpartition(".")[0]
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                edges |= {a.name for a in node.names if a.name in names}
            elif isinstance(node, ast.ImportFrom):
                base = (".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                                 + ([node.module] if node.module else []))
                        if node.level else node.module or "")
                for a in node.names:
                    sub = f"{base}.{a.name}"
                    edges.add(sub if sub in names else base)
        graph[own] = {e for e in edges if e in names and e != own}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_no_import_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert cycles(module_graph()) == []
