"""A bundle judged: what the store keeps of a run besides its raw files. Pure.

`judge(bundle, campaign_fingerprint, device_bandwidth)` checks the bundle against its cell
name, derives the per-run metrics (bench.judge.measured; none for a partial bundle), its
fingerprint, and the verdict of every retention rule that applies (bench.judge.retention),
against the fingerprint its campaign saw first on that host and the host's measured device
bandwidth. bench.store.ingest writes the result."""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.errors import BenchError
from bench.judge import measured, retention
from bench.judge.columns import METRIC_COLUMNS  # noqa: F401 - re-exported
from bench.judge.bundle import Bundle, BundleError
from bench.judge.retention import Verdict
from bench.matrix.cells import Cell, legacy_cell, parse_cell


def bundle_cell(b: Bundle, where: str) -> Cell:
    """The bundle's cell, refused (BundleError naming spec.json) when its name does not parse
    or the spec's own mechanism, reclaim or capacity contradict it. A bundle written before
    capacities were decimal names its cell in lower case with binary units (`64g-...` for
    64 GiB): its spec's capacity_bytes says so, and the cell is the canonical one of those bytes
    (`64Gi-...`), as migration 0004 renamed the stored cells."""
    name = b.spec.get("cell", "")
    cell = legacy_cell(name)
    if cell is None or cell.capacity_bytes != b.spec.get("capacity_bytes"):
        try:
            cell = parse_cell(name)
        except BenchError as exc:
            raise BundleError(where, "spec.json", f"cell: {exc.message}") from None
    for attr in ("mechanism", "reclaim", "capacity_bytes"):
        if attr in b.spec and b.spec[attr] != getattr(cell, attr):
            raise BundleError(where, "spec.json", f"{attr} {b.spec[attr]!r} contradicts "
                              f"the cell name {cell.name}")
    return cell


def run_metrics(b: Bundle) -> dict:
    """The per-run metric columns (all None for a partial bundle: stored, rejected, no
    figures)."""
    if not b.completed:
        return {col: None for col in METRIC_COLUMNS}
    return measured.engine_metrics(b) if b.is_engine else measured.metrics(b)


@dataclass(frozen=True)
class Judgement:
    verdicts: list[Verdict]
    retained: bool
    failed: list[str] = field(default_factory=list)     # the rules it failed


def judge(b: Bundle, campaign_fingerprint: dict | None,
          device_bandwidth: dict | None = None) -> Judgement:
    """Every applicable retention rule's verdict; retained when all pass. device_bandwidth: the
    host's measured cold bandwidth of the run's pool device (bench.store.bandwidth.
    device_bandwidth), the throughput rule's bound; None when none was measured."""
    verdicts = retention.evaluate(b, {"campaign_fingerprint": campaign_fingerprint,
                                      "device_bandwidth": device_bandwidth})
    return Judgement(verdicts, retention.retained(verdicts),
                     [v.rule for v in verdicts if not v.passed])
