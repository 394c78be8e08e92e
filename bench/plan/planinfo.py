"""What the controller knows of a plan it ships (and of its hint plan): hashes, geometry,
iterations, the trace it came from, and where it lives on a host. Pure and light (no numpy),
so run specs can take it without loading the plan machinery."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PlanInfo:
    """What the controller knows of the plan it ships (and of its hint plan)."""
    sha256: str
    layers: int
    experts_per_layer: int
    expert_bytes: int
    iterations: int
    trace: str
    trace_sha256: str | None = None
    batch: int = 1
    hints_sha256: str | None = None
    hints_provenance: dict | None = None
    domain: str | None = None             # the trace domain's label (bench.plan.workload)
    accepted_tokens: int | None = None    # of one replay of the plan (seconds per token)
    fixed_set_bytes: int | None = None    # a fixed-set plan (admission): the set's bytes

    @property
    def remote_path(self) -> str:
        return f"plans/{self.sha256}.bin"

    @property
    def hints_remote_path(self) -> str | None:
        return f"plans/{self.hints_sha256}.hints.bin" if self.hints_sha256 else None

    @property
    def pool_bytes(self) -> int:
        return self.layers * self.experts_per_layer * self.expert_bytes

    @property
    def geometry(self) -> tuple[int, int, int]:
        return (self.layers, self.experts_per_layer, self.expert_bytes)
