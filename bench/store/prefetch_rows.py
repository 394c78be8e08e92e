"""What the prefetch results view (bench.results.prefetch_views) reads of stored runs beyond
the flat run rows: each run's hint plan provenance record (its spec's `hints_provenance`:
source, recall of that plan on that trace, ...) and the agent's delivery counters
(agent_summaries: submitted, overwritten, completed; `left` from the stored summary) with,
as stored, the summary's per-pass counters (`per_pass`: passes, passes_done and the
pass_hints_* lists of agents that record them), from which the view takes the measured pass."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import select

from bench.store.db import Store
from bench.store.models import AgentSummary, Run

CHUNK = 500
PER_PASS_KEYS = ("passes", "passes_done", "pass_hints_submitted", "pass_hints_overwritten",
                 "pass_hints_completed", "pass_hints_left")
PROVENANCE_KEYS = ("source", "origin", "recall", "precision", "hinted", "demanded",
                   "per_layer_range", "exact_next_pass", "hints_sha256")


def prefetch_details(store: Store, run_ids: Sequence[str]) -> dict[str, dict]:
    """run_id -> {"provenance": {...} | None, "hints": {submitted, overwritten, completed,
    left} (None where not recorded), "per_pass": {PER_PASS_KEYS: stored value or None}}."""
    out: dict[str, dict] = {}
    ids = list(run_ids)
    with store.session() as s:
        for i in range(0, len(ids), CHUNK):
            q = (select(Run.run_id, Run.spec, AgentSummary.hints_submitted,
                        AgentSummary.hints_overwritten, AgentSummary.hints_completed,
                        AgentSummary.data)
                 .outerjoin(AgentSummary, AgentSummary.run_id == Run.id)
                 .where(Run.run_id.in_(ids[i:i + CHUNK])))
            for rid, spec, sub, over, comp, data in s.execute(q):
                prov = (spec or {}).get("hints_provenance") if isinstance(spec, dict) else None
                hints = (data or {}).get("hints") if isinstance(data, dict) else None
                left = hints.get("left") if isinstance(hints, dict) else None
                out[rid] = {
                    "provenance": {k: prov.get(k) for k in PROVENANCE_KEYS}
                    if isinstance(prov, dict) else None,
                    "hints": {"submitted": sub, "overwritten": over, "completed": comp,
                              "left": left if isinstance(left, int) else None},
                    "per_pass": {k: data.get(k) if isinstance(data, dict) else None
                                 for k in PER_PASS_KEYS}}
    return out
