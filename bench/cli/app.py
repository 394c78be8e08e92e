"""The `bench` command line: a thin layer that parses options, calls the library, and shows
results (rich tables, or JSON with --json). Library errors become one message with the fix."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from bench import __version__
from bench.errors import BenchError, InputError

app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                  help="Test-bench controller: the kernel page cache as the expert tier of a "
                       "larger-than-DRAM MoE pool.")
trace_app = typer.Typer(no_args_is_help=True, help="Router traces: parse, check, synthesize, "
                                                   "analyse locality, score predictions.")
pool_app = typer.Typer(no_args_is_help=True, help="Expert pools on disk.")
app.add_typer(trace_app, name="trace")
app.add_typer(pool_app, name="pool")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
KOpt = Annotated[Optional[int], typer.Option("--k", help="The model's top-k (overrides the "
                                             "trace header; llama.cpp shape defaults to 8).")]
FilesArg = Annotated[list[Path], typer.Argument(help="Trace files (JSONL).", show_default=False)]
BatchOpt = Annotated[bool, typer.Option("--batch", help="Merge the traces iteration by iteration "
                                        "(batch union, truncated to the shortest) and use that.")]


def _traces(files: list[Path], k: int | None, batch: bool = False):
    from bench.trace.parse import merge, parse_trace
    traces = [parse_trace(f, k) for f in files]
    return [merge(traces)] if batch else traces


def _split_csv(text: str, what: str) -> list[str]:
    items = [x.strip() for x in text.split(",") if x.strip()]
    if not items:
        raise InputError(f"{what} is empty")
    return items


def _ints(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in _split_csv(text, what)]
    except ValueError:
        raise InputError(f"{what} must be comma-separated integers, got {text!r}") from None


@app.command()
def version() -> None:
    """Print bench's version."""
    print(__version__)


# trace ------------------------------------------------------------------------------------------

@trace_app.command("parse")
def trace_parse(files: FilesArg, k: KOpt = None, batch: BatchOpt = False,
                json_out: JsonOpt = False) -> None:
    """Type every iteration (normal, spec-accept, spec-fallback) and count tokens, passes, reads."""
    from bench.results import views
    summaries = [t.summary() for t in _traces(files, k, batch)]
    if json_out:
        views.emit_json(summaries[0] if len(summaries) == 1 else summaries)
    else:
        views.print_table(views.parse_table(summaries))


@trace_app.command("check")
def trace_check(files: FilesArg, k: KOpt = None, json_out: JsonOpt = False) -> None:
    """Flag a suspicious first pass that is bit-identical across traces (exit 1 if any)."""
    from bench.results import views
    from bench.trace.parse import suspicious_first_passes
    groups = suspicious_first_passes(_traces(files, k))
    if json_out:
        views.emit_json({"suspicious_first_pass": groups, "ok": not groups})
    else:
        for line in views.check_lines(groups):
            views.say(f"[yellow]warning:[/] {line}")
        if not groups:
            views.say(f"ok: {len(files)} traces, no shared first pass")
    if groups:
        raise typer.Exit(1)


@trace_app.command("synth")
def trace_synth(
    out: Annotated[Path, typer.Argument(help="Output JSONL file, or - for stdout.")],
    preset: Annotated[str, typer.Option(help="Model preset: k3, qwen3, dsv3 or tiny.")] = "tiny",
    tokens: Annotated[Optional[int], typer.Option(help="Requested tokens (decode yields one "
                                                  "fewer: the first comes from prefill).")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Random seed (same seed, same bytes).")] = None,
    domain: Annotated[Optional[int], typer.Option(help="Domain index (hot-set permutation).")] = None,
    alpha: Annotated[Optional[float], typer.Option(help="Zipf exponent of selection counts.")] = None,
    head: Annotated[Optional[float], typer.Option(help="Zipf-Mandelbrot offset: popularity "
                                                  "~ (rank + head)^-alpha; 0 is pure Zipf.")] = None,
    gradient: Annotated[Optional[float], typer.Option(help="Per-layer slope ramp: first layer "
                                                      "alpha*(1-g/2), last alpha*(1+g/2).")] = None,
    reuse: Annotated[Optional[float], typer.Option(help="Probability a selection repeats the "
                                                   "previous token's expert.")] = None,
    overlap: Annotated[Optional[float], typer.Option(help="Fraction of popularity ranks domains "
                                                     "share.")] = None,
    spec_accept: Annotated[Optional[float], typer.Option(help="Rate of spec-accept iterations.")] = None,
    fallback: Annotated[Optional[float], typer.Option(help="Rate of spec-fallback iterations.")] = None,
    shape: Annotated[Optional[str], typer.Option(help="production (default) or llama.")] = None,
    dry_run_pass: Annotated[bool, typer.Option("--dry-run-pass", help="Add llama.cpp's synthetic "
                                               "first pass (identical across prompts).")] = False,
) -> None:
    """Write a deterministic synthetic trace in the production format."""
    from bench.trace.synth import generate
    from bench.trace.synth import preset as make_preset
    params = make_preset(preset, tokens=tokens, seed=seed, domain=domain, alpha=alpha, head=head,
                         gradient=gradient, reuse=reuse, overlap=overlap, spec_accept=spec_accept,
                         fallback=fallback, shape=shape, dry_run_pass=dry_run_pass or None)
    lines = generate(params)
    if str(out) == "-":
        for line in lines:
            sys.stdout.write(line + "\n")
        return
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w") as fh:
        for line in lines:
            fh.write(line + "\n")
    tmp.replace(out)


@trace_app.command("stats")
def trace_stats(files: FilesArg, k: KOpt = None,
                top: Annotated[int, typer.Option(help="Experts per layer in each trace's top set "
                                                 "(for the domain Jaccard).")] = 8,
                json_out: JsonOpt = False) -> None:
    """Locality: Zipf slope, reuse W1/W8/W64, top-8 share, coverage, domain Jaccard."""
    from bench.results import views
    from bench.trace.locality import locality
    if top < 1:
        raise InputError("--top must be at least 1")
    result = locality(_traces(files, k), top)
    if json_out:
        views.emit_json(result)
    else:
        views.print_table(views.stats_table(result))


@trace_app.command("recall")
def trace_recall(
    trace: Annotated[Path, typer.Argument(help="Trace file (JSONL).")],
    hints: Annotated[str, typer.Option(help="oracle, previous-token, or a hint plan file.")],
    k: KOpt = None,
    expert_bytes: Annotated[Optional[int], typer.Option(help="Expert size if the header lacks it.")] = 1,
    json_out: JsonOpt = False,
) -> None:
    """Recall of a next-pass prediction plan, next to previous-token recurrence."""
    from bench.results import views
    from bench.sim.recall import recall_report
    plan = _plan_for([trace], k, False, expert_bytes)
    report = recall_report(plan, _hints_for(plan, hints))
    if json_out:
        views.emit_json(report)
    else:
        views.print_table(views.recall_table(report))


# sim, demand, plan -------------------------------------------------------------------------------

@app.command()
def sim(
    files: FilesArg,
    policy: Annotated[str, typer.Option(help="Comma list of lru, lfu, static, belady.")] = "lru,lfu,static,belady",
    regime: Annotated[str, typer.Option(help="per-layer (B experts per layer) or global "
                                        "(one pool of B x layers keys).")] = "per-layer",
    budgets: Annotated[str, typer.Option(help="Comma list of B, experts per layer.")] = "8,16,32",
    window: Annotated[float, typer.Option(help="Warm on the first fraction of iterations, "
                                          "score the rest.")] = 0.6,
    train: Annotated[Optional[str], typer.Option(help="Static table: 'window' (default), "
                                                 "'oracle' (whole trace) or a trace FILE "
                                                 "(off-domain).")] = None,
    k: KOpt = None, batch: BatchOpt = False, json_out: JsonOpt = False,
) -> None:
    """Simulate cache policies under fair windows and print hit rates."""
    from bench.results import views
    from bench.sim.simulate import simulate
    from bench.trace.parse import parse_trace
    trained = train
    if train not in (None, "window", "oracle"):
        trained = parse_trace(Path(train), k)
    rows = []
    for t in _traces(files, k, batch):
        rows += simulate(t, policies=tuple(_split_csv(policy, "--policy")), regime=regime,
                         budgets=tuple(_ints(budgets, "--budgets")), window=window,
                         train=None if trained == "window" else trained)
    if json_out:
        views.emit_json(rows)
    else:
        views.print_table(views.sim_table(rows))


@app.command()
def demand(
    files: FilesArg,
    capacity: Annotated[str, typer.Option(help="Comma list of capacities C (64G = 64 GiB).")],
    expert_bytes: Annotated[Optional[int], typer.Option(help="Expert size if the header lacks it.")] = None,
    k: KOpt = None, batch: BatchOpt = False, json_out: JsonOpt = False,
) -> None:
    """Nominal miss GB per iteration: LRU over C / S experts, plan replayed twice (warm, measure)."""
    from bench.plan.planfile import plan_from_trace
    from bench.results import views
    from bench.sim.demand import demand as run_demand
    from bench.units import parse_size
    caps = [parse_size(c, "capacity") for c in _split_csv(capacity, "--capacity")]
    rows = []
    for t in _traces(files, k, batch):
        rows += run_demand(plan_from_trace(t, expert_bytes, {"source": t.source}), caps)
    if json_out:
        views.emit_json(rows)
    else:
        views.print_table(views.demand_table(rows))


def _plan_for(files: list[Path], k: int | None, batch: bool, expert_bytes: int | None):
    from bench.plan.planfile import plan_from_trace
    traces = _traces(files, k, batch)
    if len(traces) != 1:
        raise InputError("one plan is made from one trace; pass --batch to merge several")
    t = traces[0]
    return plan_from_trace(t, expert_bytes, {"source": t.source, "model": t.model.as_dict(),
                                             "accepted_tokens": t.accepted_tokens})


def _hints_for(plan, hints: str):
    from bench.plan.planfile import hints_from_file, oracle_hints, previous_token_hints, read_plan
    if hints == "oracle":
        return oracle_hints(plan)
    if hints == "previous-token":
        return previous_token_hints(plan)
    if not Path(hints).exists():
        raise InputError(f"--hints {hints!r} is neither oracle, previous-token nor a file")
    return hints_from_file(plan, read_plan(hints), hints)


@app.command()
def plan(
    files: FilesArg,
    out: Annotated[Path, typer.Option("-o", "--out", help="Replay plan file to write.")],
    hints: Annotated[Optional[str], typer.Option(help="Also write a hint plan: oracle, "
                                                 "previous-token, or a recorded hint plan FILE.")] = None,
    hints_out: Annotated[Optional[Path], typer.Option(help="Hint plan file (default: OUT "
                                                      "with .hints.bin).")] = None,
    freq_out: Annotated[Optional[Path], typer.Option(help="Also write the plan's frequency "
                                                     "table (the pinned arena's oracle).")] = None,
    expert_bytes: Annotated[Optional[int], typer.Option(help="Expert size if the header lacks it.")] = None,
    k: KOpt = None, batch: BatchOpt = False, json_out: JsonOpt = False,
) -> None:
    """Write the binary replay plan (docs/formats.md) the agent reads, and optionally hints."""
    from bench.plan.planfile import frequency_table, write_plan
    from bench.results import views
    p = _plan_for(files, k, batch, expert_bytes)
    info = {"plan": str(out), "bytes": write_plan(out, p), "iterations": len(p.iterations),
            "passes": p.passes, "reads": p.reads, "logical_bytes": p.logical_bytes,
            "distinct_experts": len(p.distinct_experts())}
    if hints:
        h = _hints_for(p, hints)
        target = hints_out or out.with_name(out.stem + ".hints.bin")
        info.update(hints=str(target), hints_bytes=write_plan(target, h),
                    hints_provenance=h.meta.get("provenance"))
    if freq_out:
        table = frequency_table(p)
        lines = [f"{layer} {expert} {n}" for (layer, expert), n in sorted(table.items())]
        freq_out.write_text("# layer expert count\n" + "\n".join(lines) + "\n")
        info["freq"] = str(freq_out)
    if json_out:
        views.emit_json(info)
    else:
        for key, value in info.items():
            views.console.print(f"{key:>18}: {value}")


@app.command()
def demo(
    out: Annotated[Path, typer.Option(help="Directory for traces, plans, the pool, the work "
                                           "dir and bundles.")] = Path("bench-demo"),
    model: Annotated[str, typer.Option(help="Model preset of the trace pipeline: k3, qwen3, "
                                            "dsv3 or tiny.")] = "k3",
    budgets: Annotated[str, typer.Option(help="Comma list of B, experts per layer.")] = "8,16,32",
    seed: Annotated[int, typer.Option(help="Random seed of the synthetic traces.")] = 0,
    trace_only: Annotated[bool, typer.Option("--trace-only", help="Only the trace pipeline "
                                             "(no root needed, nothing measured).")] = False,
    no_trace: Annotated[bool, typer.Option("--no-trace", help="Skip the trace pipeline; only "
                                           "the measured campaign.")] = False,
    max_lock: Annotated[str, typer.Option("--max-lock", help="Largest balloon (mlocked "
                                          "memory) a cell may hold; larger ones are skipped.")]
    = "2G",
    db: Annotated[Optional[str], typer.Option("--db", help="Database URL (default $BENCH_DB, "
                                              "else the local SQLite).")] = None,
    data_dir: Annotated[Optional[Path], typer.Option("--data-dir", help="Bundles and plans "
                                                     "(default OUT/data).")] = None,
    json_out: JsonOpt = False,
) -> None:
    """The main job on this machine: the trace pipeline (synth, parse, locality, policies,
    demand, plans), then as root a small campaign on the local host (cgroup walls, balloon,
    none on a 256 MiB pool) through the real executor, ending with its results table."""
    import time

    from bench.execute.demo import demo_results, prepare_campaign, root_needs, run_demo, tool_needs
    from bench.results import views
    from bench.units import parse_size
    if trace_only and no_trace:
        raise InputError("--trace-only and --no-trace exclude each other")
    lock = parse_size(max_lock, "--max-lock")
    t0 = time.monotonic()

    def step(msg: str) -> None:
        if not json_out:
            views.say(f"[dim]{time.monotonic() - t0:6.1f}s[/] {msg}")
    result: dict = {}
    if not no_trace:
        step(f"part 1: the trace pipeline ({model})")
        result["trace"] = run_demo(out, model, tuple(_ints(budgets, "--budgets")), seed, step=step)
        if not json_out:
            views.print_table(views.parse_table(result["trace"]["parse"]))
            views.print_table(views.stats_table(result["trace"]["locality"]))
            views.print_table(views.sim_table(result["trace"]["sim"]))
            views.print_table(views.sim_table(result["trace"]["sim_off_domain"], "Off-domain: "
                              "static table trained on prose, LRU needs no table"))
            views.print_table(views.demand_table(result["trace"]["demand"]))
            views.print_table(views.recall_table(result["trace"]["recall"]))
    if trace_only:
        if json_out:
            views.emit_json(result["trace"])
        else:
            views.say(f"files in {out}; {time.monotonic() - t0:.1f}s")
        return
    need = root_needs() or tool_needs()
    if need:
        # the trace part ran; the measured part cannot: say what it needs, exit 0
        result["campaign"] = {"skipped": need}
        if json_out:
            views.emit_json(result)
        else:
            views.say(f"[yellow]not measured:[/] {need}")
            views.say(f"files in {out}; {time.monotonic() - t0:.1f}s")
        return
    step("part 2: a campaign on the local host (cgroup walls, balloon, none)")
    dc, settings = prepare_campaign(out, db_url=db, data_dir=data_dir, max_lock=lock, seed=seed,
                                    step=step)
    for r in dc.runs:
        step(f"  will run {r['cell']}")
    for s in dc.skipped:
        step(f"  skipped {s['cell'] or s['point']}: {s['reason']}")
    step(f"campaign {dc.campaign}: {len(dc.runs)} runs")
    from bench.cli.campaign import run_live
    from bench.execute.campaign.executor import Executor
    run_live(dc.campaign, db, lambda store: Executor(store, dc.campaign, settings), json_out)
    res = demo_results(dc)
    result["campaign"] = res
    result["seconds"] = round(time.monotonic() - t0, 1)
    if json_out:
        views.emit_json(result)
    else:
        from rich.table import Table
        views.print_table(views.matrix_table(res["table"]))
        t = Table(title=f"demo cells on {dc.out}: run or skipped")
        for col in ("cell", "outcome", "s/it", "GB/it", "why"):
            t.add_column(col, justify="right" if col in ("s/it", "GB/it") else "left")
        for r in res["runs"]:
            dev, med = r["device_bytes_per_iteration"], r["iteration_median_s"]
            t.add_row(r["cell"], r["state"], "-" if med is None else f"{med:.4f}",
                      "-" if dev is None else f"{dev / 1e9:.4f}", "; ".join(r["failed_rules"][:2]))
        for sk in res["skipped"]:
            t.add_row(sk["cell"] or sk["point"], "skipped", "-", "-", sk["reason"])
        views.print_table(t)
        views.say(f"campaign {dc.campaign}: {res['state']}; results again with `bench results "
                  f"--matrix reclaim --campaign {dc.campaign}" + (f" --db {db}" if db else "")
                  + "`")
        views.say(f"files in {out} (trace, matrix.toml, hosts/, pool/, work/) and bundles in "
                  f"{dc.data_dir}; {time.monotonic() - t0:.1f}s")
    if res["state"] != "done":
        raise typer.Exit(1)


# pool --------------------------------------------------------------------------------------------

@pool_app.command("make")
def pool_make(
    directory: Annotated[Path, typer.Argument(help="Pool directory.")],
    layers: Annotated[int, typer.Option(help="Routed layers.")],
    experts: Annotated[int, typer.Option(help="Experts per layer.")],
    expert_bytes: Annotated[int, typer.Option(help="Bytes per expert file.")],
    seed: Annotated[int, typer.Option(help="Data seed.")] = 0,
    json_out: JsonOpt = False,
) -> None:
    """Write per-expert files of real data with pool.json (resumable; never overwrites another pool)."""
    from bench.plan.pool import PoolSpec, make_pool
    from bench.results import views
    spec = PoolSpec(layers, experts, expert_bytes, seed=seed)
    with views.progress_bar(f"pool {directory}", layers * experts) as update:
        result = make_pool(directory, spec, update)
    if json_out:
        views.emit_json(result)
    else:
        views.say(f"pool {directory}: {result['written']} experts written, {result['kept']} kept, "
                  f"{result['bytes'] / 1e9:.3f} GB")


@pool_app.command("check")
def pool_check(directory: Annotated[Path, typer.Argument(help="Pool directory.")],
               json_out: JsonOpt = False) -> None:
    """Show a pool's manifest; fail if it is missing or incomplete."""
    from dataclasses import asdict

    from bench.plan.pool import check_pool
    from bench.results import views
    spec = check_pool(directory)
    if json_out:
        views.emit_json(dict(asdict(spec), complete=True, total_bytes=spec.total_bytes))
    else:
        views.say(f"pool {directory}: {spec.layers} x {spec.experts_per_layer} experts of "
                  f"{spec.expert_bytes} B, complete")


def _register_areas() -> None:
    """Command groups that live in their own modules (hosts and labs, results...): each has
    register(app). Imported here, not discovered: a missing module is an ImportError."""
    from bench.cli import campaign, hosts, lab, reboot, results, run
    for module in (hosts, reboot, lab, results, run, campaign):
        module.register(app)


_register_areas()


def main(argv: list[str] | None = None) -> int:
    """Entry point: runs the app and turns library errors into one message and an exit code."""
    from rich.markup import escape

    from bench.results import views
    try:
        app(args=argv, prog_name="bench", standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    except BenchError as exc:
        views.err_console.print(f"[bold red]error:[/] {escape(exc.message)}", highlight=False,
                                soft_wrap=True)
        if exc.hint:
            views.err_console.print(f"[bold]fix:[/] {escape(exc.hint)}", highlight=False,
                                    soft_wrap=True)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
