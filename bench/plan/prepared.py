"""A trace prepared for shipping (a file, or a campaign workload's synth preset generated
deterministically): its replay plan written content-addressed into the data
directory (`<data_dir>/plans/<sha256>.bin`), described by a bench.plan.planinfo.PlanInfo.
Private like everything in the data directory (bench.paths): plans/ and traces/ 0700, their
files 0600."""

from __future__ import annotations

import hashlib
from pathlib import Path

from bench.errors import InputError
from bench.paths import PRIVATE_FILE, default_data_dir, private_dir, tighten, write_private
from bench.plan.planfile import Plan, encode, plan_from_trace
from bench.plan.planinfo import PlanInfo
from bench.plan.workload import check_trace_file, file_sha256, fixed_set, read_streams, streams
from bench.trace.parse import Trace, parse_trace


def plan_from_trace_file(trace: Path, k: int | None = None, data_dir: Path | None = None
                         ) -> tuple[PlanInfo, Path]:
    """Parse a trace, write its plan into <data_dir>/plans/<sha256>.bin; (PlanInfo, path)."""
    trace = Path(trace)
    check_trace_file(trace)
    return _ship(parse_trace(trace, k=k), trace.name, file_sha256(trace), data_dir)


def _ship(trace: Trace, name: str, trace_sha: str, data_dir: Path | None, *, batch: int = 1,
          domain: str | None = None, meta: dict | None = None) -> tuple[PlanInfo, Path]:
    """The plan of a parsed trace written content-addressed into <data_dir>/plans/."""
    plan = plan_from_trace(trace, meta={"trace": name, "trace_sha256": trace_sha,
                                        **({"batch": batch} if batch > 1 else {}),
                                        **(meta or {})})
    data = encode(plan)
    sha = hashlib.sha256(data).hexdigest()
    d = private_dir(Path(data_dir or default_data_dir()) / "plans")
    path = d / f"{sha}.bin"
    if not path.exists():
        write_private(path, data)
    tighten(path, PRIVATE_FILE)
    info = PlanInfo(sha256=sha, layers=plan.layers, experts_per_layer=plan.experts_per_layer,
                    expert_bytes=plan.expert_bytes, iterations=len(plan.iterations),
                    trace=name, trace_sha256=trace_sha, batch=batch, domain=domain,
                    accepted_tokens=trace.accepted_tokens,
                    fixed_set_bytes=(meta or {}).get("fixed_set_bytes"))
    return info, path


def workload_plan(workload: dict, data_dir: Path) -> tuple[PlanInfo, Path]:
    """(PlanInfo, path) of a campaign's workload (bench.plan.workload): its domain's trace, a
    batch of streams merged through the canonical parser, or a fixed set read again and
    again; a synth preset is generated deterministically into <data_dir>/traces/."""
    s = streams(workload, data_dir)
    trace, sha = read_streams(s)
    name = "+".join(p.name for p in s.paths) if len(s.paths) <= 4 else \
        f"{s.paths[0].name}+{len(s.paths) - 1} more"
    meta = None
    if workload.get("fixed_set_bytes"):
        size = trace.model.expert_bytes
        if not size:
            raise InputError(f"{name}: the trace header has no expert_bytes, which a fixed set "
                             "needs")
        trace = fixed_set(trace, size, int(workload["fixed_set_bytes"]))
        meta = dict(trace.meta)
    return _ship(trace, name, sha, data_dir, batch=s.batch, domain=s.domain, meta=meta)


def write_hint_plan(hints: Plan, data_dir: Path) -> tuple[str, Path]:
    """A hint plan written content-addressed beside the replay plans:
    `<data_dir>/plans/<sha256>.hints.bin` (the name a run's spec gives it on the host);
    (sha256, path)."""
    data = encode(hints)
    sha = hashlib.sha256(data).hexdigest()
    path = hints_file(private_dir(Path(data_dir) / "plans"), sha)
    if not path.exists():
        write_private(path, data)
    tighten(path, PRIVATE_FILE)
    return sha, path


def hints_file(plans_dir: Path, sha: str) -> Path:
    """Where the controller keeps hint plan `sha` (next to the replay plan it was made for)."""
    return Path(plans_dir) / f"{sha}.hints.bin"
