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


def paper_ratios(matrix: str | None) -> list[dict]:
    """[{a, b, what, metric, value}]: the ratios of two of `matrix`'s paper cells (same
    metric), the paper's value computed from the printed numbers."""
    vals = {(r["cell"], r["metric"]): r["value"] for r in paper_values(matrix)}
    out = []
    for r in _all().get("ratios", []):
        if r.get("matrix") != matrix:
            continue
        for metric in METRICS:
            a, b = vals.get((str(r["a"]), metric)), vals.get((str(r["b"]), metric))
            if a is not None and b:
                out.append({"a": str(r["a"]), "b": str(r["b"]), "what": str(r["what"]),
                            "metric": metric, "value": a / b})
    return out
