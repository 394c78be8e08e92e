"""Recall of a next-pass prediction plan (hint plan) against the trace it was made for.

Hint pass j is a guess at replay pass j+1 (docs/formats.md). Recall counts, over every pass
j+1 that has a predecessor, the experts of pass j+1 that hint pass j named, divided by the
experts pass j+1 read; per layer it is grouped by the predicted pass's layer. The model-blind
baseline is previous-token recurrence: hint what the same layer read the last time it was
routed (the paper: 64.7% for the engine's predictor against 32-36% for recurrence).
"""

from __future__ import annotations

from bench.errors import InputError
from bench.plan.planfile import HINT, Plan, previous_token_hints


def recall(plan: Plan, hints: Plan) -> dict:
    if hints.kind != HINT:
        raise InputError("recall needs a hint plan")
    actual = [p for it in plan.iterations for p in it.passes]
    guess = [p for it in hints.iterations for p in it.passes]
    if len(actual) != len(guess):
        raise InputError(f"hint plan has {len(guess)} passes, the trace {len(actual)}")
    hit_total = want_total = hinted = wrong_layer = 0
    per_layer: dict[int, list[int]] = {}
    for j in range(len(actual) - 1):
        target, g = actual[j + 1], guess[j]
        if g.experts and g.layer != target.layer:
            wrong_layer += 1
        named = set(g.experts) if g.layer == target.layer else set()
        hits = sum(1 for e in target.experts if e in named)
        hit_total += hits
        want_total += len(target.experts)
        hinted += len(g.experts)
        acc = per_layer.setdefault(target.layer, [0, 0])
        acc[0] += hits
        acc[1] += len(target.experts)
    layers = {layer: (h / w if w else 0.0) for layer, (h, w) in sorted(per_layer.items())}
    return {
        "recall": hit_total / want_total if want_total else 0.0,
        "hits": hit_total,
        "demanded": want_total,
        "hinted": hinted,
        "precision": hit_total / hinted if hinted else 0.0,
        "hint_passes_for_wrong_layer": wrong_layer,
        "per_layer": layers,
        "per_layer_range": [min(layers.values()), max(layers.values())] if layers else None,
        "provenance": hints.meta.get("provenance", {"source": "unknown"}),
    }


def recall_report(plan: Plan, hints: Plan) -> dict:
    """Recall of `hints` next to the previous-token baseline on the same plan."""
    return {"hints": recall(plan, hints),
            "previous_token_baseline": recall(plan, previous_token_hints(plan))}
