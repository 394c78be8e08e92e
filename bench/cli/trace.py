"""`bench trace ...`, `bench sim`, `bench demand`, `bench plan`: the trace pipeline, which needs
no host: parse, check, synthesize, locality, policy simulation, the demand model, plan files."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Optional

import typer

from bench.cli.options import (BatchOpt, FilesArg, JsonOpt, KOpt, ints, number, size_option,
                               split_csv)
from bench.cli.outpath import output_file
from bench.errors import InputError
from bench.results import trace_views, views
from bench.results.views import compose

if TYPE_CHECKING:
    from bench.trace.parse import Trace

# Library modules that pull numpy (~100 ms), SQLAlchemy with alembic (~350 ms), fabric (~140 ms)
# or matplotlib (~500 ms) are imported inside the commands that use them, so that `bench --help`
# and every light command stay fast (bench --help: 0.17 s; with every command's imports at the
# top, see README, Commands). Everything else is imported at the top.

trace_app = typer.Typer(no_args_is_help=True, help="Router traces: parse, check, synthesize, "
                                                   "analyse locality, score predictions.")


DryRunRefOpt = Annotated[Optional[list[Path]], typer.Option(
    "--dry-run-ref", help="Another prompt's trace of the same model (repeatable), read only to "
    "find llama.cpp's dry-run first pass: a first iteration bit-identical to its first is "
    "excluded (the FILES are also compared with each other).")]


def _traces(files: list[Path], k: int | None, batch: bool = False,
            refs: list[Path] | None = None):
    """The FILES through the canonical parser, together: a dry-run first pass is excluded with
    a warning on stderr (counted in parse and stats), then --batch merges."""
    from bench.trace.dryrun import parse_traces
    from bench.trace.parse import merge
    traces = parse_traces(files, k, refs or ())
    for t in traces:
        if t.dry_run:
            views.say(compose(("warning:", "yellow"), f" {t.source}: first iteration excluded as "
                              f"llama.cpp's dry-run pass (bit-identical to the first of "
                              f"{', '.join(t.meta['dry_run_twins'])}; {t.dry_run[0].reads} reads)"))
    return [merge(traces)] if batch else traces


# trace ------------------------------------------------------------------------------------------

@trace_app.command("parse")
def trace_parse(files: FilesArg, k: KOpt = None, batch: BatchOpt = False,
                json_out: JsonOpt = False, dry_run_ref: DryRunRefOpt = None) -> None:
    """Type every iteration (normal, spec-accept, spec-fallback) and count tokens, passes, reads;
    prefill and a dry-run first pass are excluded and counted."""
    summaries = [t.summary() for t in _traces(files, k, batch, dry_run_ref)]
    if json_out:
        views.emit_json(summaries[0] if len(summaries) == 1 else summaries)
    else:
        views.print_table(trace_views.parse_table(summaries))


@trace_app.command("check")
def trace_check(files: FilesArg, k: KOpt = None, json_out: JsonOpt = False) -> None:
    """Flag a suspicious first pass that is bit-identical across traces (exit 1 if any)."""
    from bench.trace.parse import parse_trace, suspicious_first_passes
    groups = suspicious_first_passes([parse_trace(f, k) for f in files])
    if json_out:
        views.emit_json({"suspicious_first_pass": groups, "ok": not groups})
    else:
        for line in trace_views.check_lines(groups):
            views.say(compose(("warning:", "yellow"), f" {line}"))
        if not groups:
            views.say(f"ok: {len(files)} traces, no shared first pass")
    if groups:
        raise typer.Exit(1)


@trace_app.command("synth")
def trace_synth(
    out: Annotated[Path, typer.Argument(help="Output JSONL file, or - for stdout.")],
    preset: Annotated[Literal["k3", "qwen3", "dsv3", "tiny"], typer.Option(
        help="Model preset.")] = "tiny",
    tokens: Annotated[Optional[int], typer.Option(help="Requested tokens (decode yields one "
                                                  "fewer: the first comes from prefill).")] = None,
    seed: Annotated[Optional[int], typer.Option(
        help="Random seed (same seed, same bytes).")] = None,
    domain: Annotated[Optional[int], typer.Option(
        help="Domain index (hot-set permutation).")] = None,
    alpha: Annotated[Optional[float], typer.Option(
        help="Zipf exponent of selection counts (0 to 20).",
        callback=number("--alpha", 20, zero=True, example="1.1"))] = None,
    head: Annotated[Optional[float], typer.Option(
        help="Zipf-Mandelbrot offset: popularity ~ (rank + head)^-alpha; 0 is pure Zipf (at "
             "most 10^6).", callback=number("--head", 1e6, zero=True, example="2"))] = None,
    gradient: Annotated[Optional[float], typer.Option(
        help="Per-layer slope ramp: first layer alpha*(1-g/2), last alpha*(1+g/2).")] = None,
    reuse: Annotated[Optional[float], typer.Option(help="Probability a selection repeats the "
                                                   "previous token's expert.")] = None,
    overlap: Annotated[Optional[float], typer.Option(help="Fraction of popularity ranks domains "
                                                     "share.")] = None,
    spec_accept: Annotated[Optional[float], typer.Option(
        help="Rate of spec-accept iterations.")] = None,
    fallback: Annotated[Optional[float], typer.Option(
        help="Rate of spec-fallback iterations.")] = None,
    drift: Annotated[Optional[float], typer.Option(
        help="Popularity share of each phase's own hot set (0: stationary).")] = None,
    phase: Annotated[Optional[float], typer.Option(
        help="Mean phase length in tokens (hot set redrawn at each phase).")] = None,
    burst: Annotated[Optional[float], typer.Option(
        help="Probability a selection re-picks an expert of the few positions before the "
             "previous one.")] = None,
    order: Annotated[Optional[Literal["shuffle", "score"]], typer.Option(
        help="Experts of a pass in random order or by gate score (popularity).")] = None,
    shape: Annotated[Optional[Literal["production", "llama"]], typer.Option(
        help="Record shape (default production).")] = None,
    dry_run_pass: Annotated[bool, typer.Option("--dry-run-pass", help="Add llama.cpp's synthetic "
                                               "first pass (identical across prompts).")] = False,
) -> None:
    """Write a deterministic synthetic trace in the production format (OUT's directory must
    exist).

    Each preset's parameters were fitted to some of the paper's numbers (agreement there is by
    construction) and checked against others they were not fitted to (docs/traces.md):

    k3 (K3, k=16, E=896, 92 layers): calibrated by hand to Table 1 (W1/W8/W64, pool coverage,
    domain Jaccard, top-8 share), Fig. 1 (B=8 to 32 hit rates, Belady) and Fig. 5 (B=159, off
    domain) together; no number held out. Not reached: Zipf slope, per-layer union coverage.

    qwen3 (Qwen3-30B-A3B, k=8, E=128, 48 layers, 400 decode steps): fitted to Table 1's W1
    38-45% and W64 95-96%, the top-8 share 34-42% and Fig. 1's B=32 LRU 75% vs static 73%.
    Checks, not fitted: B=8 LRU 30.1% below static 33.9% and LFU 36.0%, the tie at B=64, pool
    coverage under the 4,000-step runs' 73%, domain Jaccard, Zipf slope and Belady above dsv3's.
    Not reached: Zipf slope 1.10-1.26 (reads 0.99), static at B=8 (41%).

    dsv3 (DeepSeek-V3, k=8, E=256, 58 layers, 300 decode steps): fitted to Table 1's W1 26-31%
    and W64 83-85% and Fig. 1's B=32 LRU 48% vs static 35%. Checks, not fitted: LRU ahead of
    static at every budget, domain Jaccard 0.032-0.085, Belady above K3's 62% at B=32. Not
    reached: Zipf slope 0.86-0.93 (reads 0.72), LRU ahead of perfect LFU at B=8.

    tiny (k=4, E=32, 4 layers): not calibrated, for tests."""
    from bench.plan.planfile import write_error
    from bench.trace.synth import generate
    from bench.trace.synth import preset as make_preset
    if str(out) != "-":
        output_file(out, "OUT")
    params = make_preset(preset, tokens=tokens, seed=seed, domain=domain, alpha=alpha, head=head,
                         gradient=gradient, reuse=reuse, overlap=overlap, spec_accept=spec_accept,
                         fallback=fallback, drift=drift, phase=phase, burst=burst, order=order,
                         shape=shape, dry_run_pass=dry_run_pass or None)
    lines = generate(params)
    if str(out) == "-":
        for line in lines:
            sys.stdout.write(line + "\n")
        return
    tmp = out.with_name(out.name + ".tmp")
    try:
        with tmp.open("w") as fh:
            for line in lines:
                fh.write(line + "\n")
        tmp.replace(out)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise write_error(out, exc) from None


@trace_app.command("stats")
def trace_stats(files: FilesArg, k: KOpt = None,
                top: Annotated[int, typer.Option(help="Experts per layer in each trace's top set "
                                                 "(for the domain Jaccard).")] = 8,
                json_out: JsonOpt = False, dry_run_ref: DryRunRefOpt = None) -> None:
    """Locality: Zipf slope, reuse W1/W8/W64, top-8 share, coverage, domain Jaccard."""
    from bench.trace.locality import locality
    if top < 1:
        raise InputError("--top must be at least 1")
    result = locality(_traces(files, k, refs=dry_run_ref), top)
    if json_out:
        views.emit_json(result)
    else:
        views.print_table(trace_views.stats_table(result))


@trace_app.command("recall")
def trace_recall(
    trace: Annotated[Path, typer.Argument(help="Trace file (JSONL).")],
    hints: Annotated[str, typer.Option(help="oracle, previous-token, or a hint plan file.")],
    k: KOpt = None,
    expert_bytes: Annotated[Optional[int], typer.Option(
        help="Expert size if the header lacks it.")] = 1,
    json_out: JsonOpt = False,
) -> None:
    """Recall of a next-pass prediction plan, next to previous-token recurrence."""
    from bench.sim.recall import recall_report
    plan = _plan_for([trace], k, False, expert_bytes)
    report = recall_report(plan, _hints_for(plan, hints))
    if json_out:
        views.emit_json(report)
    else:
        views.print_table(trace_views.recall_table(report))


def sim(
    files: FilesArg,
    policy: Annotated[str, typer.Option(
        help="Comma list of lru, lfu (libCacheSim's: counts forgotten on eviction), "
             "lfu-perfect (counts kept), static, belady.")] = "lru,lfu,static,belady",
    regime: Annotated[Literal["per-layer", "global"], typer.Option(
        help="per-layer (B experts per layer) or global (one pool of B x layers keys).")
    ] = "per-layer",
    budgets: Annotated[str, typer.Option(help="Comma list of B, experts per layer.")] = "8,16,32",
    window: Annotated[float, typer.Option(help="Warm on the first fraction of iterations, "
                                          "score the rest.",
                                          callback=number("--window", 1, zero=True,
                                                          example="0.6"))] = 0.6,
    train: Annotated[Optional[str], typer.Option(help="Static table: 'window' (default), "
                                                 "'oracle' (whole trace) or a trace FILE "
                                                 "(off-domain).")] = None,
    view: Annotated[Literal["rates", "curves", "off-domain", "regimes"], typer.Option(
        help="rates: one row per trace, policy and budget; curves (Fig. 1): mean and min-max "
             "across the FILES (one per domain); off-domain (Fig. 5): static trained on the "
             "first FILE scored on every FILE, next to LRU; regimes (§3): global vs "
             "per-layer per trace.")] = "rates",
    plot: Annotated[Optional[Path], typer.Option(
        "--plot", help="Also draw the curves or off-domain view into this image file "
                       "(format from the suffix: .png, .pdf, .svg; no suffix: both .svg "
                       "and .png).")] = None,
    k: KOpt = None, batch: BatchOpt = False, json_out: JsonOpt = False,
    dry_run_ref: DryRunRefOpt = None,
) -> None:
    """Simulate cache policies under fair windows and print hit rates."""
    from bench.sim.build import ensure as build_kernels
    from bench.sim.simulate import simulate
    build_kernels()  # the C kernels, compiled once into the cache dir; else the numpy fallbacks
    from bench.trace.dryrun import parse_traces
    trained: str | Trace | None = train
    if train not in (None, "window", "oracle"):
        if not Path(train).exists():
            raise InputError(f"--train {train!r} is neither window, oracle nor a trace file")
        trained = parse_traces([Path(train)], k, [*files, *(dry_run_ref or ())])[0]
        dry_run_ref = [*(dry_run_ref or ()), Path(train)]   # and the FILES beside it
    from bench.trace.parse import LIMITS
    budget_list = tuple(ints(budgets, "--budgets"))
    bad = [b for b in budget_list if not 1 <= b <= LIMITS["slots"]]
    if bad:
        raise InputError(f"--budgets: {bad[0]} is outside [1, {LIMITS['slots']}] experts")
    if plot is not None and view not in ("curves", "off-domain"):
        raise InputError("--plot draws --view curves or --view off-domain")
    if view != "rates":
        _sim_view(view, _traces(files, k, batch, dry_run_ref),
                  tuple(split_csv(policy, "--policy")), regime, budget_list, window, json_out, plot)
        return
    rows = []
    for t in _traces(files, k, batch, dry_run_ref):
        rows += simulate(t, policies=tuple(split_csv(policy, "--policy")), regime=regime,
                         budgets=budget_list, window=window,
                         train=None if trained == "window" else trained)
    if json_out:
        views.emit_json(rows)
    else:
        views.print_table(trace_views.sim_table(rows))


def _sim_view(view: str, traces: list, policies: tuple, regime: str, budgets: tuple,
              window: float, json_out: bool, plot: Path | None) -> None:
    """`bench sim --view curves|off-domain|regimes` (bench.sim.figures), drawn with --plot."""
    from bench.sim import figures
    if plot is not None:
        from bench.cli.results import _plots
        for f in _plots().figstyle.outputs(plot, "--plot"):
            output_file(f, "--plot")
    if view == "curves":
        rows = figures.fig1_curves(traces, policies, budgets, regime, window)
        table = trace_views.curves_table(rows)
    elif view == "off-domain":
        if len(budgets) != 1:
            raise InputError("--view off-domain takes one budget (the paper's: --budgets 159)")
        rows = figures.fig5_off_domain(traces[0], traces[1:], budgets[0], window)
        table = trace_views.off_domain_table(rows)
    else:
        rows = [r for t in traces for r in figures.regimes(t, policies, budgets, window)]
        table = trace_views.regimes_table(rows)
    if plot is not None:
        written = _plots().draw_sim(view, rows, plot)
        views.say(f"wrote {', '.join(map(str, written))}")
    if json_out:
        views.emit_json(rows)
    else:
        views.print_table(table)


def demand(
    files: FilesArg,
    capacity: Annotated[str, typer.Option(help="Comma list of capacities C (64G = 64 x 10^9 "
                                                 "bytes; 64Gi binary).")],
    expert_bytes: Annotated[Optional[int], typer.Option(
        help="Expert size if the header lacks it.")] = None,
    k: KOpt = None, batch: BatchOpt = False, json_out: JsonOpt = False,
    dry_run_ref: DryRunRefOpt = None,
) -> None:
    """Nominal miss GB per iteration: LRU over C / S experts, plan replayed twice (warm,
    measure)."""
    from bench.plan.planfile import plan_from_trace
    from bench.sim.demand import demand as run_demand
    caps = [size_option(c, "--capacity") for c in split_csv(capacity, "--capacity")]
    rows = []
    for t in _traces(files, k, batch, dry_run_ref):
        rows += run_demand(plan_from_trace(t, expert_bytes, {"source": t.source}), caps)
    if json_out:
        views.emit_json(rows)
    else:
        views.print_table(trace_views.demand_table(rows))


def _plan_for(files: list[Path], k: int | None, batch: bool, expert_bytes: int | None,
              refs: list[Path] | None = None):
    from bench.plan.planfile import plan_from_trace, trace_meta
    traces = _traces(files, k, batch, refs)
    if len(traces) != 1:
        raise InputError("one plan is made from one trace; pass --batch to merge several")
    return plan_from_trace(traces[0], expert_bytes, trace_meta(traces[0]))


def _hints_for(plan, hints: str):
    from bench.plan.planfile import hints_from_file, oracle_hints, previous_token_hints, read_plan
    if hints == "oracle":
        return oracle_hints(plan)
    if hints == "previous-token":
        return previous_token_hints(plan)
    if not Path(hints).exists():
        raise InputError(f"--hints {hints!r} is neither oracle, previous-token nor a file")
    return hints_from_file(plan, read_plan(hints), hints)


def plan(
    files: FilesArg,
    out: Annotated[Path, typer.Option("-o", "--out", help="Replay plan file to write.")],
    hints: Annotated[Optional[str], typer.Option(
        help="Also write a hint plan: oracle, previous-token, or a recorded hint plan "
             "FILE.")] = None,
    hints_out: Annotated[Optional[Path], typer.Option(help="Hint plan file (default: OUT "
                                                      "with .hints.bin).")] = None,
    freq_out: Annotated[Optional[Path], typer.Option(help="Also write the plan's frequency "
                                                     "table (the pinned arena's oracle).")] = None,
    expert_bytes: Annotated[Optional[int], typer.Option(
        help="Expert size if the header lacks it.")] = None,
    k: KOpt = None, batch: BatchOpt = False, json_out: JsonOpt = False,
    dry_run_ref: DryRunRefOpt = None,
    from_gguf: Annotated[Optional[Path], typer.Option(
        "--from-gguf", metavar="MODEL",
        help="The pool is this GGUF model itself: also write a pool directory (--pool-out) "
             "mapping each expert to its byte ranges in the file, so the agent replays the "
             "pages the engine reads. The trace must be of this model's shape. Needs the "
             "engine extra.")] = None,
    pool_out: Annotated[Optional[Path], typer.Option(
        help="With --from-gguf: the pool directory to write (default: OUT with .pool; made "
             "if missing, its parent must exist).")] = None,
) -> None:
    """Write the binary replay plan (docs/formats.md) the agent reads, and optionally hints
    (every output's directory must exist)."""
    from bench.plan.planfile import frequency_table, write_error, write_plan
    output_file(out, "-o")
    facts = None
    if pool_out and not from_gguf:
        raise InputError("--pool-out goes with --from-gguf MODEL")
    if from_gguf:
        from bench.engine.gguf_read import model_facts
        if not from_gguf.is_file():
            raise InputError(f"--from-gguf {from_gguf}: no such file")
        facts = model_facts(from_gguf)
        if expert_bytes is not None and expert_bytes != facts["expert_bytes"]:
            raise InputError(f"--expert-bytes {expert_bytes} is not the model's expert size "
                             f"{facts['expert_bytes']}: leave it out with --from-gguf")
        expert_bytes = facts["expert_bytes"]
    if hints:
        output_file(hints_out or out.with_name(out.stem + ".hints.bin"), "--hints-out")
    if freq_out:
        output_file(freq_out, "--freq-out")
    p = _plan_for(files, k, batch, expert_bytes, dry_run_ref)
    if facts is not None and from_gguf is not None:
        from bench.engine.gguf_pool import plan_over_gguf
        p = plan_over_gguf(p, facts, from_gguf)
    info = {"plan": str(out), "bytes": write_plan(out, p), "iterations": len(p.iterations),
            "accepted_tokens": p.meta["accepted_tokens"],
            "dry_run_iterations_excluded": p.meta.get("dry_run_iterations_excluded", 0),
            "passes": p.passes, "reads": p.reads, "logical_bytes": p.logical_bytes,
            "distinct_experts": len(p.distinct_experts())}
    if hints:
        h = _hints_for(p, hints)
        target = hints_out or out.with_name(out.stem + ".hints.bin")
        info.update(hints=str(target), hints_bytes=write_plan(target, h),
                    hints_provenance=h.meta.get("provenance"))
    if facts is not None and from_gguf is not None:
        from bench.engine.gguf_pool import write_gguf_pool
        target = pool_out or out.with_name(out.stem + ".pool")
        m = write_gguf_pool(from_gguf, target, facts)
        info.update(pool=str(target), pool_kind="gguf", model=m["file"],
                    model_bytes=m["file_bytes"], expert_bytes=m["expert_bytes"],
                    experts_share=round(m["layers"] * m["experts_per_layer"]
                                        * m["expert_bytes"] / m["file_bytes"], 4))
    if freq_out:
        table = frequency_table(p)
        lines = [f"{layer} {expert} {n}" for (layer, expert), n in sorted(table.items())]
        try:
            freq_out.write_text("# layer expert count\n" + "\n".join(lines) + "\n")
        except OSError as exc:
            raise write_error(freq_out, exc) from None
        info["freq"] = str(freq_out)
    if json_out:
        views.emit_json(info)
    else:
        for key, value in info.items():
            views.show(f"{key:>18}: {value}")


def register(app: typer.Typer) -> None:
    app.add_typer(trace_app, name="trace")
    app.command()(sim)
    app.command()(demand)
    app.command()(plan)
