"""What a matrix workload replays, as one trace the plan is made from.

- `domain` picks the domain's trace: for a synth preset, a name of DOMAINS (the paper's four
  trace domains) or its index selects the preset's domain stream (bench.trace.synth: each
  domain maps popularity ranks to experts through its own permutation); for a trace file the
  file is the domain's trace and `domain` labels it.
- `batch` = N replays N streams decoded together, merged through the canonical parser's
  batch merge (bench.trace.parse.merge: iteration i of the merge reads, per layer and routing,
  the union of the N streams' experts; accepted tokens add up). A synth preset's streams are
  its domain's requests with seeds 0..N-1; a trace file is one stream, so N > 1 needs a preset.
- `fixed_set_bytes` (the admission experiment of §9) replaces the trace's replay by repeated
  reads of a fixed expert set of that size: the trace's most-selected experts (ties by layer,
  then expert), one plan iteration reading the whole set once, which every pass repeats.

Each variant is a different plan and a different trace digest, so the workload identity
(bench.judge.identity: trace_sha256, plan_sha256, batch, domain) tells them apart. Pure but
for the files it reads and writes under the data directory."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

from bench.errors import InputError
from bench.paths import PRIVATE_FILE, private_dir, tighten, write_private
from bench.trace.dryrun import parse_traces
from bench.trace.parse import NORMAL, Iteration, Pass, Trace, merge
from bench.trace.synth import PRESETS, generate, params_digest, preset

DOMAINS = ("prose", "code", "math", "chat")   # index = the synth presets' domain number
MAX_BATCH = 64


@dataclass(frozen=True)
class Streams:
    """The trace files a workload replays (one per stream), and the labels it records."""
    paths: tuple[Path, ...]
    domain: str | None
    batch: int


def domain_index(domain: object) -> int:
    """A domain name of DOMAINS or a non-negative index; None: the preset's first domain."""
    if domain is None:
        return 0
    if isinstance(domain, int) and not isinstance(domain, bool) and domain >= 0:
        return domain
    text = str(domain).strip().lower()
    if text.isdigit():
        return int(text)
    if text in DOMAINS:
        return DOMAINS.index(text)
    raise InputError(f"workload domain {str(domain)[:40]!r} is not a trace domain",
                     hint=f"use one of {', '.join(DOMAINS)} or a domain index")


def domain_name(domain: object) -> str | None:
    """The canonical label of a domain (its name where it has one)."""
    if domain is None:
        return None
    i = domain_index(domain)
    return DOMAINS[i] if i < len(DOMAINS) else str(i)


def _batch(workload: dict) -> int:
    n = workload.get("batch") or 1
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_BATCH:
        raise InputError(f"workload batch {str(n)[:20]!r} must be a whole number in "
                         f"1..{MAX_BATCH}")
    return n


def streams(workload: dict, data_dir: Path) -> Streams:
    """The trace files of a workload: a synth preset's streams generated deterministically
    into <data_dir>/traces/ (kept: the same workload reuses them), or the trace file."""
    trace = str(workload.get("trace"))
    n = _batch(workload)
    if trace not in PRESETS:
        if n > 1:
            raise InputError(f"workload batch {n} needs {n} streams, and the trace file "
                             f"{trace} is one",
                             hint="use a synth preset for a batch, or batch = 1")
        return Streams((Path(trace).expanduser(),), domain_name(workload.get("domain"))
                       if workload.get("domain") is not None else None, 1)
    dom = domain_index(workload.get("domain"))
    d = private_dir(Path(data_dir) / "traces")
    kw: dict = {"domain": dom}
    name = trace + (f"-d{dom}" if dom else "")   # the first domain keeps the file name it had
    for key, field_, tag in (("layers", "layers", "l"), ("experts", "experts_per_layer", "e"),
                             ("expert_bytes", "expert_bytes", "b"), ("tokens", "tokens", "t")):
        if workload.get(key):      # a re-sized preset (a matrix scale): its own file
            kw[field_] = int(workload[key])
            name += f"-{tag}{kw[field_]}"
    paths = []
    for seed in range(n):
        params = preset(trace, seed=seed, **kw)
        # the parameters' digest in the name: a changed generator never reuses a stale file
        path = d / f"{name}{f'-s{seed}' if seed else ''}-{params_digest(params)}.jsonl"
        if not path.exists():
            write_private(path, ("\n".join(generate(params)) + "\n").encode())
        tighten(path, PRIVATE_FILE)
        paths.append(path)
    return Streams(tuple(paths), domain_name(dom), n)


def file_sha256(path: Path) -> str:
    """The file's sha256, streamed (a trace is never held whole for its digest)."""
    h = hashlib.sha256()
    try:
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the trace ({exc.strerror or exc})") from None
    return h.hexdigest()


def check_trace_file(path: Path) -> None:
    if not path.is_file():
        raise InputError(f"{path}: no such trace file" if not path.exists() else
                         f"{path}: not a regular file (a trace is a JSONL file)")


def read_streams(s: Streams, k: int | None = None) -> tuple[Trace, str]:
    """The workload's one trace (the batch merge of its streams) and its digest: the file's
    sha256 for one stream, sha256 over the streams' digests in order for a batch."""
    for p in s.paths:
        check_trace_file(p)
    shas = [file_sha256(p) for p in s.paths]
    traces = parse_traces(s.paths, k)  # a batch's streams show their dry-run pass
    if len(traces) == 1:
        return traces[0], shas[0]
    digest = hashlib.sha256(("batch:" + ",".join(shas)).encode()).hexdigest()
    return merge(traces), digest


def fixed_set(trace: Trace, expert_bytes: int, set_bytes: int) -> Trace:
    """A one-iteration trace reading the trace's most-selected experts, as many whole experts
    as fit in set_bytes (ties by layer, then expert), grouped one pass per layer."""
    if set_bytes < expert_bytes:
        raise InputError(f"fixed_set_bytes {set_bytes} is smaller than one expert "
                         f"({expert_bytes} bytes)")
    counts = Counter((p.layer, e) for it in trace.iterations for p in it.passes
                     for e in p.experts)
    want = set_bytes // expert_bytes
    if want > len(counts):
        raise InputError(f"fixed_set_bytes {set_bytes} asks for {want} experts; the trace "
                         f"selects only {len(counts)} distinct ones "
                         f"({len(counts) * expert_bytes} bytes)",
                         hint="a smaller fixed set, or a longer trace")
    chosen = sorted(counts, key=lambda le: (-counts[le], le))[:want]
    by_layer: dict[int, list[int]] = {}
    for layer, e in sorted(chosen):
        by_layer.setdefault(layer, []).append(e)
    passes = tuple(Pass(layer, tuple(ex)) for layer, ex in sorted(by_layer.items()))
    it = Iteration(0, NORMAL, 1, passes)
    # the pool keeps the trace's geometry, whatever layers and experts the set happens to hold
    model = replace(trace.model, layers=trace.layer_count(),
                    experts_per_layer=trace.expert_count())
    return Trace(trace.source, model, (it,), 0,
                 {"fixed_set_bytes": want * expert_bytes, "fixed_set_experts": want})
