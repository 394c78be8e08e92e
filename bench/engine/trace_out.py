"""A decode's router selections as a trace in the llama.cpp eval-callback shape that
bench.trace.parse reads (docs/traces.md):

    {"model": ..., "k": K, "experts_per_layer": E, "layers": L, "expert_bytes": B}   header
    {"token": 0, "name": "ffn_moe_topk-3", "n_tokens": 7, "phase": "prefill", "experts": [...]}
    {"token": 0, "name": "ffn_moe_topk-3", "n_tokens": 1, "experts": [...]}

One record per llama_decode call and layer. The prompt's pass (one call over the whole prompt)
is written as prefill records, `n_tokens` the batch size and `"phase": "prefill"` too, so that a
one-token prompt's pass is still prefill; its experts are the last prompt position's (the only
row the last layer computes: llama.cpp keeps only the output rows there). The parser counts
and skips them. Decode records carry `token` = the decoded token's index (0 = the first token
decoded after the prompt), which the parser groups iterations by. Nothing else runs through
the graph (llama-cpp-python does no warm-up decode), so there is no scheduler dry-run pass to
exclude: a trace written here starts with real decode.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from bench.engine.llama_run import Capture, Decoded
from bench.errors import InputError

TOPK = "ffn_moe_topk-"
_NAME = re.compile(r"^ffn_moe_topk-(\d{1,9})$")


def _layers(cap: Capture) -> list[tuple[int, str]]:
    found = [(int(m.group(1)), name) for name in cap.tensors
             if (m := _NAME.fullmatch(name)) is not None]
    return sorted(found)


def records(dec: Decoded, header: dict) -> Iterator[dict]:
    """The trace's lines as dicts: the header, then the prompt's prefill records, then one
    record per decoded token and layer, layers in order."""
    yield header
    for i, cap in enumerate(dec.captures):
        prefill = i == 0
        for _layer, name in _layers(cap):
            rows = cap.tensors[name]
            rec: dict = {"token": 0 if prefill else i - 1, "name": name,
                         "n_tokens": cap.n_tokens}
            if prefill:
                rec["phase"] = "prefill"
            rec["experts"] = [int(e) for e in rows[-1]]
            yield rec


def write_trace(dec: Decoded, header: dict, out: IO[str]) -> int:
    """Write the trace; returns the number of decode records."""
    n = 0
    for rec in records(dec, header):
        out.write(json.dumps(rec, separators=(",", ":")) + "\n")
        n += "experts" in rec and "phase" not in rec
    return n


def header_for(model: Path) -> dict:
    """The trace header of a GGUF model: k, experts per layer, layers and one expert's bytes
    (its slices of the three expert tensors), read from the file with gguf's reader."""
    from bench.engine.gguf_read import model_facts
    f = model_facts(model)
    return {"model": f["name"], "k": f["k"], "experts_per_layer": f["experts"],
            "layers": f["layers"], "expert_bytes": f["expert_bytes"]}


def check_complete(dec: Decoded, layers: int) -> None:
    """Every llama_decode call routed every layer once: otherwise the callback missed tensors
    (a renamed graph node, a backend that hid them) and the trace would be silently thin."""
    for i, cap in enumerate(dec.captures):
        got = [layer for layer, _ in _layers(cap)]
        if got != list(range(layers)):
            raise InputError(f"llama_decode call {i}: router top-k of layers {got}, expected "
                             f"0..{layers - 1}: this llama.cpp does not name them {TOPK}L")
