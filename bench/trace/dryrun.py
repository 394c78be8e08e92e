"""llama.cpp's scheduler dry-run first pass, found and excluded where traces are read together.

Its router selections depend on the model alone (a reservation pass over fixed tokens, before
real decode), so the traces of different prompts of one model start with a bit-identical
first iteration: the paper's mark (four prompts, identical "step 0" coverage). Every command
reads its traces through `parse_traces`: the traces it is given (and `references`, other
prompts' traces of the same model) are compared, and in every group of two or more whose
first iterations are bit-identical and which differ after it (one file given twice is no
evidence) each trace's first iteration is dropped, kept in `Trace.dry_run` (counted) and the
rest re-indexed. One trace alone cannot show its dry run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from bench.errors import TraceError
from bench.trace.parse import Trace, first_pass_signature, parse_trace


def _body(trace: Trace) -> tuple:
    return tuple((it.kind, tuple((p.layer, p.experts) for p in it.passes))
                 for it in trace.iterations[1:])


def without_dry_runs(traces: Sequence[Trace], references: Sequence[Trace] = ()) -> list[Trace]:
    """`traces`, each whose first iteration is bit-identical to another trace's first (among
    `traces` and `references`) while the traces differ after it, without that iteration: it
    is the scheduler's dry run, kept in `Trace.dry_run` (counted), the rest re-indexed."""
    groups: dict[tuple, list[Trace]] = {}
    for t in [*traces, *references]:
        groups.setdefault((t.model.k, first_pass_signature(t)), []).append(t)
    twins: dict[int, list[str]] = {}
    for group in groups.values():
        if len(group) > 1 and len({_body(t) for t in group}) > 1:
            for t in group:
                twins[id(t)] = [o.source for o in group if o is not t]
    out = []
    for t in traces:
        if id(t) not in twins:
            out.append(t)
            continue
        if len(t.iterations) < 2:
            raise TraceError(t.source, t.iterations[0].line, "the only iteration is a dry-run "
                             "pass (bit-identical to the first of " + ", ".join(twins[id(t)]) +
                             "): no decode left")
        rest = tuple(replace(it, index=i) for i, it in enumerate(t.iterations[1:]))
        out.append(replace(t, iterations=rest, dry_run=t.iterations[:1],
                           meta={**t.meta, "dry_run_twins": twins[id(t)]}))
    return out


def parse_traces(paths: Sequence[str | Path], k: int | None = None,
                 references: Sequence[str | Path] = ()) -> list[Trace]:
    """The traces a command reads, parsed together: dry-run first passes excluded (module
    doc); `references` only help detect them and are not returned."""
    return without_dry_runs([parse_trace(p, k) for p in paths],
                            [parse_trace(p, k) for p in references])
