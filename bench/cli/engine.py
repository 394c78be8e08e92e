"""`bench engine ...`: a real engine end to end (issue 25): a tiny MoE model made here
(`engine model make`) and decode traced through llama.cpp's evaluation callback (`engine
trace`). Needs the engine extra (pip install 'bench[engine]'); without it each command says so
in one line. The end-to-end matrix's engine cells (docs/engine.md) are a different thing: they
run a configured engine command on a host."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from bench.cli.options import JsonOpt
from bench.cli.outpath import output_file
from bench.errors import InputError
from bench.results import views

engine_app = typer.Typer(no_args_is_help=True, help="A real engine (llama.cpp) on a tiny MoE "
                                                    "model made here: make the model, trace "
                                                    "decode. Needs pip install 'bench[engine]'.")
model_app = typer.Typer(no_args_is_help=True, help="The tiny MoE model (GGUF).")
engine_app.add_typer(model_app, name="model")

DEFAULT_PROMPT = "The page cache is the expert tier of a larger-than-DRAM MoE pool."


@model_app.command("make")
def model_make(
    out: Annotated[Path, typer.Argument(help="The GGUF file to write (replaced if it exists).")],
    layers: Annotated[int, typer.Option(help="Transformer layers (1-64).")] = 8,
    experts: Annotated[int, typer.Option(help="Experts per layer (2-256).")] = 32,
    k: Annotated[int, typer.Option("--k", help="Experts routed per token and layer "
                                   "(top-k, 1-16).")] = 4,
    expert_mib: Annotated[float, typer.Option(help="One expert's size in MiB (its gate, up "
                                              "and down matrices, f16; 0.01-64).")] = 1.0,
    seed: Annotated[int, typer.Option(help="Seed of the random weights (same seed and shape, "
                                      "same bytes).")] = 0,
    reuse: Annotated[bool, typer.Option(
        "--reuse", help="Keep OUT when bench made it with this shape and seed (the same "
                        "bytes); refuse any other file there instead of replacing it.")] = False,
    mkdir: Annotated[bool, typer.Option(
        "--mkdir", help="Create OUT's directory (and its parents) when missing.")] = False,
    json_out: JsonOpt = False,
) -> None:
    """Write a GGUF of llama.cpp's llama architecture with experts (Mixtral layout: softmax
    router, top-k, SiLU experts), deterministic random weights and a byte-fallback vocabulary
    of 354 tokens. Experts dominate the file (default 8 x 32 experts of 1 MiB: 277 MB)."""
    from bench.engine.gguf_model import Shape, make_model
    if mkdir:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"OUT {out}: cannot create {out.parent}: "
                             f"{exc.strerror or exc}") from None
    info = make_model(output_file(out, "OUT"), Shape(layers=layers, experts=experts, k=k,
                                                     expert_mib=expert_mib, seed=seed),
                      reuse=reuse)
    if json_out:
        views.emit_json(info)
        return
    if info["kept"]:
        print(f"{out}: kept, bench made it with this shape and seed ({info['bytes']} bytes)")
        return
    experts_total = info["layers"] * info["experts"] * info["expert_bytes"]
    print(f"{out}: {info['arch']} MoE, {info['layers']} layers x {info['experts']} experts "
          f"(top-{info['k']}) of {info['expert_bytes']} bytes, {info['vocab']} tokens; "
          f"{info['bytes']} bytes, experts {100 * experts_total / info['bytes']:.1f}%")


@engine_app.command("trace")
def engine_trace(
    model: Annotated[Path, typer.Argument(help="A GGUF MoE model (bench engine model make).")],
    out: Annotated[Path, typer.Option("-o", "--out", help="The trace (JSONL, the llama.cpp "
                                      "eval-callback shape; - for stdout).")],
    prompt: Annotated[str, typer.Option(help="The prompt.")] = DEFAULT_PROMPT,
    tokens: Annotated[int, typer.Option(help="Tokens to decode greedily (1-4096).")] = 64,
    threads: Annotated[int, typer.Option(help="llama.cpp threads (the output does not "
                                         "depend on it; more than the idle cores slows "
                                         "decode down many times: ggml spins).")] = 1,
    load: Annotated[str, typer.Option(
        metavar="auto|mmap|read|direct-io",
        help="How llama.cpp loads the weights: mmap (its loader also madvises WILLNEED over "
             "the whole file: the page cache admits all of it at load), read (buffered "
             "copies: admitted too), direct-io (O_DIRECT into its own memory: nothing "
             "admitted), auto (llama.cpp's choice; mmap on a CPU build). The trace does not "
             "depend on it.")] = "auto",
    json_out: JsonOpt = False,
) -> None:
    """Decode greedily through llama.cpp with an evaluation callback on the router's top-k
    tensors (ffn_moe_topk-L) and write the trace bench trace/sim/plan read: a header, the
    prompt's pass as prefill records (excluded by the parser), one record per decoded token
    and layer."""
    from bench.engine.extra import need
    from bench.engine.llama_run import decode
    from bench.engine.trace_out import TOPK, check_complete, header_for, write_trace
    need("llama_cpp")               # before anything is read: a missing extra is the one line
    header = header_for(model)
    dest = None if str(out) == "-" else output_file(out, "-o")
    dec = decode(model, prompt, tokens, prefixes=(TOPK,), threads=threads, load=load)
    check_complete(dec, header["layers"])
    with (contextlib.nullcontext(sys.stdout) if dest is None
          else open(dest, "w", encoding="utf-8")) as fh:
        n = write_trace(dec, header, fh)
    info = {"model": str(model), "trace": str(out), "load": load,
            "prompt_tokens": len(dec.prompt_tokens),
            "tokens": len(dec.output_tokens), "records": n, "output_hash": dec.output_hash,
            "output_tokens": dec.output_tokens, "load_s": round(dec.load_s, 3),
            "prefill_s": round(dec.prefill_s, 3), "decode_s": round(dec.decode_s, 3),
            "tokens_per_s": round(dec.tokens_per_s, 1)}
    if json_out:
        views.emit_json(info)
    elif dest is not None:
        print(f"{out}: {n} router records, {len(dec.output_tokens)} tokens decoded after "
              f"{len(dec.prompt_tokens)} prompt tokens ({dec.tokens_per_s:.1f} tokens/s, "
              f"load {dec.load_s:.2f} s); output sha256 {dec.output_hash[:16]}")


MAX_PROMPT_FILE = 64 << 10


@engine_app.command("run")
def engine_run(
    model: Annotated[Path, typer.Argument(help="A GGUF MoE model (bench engine model make).")],
    prompt_file: Annotated[Path, typer.Option(help="The prompt, a UTF-8 text file (at most "
                                              "64 KiB).")],
    tokens: Annotated[int, typer.Option(help="Tokens to decode greedily (1-4096).")] = 64,
    threads: Annotated[int, typer.Option(help="llama.cpp threads.")] = 1,
    load: Annotated[str, typer.Option(metavar="auto|mmap|read|direct-io",
                                      help="llama.cpp's load mode (see bench engine trace "
                                           "--help).")] = "auto",
) -> None:
    """Decode greedily and print what an end-to-end engine cell reads (docs/engine.md): a
    `backend:` line, `cold load: S s`, `output token ids: a,b,...` and the decode time. The
    built-in engine of an [engine] table: command ["bench", "engine", "run", MODEL,
    "--prompt-file", "{prompt_file}", "--tokens", "{n_tokens}", "{policy_args}"], the
    policies' args `--load mmap` (admit) and `--load direct-io` (nocache)."""
    from bench.engine.extra import need
    from bench.engine.llama_run import decode, seconds_since_start
    started = seconds_since_start()      # the interpreter's start and imports so far
    t0 = time.perf_counter()
    L = need("llama_cpp")
    import_s = time.perf_counter() - t0
    try:
        with prompt_file.open("rb") as f:
            raw = f.read(MAX_PROMPT_FILE + 1)
    except OSError as exc:
        raise InputError(f"--prompt-file {prompt_file}: {exc.strerror or exc}") from None
    if len(raw) > MAX_PROMPT_FILE:
        raise InputError(f"--prompt-file {prompt_file}: larger than {MAX_PROMPT_FILE} bytes")
    prompt = raw.decode("utf-8", "replace").strip()
    dec = decode(model, prompt, tokens, threads=threads, load=load)
    print(f"backend: llama.cpp CPU (llama-cpp-python {getattr(L, '__version__', '?')}, "
          f"load {load})")
    # from the process's start: the cell's steady time (wall - load) is then prefill, decode
    # and exit, not the interpreter's start and llama.cpp's import
    load_s = (started or 0.0) + import_s + dec.load_s
    before = "?" if started is None else f"{started:.2f}"
    print(f"cold load: {load_s:.6f} s (process start to bench {before} s, llama.cpp import "
          f"{import_s:.3f} s, model and context {dec.load_s:.3f} s)")
    print("output token ids: " + ",".join(str(t) for t in dec.output_tokens))
    print(f"decode: {len(dec.output_tokens)} tokens in {dec.decode_s:.6f} s "
          f"({dec.tokens_per_s:.1f} tokens/s); output sha256 {dec.output_hash}")


def register(app: typer.Typer) -> None:
    app.add_typer(engine_app, name="engine")
