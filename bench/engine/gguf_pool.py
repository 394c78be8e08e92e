"""A pool over a GGUF model itself (issue 25, item 3; docs/formats.md, "A pool over a GGUF"):
the agent replays a plan over the engine's own file, each (layer, expert) read as its slices of
the layer's expert tensors, so it reads the pages llama.cpp reads for those experts.

The pool is a directory holding `pool.json` (kind "gguf": the model file, its size and identity,
the shape) and `ranges.bin` (every expert's (offset, length) ranges, read by native/poolgguf.c).
The model is not copied: its identity (size, mtime, sha256 of the first MiB) is recorded so a
changed model is noticed, and the agent refuses a file whose size differs."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import replace
from pathlib import Path

from bench.engine.gguf_read import EXPERT_TENSORS, expert_ranges, model_facts
from bench.errors import InputError
from bench.paths import write_replacing

RANGES_NAME = "ranges.bin"
RANGES_HEADER = struct.Struct("<4sIIIII")    # "BRNG", version 1, L, E, ranges per expert, 0
RANGE = struct.Struct("<QQ")
HEAD_BYTES = 1 << 20


def model_identity(model: Path) -> dict:
    """What names this model file's bytes cheaply: size, mtime_ns and the sha256 of its first
    MiB (the GGUF header and tensor table, where any change of shape or layout shows)."""
    st = model.stat()
    with model.open("rb") as f:
        head = hashlib.sha256(f.read(HEAD_BYTES)).hexdigest()
    return {"bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "head_sha256": head}


def plan_over_gguf(plan, facts: dict, model: Path):
    """The plan (bench.plan.planfile.Plan), checked to be of the model's shape (a trace of
    another model would read other experts' bytes), its provenance naming the model."""
    if (plan.layers, plan.experts_per_layer) != (facts["layers"], facts["experts"]):
        raise InputError(f"the trace has {plan.layers} layers x {plan.experts_per_layer} "
                         f"experts, the model {model} {facts['layers']} x {facts['experts']}: "
                         "trace this model (bench engine trace) or name the model it came from")
    return replace(plan, meta={**plan.meta, "pool": {"kind": "gguf", "model": str(model),
                                                     "model_bytes": facts["bytes"]}})


def ranges_blob(facts: dict) -> bytes:
    """The ranges file: the header, then each expert's ranges in (layer, expert) order."""
    per = len(EXPERT_TENSORS)
    out = [RANGES_HEADER.pack(b"BRNG", 1, facts["layers"], facts["experts"], per, 0)]
    for layer in range(facts["layers"]):
        for expert in range(facts["experts"]):
            rs = expert_ranges(facts, layer, expert)
            if sum(n for _, n in rs) != facts["expert_bytes"]:
                raise InputError(f"{facts['name']}: the experts of layer {layer} are not "
                                 f"{facts['expert_bytes']} bytes each (layers differ in "
                                 "expert size: a plan needs one size)")
            out += [RANGE.pack(off, n) for off, n in rs]
    return b"".join(out)


def write_gguf_pool(model: Path, directory: Path, facts: dict | None = None) -> dict:
    """Write the pool over `model` into `directory` (made if missing; a directory holding
    anything but a gguf pool's two files is refused untouched). Returns pool.json's content."""
    facts = facts or model_facts(model)
    if directory.exists() and not directory.is_dir():
        raise InputError(f"{directory} exists and is not a directory")
    extra = sorted(p.name for p in directory.iterdir()
                   if p.name not in ("pool.json", RANGES_NAME)) if directory.is_dir() else []
    if extra:
        raise InputError(f"{directory} holds {', '.join(extra[:3])}: not a pool over a GGUF; "
                         "choose an empty or new directory (--pool-out)")
    blob = ranges_blob(facts)
    manifest = {"kind": "gguf", "format": 1, "file": str(model.resolve()),
                "file_bytes": facts["bytes"], "model": model_identity(model),
                "layers": facts["layers"], "experts_per_layer": facts["experts"],
                "expert_bytes": facts["expert_bytes"], "ranges": RANGES_NAME,
                "ranges_per_expert": len(EXPERT_TENSORS),
                "ranges_sha256": hashlib.sha256(blob).hexdigest(), "complete": True}
    try:
        directory.mkdir(parents=False, exist_ok=True)
        write_replacing(directory / RANGES_NAME, lambda f: f.write(blob))
        # pool.json last: a pool whose manifest is there is whole
        write_replacing(directory / "pool.json", lambda f: f.write(
            (json.dumps(manifest, sort_keys=True) + "\n").encode()))
    except OSError as exc:
        raise InputError(f"cannot write the pool {directory}: {os.strerror(exc.errno or 0)}"
                         if exc.errno else f"cannot write the pool {directory}: {exc}") from None
    return manifest
