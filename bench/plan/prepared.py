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
from bench.trace.parse import parse_trace
from bench.trace.synth import PRESETS, generate, preset


def plan_from_trace_file(trace: Path, k: int | None = None, data_dir: Path | None = None
                         ) -> tuple[PlanInfo, Path]:
    """Parse a trace, write its plan into <data_dir>/plans/<sha256>.bin; (PlanInfo, path)."""
    trace = Path(trace)
    if not trace.is_file():
        raise InputError(f"{trace}: no such trace file" if not trace.exists() else
                         f"{trace}: not a regular file (a trace is a JSONL file)")
    trace_sha = _sha256(trace)
    plan = plan_from_trace(parse_trace(trace, k=k),
                           meta={"trace": trace.name, "trace_sha256": trace_sha})
    data = encode(plan)
    sha = hashlib.sha256(data).hexdigest()
    d = private_dir(Path(data_dir or default_data_dir()) / "plans")
    path = d / f"{sha}.bin"
    if not path.exists():
        write_private(path, data)
    tighten(path, PRIVATE_FILE)
    info = PlanInfo(sha256=sha, layers=plan.layers, experts_per_layer=plan.experts_per_layer,
                    expert_bytes=plan.expert_bytes, iterations=len(plan.iterations),
                    trace=trace.name, trace_sha256=trace_sha)
    return info, path


def _sha256(path: Path) -> str:
    """The file's sha256, streamed (a trace is never held whole for its digest)."""
    h = hashlib.sha256()
    try:
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the trace ({exc.strerror or exc})") from None
    return h.hexdigest()


def workload_plan(workload: dict, data_dir: Path) -> tuple[PlanInfo, Path]:
    """(PlanInfo, path) of the campaign's workload: a synth preset is generated
    deterministically into <data_dir>/traces/, a file is used as is."""
    trace = str(workload.get("trace"))
    if trace in PRESETS:
        d = private_dir(Path(data_dir) / "traces")
        dom = workload.get("domain")
        kw = {"domain": int(dom)} if isinstance(dom, int) or (isinstance(dom, str)
                                                              and dom.isdigit()) else {}
        name = trace + (f"-d{kw['domain']}" if kw else "")
        for key, field_, tag in (("layers", "layers", "l"), ("experts", "experts_per_layer", "e"),
                                 ("expert_bytes", "expert_bytes", "b"), ("tokens", "tokens", "t")):
            if workload.get(key):      # a re-sized preset (a matrix scale): its own file
                kw[field_] = int(workload[key])
                name += f"-{tag}{kw[field_]}"
        path = d / f"{name}.jsonl"
        if not path.exists():
            write_private(path, ("\n".join(generate(preset(trace, **kw))) + "\n").encode())
        tighten(path, PRIVATE_FILE)
    else:
        path = Path(trace).expanduser()
    return plan_from_trace_file(path, data_dir=data_dir)


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
