"""How big a matrix may get, checked before anything of that size is built: a matrix file that
asks for 10^9 repetitions is refused while it loads, naming the key and the limit, not after
the expansion has filled the memory. `bench schema matrix` shows the limits (the maximum of
each `repetitions`, the descriptions of `repetitions` and `cells`).

- repetitions (of the matrix, of a [[cells.extra]] cell, of a [scale.NAME]): at most
  MAX_REPETITIONS runs of one cell on one host;
- cells: capacities x mechanisms x reclaims x modes x prefetch, plus the extras, at most
  MAX_CELLS, counted from the lengths of the lists before the product is made;
- runs per campaign: the cells' repetitions added up (engine matrices: pairs x 2 per prompt),
  at most MAX_RUNS while the matrix loads (the runs on one host for placement `each`), and
  again for the hosts it is expanded onto (bench.matrix.expand), before any run is made.
A campaign of MAX_RUNS runs plans in seconds (bench.matrix.schedule is near-linear); one run
takes minutes, so MAX_RUNS runs are months of one host's time.

The checks return the keyword arguments of a bench.matrix.matrix_schema Problem (loc, message,
hint): that module imports this one for the Repetitions type, so this one cannot import it."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any

import annotated_types as at
from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

MAX_REPETITIONS = 1000
MAX_CELLS = 10_000
MAX_RUNS = 100_000

REPETITIONS_FIX = (f"give 1 to {MAX_REPETITIONS} repetitions; for more samples of a cell, "
                   "run the matrix again as another campaign and compare the campaigns")
RUNS_TEXT = (f"a campaign holds at most {MAX_RUNS} runs (cells x repetitions, x hosts for "
             "placement each)")
CELLS_TEXT = (f"at most {MAX_CELLS} cells (capacities x mechanisms x reclaims x modes x "
              "prefetch, plus extra)")


def _at_most(limit: int, fix: str) -> Any:
    """A check of `value <= limit` whose refusal carries the fix (bench.matrix.matrix_schema
    renders a less_than_equal error as 'must be at most LIMIT, got VALUE' and its hint)."""
    def check(value: int) -> int:
        if value > limit:
            raise PydanticCustomError("less_than_equal", "must be at most {le}",
                                      {"le": limit, "hint": fix})
        return value
    return AfterValidator(check)


class _Maximum:
    """The JSON Schema's `maximum` of a bounded integer (the check itself is _at_most's)."""

    def __init__(self, limit: int):
        self.limit = limit

    def __get_pydantic_json_schema__(self, core: Any, handler: Any) -> dict:
        return {**handler(core), "maximum": self.limit}


Repetitions = Annotated[int, at.Ge(1), _at_most(MAX_REPETITIONS, REPETITIONS_FIX),
                        _Maximum(MAX_REPETITIONS)]


def _axis_lengths(cells: Any) -> list[tuple[str, int]]:
    return [(k, len(getattr(cells, k))) for k in ("capacities", "mechanisms", "reclaims",
                                                 "modes", "prefetch")]


def cells_problem(cells: Any) -> dict[str, Any] | None:
    """The [cells] table (bench.matrix.matrix_schema.Cells) makes more than MAX_CELLS cells
    (from the lengths of its lists: the product is not made), or None."""
    axes = _axis_lengths(cells) if all(
        getattr(cells, k) is not None for k in ("capacities", "mechanisms", "reclaims")) else []
    n = math.prod(length for _, length in axes) if axes else 0
    total = n + len(cells.extra)
    if total <= MAX_CELLS:
        return None
    product = " x ".join(f"{length} {k}" for k, length in axes)
    what = (f"{product} = {n} cells" if axes else "") + (
        f"{' + ' if axes else ''}{len(cells.extra)} extra" if cells.extra else "")
    return _problem(("cells",), f"{what}: {total} cells, more than the {MAX_CELLS} a matrix "
                    "may have", "list fewer values, or split the matrix into several (one "
                    "campaign each)")


def runs_problem(repetitions: Sequence[int | None], default: int, engine: bool
                 ) -> dict[str, Any] | None:
    """The cells' repetitions (None: the matrix's `default`) add up to more than MAX_RUNS, or
    None. The key named is the one that sets the repetitions: engine.pairs or repetitions."""
    runs = sum(r or default for r in repetitions)
    if runs <= MAX_RUNS:
        return None
    n = len(repetitions)
    if engine:
        return _problem(("engine", "pairs"), f"{n} cells x {default} pairs make {runs} runs, "
                        f"more than the {MAX_RUNS} a campaign may hold",
                        "fewer pairs or prompts, or several campaigns")
    how = (f"{n} cells x {default} repetitions make {runs} runs" if all(
        r is None or r == default for r in repetitions)
        else f"the repetitions of the {n} cells add up to {runs} runs")
    return _problem(("repetitions",), f"{how}, more than the {MAX_RUNS} a campaign may hold",
                    "fewer repetitions or cells, or split the matrix into several (one "
                    "campaign each)")


def _problem(loc: tuple[str, ...], message: str, hint: str) -> dict[str, Any]:
    return {"loc": loc, "message": message, "hint": hint}
