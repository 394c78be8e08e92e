"""A corpus of hostile inputs for the trace, plan, sim, plot and ingest commands (the sibling of
hostile.py, which holds hostile names for views): traces and headers with numbers no router
writes (100k-digit integers, absurd layer, expert and size counts, floats and booleans where
integers belong, NaN), nesting 10^5 deep, endless lines, plan files whose header claims more
than the file holds, hint plans of another shape, and paths that are not what the command
needs (a missing directory, a directory, a device, a directory that is not a bundle).

Each case builds its files under a directory and returns the command line, the file (or path)
its refusal must name and the words it must say. `bench` runs it in a child process whose
address space is capped (RLIMIT_AS), so a parser that sizes an allocation from a header fails
the test instead of eating the machine; `run_capped` returns its exit code, output and peak
RSS."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO

AS_LIMIT = 1 << 30          # 1 GiB of address space for the child: numpy, rich and typer fit

# the tiny model every hostile trace pretends to be
K, LAYERS, EXPERTS, EXPERT_BYTES = 2, 2, 8, 4096
HEADER = {"model": "hostile", "k": K, "layers": LAYERS, "experts_per_layer": EXPERTS,
          "expert_bytes": EXPERT_BYTES}


def good_records(iterations: int = 4) -> list[str]:
    """Whole iterations of the tiny model, as a router writes them."""
    return [json.dumps({"step": s, "layer": la, "experts": [(s + la) % EXPERTS,
                                                            (s + la + 1) % EXPERTS]})
            for s in range(iterations) for la in range(LAYERS)]


def trace_text(header: str | None, *records: str) -> str:
    lines = ([header] if header is not None else []) + list(records or good_records())
    return "\n".join(lines) + "\n"


def header_with(**changes) -> str:
    """The header line with some values replaced by raw JSON text (not re-encoded: the text
    is what is hostile)."""
    parts = [f'"{k}": {json.dumps(v)}' for k, v in HEADER.items() if k not in changes]
    parts += [f'"{k}": {v}' for k, v in changes.items()]
    return "{" + ", ".join(parts) + "}"


# plan files -------------------------------------------------------------------------------------

_HEADER = struct.Struct("<4sHHIIQIIQII")
_FIELDS = ("magic", "version", "kind", "layers", "experts_per_layer", "expert_bytes",
           "iterations", "passes", "reads", "meta_len", "reserved")


def hint_plan_bytes(trace: Path) -> bytes:
    """A valid oracle hint plan of `trace`, by bench's own writer."""
    from bench.plan.planfile import encode, oracle_hints, plan_from_trace
    from bench.trace.parse import parse_trace
    return encode(oracle_hints(plan_from_trace(parse_trace(trace))))


def rebuild_plan(data: bytes, meta: bytes | None = None, **fields) -> bytes:
    """The plan with header fields and/or metadata replaced (meta_len follows the metadata
    unless given), the body kept."""
    vals = dict(zip(_FIELDS, _HEADER.unpack_from(data)))
    off = _HEADER.size + vals["meta_len"]
    off += -off % 8
    body = data[off:]
    m = data[_HEADER.size:_HEADER.size + vals["meta_len"]] if meta is None else meta
    vals["meta_len"] = len(m)
    vals.update(fields)
    head = _HEADER.pack(*(vals[f] for f in _FIELDS))
    return head + m + b"\0" * (-(len(head) + len(m)) % 8) + body


def plan_with_read(data: bytes, index: int, expert: int, experts_per_layer: int) -> bytes:
    """The plan with read `index` naming `expert`, and room for it in the header."""
    vals = dict(zip(_FIELDS, _HEADER.unpack_from(data)))
    reads_at = len(data) - 4 * vals["reads"]
    out = bytearray(rebuild_plan(data, experts_per_layer=experts_per_layer))
    struct.pack_into("<I", out, reads_at + 4 * index, expert)
    return bytes(out)


# cases ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """`build(dir)` writes the files and returns (argv, the path the refusal names, what it
    says); `left` lists paths (relative to dir) that must still be there afterwards."""

    name: str
    build: Callable[[Path], tuple[list[str], str, str]]
    left: tuple[str, ...] = ()


def _trace_case(name: str, text: str | bytes, says: str, command: tuple[str, ...] = ("trace",
                                                                                      "parse"),
                extra: tuple[str, ...] = ()) -> Case:
    def build(d: Path) -> tuple[list[str], str, str]:
        p = d / f"{name}.jsonl"
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text)
        return [*command, str(p), *extra], str(p), says
    return Case(name, build)


def _good_trace(d: Path) -> Path:
    p = d / "good.jsonl"
    p.write_text(trace_text(json.dumps(HEADER)))
    return p


def _hints_case(name: str, make: Callable[[bytes], bytes], says: str) -> Case:
    def build(d: Path) -> tuple[list[str], str, str]:
        good = _good_trace(d)
        p = d / f"{name}.bin"
        p.write_bytes(make(hint_plan_bytes(good)))
        return ["trace", "recall", str(good), "--hints", str(p)], str(p), says
    return Case(name, build)


def _path_case(name: str, argv: Callable[[Path, Path], list[str]], named: str, says: str,
               left: tuple[str, ...] = ()) -> Case:
    """`named` and `says` may hold {d}, the case's directory."""
    def build(d: Path) -> tuple[list[str], str, str]:
        good = _good_trace(d)
        return argv(d, good), named.format(d=d), says.format(d=d)
    return Case(name, build, left)


DEEP = "[" * 100_000 + "]" * 100_000
BIG = "1" + "0" * 100_000

TRACES = [
    _trace_case("header-100k-digit-layers", trace_text(header_with(layers=BIG)),
                ":1: key 'layers': an integer of 100001 digits (at most 20)"),
    _trace_case("record-5000-digit-expert", trace_text(json.dumps(HEADER), '{"step": 0, '
                '"layer": 0, "experts": [1, ' + "9" * 5000 + "]}"),
                ":2: key 'experts': expert id of an integer of 5000 digits"),
    _trace_case("header-10^12-layers", trace_text(header_with(layers=10 ** 12)),
                ":1: key 'layers': 1000000000000 is outside what bench reads [1, 4096]"),
    _trace_case("header-21-digit-expert-bytes", trace_text(header_with(expert_bytes=10 ** 20)),
                ":1: key 'expert_bytes': an integer of 21 digits (at most 20)"),
    _trace_case("header-10^15-experts", trace_text(header_with(experts_per_layer=10 ** 15)),
                ":1: key 'experts_per_layer': 1000000000000000 is outside what bench reads"),
    _trace_case("header-2^36-slots", trace_text(header_with(layers=4096,
                                                            experts_per_layer=1 << 20)),
                ":1: key 'experts_per_layer': 4096 layers x 1048576 experts is more than the "
                "16777216 (layer, expert) slots"),
    # past uint64: what the plan header's 64-bit field overflowed on
    _trace_case("header-5x10^19-expert-bytes", trace_text(header_with(
        expert_bytes=5 * 10 ** 19)), ":1: key 'expert_bytes': 50000000000000000000 is outside "
        "what bench reads",
                command=("plan",), extra=("-o", "p.bin")),
    # whole iterations of 4096 layers: what `trace stats` would size a 32 GiB table from
    _trace_case("header-2^36-slots-stats", trace_text(header_with(
        layers=4096, experts_per_layer=1 << 20), *(json.dumps(
            {"step": 0, "layer": la, "experts": [la, la + 1]}) for la in range(4096))),
        ":1: key 'experts_per_layer': 4096 layers x 1048576 experts", command=("trace", "stats")),
    _trace_case("header-10^9-k", trace_text(header_with(k=10 ** 9)),
                ":1: key 'k': 1000000000 is outside what bench reads [1, 1024]"),
    _trace_case("header-k-above-experts", trace_text(header_with(k=16)),
                ":1: key 'k': top-16 of 8 experts per layer"),
    _trace_case("header-float-layers", trace_text(header_with(layers="2.0")),
                ":1: 'layers' must be an integer, got float 2.0"),
    _trace_case("header-float-overflow", trace_text(header_with(expert_bytes="1e400")),
                ":1: 'expert_bytes' must be an integer, got float inf"),
    _trace_case("header-bool-k", trace_text(header_with(k="true")),
                ":1: 'k' must be an integer, got bool True"),
    _trace_case("header-nan", trace_text(header_with(expert_bytes="NaN")),
                ":1: bad JSON: NaN is not a number"),
    _trace_case("header-infinity", trace_text(header_with(layers="-Infinity")),
                ":1: bad JSON: -Infinity is not a number"),
    _trace_case("header-negative", trace_text(header_with(layers="-3")),
                ":1: header 'layers' must be positive, got -3"),
    _trace_case("header-deep-model", trace_text(header_with(model=DEEP)),
                ":1: bad JSON: nested too deep"),
    _trace_case("header-nested-model", trace_text(header_with(model='{"a": [1, 2]}')),
                ":1: key 'model': must be a name of at most 256 characters, got object"),
    _trace_case("deep-line", trace_text(json.dumps(HEADER), DEEP),
                ":2: bad JSON: nested too deep"),
    _trace_case("endless-line", "x" * (3 << 20),
                ":1: line longer than 1048576 characters"),
    _trace_case("endless-second-line", json.dumps(HEADER) + "\n" + " " * (3 << 20),
                ":2: line longer than 1048576 characters"),
    _trace_case("expert-past-header", trace_text(json.dumps(HEADER), '{"step": 0, "layer": 0, '
                '"experts": [1, 8]}'), ":2: expert 8 out of range [0, 8)"),
    _trace_case("layer-past-header", trace_text(json.dumps(HEADER), '{"step": 0, "layer": 2, '
                '"experts": [1, 2]}'), ":2: layer 2 out of range [0, 2)"),
    _trace_case("headerless-expert-10^18", trace_text(None, '{"layer": 0, "experts": '
                '[1, 1000000000000000000]}'), ":1: expert 1000000000000000000 out of range "
                "[0, 1048576)", extra=("--k", "2")),
    _trace_case("headerless-layer-10^12", trace_text(None, '{"layer": 1000000000000, '
                '"experts": [1, 2]}'), ":1: layer 1000000000000 out of range [0, 4096)",
                extra=("--k", "2")),
    _trace_case("headerless-slots", trace_text(None, '{"layer": 0, "experts": [1, 1048575]}',
                                               '{"layer": 4095, "experts": [1, 2]}'),
                ":1: expert 1048575 with layer 4095 (line 2): 4096 layers x 1048576 experts is "
                "more than the 16777216", extra=("--k", "2")),
    _trace_case("expert-float", trace_text(json.dumps(HEADER), '{"step": 0, "layer": 0, '
                '"experts": [1, 2.5]}'), ":2: expert id float 2.5 is not an integer"),
    _trace_case("expert-bool", trace_text(json.dumps(HEADER), '{"step": 0, "layer": 0, '
                '"experts": [1, true]}'), ":2: expert id bool True is not an integer"),
    _trace_case("step-float", trace_text(json.dumps(HEADER), '{"step": 1e300, "layer": 0, '
                '"experts": [1, 2]}'), ":2: 'step' must be an integer, got float 1e+300"),
    _trace_case("width-million", trace_text(json.dumps(HEADER), '{"step": 0, "layer": 0, '
                '"experts": [' + ", ".join(["1"] * 200_000) + "]}"),
                ":2: record width 200000 is neither k=2 nor 2k=4"),
    _trace_case("not-utf8", json.dumps(HEADER).encode() + b"\n\xff\xfe{}\n", "not UTF-8 text"),
]


def _train_case(d: Path) -> tuple[list[str], str, str]:
    """`bench sim GOOD --train FILE`: the hostile file is the option's."""
    p = d / "train.jsonl"
    p.write_text(trace_text(header_with(layers=10 ** 12)))
    return (["sim", str(_good_trace(d)), "--train", str(p)], str(p),
            ":1: key 'layers': 1000000000000 is outside")


TRACES.append(Case("train-trace-absurd", _train_case))


def _meta_int(data: bytes) -> bytes:
    return rebuild_plan(data, meta=b'{"provenance": {"n": ' + BIG.encode() + b"}}")


PLANS = [
    _hints_case("plan-2^32-layers", lambda b: rebuild_plan(b, layers=0xFFFFFFFF),
                ": header field 'layers': 4294967295 is outside what bench reads"),
    _hints_case("plan-2^60-expert-bytes", lambda b: rebuild_plan(b, expert_bytes=1 << 60),
                ": header field 'expert_bytes': 1152921504606846976 is outside"),
    _hints_case("plan-claims-2^64-reads", lambda b: rebuild_plan(b, reads=(1 << 64) - 1),
                ": plan size "),
    _hints_case("plan-claims-2^32-meta", lambda b: rebuild_plan(b, meta_len=0xFFFFFFFF),
                ": plan size "),
    _hints_case("plan-truncated", lambda b: b[:20], ": truncated plan (20 bytes"),
    _hints_case("plan-bad-magic", lambda b: b"XPLN" + b[4:], ": not a plan (magic"),
    _hints_case("plan-meta-100k-digits", _meta_int,
                ": plan metadata key 'provenance.n': an integer of 100001 digits"),
    _hints_case("plan-meta-deep", lambda b: rebuild_plan(b, meta=DEEP.encode()),
                ": plan metadata: bad JSON: nested too deep"),
    _hints_case("plan-meta-list", lambda b: rebuild_plan(b, meta=b"[1, 2]"),
                ": plan metadata must be a JSON object, got list"),
    _hints_case("plan-meta-nan", lambda b: rebuild_plan(b, meta=b'{"x": NaN}'),
                ": plan metadata: bad JSON: NaN is not a number"),
    _hints_case("plan-meta-not-utf8", lambda b: rebuild_plan(b, meta=b'{"\xff": 1}'),
                ": plan metadata is not UTF-8"),
    _hints_case("plan-provenance-list", lambda b: rebuild_plan(b, meta=b'{"provenance": [1]}'),
                ": plan metadata key 'provenance': must be a JSON object"),
    _hints_case("hints-of-another-shape", lambda b: plan_with_read(b, 0, 40, 64),
                "a hint names layer 1 expert 40, outside the replay plan's 2 layers x 8 experts"),
]


def _ingest(d: Path, *paths: str) -> list[str]:
    return ["ingest", *paths, "--db", f"sqlite:///{d}/ingest.db"]


def _dir_with(d: Path, name: str, *files: str) -> Path:
    p = d / name
    p.mkdir()
    for f in files:
        (p / f).write_text("{}\n")
    return p


def _bundles(d: Path) -> Path:
    """A directory holding a (bundle-shaped) directory, as <data_dir>/bundles/<host>/ does."""
    p = _dir_with(d, "bundles", "notes.txt")
    _dir_with(p, "r1", "spec.json", "manifest.json")
    return p


PATHS = [
    _path_case("synth-missing-dir", lambda d, g: ["trace", "synth", f"{d}/nowhere/t.jsonl"],
               "OUT {d}/nowhere/t.jsonl", "directory {d}/nowhere does not exist"),
    _path_case("synth-into-a-directory", lambda d, g: ["trace", "synth", str(d)],
               "OUT {d}", "is a directory"),
    _path_case("plan-missing-dir", lambda d, g: ["plan", str(g), "-o", f"{d}/nowhere/p.bin"],
               "-o {d}/nowhere/p.bin", "directory {d}/nowhere does not exist"),
    _path_case("plan-hints-out-missing-dir", lambda d, g: [
        "plan", str(g), "-o", f"{d}/p.bin", "--hints", "oracle", "--hints-out",
        f"{d}/nowhere/h.bin"], "--hints-out {d}/nowhere/h.bin", "does not exist"),
    _path_case("plan-freq-out-missing-dir", lambda d, g: [
        "plan", str(g), "-o", f"{d}/p.bin", "--freq-out", f"{d}/nowhere/f.txt"],
        "--freq-out {d}/nowhere/f.txt", "does not exist"),
    _path_case("plan-out-parent-is-a-file", lambda d, g: ["plan", str(g), "-o", f"{g}/p.bin"],
               "-o {d}/good.jsonl/p.bin", "{d}/good.jsonl is not a directory"),
    _path_case("plot-missing-dir", lambda d, g: [
        "plot", "capacity", "-o", f"{d}/nowhere/c.png", "--db", f"sqlite:///{d}/plot.db"],
        "-o {d}/nowhere/c.png", "directory {d}/nowhere does not exist"),
    _path_case("plot-unknown-format", lambda d, g: [
        "plot", "capacity", "-o", f"{d}/c.xyz", "--db", f"sqlite:///{d}/plot.db"],
        "-o {d}/c.xyz", "matplotlib cannot write .xyz files"),
    _path_case("trace-is-a-directory", lambda d, g: ["trace", "parse", str(d)],
               "{d}", "not a regular file"),
    _path_case("trace-is-a-device", lambda d, g: ["trace", "stats", "/dev/zero"],
               "/dev/zero", "not a regular file"),
    _path_case("hints-is-a-device", lambda d, g: ["trace", "recall", str(g), "--hints",
                                                  "/dev/zero"],
               "/dev/zero", "not a regular file (a plan is a BPLN file)"),
    _path_case("hints-is-a-directory", lambda d, g: ["trace", "recall", str(g), "--hints",
                                                     str(d)],
               "{d}", "not a regular file (a plan is a BPLN file)"),
    _path_case("train-is-a-directory", lambda d, g: ["sim", str(g), "--train", str(d)],
               "{d}", "not a regular file (a trace is a JSONL file)"),
    _path_case("ingest-a-plain-directory", lambda d, g: _ingest(d, str(_dir_with(d, "photos",
                                                                                 "a.jpg"))),
               "{d}/photos", "not a run bundle: no spec.json and no manifest.json (left in "
               "place)", left=("photos/a.jpg",)),
    _path_case("ingest-dot", lambda d, g: _ingest(d, "."), ".",
               "not a run bundle: no spec.json and no manifest.json",
               left=("good.jsonl",)),
    _path_case("ingest-a-run-still-writing", lambda d, g: _ingest(d, str(_dir_with(
        d, "r1", "spec.json", "status.json"))), "{d}/r1",
        "not a run bundle: no manifest.json (left in place)",
        left=("r1/spec.json", "r1/status.json")),
    _path_case("ingest-a-directory-of-bundles", lambda d, g: _ingest(d, str(_bundles(d))),
        "{d}/bundles", "not a run bundle: no spec.json and no manifest.json",
        left=("bundles/r1/spec.json", "bundles/notes.txt")),
    _path_case("ingest-a-file", lambda d, g: _ingest(d, str(g)), "{d}/good.jsonl",
               "not a directory (left in place)", left=("good.jsonl",)),
]

# numbers in options of the same commands: named by the option (or the parameter)
OPTIONS = [
    _path_case("synth-negative-seed", lambda d, g: ["trace", "synth", "-", "--seed", "-1"],
               "synth: seed", "must be >= 0"),
    _path_case("synth-infinite-alpha", lambda d, g: ["trace", "synth", "-", "--alpha", "inf"],
               "--alpha", "must be a finite number >= 0 and at most 20, got inf"),
    _path_case("synth-10^12-tokens", lambda d, g: ["trace", "synth", "-", "--tokens",
                                                   str(10 ** 12)],
               "synth: tokens", "must be at most 1000000"),
    _path_case("sim-23-digit-budget", lambda d, g: ["sim", str(g), "--budgets", "9" * 23],
               "--budgets", "is outside [1, 16777216] experts"),
    _path_case("k-10^9", lambda d, g: ["trace", "parse", str(g), "--k", str(10 ** 9)],
               "--k", "must be in [1, 1024], got 1000000000"),
    _path_case("plan-10^30-expert-bytes", lambda d, g: [
        "demand", str(g), "--capacity", "1G", "--expert-bytes", str(10 ** 30)],
        "{d}/good.jsonl", "header field 'expert_bytes': 1" + "0" * 30 + " is outside"),
]

ALL = TRACES + PLANS + PATHS + OPTIONS


# running bench in a capped child ----------------------------------------------------------------

# A small parent forks `bench` with its address space capped, waits for it and writes its exit
# code and peak RSS to a file (the child's stdout and stderr are the test's to read).
_RUN = ("import os, resource, sys\n"
        "limit, report = int(sys.argv[1]), sys.argv[2]\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
        "    os.execv(sys.executable, [sys.executable, *sys.argv[3:]])\n"
        "_, status, usage = os.wait4(pid, 0)\n"
        "with open(report, 'w') as f:\n"
        "    f.write(f'{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss}')\n")


@dataclass(frozen=True)
class Ran:
    rc: int
    stdout: str
    stderr: str
    peak_rss_mib: int


def run_capped(argv: list[str], cwd: Path, report: Path, limit: int = AS_LIMIT,
               timeout: float = 120, python: tuple[str, ...] = ("-m", "bench")) -> Ran:
    """`bench ARGV` (or `python PYTHON ARGV`) in a child whose address space is capped at
    `limit` bytes."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", COLUMNS="200",
               PYTHONPATH=str(REPO), BENCH_DATA_DIR=str(cwd / "data"))
    p = subprocess.run([sys.executable, "-c", _RUN, str(limit), str(report), *python, *argv],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    rc, kib = report.read_text().split()
    return Ran(int(rc), p.stdout, p.stderr, int(kib) // 1024)
