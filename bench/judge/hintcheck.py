"""The `hint_provenance` retention rule's check (bench.judge.retention), apart so it can be
read and tested on its own. Pure: a run's spec and bundle files in, (passed, reason) out.

A prefetch run counts only when its spec carries the one provenance record the producers write
(bench.matrix.hintplans: source, hints/plan/trace sha256, recall of that plan on that trace),
that record is about the very plans the run replayed, and the cell's label agrees with what the
plan is (paper audit pitfalls 8 and 11). The runner dumps the replay plan and the hint plan into
the bundle (`plan.bin`, `hints.bin`); the check hashes both against the spec and recomputes the
record from them, so a recall figure, an exactness flag or a source the producer got wrong (or a
spec edited by hand) is caught from the bytes the agent read.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping

from bench.errors import BenchError
from bench.matrix.hintplans import SOURCES, label_problem, provenance
from bench.plan.planfile import HINT, REPLAY, decode

HINTS_FILE, PLAN_FILE = "hints.bin", "plan.bin"
RECALL_TOLERANCE = 1e-6


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _record_problem(spec: dict, prov: object) -> str | None:
    if not isinstance(prov, dict):
        return f"hints_provenance {prov!r} is not a provenance record"
    if prov.get("source") not in SOURCES:
        return (f"hints_provenance source {prov.get('source')!r} is not one of "
                f"{', '.join(SOURCES)}")
    if not spec.get("hints_sha256"):
        return "hint plan hash not recorded"
    raw = spec.get("workload")
    work: dict = raw if isinstance(raw, dict) else {}
    for key, want in (("hints_sha256", spec.get("hints_sha256")),
                      ("plan_sha256", spec.get("plan_sha256")),
                      ("trace_sha256", work.get("trace_sha256"))):
        if prov.get(key) != want:
            return (f"the provenance record is about another {key.split('_')[0]} "
                    f"({str(prov.get(key))[:12]}) than the run's ({str(want)[:12]}): its recall "
                    "does not describe the plan replayed")
    r = prov.get("recall")
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) \
            or not 0 <= r <= 1:
        return f"recall {r!r} is not a number in [0, 1]"
    return None


def _dump_problem(spec: dict, prov: dict, files: Mapping[str, bytes]) -> str | None:
    """Recompute the record from the dumped plans; None when it matches."""
    hints_data, plan_data = files.get(HINTS_FILE), files.get(PLAN_FILE)
    if hints_data is None or plan_data is None:
        return "the bundle lacks the replayed plans (plan.bin, hints.bin) to check the hints by"
    if _sha(hints_data) != spec["hints_sha256"]:
        return "the dumped hint plan does not hash to the spec's hints_sha256"
    if _sha(plan_data) != spec.get("plan_sha256"):
        return "the dumped replay plan does not hash to the spec's plan_sha256"
    try:
        plan, hints = decode(plan_data, PLAN_FILE), decode(hints_data, HINTS_FILE)
        if plan.kind != REPLAY or hints.kind != HINT:
            return "the dumped plans are not a replay plan and a hint plan"
        got = provenance(plan, hints, hints_sha256=spec["hints_sha256"],
                         plan_sha256=spec["plan_sha256"], trace_sha256=prov.get("trace_sha256"))
    except BenchError as exc:
        return f"the dumped plans do not decode: {exc.message}"
    if got["source"] != prov["source"] or got.get("origin") != prov.get("origin"):
        return (f"the hint plan replayed says source {got['source']}"
                + (f" (origin {got.get('origin')})" if got.get("origin") else "")
                + f", its record {prov['source']}")
    if abs(got["recall"] - float(prov["recall"])) > RECALL_TOLERANCE or \
            got["exact_next_pass"] != prov.get("exact_next_pass"):
        return (f"recall recomputed from the replayed plans is {got['recall']:.4f}, the record "
                f"says {prov['recall']}: the figure comes from another plan")
    return None


def check_hints(spec: dict, files: Mapping[str, bytes]) -> tuple[bool, str]:
    label = spec.get("prefetch", "none")
    if label in (None, "none"):
        return True, "no prefetch"
    prov = spec.get("hints_provenance")
    why = _record_problem(spec, prov)
    if why is None:
        assert isinstance(prov, dict)
        why = label_problem(str(label), prov) or _dump_problem(spec, prov, files)
    if why is not None:
        return False, why
    assert isinstance(prov, dict)
    return True, (f"{label} = {prov['source']} hints {spec['hints_sha256'][:12]}, recall "
                  f"{float(prov['recall']):.3f} on this plan, recomputed from the dumped plans")
