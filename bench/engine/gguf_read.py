"""Facts about a GGUF MoE model read with gguf's GGUFReader (no llama.cpp): its shape, where
each expert tensor lies in the file, and the router weights. What the trace header, the
independent router check (tests) and a plan over the file itself (issue 25 item 3) read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bench.engine.extra import need
from bench.errors import InputError

EXPERT_TENSORS = ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps")


def _reader(model: Path) -> Any:
    gguf = need("gguf")
    try:
        return gguf.GGUFReader(str(model))
    except Exception as exc:   # noqa: BLE001 - gguf's reader raises many kinds on a bad file
        raise InputError(f"{model}: not a GGUF file gguf can read: "
                         f"{type(exc).__name__}: {exc}") from None


def _scalar(r: Any, key: str) -> int | str | None:
    f = r.get_field(key)
    if f is None:
        return None
    v = f.contents()
    return v if isinstance(v, (int, str)) else None


def model_facts(model: Path) -> dict:
    """arch, name, layers, experts, k, expert_bytes (the bytes of one expert across its three
    tensors), file bytes, and for each expert tensor its absolute file offset, bytes and
    per-expert stride: what a plan over the file needs."""
    r = _reader(model)
    arch = _scalar(r, "general.architecture")
    if not isinstance(arch, str):
        raise InputError(f"{model}: no general.architecture")
    layers = _scalar(r, f"{arch}.block_count")
    experts = _scalar(r, f"{arch}.expert_count")
    k = _scalar(r, f"{arch}.expert_used_count")
    if not (isinstance(layers, int) and isinstance(experts, int) and isinstance(k, int)):
        raise InputError(f"{model}: not an MoE model ({arch}.block_count, expert_count and "
                         "expert_used_count are needed)")
    tensors = {}
    for t in r.tensors:
        parts = t.name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[2] in EXPERT_TENSORS:
            tensors[t.name] = {"offset": int(t.data_offset), "bytes": int(t.n_bytes),
                               "stride": int(t.n_bytes) // experts}
    per_layer = [sum(v["stride"] for n, v in tensors.items() if n.startswith(f"blk.{i}."))
                 for i in range(layers)]
    name = _scalar(r, "general.name")
    return {"arch": arch, "name": name if isinstance(name, str) else model.name,
            "layers": layers, "experts": experts, "k": k,
            "expert_bytes": max(per_layer) if per_layer else 0,
            "bytes": model.stat().st_size, "expert_tensors": tensors}


def router_weights(model: Path) -> dict[int, np.ndarray]:
    """Each layer's router matrix (ffn_gate_inp, f32) as numpy [experts, n_embd], read from
    the file: logits = W @ x for the router's input x."""
    r = _reader(model)
    out = {}
    for t in r.tensors:
        parts = t.name.split(".")
        if len(parts) == 4 and parts[0] == "blk" and parts[2] == "ffn_gate_inp":
            ne = [int(n) for n in t.shape]          # ggml order: [n_embd, experts]
            out[int(parts[1])] = np.asarray(t.data, dtype=np.float32).reshape(ne[1], ne[0])
    return out


def expert_ranges(facts: dict, layer: int, expert: int) -> list[tuple[int, int]]:
    """The byte ranges (file offset, length) llama.cpp reads for one expert of one layer: its
    slice of each of the layer's expert tensors (gate, up, down), in file order. An expert
    tensor is [experts, ...] in numpy order, so expert e is the e-th stride of it. What a plan
    over the GGUF itself maps a (layer, expert) read to (issue 25, item 3)."""
    if not (0 <= layer < facts["layers"] and 0 <= expert < facts["experts"]):
        raise InputError(f"expert ({layer}, {expert}) is outside the model's "
                         f"{facts['layers']} layers x {facts['experts']} experts")
    out = []
    for name in EXPERT_TENSORS:
        t = facts["expert_tensors"].get(f"blk.{layer}.{name}.weight")
        if t is None:
            raise InputError(f"{facts['name']}: no tensor blk.{layer}.{name}.weight")
        out.append((t["offset"] + expert * t["stride"], t["stride"]))
    return sorted(out)
