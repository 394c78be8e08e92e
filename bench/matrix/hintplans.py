"""Hint plans for prefetch cells (paper §7): made from the replay plan, written content
addressed, and described by ONE provenance record that every producer (`bench run --hints`,
campaigns) writes and the retention rule `hint_provenance` checks.

A prefetch cell names its hint plan by a label (`{C}-...-{label}-{delivery}`):

- `oracle`: hint pass j = replay pass j+1 (bench.plan.planfile.oracle_hints), the one-pass
  upper bound;
- `pilot`: the predictor. bench has no engine to record the paper's PILOT plan from, so the
  pilot it makes is the model-blind previous-token recurrence (previous_token_hints); an
  engine's dumped prediction plan is shipped as a named file (`--hints FILE`, a matrix's
  `workload.hints`) under the same label;
- any other label: a named hint plan file (checked against the replay plan's shape).

The provenance record (spec `hints_provenance`):
  source          oracle | previous-token | file
  origin          for a file: the `source` its own metadata names (else "unknown")
  file            for a file: its base name
  hints_sha256, plan_sha256, trace_sha256: what the record is about
  recall, precision, hinted, demanded, per_layer_range: bench.sim.recall of THIS hint plan on
                  THIS plan (pitfall 11: a recall figure and a hint plan from different runs)
  exact_next_pass every hint pass names exactly the experts of the next replay pass (an
                  oracle, whatever it is called)
`label_problem` says why a label and a record disagree (pitfall 8: oracle hints labelled as the
predictor).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from bench.errors import InputError
from bench.matrix.cells import parse_cell
from bench.plan.planfile import (Plan, hints_from_file, oracle_hints, previous_token_hints,
                                 read_plan)
from bench.plan.planinfo import PlanInfo
from bench.plan.prepared import write_hint_plan
from bench.sim.recall import recall

SOURCES = ("oracle", "previous-token", "file")
BUILTIN = {"oracle": "oracle", "pilot": "previous-token", "previous_token": "previous-token",
           "previous-token": "previous-token"}
MAX_HINT_FILE = 256 << 20


def default_choice(label: str, files: dict[str, str] | None = None) -> str:
    """What a cell's hint label ships when nobody says otherwise: the built-in plan of that
    label, or the file the matrix maps it to; InputError naming the fix otherwise."""
    if files and label in files:
        return files[label]
    if label in BUILTIN:
        return label
    raise InputError(f"hint plan label {label!r} names no built-in plan (oracle, pilot)",
                     hint=f"give the file: --hints FILE, or in a matrix workload.hints = "
                          f"{{ {label} = \"FILE\" }}")


def make_hints(plan: Plan, choice: str) -> Plan:
    """The hint plan `choice` (oracle, pilot, previous-token, or a hint plan file) for `plan`."""
    if choice in BUILTIN:
        return oracle_hints(plan) if BUILTIN[choice] == "oracle" else previous_token_hints(plan)
    path = Path(choice).expanduser()
    if not path.is_file():
        raise InputError(f"--hints {choice!r} is neither oracle, pilot, previous-token nor a "
                         "hint plan file", hint="write a hint plan with `bench plan TRACE -o "
                                                "P --hints oracle|previous-token`")
    if path.stat().st_size > MAX_HINT_FILE:
        raise InputError(f"{path}: hint plan of {path.stat().st_size} bytes is above "
                         f"{MAX_HINT_FILE} bytes")
    return hints_from_file(plan, read_plan(path), path.name)


def _exact(plan: Plan, hints: Plan) -> bool:
    flat = [p for it in plan.iterations for p in it.passes]
    guess = [p for it in hints.iterations for p in it.passes]
    return len(flat) == len(guess) and all(
        g.layer == n.layer and set(g.experts) == set(n.experts)
        for g, n in zip(guess, flat[1:]))


def provenance(plan: Plan, hints: Plan, *, hints_sha256: str, plan_sha256: str,
               trace_sha256: str | None) -> dict:
    """The one provenance record (module doc) of `hints` replayed against `plan`."""
    raw = hints.meta.get("provenance")
    inner: dict = raw if isinstance(raw, dict) else {}
    source = str(inner.get("source", "unknown"))
    rec = recall(plan, hints)
    out: dict = {"source": source if source in SOURCES else "file"}
    if out["source"] == "file":
        out["origin"] = str(inner.get("origin") or "unknown")[:64]
        out["file"] = str(inner.get("file", ""))[:128]
    out.update(hints_sha256=hints_sha256, plan_sha256=plan_sha256, trace_sha256=trace_sha256,
               recall=round(rec["recall"], 6), precision=round(rec["precision"], 6),
               hinted=rec["hinted"], demanded=rec["demanded"],
               per_layer_range=rec["per_layer_range"], exact_next_pass=_exact(plan, hints))
    return out


def label_problem(label: str, prov: dict) -> str | None:
    """Why a cell's hint label and the provenance record of the plan it carries disagree."""
    source, origin = prov.get("source"), prov.get("origin")
    exact = prov.get("exact_next_pass") is True
    if label == "oracle":
        if source != "oracle" and not exact:
            return f"labelled oracle but the hint plan is {source} (not the next pass)"
        return None
    if source == "oracle" or origin == "oracle" or exact:
        what = "the oracle's" if (source == "oracle" or origin == "oracle") else \
            "an exact next-pass (oracle) plan's"
        return f"labelled {label} but carries {what} hints (recall {prov.get('recall')})"
    if label in BUILTIN and BUILTIN[label] == "previous-token" and source not in (
            "previous-token", "file"):
        return f"labelled {label} but the hint plan is {source}"
    return None


def prepare_hints(info: PlanInfo, plan_path: Path, label: str, choice: str | None,
                  data_dir: Path) -> tuple[PlanInfo, Path]:
    """The hint plan of `choice` (default: the label's own, default_choice) for the plan at
    plan_path: written into <data_dir>/plans/<sha256>.hints.bin; (PlanInfo carrying its hash
    and provenance record, its path). A label the plan contradicts is not refused here:
    the run goes ahead and retention (`hint_provenance`) rejects it with the reason."""
    plan = read_plan(plan_path)
    hints = make_hints(plan, choice or default_choice(label))
    sha, path = write_hint_plan(hints, data_dir)
    prov = provenance(plan, hints, hints_sha256=sha, plan_sha256=info.sha256,
                      trace_sha256=info.trace_sha256)
    prov["label"] = label
    return replace(info, hints_sha256=sha, hints_provenance=prov), path


def campaign_hint_plans(info: PlanInfo, plan_path: Path, cells: Iterable[str],
                        files: dict[str, str] | None, data_dir: Path) -> dict[str, PlanInfo]:
    """label -> the campaign plan carrying that label's hint plan, for every hint label among
    `cells` (the matrix's workload.hints maps labels to files; oracle and pilot are built in).
    Made once per campaign session, deterministically: a resumed campaign ships the same
    hashes."""
    labels = sorted({c.hints for c in map(parse_cell, cells) if c.hints is not None})
    return {label: prepare_hints(info, plan_path, label, default_choice(label, files),
                                 data_dir)[0] for label in labels}
