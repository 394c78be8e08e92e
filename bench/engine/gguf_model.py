"""A tiny MoE model made here: a GGUF of llama.cpp's `llama` architecture with experts (the
Mixtral layout: softmax router, top-k, SiLU-gated experts), deterministic random weights and a
byte-fallback SentencePiece ('llama') vocabulary of a few hundred tokens.

Why this architecture: it is the smallest MoE graph llama.cpp builds (no shared experts, no
biases, no q/k norms), and its router is what the paper traced (`ffn_moe_topk-L`). Why this
vocabulary: an SPM vocabulary with the 256 byte tokens tokenizes any text with no merges table;
printable ASCII and the SPM space marker are whole tokens so a prompt is one token a
character.

The file is laid out for the page cache: `general.alignment` is the page size (4096), so every
tensor starts on a page, and the expert width is chosen so that one expert's slice of each
of the three expert tensors (gate, up, down: [experts, ...] in numpy order, one expert
contiguous) is a whole number of pages. Experts dominate the file: a model of L layers, E
experts of M MiB holds L*E*M MiB of experts and well under 1 MiB a layer of the rest.

Weights are drawn from one numpy Generator seeded with `seed`, tensor by tensor in a fixed
order, so a shape and a seed give the same bytes on every machine (tests check the file hash).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from bench.engine.extra import need
from bench.errors import InputError

ARCH = "llama"
ALIGNMENT = 4096
N_EMBD = 256
N_HEAD = 4
CONTEXT = 2048
SPACE = "\u2581"                  # SentencePiece's space marker
SPECIAL = ("<unk>", "<s>", "</s>")  # ids 0, 1, 2: llama.cpp's SPM defaults
# what `model make` accepts: far above the defaults, far below what would fill a disk by a typo
BOUNDS = {"layers": (1, 64), "experts": (2, 256), "k": (1, 16), "expert_mib": (0.01, 64.0)}


@dataclass(frozen=True, slots=True)
class Shape:
    """What a made model is: its layers, experts per layer, top-k, expert width and seed."""

    layers: int = 8
    experts: int = 32
    k: int = 4
    expert_mib: float = 1.0
    seed: int = 0

    def check(self) -> None:
        for key, (lo, hi) in BOUNDS.items():
            val = getattr(self, key)
            if not lo <= val <= hi:
                raise InputError(f"--{key.replace('_', '-')} {val}: must be in [{lo}, {hi}]")
        if self.k > self.experts:
            raise InputError(f"--k {self.k}: top-{self.k} of {self.experts} experts")
        if not 0 <= self.seed < 2**63:
            raise InputError(f"--seed {self.seed}: must be in [0, 2^63)")

    @property
    def n_ff(self) -> int:
        """The expert's hidden width: M MiB over its three f16 matrices of N_EMBD x n_ff,
        rounded down to a multiple of 8 (N_EMBD * 8 * 2 bytes = one 4096-byte page), at
        least 8."""
        per_matrix = self.expert_mib * 2**20 / 3
        return max(8, int(per_matrix / (N_EMBD * 2)) // 8 * 8)

    @property
    def expert_bytes(self) -> int:
        """One expert's bytes in the file: its slice of gate, up and down (f16)."""
        return 3 * N_EMBD * self.n_ff * 2

    def as_dict(self) -> dict:
        return {**asdict(self), "n_ff": self.n_ff, "expert_bytes": self.expert_bytes,
                "n_embd": N_EMBD, "n_head": N_HEAD, "arch": ARCH}


def vocabulary() -> tuple[list[str], list[float], list[int]]:
    """Tokens, scores and token types: the three specials, the 256 byte tokens (<0xNN>,
    llama.cpp's byte fallback), the SPM space marker and printable ASCII (one token a
    character; higher score for lower id, SPM's merge priority)."""
    tok = need("gguf")
    tokens = list(SPECIAL)
    types = [tok.TokenType.UNKNOWN, tok.TokenType.CONTROL, tok.TokenType.CONTROL]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [tok.TokenType.BYTE] * 256
    pieces = [SPACE] + [chr(c) for c in range(33, 127)]
    tokens += pieces
    types += [tok.TokenType.NORMAL] * len(pieces)
    scores = [0.0] * (len(SPECIAL) + 256) + [-float(i) for i in range(len(pieces))]
    return tokens, scores, [int(t) for t in types]


def _tensors(shape: Shape, n_vocab: int) -> Iterator[tuple[str, np.ndarray]]:
    """(name, array) in file order, numpy shapes (ggml's reversed). Scale 1/sqrt(fan-in) keeps
    activations O(1) through the layers, so the router's choice varies with the token."""
    rng = np.random.default_rng(shape.seed)
    e, f, d = shape.experts, shape.n_ff, N_EMBD

    def normal(*dims: int, fan_in: int, dtype: type = np.float32) -> np.ndarray:
        x = rng.standard_normal(dims, dtype=np.float32)
        x *= np.float32(1.0 / np.sqrt(fan_in))
        return x.astype(dtype, copy=False)

    yield "token_embd.weight", normal(n_vocab, d, fan_in=1)
    yield "output_norm.weight", np.ones(d, dtype=np.float32)
    yield "output.weight", normal(n_vocab, d, fan_in=d)
    for i in range(shape.layers):
        b = f"blk.{i}"
        yield f"{b}.attn_norm.weight", np.ones(d, dtype=np.float32)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            yield f"{b}.{name}.weight", normal(d, d, fan_in=d)
        yield f"{b}.ffn_norm.weight", np.ones(d, dtype=np.float32)
        yield f"{b}.ffn_gate_inp.weight", normal(e, d, fan_in=d)
        yield f"{b}.ffn_gate_exps.weight", normal(e, f, d, fan_in=d, dtype=np.float16)
        yield f"{b}.ffn_up_exps.weight", normal(e, f, d, fan_in=d, dtype=np.float16)
        yield f"{b}.ffn_down_exps.weight", normal(e, d, f, fan_in=f, dtype=np.float16)


SHAPE_KEY = "bench.shape"          # the Shape as JSON: what `make --reuse` compares


def made_shape(path: Path) -> dict | None:
    """The shape a file says bench made it with (its SHAPE_KEY), or None: not a GGUF, or
    not one of bench's."""
    gguf = need("gguf")
    try:
        f = gguf.GGUFReader(str(path)).get_field(SHAPE_KEY)
        got = json.loads(f.contents()) if f is not None else None
    except Exception:   # noqa: BLE001 - gguf's reader raises many kinds on a malformed file
        return None
    return got if isinstance(got, dict) else None


def shape_text(d: dict) -> str:
    """A shape as a person reads it: 8 layers x 32 experts (top-4) of 1.0 MiB, seed 0."""
    return (f"{d.get('layers')} layers x {d.get('experts')} experts (top-{d.get('k')}) of "
            f"{d.get('expert_mib')} MiB, seed {d.get('seed')}")


def make_model(out: Path, shape: Shape, reuse: bool = False) -> dict:
    """Write the model to `out` (through a temporary file in its directory, renamed into
    place) and return what it is: the shape's facts, the file's size and its vocabulary size.
    `reuse`: an `out` bench made with this shape is kept as it is (`kept` true: the same
    bytes); any other file there is refused, never overwritten."""
    shape.check()
    if not out.parent.is_dir():
        raise InputError(f"{out.parent}: no such directory")
    gguf = need("gguf")
    if reuse and out.exists():
        got = made_shape(out) if out.is_file() else None
        if got != shape.as_dict():
            said = ("not a whole model bench made (gguf cannot read it, or it has no "
                    f"{SHAPE_KEY})" if got is None else f"a model of {shape_text(got)}")
            raise InputError(f"{out}: exists and is {said}, not {shape_text(shape.as_dict())}",
                             hint="remove it, or make the model at another path")
        return {**shape.as_dict(), "path": str(out), "bytes": out.stat().st_size,
                "vocab": len(vocabulary()[0]), "kept": True}
    tokens, scores, types = vocabulary()
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    w = gguf.GGUFWriter(str(tmp), ARCH)
    try:
        w.add_name(f"bench-tiny-moe-{shape.layers}x{shape.experts}-top{shape.k}")
        w.add_custom_alignment(ALIGNMENT)
        w.add_string(SHAPE_KEY, json.dumps(shape.as_dict(), sort_keys=True))
        w.add_context_length(CONTEXT)
        w.add_embedding_length(N_EMBD)
        w.add_block_count(shape.layers)
        w.add_feed_forward_length(shape.n_ff)
        w.add_head_count(N_HEAD)
        w.add_head_count_kv(N_HEAD)
        w.add_rope_dimension_count(N_EMBD // N_HEAD)
        w.add_rope_freq_base(10000.0)
        w.add_layer_norm_rms_eps(1e-5)
        w.add_expert_count(shape.experts)
        w.add_expert_used_count(shape.k)
        w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_unk_token_id(0)
        w.add_bos_token_id(1)
        w.add_eos_token_id(2)
        w.add_add_bos_token(True)
        w.add_add_eos_token(False)
        for name, arr in _tensors(shape, len(tokens)):
            w.add_tensor(name, arr)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, out)
    except OSError as exc:
        raise InputError(f"{out}: cannot write the model: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return {**shape.as_dict(), "path": str(out), "bytes": out.stat().st_size,
            "vocab": len(tokens), "kept": False}
