"""How long a planned run and a reboot take: measured where the results database has earlier
ones (the wall durations of finished runs of the same cell on the same host, the journaled
reboots of the same host; bench.store.durations gathers them), modelled otherwise (the
matrix's [estimate] run_seconds and reboot_seconds). Pure: the measurements come in as data,
so the plan (bench.matrix.schedule) and the live ETA (bench.execute.progress) say the same
thing about the same numbers, and each estimate says where it came from."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median

MODELLED = "modelled"


@dataclass(frozen=True)
class Estimate:
    seconds: float
    n: int = 0              # measurements behind it; 0: the model's figure

    @property
    def source(self) -> str:
        """"measured n=3" or "modelled"."""
        return f"measured n={self.n}" if self.n else MODELLED


@dataclass(frozen=True)
class Estimates:
    """The model's figures, and what was measured: run wall seconds per (host, cell), reboot
    seconds per host. A measurement that is not a finite positive number is ignored."""
    run_seconds: float
    reboot_seconds: float
    runs: Mapping[tuple[str, str], Sequence[float]] = field(default_factory=dict)
    reboots: Mapping[str, Sequence[float]] = field(default_factory=dict)

    def run(self, host: str, cell: str) -> Estimate:
        """The median wall time of the cell's earlier runs on this host, else the model's."""
        return _estimate(self.runs.get((host, cell), ()), self.run_seconds)

    def reboot(self, host: str) -> Estimate:
        """The median of the host's journaled reboots, else the model's."""
        return _estimate(self.reboots.get(host, ()), self.reboot_seconds)


def _estimate(xs: Iterable[float], model: float) -> Estimate:
    v = [float(x) for x in xs if x is not None and 0 < float(x) < float("inf")]
    return Estimate(median(v), len(v)) if v else Estimate(float(model))


def sources(estimates: Sequence[Estimate]) -> str:
    """What a sum of estimates rests on, in words: "measured (n=2..5)", "modelled", or
    "3 measured (n=2..5), 1 modelled"."""
    measured = [e.n for e in estimates if e.n]
    modelled = len(estimates) - len(measured)
    if not estimates:
        return "none"
    if not measured:
        return MODELLED
    ns = f"n={min(measured)}" + (f"..{max(measured)}" if max(measured) != min(measured) else "")
    if not modelled:
        return f"measured ({ns})"
    return f"{len(measured)} measured ({ns}), {modelled} modelled"
