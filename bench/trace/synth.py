"""Deterministic synthetic router traces in exactly the production format.

Real traces are not in the repository, so tests, benchmarks and the demo run on traces made
here. The structure mirrors what the paper measures on real routing (Table 1, Facts 1-6):

* per-layer Zipf-like popularity ~ (rank + head)^-alpha_l (Zipf-Mandelbrot; head = 0 is pure
  Zipf), where alpha_l ramps linearly from alpha*(1-gradient/2) at the first layer to
  alpha*(1+gradient/2) at the last (early layers flat, deep layers concentrated: Fact 2);
* temporal reuse: each of the k selections of a position is, with probability `reuse`, a copy
  of one of the previous position's experts at the same layer (Fact 4); the rest are drawn from
  the layer's popularity: k distinct experts with inclusion probability proportional to
  (rank + head)^-alpha (systematic PPS sampling), so with head = 0 selection counts fall with
  rank at slope alpha (a positive head flattens the top ranks, as load balancing does);
* domains: popularity ranks map to expert ids through a per-layer permutation; every domain
  keeps a fraction `overlap` of the base permutation's rank positions and shuffles the rest,
  so hot sets of different domains overlap by a tunable amount (Fact 5);
* non-stationarity (off unless set; on in the k3 and dsv3 presets): phases of geometric length (mean
  `phase` tokens, each layer's phases ending on their own) each give a fresh hot set of `phase_set`
  experts per layer, drawn uniformly, a share `drift` of the popularity (Zipf `phase_alpha`
  inside it), so the hot set drifts within a request and a table of past counts ages while
  recency tracks (Fig. 1, Fig. 5); `burst`: a selection re-picks an expert of the positions
  before the previous one (the last `burst_window` - 1), short-range reuse beyond W1;
* order inside a pass: `shuffle` (random) or `score` (by gate score, i.e. current popularity,
  with jitter): an expert keeps about its place from pass to pass, so a pass of k experts
  evicts its own reuse from an LRU of fewer than k keys (the paper's LRU at 0.5% for B=8);
* speculative decoding: with probability `spec_accept` an iteration carries two positions per
  layer (records of width 2k, 2 accepted tokens); with probability `fallback` a failed
  speculation re-routes a contiguous range of deep layers inside the same step (1 token);
* a requested token count: decode produces tokens - 1 accepted tokens (the first token comes
  from prefill, whose records are emitted tagged "phase": "prefill" and excluded by the parser).

Same parameters and seed give byte-identical output. Pure: returns lines; the CLI writes them.
Parameters are held to the parser's bounds (bench.trace.parse.LIMITS: what is generated can
be read back), at most MAX_TOKENS tokens, finite rates and a non-negative seed.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace

import numpy as np

from bench.errors import InputError
from bench.trace.parse import LIMITS

MAX_TOKENS = 1_000_000      # a k3 trace of a million tokens is about 18 GB of JSONL


@dataclass(frozen=True)
class SynthParams:
    model: str
    k: int
    experts_per_layer: int
    layers: int
    expert_bytes: int
    tokens: int = 300
    alpha: float = 1.0
    head: float = 0.0
    gradient: float = 0.6
    reuse: float = 0.3
    overlap: float = 0.3
    domain: int = 0
    spec_accept: float = 0.05
    fallback: float = 0.15
    drift: float = 0.0          # popularity mass of the current phase's hot set (0: stationary)
    phase: float = 40.0         # mean phase length in accepted-token positions (geometric)
    phase_set: int = 24         # experts per layer in a phase's hot set
    phase_alpha: float = 0.0    # Zipf slope of the popularity inside a phase's hot set
    burst: float = 0.0          # probability a selection re-picks one of the last `burst_window`
    burst_window: int = 8       # positions' experts (beyond the previous one: short bursts)
    order: str = "shuffle"      # "score": a pass lists its experts by popularity rank (gate score)
    seed: int = 0
    shape: str = "production"  # or "llama": one record per token and layer, no header
    dry_run_pass: bool = False  # llama.cpp's synthetic first pass, identical for every prompt

    def validate(self) -> "SynthParams":
        floats = ("alpha", "head", "gradient", "reuse", "overlap", "spec_accept", "fallback",
                  "drift", "phase", "burst", "phase_alpha")
        for name in floats:
            if not math.isfinite(getattr(self, name)):
                raise InputError(f"synth: {name} must be a finite number, got "
                                 f"{getattr(self, name)}")
        checks = [
            (self.k <= LIMITS["k"], f"k must be at most {LIMITS['k']}"),
            (self.layers <= LIMITS["layers"], f"layers must be at most {LIMITS['layers']}"),
            (self.experts_per_layer <= LIMITS["experts_per_layer"],
             f"experts_per_layer must be at most {LIMITS['experts_per_layer']}"),
            (self.layers * self.experts_per_layer <= LIMITS["slots"],
             f"layers x experts_per_layer must be at most {LIMITS['slots']}"),
            (self.expert_bytes <= LIMITS["expert_bytes"],
             f"expert_bytes must be at most {LIMITS['expert_bytes']}"),
            (self.tokens <= MAX_TOKENS, f"tokens must be at most {MAX_TOKENS}"),
            (self.seed >= 0, "seed must be >= 0"),
            (self.k >= 1, "k must be at least 1"),
            (self.experts_per_layer >= 2 * self.k, "experts_per_layer must be at least 2k"),
            (self.layers >= 1, "layers must be at least 1"),
            (self.expert_bytes >= 32, "expert_bytes must be at least 32"),
            (self.tokens >= 2, "tokens must be at least 2 (the first comes from prefill)"),
            (self.alpha >= 0, "alpha (Zipf slope) must be >= 0"),
            (self.head >= 0, "head (Zipf-Mandelbrot offset) must be >= 0"),
            (0 <= self.gradient < 2, "gradient must be in [0, 2)"),
            (0 <= self.reuse <= 1, "reuse must be in [0, 1]"),
            (0 <= self.overlap <= 1, "overlap must be in [0, 1]"),
            (self.domain >= 0, "domain must be >= 0"),
            (0 <= self.spec_accept <= 1, "spec_accept must be in [0, 1]"),
            (0 <= self.fallback <= 1, "fallback must be in [0, 1]"),
            (self.spec_accept + self.fallback <= 1, "spec_accept + fallback must be <= 1"),
            (0 <= self.drift <= 1, "drift must be in [0, 1]"),
            (1 <= self.phase <= MAX_TOKENS, f"phase must be in [1, {MAX_TOKENS}] tokens"),
            (0 <= self.burst <= 1, "burst must be in [0, 1]"),
            (self.phase_alpha >= 0, "phase_alpha must be >= 0"),
            (self.reuse + self.burst <= 1, "reuse + burst must be <= 1"),
            (1 <= self.burst_window <= 64, "burst_window must be in [1, 64]"),
            (1 <= self.phase_set <= self.experts_per_layer,
             "phase_set must be in [1, experts_per_layer]"),
            (self.order in ("shuffle", "score"), "order must be shuffle or score"),
            (self.shape in ("production", "llama"), "shape must be production or llama"),
            (self.shape == "production" or (self.spec_accept == 0 and self.fallback == 0),
             "the llama shape has no speculative decoding: set spec_accept and fallback to 0"),
        ]
        for ok, msg in checks:
            if not ok:
                raise InputError(f"synth: {msg}")
        return self

    def layer_alpha(self, layer: int) -> float:
        frac = layer / (self.layers - 1) if self.layers > 1 else 0.5
        return self.alpha * (1 - self.gradient / 2 + self.gradient * frac)


PRESETS: dict[str, SynthParams] = {
    # The production model of the paper: k=16, E=896, 92 routed layers, 17.55 MB experts.
    # head and alpha chosen so locality lands near the paper's Table 1 for K3: top-8 share
    # about 14%, W1/W8/W64 about 33/55/80%, pool coverage about 70% in 300 tokens.
    "k3": SynthParams("kimi-k3-synth", 16, 896, 92, 17_550_000, alpha=1.6, head=40.0,
                      gradient=0.8, reuse=0.24, overlap=0.75, spec_accept=0.05, fallback=0.15,
                      drift=0.3, phase=30.0, phase_set=24, phase_alpha=1.5, burst=0.08,
                      burst_window=3, order="score"),
    # qwen3 and dsv3 (llama.cpp traces: no speculation; the paper's 400 and 300 steps) are
    # fitted by tests/perf/fit_synth_presets.py to the §3 numbers in
    # tests/support/preset_targets.py FITTED (seed 11, four domains); the other §3 numbers are
    # held-out checks (tests/unit/test_synth_paper_models.py). qwen3: W1, W64, top-8 share and
    # Fig. 1's B=32 tie (LRU 75 vs static 73): a flattened head (alpha 2.7 on rank + 10), a
    # shallow layer ramp and bursts over the last 64 positions, stationary.
    "qwen3": SynthParams("qwen3-30b-a3b-synth", 8, 128, 48, 2_864_583, tokens=401, alpha=2.7,
                         head=10.0, gradient=0.3, reuse=0.2875, burst=0.2625, burst_window=64,
                         spec_accept=0.0, fallback=0.0),
    # dsv3: W1, W64 and Fig. 1's B=32 (LRU 48 vs static 35): phases of 65 tokens carrying 35%
    # of the popularity, as in k3, are what let LRU lead a static table.
    "dsv3": SynthParams("deepseek-v3-synth", 8, 256, 58, 44_040_192, tokens=301, alpha=0.7,
                        reuse=0.16, drift=0.35, phase=65.0, phase_set=24, phase_alpha=1.0,
                        spec_accept=0.0, fallback=0.0),
    "tiny": SynthParams("tiny-synth", 4, 32, 4, 65_536, tokens=60, alpha=1.0, reuse=0.3),
}


def preset(name: str, **overrides) -> SynthParams:
    if name not in PRESETS:
        raise InputError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    clean = {k: v for k, v in overrides.items() if v is not None}
    return replace(PRESETS[name], **clean).validate()


def _inclusion_of(w: np.ndarray, k: int) -> np.ndarray:
    """Per-expert probability of being among a position's k selections: proportional to w,
    summing to k, capped at 1."""
    n = w.shape[0]
    pi = np.zeros(n)
    capped = np.zeros(n, bool)
    for _ in range(n):
        free = ~capped
        pi[free] = w[free] * (k - capped.sum()) / w[free].sum()
        pi[capped] = 1.0
        over = free & (pi > 1.0)
        if not over.any():
            return pi
        capped |= over
    return pi


class _Layer:
    """Popularity and history of one layer."""

    def __init__(self, p: SynthParams, layer: int, base_perm: np.ndarray, rng: np.random.Generator):
        e = p.experts_per_layer
        perm = base_perm.copy()
        moved = np.flatnonzero(rng.random(e) >= p.overlap)  # rank positions this domain reshuffles
        perm[moved] = perm[rng.permutation(moved)]
        w = (np.arange(1, e + 1, dtype=np.float64) + p.head) ** -p.layer_alpha(layer)
        self.base = np.empty(e)
        self.base[perm] = w / w.sum()            # the domain's stationary popularity, by expert
        self.weights = self.base
        self.inclusion = _inclusion_of(self.base, p.k)
        self.prev: np.ndarray | None = None
        self.history: list[list[int]] = []   # older positions, newest last (burst source)

    def new_phase(self, p: SynthParams, rng: np.random.Generator) -> None:
        """A phase boundary: a fresh hot set of `phase_set` experts, drawn uniformly from the
        layer, takes a share `drift` of the popularity mass (Zipf slope `phase_alpha` inside
        it) until the next boundary: popularity drifts within a request, the stationary head
        keeps the rest."""
        hot = rng.choice(self.base.shape[0], size=p.phase_set, replace=False)
        share = np.arange(1, p.phase_set + 1, dtype=np.float64) ** -p.phase_alpha
        w = self.base * (1.0 - p.drift)
        w[hot] += p.drift * share / share.sum()
        self.weights = w
        self.inclusion = _inclusion_of(w, p.k)

    def _fresh(self, p: SynthParams, rng: np.random.Generator, chosen: list[int]) -> None:
        # Systematic PPS sampling: k distinct experts, expert x included with probability
        # inclusion[x]; the random permutation decorrelates which experts are drawn together.
        order = rng.permutation(self.inclusion.shape[0])
        edges = np.cumsum(self.inclusion[order])
        hits = np.searchsorted(edges, rng.random() + np.arange(p.k), side="right")
        fresh = order[np.minimum(hits, order.shape[0] - 1)]
        rng.shuffle(fresh)
        taken = set(chosen)
        for expert in fresh.tolist():
            if expert not in taken:
                chosen.append(expert)
                taken.add(expert)
                if len(chosen) == p.k:
                    break

    def _burst(self, p: SynthParams, rng: np.random.Generator, chosen: list[int]) -> None:
        """Re-pick experts of the positions before the previous one (a short burst)."""
        n = int(rng.binomial(p.k, p.burst)) if self.history and p.burst > 0 else 0
        if not n:
            return
        pool = [e for e in dict.fromkeys(x for pos in self.history for x in pos)
                if e not in set(chosen)]
        if pool:
            chosen += rng.choice(pool, size=min(n, len(pool), p.k - len(chosen)),
                                 replace=False).tolist()

    def position(self, p: SynthParams, rng: np.random.Generator, commit: bool = True) -> list[int]:
        chosen: list[int] = []
        if self.prev is not None and p.reuse > 0:
            n_copy = int(rng.binomial(p.k, p.reuse))
            if n_copy:
                chosen = rng.choice(self.prev, size=n_copy, replace=False).tolist()
        self._burst(p, rng, chosen)
        if len(chosen) < p.k:
            self._fresh(p, rng, chosen)
        if p.order == "score":
            # A router lists a pass's experts by gate score, which follows popularity: an expert
            # keeps about its place from pass to pass, so a pass of k experts evicts its own
            # reuse from an LRU cache of fewer than k (the paper's B=8 LRU at 0.5%).
            jitter = rng.normal(0.0, 0.5, len(chosen))
            key = -np.log(self.weights[np.asarray(chosen, np.int64)]) + jitter
            chosen = [chosen[i] for i in np.argsort(key, kind="stable")]
        else:
            # Shuffled: copied experts are not systematically read first.
            order = rng.permutation(len(chosen))
            chosen = [chosen[i] for i in order]
        if commit:
            keep = p.burst_window - 1
            if self.prev is not None and p.burst > 0 and keep:
                self.history = (self.history + [self.prev.tolist()])[-keep:]
            self.prev = np.asarray(chosen)
        return chosen


def _dry_run_lines(p: SynthParams) -> Iterator[str]:
    """llama.cpp's synthetic first pass: identical for every domain and seed of this model."""
    fixed = np.random.default_rng([0xD27, p.layers, p.experts_per_layer])
    for li in range(p.layers):
        experts = fixed.choice(p.experts_per_layer, size=p.k, replace=False).tolist()
        if p.shape == "production":
            yield json.dumps({"step": 0, "layer": li, "experts": experts})
        else:
            yield json.dumps({"token": 0, "name": f"ffn_moe_topk-{li}", "experts": experts})


# Bump when generate() writes other lines for the same parameters (tests/unit/test_synth_version.py
# holds the digest of one trace per version): generated traces are cached under a name that
# carries params_digest, and a stale cache must never stand in for the new generator.
GENERATOR_VERSION = 2


def params_digest(p: SynthParams) -> str:
    """12 hex digits naming a trace generated from `p` by this generator version."""
    text = json.dumps([GENERATOR_VERSION, asdict(p)], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def generate(p: SynthParams) -> Iterator[str]:
    """Yield the JSONL lines of the trace, header first (production shape)."""
    p.validate()
    base_rng = np.random.default_rng([p.seed, 0xBA5E])
    dom_rng = np.random.default_rng([p.seed, 0xD0, p.domain])
    run_rng = np.random.default_rng([p.seed, 0x5EED, p.domain])
    phase_rng = np.random.default_rng([p.seed, 0xF4A5E, p.domain])
    base_perms = [base_rng.permutation(p.experts_per_layer) for _ in range(p.layers)]
    layers = [_Layer(p, li, base_perms[li], dom_rng) for li in range(p.layers)]
    dumps = json.dumps
    if p.shape == "production":
        header = {"model": p.model, "k": p.k, "experts_per_layer": p.experts_per_layer,
                  "layers": p.layers, "expert_bytes": p.expert_bytes,
                  "synth": {k: v for k, v in asdict(p).items()
                            if k not in ("model", "k", "experts_per_layer", "layers",
                                         "expert_bytes")}}
        yield dumps(header)
        for li, lay in enumerate(layers):  # batched prefill: positions mixed, excluded on parse
            yield dumps({"phase": "prefill", "layer": li, "experts": lay.position(p, run_rng)})
    else:
        for li, lay in enumerate(layers):
            yield dumps({"token": 0, "n_tokens": 7, "name": f"ffn_moe_topk-{li}",
                         "experts": lay.position(p, run_rng)})
    if p.dry_run_pass:
        yield from _dry_run_lines(p)
    step = first = 1 if p.dry_run_pass else 0
    left = p.tokens - 1
    while left > 0:
        if p.drift > 0:   # each layer's phases end on their own (geometric, mean `phase`)
            for lay in layers:
                if step == first or phase_rng.random() < 1.0 / p.phase:
                    lay.new_phase(p, phase_rng)
        u = run_rng.random()
        if p.shape == "llama":
            for li, lay in enumerate(layers):
                yield dumps({"token": step, "name": f"ffn_moe_topk-{li}",
                             "experts": lay.position(p, run_rng)})
            left -= 1
        elif u < p.spec_accept and left >= 2:
            for li, lay in enumerate(layers):
                yield dumps({"step": step, "layer": li,
                             "experts": lay.position(p, run_rng) + lay.position(p, run_rng)})
            left -= 2
        elif u < p.spec_accept + p.fallback:
            # The speculative pass is rejected from a random layer on; the fallback pass then
            # re-routes those layers. The rejected selections do not enter the history.
            start = int(run_rng.integers(0, p.layers))
            for li, lay in enumerate(layers):
                yield dumps({"step": step, "layer": li,
                             "experts": lay.position(p, run_rng, commit=li < start)})
            for li in range(start, p.layers):
                yield dumps({"step": step, "layer": li, "experts": layers[li].position(p, run_rng)})
            left -= 1
        else:
            for li, lay in enumerate(layers):
                yield dumps({"step": step, "layer": li, "experts": lay.position(p, run_rng)})
            left -= 1
        step += 1
