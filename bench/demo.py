"""`bench demo`: the trace pipeline end to end on synthetic traces of the production model.

Until campaigns land (the smoke matrix on the local host), the demo runs every pure stage of
the data flow for real: synthesize four domains, parse them with the canonical parser, check
them, measure locality (Table 1), simulate the policies under fair windows (Fig. 1, per-layer
and global, same-domain and off-domain static tables), run the demand model over the capacity
sweep (Table 2's miss column, capacities scaled to the model's pool), and write the replay plan, hint plans and a frequency table the
agent reads. Every file lands in one directory so any figure can be recomputed.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .demand import demand
from .locality import locality
from .planfile import (frequency_table, oracle_hints, plan_from_trace, previous_token_hints,
                       write_plan)
from .recall import recall_report
from .sim import simulate
from .synth import generate, preset
from .trace import parse_trace, suspicious_first_passes
from .units import parse_size

DOMAINS = ("prose", "code", "math", "chat")
# The paper's capacity sweep (Table 2) on the 1.45 TB K3 pool, as fractions of the pool so
# every model preset is swept over the same relative capacities.
PAPER_POOL_BYTES = 1.45e12
PAPER_CAPACITIES = ("448G", "256G", "128G", "64G")


def sweep_capacities(pool_bytes: int) -> list[int]:
    """The paper's capacities scaled to this pool, rounded down to whole MiB."""
    mib = 1 << 20
    return [max(mib, int(parse_size(c) / PAPER_POOL_BYTES * pool_bytes) // mib * mib)
            for c in PAPER_CAPACITIES]

Step = Callable[[str], None]


def run_demo(out: Path, model: str = "k3", budgets: tuple[int, ...] = (8, 16, 32),
             seed: int = 0, step: Step = lambda _msg: None) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for d, name in enumerate(DOMAINS):
        step(f"synthesizing the {name} trace ({model})")
        p = out / f"{model}-{name}.jsonl"
        tmp = p.with_name(p.name + ".tmp")
        with tmp.open("w") as fh:
            for line in generate(preset(model, domain=d, seed=seed)):
                fh.write(line + "\n")
        tmp.replace(p)
        paths.append(p)
    step("parsing with the canonical parser")
    traces = [parse_trace(p) for p in paths]
    step("measuring locality")
    stats = locality(traces)
    rows = []
    for t in traces:
        step(f"simulating policies on {Path(t.source).name} (per-layer, fair windows)")
        rows += simulate(t, regime="per-layer", budgets=budgets)
    step("simulating the global pool on the prose trace")
    rows += simulate(traces[0], regime="global", budgets=budgets)
    step("off-domain static tables (trained on prose)")
    off = []
    for t in traces[1:]:
        off += simulate(t, policies=("static", "lru"), regime="per-layer", budgets=budgets,
                        train=traces[0])
    step("demand model over the capacity sweep")
    plan = plan_from_trace(traces[0], meta={"source": traces[0].source})
    pool_bytes = plan.layers * plan.experts_per_layer * plan.expert_bytes
    demand_rows = demand(plan, sweep_capacities(pool_bytes))
    step("writing the replay plan, hint plans and frequency table")
    write_plan(out / "plan.bin", plan)
    oracle = oracle_hints(plan)
    write_plan(out / "plan.oracle-hints.bin", oracle)
    write_plan(out / "plan.previous-token-hints.bin", previous_token_hints(plan))
    freq = frequency_table(plan)
    (out / "plan.freq").write_text("# layer expert count\n" + "".join(
        f"{l} {e} {n}\n" for (l, e), n in sorted(freq.items())))
    return {
        "directory": str(out),
        "parse": [t.summary() for t in traces],
        "suspicious_first_pass": suspicious_first_passes(traces),
        "locality": stats,
        "sim": rows,
        "sim_off_domain": off,
        "demand": demand_rows,
        "recall": recall_report(plan, oracle),
        "plan": {"iterations": len(plan.iterations), "passes": plan.passes, "reads": plan.reads,
                 "logical_bytes": plan.logical_bytes, "distinct_experts": len(freq)},
    }
