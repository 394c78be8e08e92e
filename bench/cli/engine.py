"""`bench engine ...`: a real engine end to end (issue 25): a tiny MoE model made here
(`engine model make`) and decode traced through llama.cpp's evaluation callback (`engine
trace`), run as an end-to-end cell runs it (`engine run`), and the agent's replay of that
trace over the model file run the same way (`engine prepare`, `engine run --load replay`;
bench.engine.replay_run). Needs the engine extra (pip install 'bench[engine]'); without it
each command says so in one line. The end-to-end matrix's engine cells (docs/engine.md) are a
different thing: they run a configured engine command on a host."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from bench.cli.options import JsonOpt
from bench.cli.outpath import output_file
from bench.errors import InputError
from bench.results import views

if TYPE_CHECKING:       # gguf_model imports numpy: kept out of `bench --help`
    from bench.engine.gguf_model import Shape

engine_app = typer.Typer(no_args_is_help=True, help="A real engine (llama.cpp) on a tiny MoE "
                                                    "model made here: make the model, trace "
                                                    "and run decode, prepare and run the "
                                                    "agent's replay of its trace. Needs pip "
                                                    "install 'bench[engine]'.")
model_app = typer.Typer(no_args_is_help=True, help="The tiny MoE model (GGUF).")
engine_app.add_typer(model_app, name="model")

DEFAULT_PROMPT = "The page cache is the expert tier of a larger-than-DRAM MoE pool."


def _make_model(out: Path, shape: Shape, reuse: bool, mkdir: bool) -> dict:
    """`model make`'s work (OUT's directory made when asked, then the model written or kept):
    shared by `engine prepare`, which makes the default model as `make --reuse --mkdir`."""
    from bench.engine.gguf_model import make_model
    if mkdir:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"OUT {out}: cannot create {out.parent}: "
                             f"{exc.strerror or exc}") from None
    return make_model(output_file(out, "OUT"), shape, reuse=reuse)


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
    from bench.engine.gguf_model import Shape
    info = _make_model(out, Shape(layers=layers, experts=experts, k=k, expert_mib=expert_mib,
                                  seed=seed), reuse=reuse, mkdir=mkdir)
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


LOAD_HELP = ("llama.cpp's load mode (see bench engine trace --help), or replay: the agent "
             "(--agent) replays llama.cpp's trace of this prompt over the model file, "
             "without llama.cpp (bench engine prepare makes the trace, plan and pool first).")


@engine_app.command("prepare")
def engine_prepare(
    model: Annotated[Path, typer.Argument(help="The model to make (kept when bench made it "
                                          "with the default shape), as bench engine model make "
                                          "MODEL --reuse --mkdir does.")],
    prompt_file: Annotated[Path, typer.Option(help="The prompt, a UTF-8 text file (at most "
                                              "64 KiB), read as bench engine run reads it.")],
    tokens: Annotated[int, typer.Option(help="Tokens to decode greedily (1-4096).")] = 64,
    threads: Annotated[int, typer.Option(help="llama.cpp threads for the traced decode (the "
                                         "output does not depend on it).")] = 1,
    json_out: JsonOpt = False,
) -> None:
    """What an end-to-end matrix's `prepare` runs before each run of the replay arm (before
    the page cache is dropped): the default tiny model at MODEL, then, unless already there
    and valid, into MODEL.replay/ this prompt's trace (bench engine trace), its replay plan
    and a pool over the model itself (bench plan --from-gguf) and a record of the decode's
    output, named by a key of the model's bytes, the prompt and the token count."""
    from bench.engine.gguf_model import Shape
    from bench.engine.replay_run import check_request, prepare_replay, read_prompt_file
    prompt = read_prompt_file(prompt_file)
    check_request(prompt, tokens)           # before a 277 MB model is written
    made = _make_model(model, Shape(), reuse=True, mkdir=True)
    info = prepare_replay(model, prompt, tokens, threads=threads)
    info = {"model_state": "kept" if made["kept"] else "made", "model_bytes": made["bytes"],
            **info}
    if json_out:
        views.emit_json(info)
        return
    print(f"{model}: {info['model_state']} ({made['bytes']} bytes)")
    print(f"{info['trace']}: {info['trace_state']} ({info['tokens']} tokens, output sha256 "
          f"{info['output_sha256'][:16]})")
    print(f"{info['plan']}: {info['trace_state']} ({info['reads']} reads of "
          f"{info['distinct_experts']} distinct experts, {info['logical_bytes']} bytes)")
    print(f"{info['pool']}: {info['pool_state']} (a pool over {model})")


@engine_app.command("run")
def engine_run(
    model: Annotated[Path, typer.Argument(help="A GGUF MoE model (bench engine model make).")],
    prompt_file: Annotated[Path, typer.Option(help="The prompt, a UTF-8 text file (at most "
                                              "64 KiB).")],
    tokens: Annotated[int, typer.Option(help="Tokens to decode greedily (1-4096).")] = 64,
    threads: Annotated[int, typer.Option(help="llama.cpp threads.")] = 1,
    load: Annotated[str, typer.Option(metavar="auto|mmap|read|direct-io|replay",
                                      help=LOAD_HELP)] = "auto",
    agent: Annotated[Optional[Path], typer.Option(
        help="With --load replay: the native agent (bench-agent) that replays the "
             "trace.")] = None,
) -> None:
    """Decode greedily and print what an end-to-end engine cell reads (docs/engine.md): a
    `backend:` line, `cold load: S s`, `output token ids: a,b,...` and the decode time, then
    the model's bytes in the page cache (experts and the rest). The built-in engine of the
    shipped end-to-end matrix: `bench engine run MODEL --prompt-file P --tokens N` with
    `--load mmap` (admit) or `--load direct-io` (nocache); `--load replay --agent PATH` runs
    the agent's replay of llama.cpp's trace instead (bench engine prepare first)."""
    from bench.engine.llama_run import LOAD_MODES, seconds_since_start
    started = seconds_since_start()      # the interpreter's start and imports so far
    t0 = time.perf_counter()
    if load not in (*LOAD_MODES, "replay"):
        raise InputError(f"--load {load!r}: one of {', '.join(LOAD_MODES)}, replay")
    if (load == "replay") != (agent is not None):
        raise InputError("--agent goes with --load replay" if agent is not None else
                         "--load replay needs --agent PATH (the native bench-agent)")
    if load == "replay" and agent is not None:
        _run_replay(model, prompt_file, tokens, agent, started, t0)
    else:
        _run_llama(model, prompt_file, tokens, threads, load, started, t0)
    _print_split(model)


def _run_llama(model: Path, prompt_file: Path, tokens: int, threads: int, load: str,
               started: float | None, t0: float) -> None:
    from bench.engine.extra import need
    from bench.engine.llama_run import decode
    from bench.engine.replay_run import read_prompt_file
    L = need("llama_cpp")
    import_s = time.perf_counter() - t0
    prompt = read_prompt_file(prompt_file)
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


def _run_replay(model: Path, prompt_file: Path, tokens: int, agent: Path,
                started: float | None, t0: float) -> None:
    """The replay arm: no llama.cpp (not even imported), the agent over the prepared plan."""
    from bench.engine.replay_run import agent_failure, load_prepared, read_prompt_file
    from bench.engine.replay_run import run_agent as replay
    prompt = read_prompt_file(prompt_file)
    prepared, rec = load_prepared(model, prompt, tokens, prompt_file)
    run = replay(agent, prepared)
    if run.rc != 0 or run.summary is None:
        if run.stderr_tail.strip():
            sys.stderr.write(run.stderr_tail.rstrip("\n") + "\n")
        raise agent_failure(run)
    s = run.summary
    print(f"backend: bench-agent replay (pagecache) of llama.cpp's trace {prepared.key}")
    # the cell's steady time (wall - load) is then the agent's replay and exit
    before = "?" if started is None else f"{started:.2f}"
    bench_s = run.spawned_at - t0
    print(f"cold load: {(started or 0.0) + bench_s:.6f} s (no model load: the replay reads "
          f"experts as the trace calls them; process start to bench {before} s, bench to the "
          f"agent's start {bench_s:.3f} s)")
    print("output token ids: " + ",".join(str(t) for t in rec["output_tokens"]))
    wall = (s.get("pass_wall_ns") or [0])[0] / 1e9
    print(f"replay: {s.get('plan_reads')} reads of {s.get('distinct_experts')} distinct "
          f"experts, {s.get('plan_bytes')} bytes in {wall:.6f} s; output sha256 "
          f"{rec['output_sha256']}")


def _print_split(model: Path) -> None:
    """The model file's bytes in the page cache after the work, experts and the rest."""
    from bench.engine.replay_run import page_cache_split, split_line
    print(split_line(page_cache_split(model)))


def register(app: typer.Typer) -> None:
    app.add_typer(engine_app, name="engine")
