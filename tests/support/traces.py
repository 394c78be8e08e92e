"""Trace lines for tests: a header and one router record, as the production format writes them."""

import json


def header(k=2, experts=8, layers=3, expert_bytes=4096, model="t"):
    return json.dumps({"model": model, "k": k, "experts_per_layer": experts, "layers": layers,
                       "expert_bytes": expert_bytes})


def rec(layer, experts, step=None, **extra):
    r = {"layer": layer, "experts": experts}
    if step is not None:
        r["step"] = step
    r.update(extra)
    return json.dumps(r)
