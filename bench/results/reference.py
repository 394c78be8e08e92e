"""The paper's printed numbers that bench ships (bench/data/reference/paper.toml), per shipped
matrix: what `bench report` sets beside a campaign's in "Against the reference". Pure."""

from __future__ import annotations

import tomllib
from functools import lru_cache
from importlib import resources

METRICS = ("device_gb", "median_s")


@lru_cache(maxsize=1)
def _all() -> dict:
    text = resources.files("bench").joinpath("data", "reference", "paper.toml").read_text()
    return tomllib.loads(text)


def paper_values(matrix: str | None) -> list[dict]:
    """[{cell, metric, value, source}] the paper prints for `matrix` (none for a matrix the
    paper has no number of, or an ad-hoc one)."""
    rows = _all().get(matrix or "", [])
    return [{"cell": str(r["cell"]), "metric": str(r["metric"]), "value": float(r["value"]),
             "source": str(r.get("source", ""))} for r in rows if r.get("metric") in METRICS]
