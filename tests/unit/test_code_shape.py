"""The house stays readable: no module over 600 lines and no function body over 60 lines,
unless a comment right above the function says why it must be long ("# long: ..."); every
lint suppression says why."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "bench").rglob("*.py"), *(ROOT / "agents").rglob("*.py")])
MAX_MODULE_LINES = 600
MAX_BODY_LINES = 60


def _rel(p: Path) -> str:
    return str(p.relative_to(ROOT))


def long_functions(path: Path) -> list[str]:
    """Functions whose body (docstring included, signature not) is over the limit and that
    carry no `# long:` comment on the line above their `def` (or its decorators)."""
    text = path.read_text()
    lines = text.splitlines()
    out = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.end_lineno - node.body[0].lineno + 1
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            above = lines[first - 2].strip() if first >= 2 else ""
            if body > MAX_BODY_LINES and not above.startswith("# long:"):
                out.append(f"{_rel(path)}:{node.lineno} {node.name} ({body} lines)")
    return out


@pytest.mark.parametrize("path", SOURCES, ids=_rel)
def test_modules_and_functions_stay_short(path):
    n = len(path.read_text().splitlines())
    assert n <= MAX_MODULE_LINES, f"{_rel(path)} has {n} lines"
    assert long_functions(path) == []


@pytest.mark.parametrize("path", SOURCES, ids=_rel)
def test_every_suppression_says_why(path):
    """A `# noqa` or `# type: ignore` is followed by the reason (`# noqa: BLE001 - why`;
    `# type: ignore[code]  # why`, since mypy takes nothing but a comment after the codes)."""
    bare = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        m = re.search(r"#\s*(noqa(?::\s*[A-Z0-9, ]+)?|type:\s*ignore(?:\[[-\w, ]+\])?)(.*)$", line)
        if m and not re.match(r"\s*[-:(—#]\s*\S", m.group(2)):
            bare.append(f"{_rel(path)}:{i}: {line.strip()}")
    assert bare == []


def test_the_shape_check_would_catch_a_long_function(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(61))
    (tmp_path / "bench").mkdir()
    f = tmp_path / "bench" / "m.py"
    f.write_text(f"def f():\n{body}\n\n\n# long: a table of 61 assignments\ndef g():\n{body}\n")
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        assert long_functions(f) == ["bench/m.py:1 f (61 lines)"]
    finally:
        ROOT = old
