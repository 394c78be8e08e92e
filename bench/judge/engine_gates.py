"""End-to-end engine runs judged (paper §9, Table 3; docs/engine.md): the gates over an engine
run's captured output and the statistics of balanced pairs. Pure.

- gates: `find_backend`, `parse_tokens`, `parse_load`, `degenerate`, and
  `facts(engine_spec, stdout, stderr, record)` that derives what a run measured.
- `pair_stats(prompt, runs)`: per prompt the median of per-PAIR ratios nocache_s / admit_s (not
  the quotient of the medians), their range, the medians of each side and whether every pair's
  two output hashes match.
- `replay_stats(runs)`: the replay-vs-engine line: device bytes per token of the engine's
  admit runs beside the agent's replays of its trace, and the page-cache split of each.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass, field

from bench.judge.stats import median

# a degenerate output ends in a cycle of at most this period covering at least this share
CYCLE_MAX_PERIOD = 4
CYCLE_MIN_SHARE = 0.5
CYCLE_MIN_TOKENS = 4


# gates over captured output ----------------------------------------------------------------------

def _group(m: re.Match, name: str) -> str:
    return m.group(name) if name in m.re.groupindex else m.group(1)


def find_backend(stdout: str, stderr: str, expected: str) -> str | None:
    """The first line of stdout, then stderr, containing the expected backend string."""
    for text in (stdout, stderr):
        for line in text.splitlines():
            if expected in line:
                return line.strip()
    return None


def parse_tokens(stdout: str, stderr: str, regex: str) -> list[int] | None:
    """The output token IDs: the integers in the regex's group at its first match in stdout
    (else stderr); None when it matches nowhere, or holds a number of more than 18 digits (no
    vocabulary is that large: not token IDs)."""
    rx = re.compile(regex, re.MULTILINE)
    for text in (stdout, stderr):
        m = rx.search(text)
        if m:
            ids = re.findall(r"-?\d+", _group(m, "tokens") or "")
            return None if any(len(x) > 19 for x in ids) else [int(x) for x in ids]
    return None


def parse_load(stdout: str, stderr: str, regex: str) -> float | None:
    """The cold model load seconds the engine reports (first match, stdout then stderr)."""
    rx = re.compile(regex, re.MULTILINE)
    for text in (stdout, stderr):
        m = rx.search(text)
        if m:
            try:
                return float(_group(m, "seconds"))
            except (TypeError, ValueError):
                return None
    return None


# an engine may say which of its model file's bytes the page cache holds after the run (bench
# engine run does, from mincore): the replay-vs-engine line splits the engine's bytes with it
PAGE_CACHE = re.compile(r"^page cache after decode: experts (\d{1,19}) B, the rest (\d{1,19}) B "
                        r"\(model: experts (\d{1,19}) B, the rest (\d{1,19}) B\)", re.MULTILINE)


def parse_page_cache(stdout: str) -> dict | None:
    """The page-cache split line of an engine's stdout: experts and rest cached, and the
    model's experts and rest (bytes), or None when it printed none."""
    m = PAGE_CACHE.search(stdout)
    if m is None:
        return None
    return dict(zip(("experts", "rest", "model_experts", "model_rest"), map(int, m.groups())))


def output_sha256(tokens: list[int]) -> str:
    """SHA-256 of the output token ID sequence: decimal IDs joined by ',' (ASCII)."""
    return hashlib.sha256(",".join(str(t) for t in tokens).encode("ascii")).hexdigest()


def degenerate(tokens: list[int] | None, min_tokens: int = 1) -> str | None:
    """Why an output is degenerate, or None: no tokens, fewer than min_tokens, or an output
    that ends in a cycle of period <= 4 (one token repeated is period 1) covering at least
    half of it (and at least 4 tokens)."""
    if tokens is None:
        return "no output token IDs found"
    n = len(tokens)
    if n == 0:
        return "the output has no tokens"
    if n < min_tokens:
        return f"only {n} output tokens, at least {min_tokens} wanted"
    for period in range(1, CYCLE_MAX_PERIOD + 1):
        if n < 2 * period:
            break
        run = period
        while run < n and tokens[n - 1 - run] == tokens[n - 1 - run + period]:
            run += 1
        if run >= max(CYCLE_MIN_TOKENS, CYCLE_MIN_SHARE * n, 2 * period):
            what = (f"token {tokens[-1]} repeated" if period == 1 else
                    f"a cycle of {period} tokens {tokens[n - period:]} repeated")
            return f"the last {run} of {n} tokens are {what}"
    return None


def facts(spec_engine: dict, stdout: str, stderr: str, record: dict | None) -> dict:
    """What one engine run measured, from its spec's engine section, its captured output and
    the runner's record (engine.json). Steady-decode time = wall time - reported cold load."""
    rec = record or {}
    tokens = parse_tokens(stdout, stderr, spec_engine["tokens_regex"])
    load = parse_load(stdout, stderr, spec_engine["load_regex"])
    wall = rec.get("wall_s")
    line = find_backend(stdout, stderr, spec_engine["backend"])
    pair = spec_engine.get("pair") or {}
    return {
        "prompt": spec_engine.get("prompt"), "policy": spec_engine.get("policy"),
        "policy_args": spec_engine.get("policy_args"),
        "pair_index": pair.get("index"), "pair_order": pair.get("order"),
        "pair_position": pair.get("position"),
        "wall_s": wall, "load_s": load,
        "steady_s": None if wall is None or load is None else wall - load,
        "backend_found": line is not None, "backend_line": line,
        "tokens": None if tokens is None else len(tokens),
        "token_ids": tokens,
        "output_sha256": None if tokens is None else output_sha256(tokens),
        "degenerate": degenerate(tokens, int(spec_engine.get("min_tokens") or 1)),
        "exit_code": rec.get("exit_code"), "signal": rec.get("signal"),
        "timed_out": bool(rec.get("timed_out")),
        "page_cache": parse_page_cache(stdout),
    }


# pair statistics -------------------------------------------------------------------------------

@dataclass
class PairStats:
    prompt: str
    pairs: int = 0
    admit_median_s: float | None = None
    nocache_median_s: float | None = None
    speedup: float | None = None             # median of per-pair nocache_s / admit_s
    speedup_min: float | None = None
    speedup_max: float | None = None
    ratio_of_medians: float | None = None    # shown for contrast only
    # device bytes per decoded token (the pool device, the whole run: load and decode),
    # medians over the counted pairs' runs of each policy
    admit_bytes_per_token: float | None = None
    nocache_bytes_per_token: float | None = None
    hashes_match: bool | None = None         # every counted pair's two hashes equal
    mismatched: list[str] = field(default_factory=list)
    incomplete: list[str] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def pair_stats(prompt: str, runs: list[dict]) -> PairStats:
    """Pair statistics of one prompt over its retained runs, each {"pair": a label naming the
    pair (campaign, host, index), "policy", "steady_s", "output_sha256"}. A pair counts when
    both its admit and its nocache run are there with a steady time; the others are listed as
    incomplete. Medians are over the counted pairs."""
    by: dict[str, dict] = {}
    for r in runs:
        by.setdefault(r["pair"], {})[r["policy"]] = r
    st = PairStats(prompt)
    admits, nocaches = [], []
    per_token: dict[str, list[float]] = {"admit": [], "nocache": []}
    for label in sorted(by):
        a, n = by[label].get("admit"), by[label].get("nocache")
        if a is None or n is None or a.get("steady_s") is None or n.get("steady_s") is None \
                or a["steady_s"] <= 0:
            st.incomplete.append(label)
            continue
        admits.append(a["steady_s"])
        nocaches.append(n["steady_s"])
        for pol, r in (("admit", a), ("nocache", n)):
            if r.get("device_bytes") is not None and r.get("tokens"):
                per_token[pol].append(r["device_bytes"] / r["tokens"])
        st.ratios.append(n["steady_s"] / a["steady_s"])
        if a.get("output_sha256") is None or a.get("output_sha256") != n.get("output_sha256"):
            st.mismatched.append(label)
    st.pairs = len(st.ratios)
    if st.pairs:
        st.admit_median_s, st.nocache_median_s = median(admits), median(nocaches)
        st.speedup = median(st.ratios)
        st.speedup_min, st.speedup_max = min(st.ratios), max(st.ratios)
        st.ratio_of_medians = st.nocache_median_s / st.admit_median_s
        st.hashes_match = not st.mismatched
    if per_token["admit"]:
        st.admit_bytes_per_token = median(per_token["admit"])
    if per_token["nocache"]:
        st.nocache_bytes_per_token = median(per_token["nocache"])
    return st


def replay_stats(runs: list[dict]) -> dict | None:
    """The replay-vs-engine line of one prompt and arm over its retained runs (each {"policy",
    "device_bytes", "tokens", "output_sha256", "page_cache"}): median device bytes per decoded
    token of the engine's admit runs and of the agent's replays of its trace, each with its n,
    their ratio, the median page-cache split of each side (bytes of experts and of the rest of
    the model file cached after the run), and whether every replay's output (the traced
    decode's) hashes like every admit run's. None without replay runs."""
    def side(policy: str) -> dict:
        rs = [r for r in runs if r["policy"] == policy and r.get("device_bytes") is not None
              and r.get("tokens")]
        split = [r["page_cache"] for r in rs if isinstance(r.get("page_cache"), dict)]
        return {"n": len(rs), "bytes_per_token": median(
                    [r["device_bytes"] / r["tokens"] for r in rs]) if rs else None,
                "n_split": len(split)} | {k: median([p[k] for p in split]) if split else None
                                          for k in ("experts", "rest", "model_experts",
                                                    "model_rest")}
    if not any(r["policy"] == "replay" for r in runs):
        return None
    engine, replay = side("admit"), side("replay")
    hashes = {r.get("output_sha256") for r in runs if r["policy"] in ("admit", "replay")}
    ratio = (engine["bytes_per_token"] / replay["bytes_per_token"]
             if engine["bytes_per_token"] and replay["bytes_per_token"] else None)
    return {"engine": engine, "replay": replay, "ratio": ratio,
            "outputs_match": None if not (engine["n"] and replay["n"]) else (
                len(hashes) == 1 and None not in hashes)}


def by_arm(groups: list[dict]) -> list[dict]:
    """Result groups split by arm (ample, or a capacity and mechanism: the cell less its
    policy), each with its `arm` text; ordered by prompt, ample first, then the largest
    capacity first, then host."""
    from bench.matrix.cells import parse_cell
    from bench.matrix.engine_cells import arm_text
    out = []
    for g in groups:
        arms: dict[tuple[int, str], list[dict]] = {}
        for r in g["runs"]:
            c = parse_cell(r["cell"])
            arms.setdefault((c.capacity_bytes, c.mechanism), []).append(r)
        out += [dict(g, runs=runs, arm=arm_text(*arm), arm_key=arm)
                for arm, runs in arms.items()]
    return sorted(out, key=lambda g: (g["runs"][0]["prompt"], g["arm_key"][0] != 0,
                                      -g["arm_key"][0], g["arm_key"][1], g["host"]))


def policy_args(data) -> list[str] | None:
    """The policy's arguments an engine run's data holds, if they are a list of strings."""
    got = data.get("policy_args") if isinstance(data, dict) else None
    return got if isinstance(got, list) and all(isinstance(a, str) for a in got) else None


def page_cache_of(data) -> dict | None:
    """The page-cache split an engine run's data holds, if it is one (four integers)."""
    got = data.get("page_cache") if isinstance(data, dict) else None
    keys = ("experts", "rest", "model_experts", "model_rest")
    return got if isinstance(got, dict) and all(
        isinstance(got.get(k), int) and not isinstance(got.get(k), bool) for k in keys) else None


def from_data(data) -> dict:
    """What results read from an engine run's stored data: policy_args and page_cache."""
    return {"policy_args": policy_args(data), "page_cache": page_cache_of(data)}


def arms(runs: list[dict]) -> dict[str, str]:
    """What told the engine which reader, per policy, as the runs' specs said it (the
    arguments; `shlex`-joined), e.g. {"admit": "--load mmap", "nocache": "--load direct-io"};
    a policy whose runs disagree shows each."""
    out: dict[str, list[str]] = {}
    for r in runs:
        if r.get("policy_args") is not None:
            text = shlex.join(r["policy_args"]) or "(no arguments)"
            if text not in out.setdefault(r["policy"], []):
                out[r["policy"]].append(text)
    return {k: " | ".join(v) for k, v in sorted(out.items())}
