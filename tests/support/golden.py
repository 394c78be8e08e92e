"""Golden files of rendered tables: tests/local/store/golden/ holds the expected text;
BENCH_UPDATE_GOLDEN=1 rewrites them (review the diff before committing)."""

import io
import os

from rich.console import Console

from tests.support import paths

GOLDEN = paths.REPO / "tests" / "local" / "store" / "golden"


def render(table) -> str:
    con = Console(width=120, record=True, file=io.StringIO(), color_system=None)
    con.print(table)
    return con.export_text()


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("BENCH_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with BENCH_UPDATE_GOLDEN=1 once and review it"
    assert text == path.read_text(), f"{name} changed (BENCH_UPDATE_GOLDEN=1 to accept)"
