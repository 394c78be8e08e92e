"""Greedy decoding of a GGUF model through llama.cpp (llama-cpp-python's low-level ctypes API),
with an evaluation callback that copies out the graph tensors it is asked for.

Why the low-level API: the high-level `Llama` class builds its own context parameters and has
no place for `cb_eval`, the scheduler's evaluation callback (llama.h's `cb_eval`,
`cb_eval_user_data`; the paper's tracer was such a callback). Why greedy by argmax here and
not llama.cpp's sampler: the output is then a function of the logits alone, which is what
"the same token ids run after run" is about.

The callback (`ggml_backend_sched_eval_callback(t, ask, user_data)`) is called twice a node:
with ask=True to say whether we want it (the scheduler then computes up to that node and
stops), with ask=False once it is computed. A tensor is read with the ggml calls every backend
implements (`ggml_get_name`, `ggml_backend_tensor_get`) and its shape from the head of
`struct ggml_tensor` (type, buffer, ne[4], nb[4]: stable across ggml versions since 2023);
strides are honoured, since `ffn_moe_topk` is a view of an argsort.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from bench.engine.extra import need
from bench.errors import BenchError, InputError

GGML_TYPE_F32, GGML_TYPE_I32 = 0, 26
_DTYPES = {GGML_TYPE_F32: np.float32, GGML_TYPE_I32: np.int32}
MAX_PROMPT_TOKENS = 1024
MAX_DECODE_TOKENS = 4096
THREADS = 1       # ggml spins at its barriers: 2 threads on a busy 2-core host ran 10x slower


class EngineError(BenchError):
    """llama.cpp refused the model, the prompt or a decode step."""


class _TensorHead(ctypes.Structure):
    # the head of ggml.h's struct ggml_tensor; ctypes pads after the enum as the C compiler does
    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p),
                ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4)]


@dataclass
class Capture:
    """The tensors the callback copied during one llama_decode call: name -> array of shape
    (n_rows, ne0), one row a token position of the ubatch."""

    n_tokens: int
    tensors: dict[str, np.ndarray] = field(default_factory=dict)


@dataclass
class Decoded:
    """What a greedy decode gave: prompt and output token ids, the output text, the callback's
    captures (prefill first, then one per decoded token) and the timings."""

    prompt_tokens: list[int]
    output_tokens: list[int]
    text: str
    captures: list[Capture]
    load_s: float
    prefill_s: float
    decode_s: float

    @property
    def output_hash(self) -> str:
        """sha256 of the output token ids (decimal, comma-separated): what run-to-run
        determinism and the engine pairs' hash agreement compare."""
        return hashlib.sha256(",".join(map(str, self.output_tokens)).encode()).hexdigest()

    @property
    def tokens_per_s(self) -> float:
        return len(self.output_tokens) / self.decode_s if self.decode_s > 0 else 0.0


def _read_tensor(lib: ctypes.CDLL, ptr: int) -> tuple[str, np.ndarray | None]:
    name = lib.ggml_get_name(ctypes.c_void_p(ptr)).decode("utf-8", "replace")
    head = _TensorHead.from_address(ptr)
    dtype = _DTYPES.get(head.type)
    ne, nb = list(head.ne), list(head.nb)
    if dtype is None or nb[0] != 4 or ne[2] != 1 or ne[3] != 1:
        return name, None
    size = 4 + (ne[0] - 1) * nb[0] + (ne[1] - 1) * nb[1]
    buf = (ctypes.c_char * size)()
    lib.ggml_backend_tensor_get(ctypes.c_void_p(ptr), buf, 0, size)
    raw = bytes(buf)
    rows = [np.frombuffer(raw, dtype=dtype, count=ne[0], offset=j * nb[1]) for j in range(ne[1])]
    return name, np.stack(rows)


class _Callback:
    """The evaluation callback: wants the tensors named a prefix of `prefixes` followed by a
    layer number, and files them into the current Capture."""

    def __init__(self, lib: ctypes.CDLL, prefixes: tuple[str, ...]):
        self.lib, self.prefixes = lib, tuple(p.encode() for p in prefixes)
        lib.ggml_get_name.argtypes = [ctypes.c_void_p]
        lib.ggml_get_name.restype = ctypes.c_char_p
        lib.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p,
                                                ctypes.c_size_t, ctypes.c_size_t]
        lib.ggml_backend_tensor_get.restype = None
        self.current: Capture | None = None
        self.error: str | None = None

    def __call__(self, t: int, ask: bool, _user: int) -> bool:
        try:
            name = self.lib.ggml_get_name(ctypes.c_void_p(t))
            # exactly PREFIX<layer>: views of it ("ffn_norm-0 (reshaped)") are other nodes
            wanted = any(name.startswith(p) and name[len(p):].isdigit() for p in self.prefixes)
            if ask or not wanted:
                return wanted if ask else True
            key, arr = _read_tensor(self.lib, t)
            if arr is None:
                self.error = f"tensor {key}: not a 2-d f32/i32 tensor llama.cpp could hand over"
                return False            # stops the decode: llama_decode then fails
            if self.current is not None:
                self.current.tensors[key] = arr
            return True
        except Exception as exc:        # noqa: BLE001 -- an exception must not cross into C
            self.error = f"evaluation callback: {type(exc).__name__}: {exc}"
            return False


_LOGS: list[str] = []                 # llama.cpp's recent log lines, for error messages
_LOG_HOOK: list[Callable] = []          # the installed log callback: llama.cpp keeps calling it


def _quiet_logs(llama_cpp: ModuleType) -> list[str]:
    """Send llama.cpp's log lines into a bounded list (kept for errors) instead of stderr;
    installed once per process and never freed (llama.cpp holds the pointer)."""
    if not _LOG_HOOK:
        @llama_cpp.llama_log_callback
        def log(_level: int, text: bytes, _user: int) -> None:
            _LOGS.append(text.decode("utf-8", "replace").rstrip())
            del _LOGS[:-200]
        llama_cpp.llama_log_set(log, ctypes.c_void_p())
        _LOG_HOOK.append(log)
    return _LOGS


# llama.cpp's llama_load_mode: how the weights reach memory. mmap maps the file (and its
# loader madvises WILLNEED over the whole mapping: the page cache admits the file at load);
# read copies it with buffered reads (admitted too); direct-io reads it with O_DIRECT into
# anonymous buffers (nothing admitted); auto lets llama.cpp choose.
LOAD_MODES = {"auto": -1, "read": 0, "mmap": 1, "direct-io": 4}


def seconds_since_start() -> float | None:
    """Seconds since this process started (/proc/self/stat's starttime against /proc/uptime,
    in clock ticks: 10 ms), or None where /proc does not say."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read(4096)
        with open("/proc/uptime") as f:
            uptime = float(f.read(64).split()[0])
        start = int(stat.rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, round(uptime - start, 2))


def decode(model: Path, prompt: str, n_tokens: int, prefixes: tuple[str, ...] = (),
           threads: int = THREADS, load: str = "auto") -> Decoded:
    """Greedy-decode `n_tokens` tokens after `prompt` with llama.cpp, the callback copying
    the tensors named by `prefixes` (e.g. "ffn_moe_topk-") at every llama_decode call; the
    weights loaded as `load` says (LOAD_MODES)."""
    if not model.is_file():
        raise InputError(f"{model}: no such model file")
    if not 1 <= n_tokens <= MAX_DECODE_TOKENS:
        raise InputError(f"--tokens {n_tokens}: must be in [1, {MAX_DECODE_TOKENS}]")
    if not prompt:
        raise InputError("--prompt: must not be empty")
    if load not in LOAD_MODES:
        raise InputError(f"--load {load!r}: one of {', '.join(LOAD_MODES)}")
    L = need("llama_cpp")
    logs = _quiet_logs(L)
    keep: list[object] = []
    L.llama_backend_init()
    t0 = time.perf_counter()
    mparams = L.llama_model_default_params()
    if "load_mode" not in dict(type(mparams)._fields_):
        # a ctypes Structure takes any attribute silently: an unknown field changes nothing
        raise EngineError(f"llama-cpp-python {getattr(L, '__version__', '?')} has no "
                          "load_mode (0.3.36 or later is needed)")
    mparams.load_mode = LOAD_MODES[load]
    mdl = L.llama_model_load_from_file(os.fsencode(model), mparams)
    if not mdl:
        raise EngineError(f"{model}: llama.cpp cannot load it: {_last(logs)}")
    ctx = None
    try:
        vocab = L.llama_model_get_vocab(mdl)
        prompt_ids = _tokenize(L, vocab, prompt)
        cb = _Callback(L.llama_cpp._lib, prefixes)
        c_cb = L.ggml_backend_sched_eval_callback(cb)
        keep.append(c_cb)
        ctx = _context(L, mdl, len(prompt_ids) + n_tokens + 16, len(prompt_ids), threads,
                       c_cb if prefixes else None)
        if not ctx:
            raise EngineError(f"{model}: llama.cpp cannot make a context: {_last(logs)}")
        load_s = time.perf_counter() - t0
        out, captures, prefill_s, decode_s = _greedy(L, ctx, cb, prompt_ids, n_tokens,
                                                     L.llama_vocab_n_tokens(vocab))
        text = "".join(_piece(L, vocab, t) for t in out)
        return Decoded(prompt_ids, out, text, captures, load_s, prefill_s, decode_s)
    finally:
        if ctx:
            L.llama_free(ctx)
        L.llama_model_free(mdl)
        del keep


def _context(L: ModuleType, mdl: Any, n_ctx: int, n_batch: int, threads: int,
             c_cb: Any) -> Any:
    """A llama.cpp context: the whole prompt in one batch, the callback set when given."""
    cparams = L.llama_context_default_params()
    cparams.n_ctx = n_ctx
    cparams.n_batch = cparams.n_ubatch = max(n_batch, 1)
    cparams.n_threads = cparams.n_threads_batch = threads
    cparams.no_perf = True
    if c_cb is not None:
        cparams.cb_eval = c_cb
        cparams.cb_eval_user_data = None
    return L.llama_init_from_model(mdl, cparams)


def _greedy(L: ModuleType, ctx: Any, cb: _Callback, prompt_ids: list[int], n_tokens: int,
            n_vocab: int) -> tuple[list[int], list[Capture], float, float]:
    """The prompt in one llama_decode call, then one call per output token (every output
    token goes through the graph once: one decode pass, a trace iteration, per token);
    returns the output, the captures and the prefill and decode seconds."""
    captures: list[Capture] = []

    def step(ids: list[int]) -> int:
        cb.current = Capture(n_tokens=len(ids))
        captures.append(cb.current)
        arr = (L.llama_token * len(ids))(*ids)
        rc = L.llama_decode(ctx, L.llama_batch_get_one(arr, len(ids)))
        if cb.error:
            raise EngineError(cb.error)
        if rc != 0:
            raise EngineError(f"llama_decode returned {rc}: {_last(_LOGS)}")
        logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, -1), shape=(n_vocab,))
        return int(np.argmax(logits))

    t1 = time.perf_counter()
    nxt = step(prompt_ids)
    t2 = time.perf_counter()
    out: list[int] = []
    for _ in range(n_tokens):
        out.append(nxt)
        nxt = step([nxt])
    return out, captures, t2 - t1, time.perf_counter() - t2


def _tokenize(L: ModuleType, vocab: Any, prompt: str) -> list[int]:
    data = prompt.encode()
    cap = min(len(data) + 8, MAX_PROMPT_TOKENS + 1)
    buf = (L.llama_token * cap)()
    n = L.llama_tokenize(vocab, data, len(data), buf, cap, True, False)
    if n < 0 or n > MAX_PROMPT_TOKENS:
        raise InputError(f"--prompt: more than {MAX_PROMPT_TOKENS} tokens")
    return list(buf[:n])


def _piece(L: ModuleType, vocab: Any, token: int) -> str:
    buf = ctypes.create_string_buffer(64)
    n = L.llama_token_to_piece(vocab, token, buf, len(buf), 0, False)
    return buf.raw[:max(n, 0)].decode("utf-8", "replace")


def _last(logs: list[str]) -> str:
    lines = [ln for ln in logs if ln]
    return lines[-1][:200] if lines else "no message"
