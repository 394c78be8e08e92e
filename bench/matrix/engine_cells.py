"""End-to-end engine cells (paper §9, Table 3): a configured inference engine decodes instead of
the replay agent, once with page-cache admission (`admit`) and once under the engine's nocache
reader (`nocache`), in balanced pairs. Pure: data in, data out (docs/engine.md).

- `parse_engine(table, source)`: the matrix's `[engine]` table (the EngineTable model) ->
  EngineConfig, every key validated (regexes compiled, placeholders checked) and every problem
  reported at once, each naming the file and the dotted key (bench.matrix.matrix_schema).
- `argv_for` / `env_for`: the engine's argv and environment additions of one run. Placeholders
  ({prompt_file} {prompt} {policy} {n_tokens} {pool_dir} {work_dir} {run_dir} {run_id}) are
  substituted per argv element, never through a shell; an element that is exactly
  {policy_args} is replaced by the policy's argument list (else those arguments are appended).
  {bench} and {bench_data} (this controller's bench and its data directory: the built-in
  engine) make a matrix local-only: `build_spec` refuses another host.
- `pair_orders(n, seed, salt)`: balanced pair order: pair 0 admit-first, pair 1 nocache-first,
  pairs 2.. a seeded shuffle (same seed, same order).
- the gates over captured output and the pair statistics are judgement: bench.judge.engine_gates.
- `build_spec(...)`: the spec.json of one engine run (docs/bundle.md, `engine` section).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from typing import Annotated, Iterator

from pydantic import AfterValidator

from bench.errors import InputError
from bench.matrix.cells import ENGINE_PREFIX, POLICY_MODES, Cell, engine_cell, parse_cell
from bench.matrix.runspec import check_run_id
from bench.matrix.matrix_schema import (AbsPath, PosInt, Problem, SchemaError, Table, View, bad,
                                        collect, doc, matches, no_nul)
from bench.units import format_size
from bench.version import controller_version as current_controller_version

POLICIES = ("admit", "nocache")                  # the two sides of a pair
REPLAY = "replay"           # the agent replaying the engine's trace: no side of a pair
ORDERS = ("admit-first", "nocache-first")
# {bench} {bench_data}: this controller's own bench executable and its data directory (the
# built-in engine, bench engine run, and its prompts): they exist on the local host only
CONTROLLER = ("bench", "bench_data")
PLACEHOLDERS = ("prompt_file", "prompt", "policy", "n_tokens", "pool_dir", "work_dir",
                "run_dir", "run_id") + CONTROLLER
LOCAL_ONLY = ("the engine runs this controller's own bench ({bench}, {bench_data}): the local "
              "host only; a vm lab guest carries no llama.cpp (pip builds it from source, about "
              "13 min on two native cores, many times that under qemu's TCG) and no bench")
LOCAL_ONLY_SKIP = "its engine is this controller's bench ({bench}): the local host only"
POLICY_ARGS = "{policy_args}"
DEFAULT_TIMEOUT_S = 3600
DEFAULT_N_TOKENS = 60
DEFAULT_PAIRS = 3
LABEL = re.compile(r"^[a-z0-9_]{1,32}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FIELD = re.compile(r"\{\{|\}\}|\{([a-z_]*)\}|[{}]")


class EngineConfigError(InputError):
    """An [engine] table that does not validate; names the source and the dotted key."""


@dataclass(frozen=True)
class Policy:
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    backend: str | None = None           # this policy's own backend string (replay's)

    def as_dict(self) -> dict:
        return {"args": list(self.args), "env": dict(self.env)} | (
            {"backend": self.backend} if self.backend else {})


@dataclass(frozen=True)
class EngineConfig:
    command: tuple[str, ...]
    backend: str
    tokens_regex: str
    load_regex: str
    prompts: tuple[tuple[str, str], ...]           # (label, prompt file), in file order
    policies: tuple[tuple[str, Policy], ...]       # admit, nocache[, replay]
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    timeout_s: int = DEFAULT_TIMEOUT_S
    n_tokens: int = DEFAULT_N_TOKENS
    min_tokens: int = DEFAULT_N_TOKENS
    pairs: int = DEFAULT_PAIRS
    prepare: tuple[str, ...] = ()                  # argv the runner runs before the drop
    capacities: tuple[tuple[int, str], ...] = ()    # (C bytes, cgroup|balloon) besides ample

    def policy(self, name: str) -> Policy:
        return dict(self.policies)[name]

    def prompt_file(self, prompt: str) -> str:
        files = dict(self.prompts)
        if prompt not in files:
            raise InputError(f"no prompt {prompt!r} in the engine config",
                             hint=f"prompts: {', '.join(files)}")
        return files[prompt]

    @property
    def prompt_names(self) -> list[str]:
        return [p for p, _ in self.prompts]

    @property
    def arms(self) -> list[tuple[int, str]]:
        """Ample (0, none), then each capacity in file order."""
        return [(0, "none"), *self.capacities]

    @property
    def replay(self) -> bool:
        """Whether each pair is followed by the agent replaying the engine's trace."""
        return REPLAY in dict(self.policies)

    def backend_of(self, policy: str) -> str:
        return self.policy(policy).backend or self.backend

    def cells(self) -> list[Cell]:
        """Per prompt (in file order) and arm (ample, then each capacity) its admit and its
        nocache cell, and its replay cell where policies.replay is set."""
        pols = POLICIES + ((REPLAY,) if self.replay else ())
        return [engine_cell(p, pol, c, m) for p in self.prompt_names for c, m in self.arms
                for pol in pols]

    @property
    def local_only(self) -> bool:
        """Whether it names this controller's bench ({bench}, {bench_data}) anywhere."""
        texts = (*self.command, *self.prepare, *(a for _, p in self.policies for a in p.args))
        return any("{" + c + "}" in t for t in texts for c in CONTROLLER) or any(
            f.startswith(BENCH_DATA) for _, f in self.prompts)

    def as_dict(self) -> dict:
        # prepare only when set: the digest of a configuration made before it existed holds
        return {"command": list(self.command), "cwd": self.cwd, "env": dict(self.env),
                "timeout_s": self.timeout_s, "n_tokens": self.n_tokens,
                "min_tokens": self.min_tokens, "pairs": self.pairs, "backend": self.backend,
                "tokens_regex": self.tokens_regex, "load_regex": self.load_regex,
                "policies": {k: v.as_dict() for k, v in self.policies},
                "prompts": dict(self.prompts)} | (
                    {"prepare": list(self.prepare)} if self.prepare else {}) | (
                    {"capacities": [arm_text(c, m) for c, m in self.capacities]}
                    if self.capacities else {})

    @property
    def digest(self) -> str:
        """Identity of the configuration (recorded in every spec: the pairs of a campaign
        must have run under one configuration)."""
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()


# the [engine] table: its model, parsing ----------------------------------------------------------

_PLACEHOLDER_HINT = (f"placeholders: {', '.join('{' + x + '}' for x in PLACEHOLDERS)}, "
                     f"{POLICY_ARGS} as a whole element; write {{{{ and }}}} for braces")


class EngineTableError(SchemaError, EngineConfigError):
    """An [engine] table with one or more problems (each on its own line)."""


def _template(splice: bool) -> AfterValidator:
    """An argv element: placeholders known, braces paired; `splice`: may be {policy_args}."""
    def check(text: str) -> str:
        if "\0" in text:
            raise bad("contains a NUL byte")
        if splice and text == POLICY_ARGS:
            return text
        try:
            _subst(text, dict.fromkeys(PLACEHOLDERS, "x"))
        except InputError as exc:
            raise bad(exc.message, hint=_PLACEHOLDER_HINT) from None
        return text
    return AfterValidator(check)


def _command(argv: list[str]) -> list[str]:
    if not argv or not argv[0]:
        raise bad("the engine program must not be empty", at=(0,))
    if argv.count(POLICY_ARGS) > 1:
        raise bad(f"{POLICY_ARGS} appears more than once")
    return argv


def _regex(group: str, example: str) -> AfterValidator:
    def check(text: str) -> str:
        try:
            rx = re.compile(text, re.MULTILINE)
        except re.error as exc:
            raise bad(f"not a valid regular expression: {exc}") from None
        if group not in rx.groupindex and rx.groups != 1:
            raise bad(f"needs exactly one capturing group or a group named (?P<{group}>...), "
                      f"has {rx.groups}", hint=f"e.g. '^{example}: (.*)$'")
        return text
    return AfterValidator(check)


def _backend(text: str) -> str:
    if not text.strip() or "\n" in text:
        raise bad("must be a non-empty single line",
                  hint="the backend string the engine prints when it runs as intended")
    return text


BENCH_DATA = "{bench_data}/"       # a prompt path's only placeholder, as its prefix


def _prompt_file(text: str) -> str:
    if not text or "\0" in text:
        raise bad(f"must be a file path, got {text!r}")
    return text


def _prompt_path(path: str, here: dict) -> str:
    """A prompt path with its {bench_data}/ prefix substituted; any other brace is literal."""
    return here["bench_data"] + path[len(BENCH_DATA) - 1:] if path.startswith(BENCH_DATA) \
        else path


def arm_text(capacity_bytes: int, mechanism: str) -> str:
    """An arm as the matrix and the results write it: 400M-cgroup; ample for none."""
    return "ample" if not capacity_bytes else f"{format_size(capacity_bytes)}-{mechanism}"


def parse_arm(text: str) -> tuple[int, str]:
    """A capacities entry ("400M-cgroup", "512Mi-balloon") -> (bytes, mechanism)."""
    try:
        c = parse_cell(f"e2e-x-admit-{text}")
    except InputError:
        raise bad(f"{text!r} is not a capacity and mechanism like 400M-cgroup or "
                  "400M-balloon") from None
    return c.capacity_bytes, c.mechanism


def _arms(texts: list[str]) -> list[str]:
    seen = [parse_arm(t) for t in texts]
    if len(set(seen)) != len(seen):
        raise bad("names one capacity and mechanism twice")
    return texts


def _some_prompt(prompts: dict) -> dict:
    if not prompts:
        raise bad("must name at least one prompt")
    return prompts


Env = dict[Annotated[str, matches(ENV_NAME, "is not an environment variable name",
                                  "letters, digits and _, not starting with a digit")],
           Annotated[str, AfterValidator(no_nul)]]


class PolicyTable(Table):
    """How the engine is told to use one reader: arguments and environment."""
    args: list[Annotated[str, _template(False)]] = doc(
        "arguments spliced at {policy_args} (else appended); placeholders allowed", [])
    env: Env = doc("environment additions of this policy (they win over engine.env)", {})
    backend: Annotated[str, AfterValidator(_backend)] | None = doc(
        "this policy's backend string instead of engine.backend (a replay is no engine)",
        None)


class PoliciesTable(Table):
    """The two policies a pair compares, and the optional replay (bench.matrix.cells
    POLICY_MODES)."""
    admit: PolicyTable = doc("page-cache admission (cell mode pagecache)")
    nocache: PolicyTable = doc("the engine's nocache reader (cell mode nocache)")
    replay: PolicyTable | None = doc(
        "the agent replaying the engine's own trace of the prompt over the model file, after "
        "each pair, measured like the engine (the replay-vs-engine line of bench results); "
        "prepare must have written the trace and plan", None,
        examples=[{"args": ["--load", "replay", "--agent", "{work_dir}/native/bench-agent"],
                   "backend": "backend: bench-agent replay"}])


class EngineTable(Table):
    """An end-to-end matrix's [engine] table (docs/engine.md): the engine decodes each prompt
    under both policies, in balanced pairs."""
    command: Annotated[list[Annotated[str, _template(True)]], AfterValidator(_command)] = doc(
        "the engine's argv template, no shell ever; placeholders "
        + " ".join("{" + x + "}" for x in PLACEHOLDERS)
        + f"; an element {POLICY_ARGS} is replaced by the policy's args",
        examples=[["/opt/engine/bin/decode", "--prompt-file", "{prompt_file}", POLICY_ARGS]])
    cwd: AbsPath | None = doc("working directory of the engine (absolute)", None)
    env: Env = doc("environment additions for both policies", {})
    timeout_s: PosInt = doc("the runner stops the engine's process group after this",
                            DEFAULT_TIMEOUT_S)
    n_tokens: PosInt = doc("tokens to decode ({n_tokens})", DEFAULT_N_TOKENS)
    min_tokens: PosInt | None = doc("fewer output tokens is a degenerate output (default: "
                                    "n_tokens)", None)
    pairs: PosInt = doc("measured pairs per prompt", DEFAULT_PAIRS)
    prepare: Annotated[list[Annotated[str, _template(False)]], AfterValidator(_command)] | None \
        = doc("a command the runner runs before it drops the caches, outside the measurement "
              "(e.g. make the model when it is missing); placeholders as in command", None,
              examples=[["{bench}", "engine", "model", "make", "{pool_dir}/m.gguf", "--reuse"]])
    capacities: Annotated[list[str], AfterValidator(_arms)] = doc(
        "arms besides ample capacity, each C-mechanism (cgroup or balloon): the pairs run "
        "again with the engine under a cgroup wall of C, or with a balloon leaving C", [],
        examples=[["400M-cgroup", "400M-balloon"]])
    backend: Annotated[str, AfterValidator(_backend)] = doc(
        "the backend string that must appear in the engine's stdout or stderr")
    tokens_regex: Annotated[str, _regex("tokens", "output token ids")] = doc(
        "finds the output token IDs: one group, or (?P<tokens>...) (MULTILINE)")
    load_regex: Annotated[str, _regex("seconds", "load time")] = doc(
        "finds the cold model load in seconds: one group, or (?P<seconds>...) (MULTILINE)")
    policies: PoliciesTable = doc("admit and nocache: args and env of each")
    prompts: Annotated[dict[Annotated[str, matches(
        LABEL, "is not a prompt label", "1-32 of a-z, 0-9 and _ (it becomes part of the cell "
        "name)")], Annotated[str, AfterValidator(_prompt_file)]], AfterValidator(_some_prompt)] \
        = doc("label = prompt file on the host (absolute, relative to cwd, or {bench_data}/...: "
              "this controller's data directory, the shipped prompts)")

    @staticmethod
    def rules(v: View, ctx: dict) -> Iterator[Problem]:
        if v.ok("min_tokens", "n_tokens") and (v.min_tokens or 0) > v.n_tokens:
            yield Problem(("min_tokens",), f"{v.min_tokens} is above n_tokens {v.n_tokens}")
        if (v.ok("policies", "command") and v.policies.admit == v.policies.nocache
                and not any("{policy}" in el for el in v.command)):
            yield Problem(("policies",), "admit and nocache give the engine the same arguments "
                          "and environment, and the command has no {policy}",
                          hint="tell the engine which reader to use: args, env or {policy}")
        if v.ok("prompts", "cwd") and v.cwd is None:
            for label, path in v.prompts.items():
                if not path.startswith(("/", BENCH_DATA)):
                    yield Problem(("prompts", label), f"{path!r} is relative and no cwd is given",
                                  hint="give an absolute path on the host, or set engine.cwd")


def parse_engine(data, source: str) -> EngineConfig:
    """Validate a matrix's `[engine]` table (`source` names the file in messages); every
    problem at once, as an EngineTableError."""
    table, problems = collect(EngineTable, data, source=source, prefix=("engine",))
    if problems:
        raise EngineTableError(problems)
    return config_of(table)


def config_of(t: EngineTable) -> EngineConfig:
    """The EngineConfig of a validated [engine] table."""
    return EngineConfig(
        command=tuple(t.command), backend=t.backend, tokens_regex=t.tokens_regex,
        load_regex=t.load_regex, prompts=tuple(t.prompts.items()),
        policies=tuple((name, Policy(tuple(p.args), tuple(p.env.items()), p.backend))
                       for name, p in ((n, getattr(t.policies, n)) for n in POLICY_MODES)
                       if p is not None),
        cwd=t.cwd, env=tuple(t.env.items()), timeout_s=t.timeout_s, n_tokens=t.n_tokens,
        min_tokens=t.n_tokens if t.min_tokens is None else t.min_tokens, pairs=t.pairs,
        prepare=tuple(t.prepare or ()),
        capacities=tuple(parse_arm(x) for x in t.capacities))


def from_dict(d: dict, source: str = "engine config") -> EngineConfig:
    """Back from `EngineConfig.as_dict()` (what a campaign's journal keeps)."""
    d = {k: v for k, v in d.items() if v is not None}
    return parse_engine(d, source)


# argv and environment ---------------------------------------------------------------------------

def _subst(text: str, values: dict) -> str:
    def rep(m: re.Match) -> str:
        tok = m.group(0)
        if tok == "{{":
            return "{"
        if tok == "}}":
            return "}"
        name = m.group(1)
        if name is None:
            raise InputError(f"{text!r}: a lone {tok!r} (write {tok * 2} for a literal brace)")
        if name not in values:
            raise InputError(f"{text!r}: unknown placeholder {{{name}}}")
        return str(values[name])
    return _FIELD.sub(rep, text)


def values_for(cfg: EngineConfig, prompt: str, policy: str, *, pool_dir: str, work_dir: str,
               run_id: str, controller: dict | None = None) -> dict:
    """The placeholders' values of one run; `controller` gives {bench} and {bench_data}
    (bench.paths.controller_paths) where the run is on the local host."""
    here = {c: "{" + c + "}" for c in CONTROLLER} | (controller or {})
    return {"prompt_file": _prompt_path(cfg.prompt_file(prompt), here), "prompt": prompt,
            "policy": policy, "n_tokens": cfg.n_tokens, "pool_dir": pool_dir,
            "work_dir": work_dir, "run_dir": f"{work_dir.rstrip('/')}/runs/{run_id}",
            "run_id": run_id} | here


def argv_for(cfg: EngineConfig, values: dict) -> list[str]:
    """The engine's argv: each element substituted on its own; {policy_args} spliced."""
    pol = [_subst(a, values) for a in cfg.policy(values["policy"]).args]
    out: list[str] = []
    for el in cfg.command:
        if el == POLICY_ARGS:
            out += pol
        else:
            out.append(_subst(el, values))
    if POLICY_ARGS not in cfg.command:
        out += pol
    return out


def env_for(cfg: EngineConfig, policy: str) -> dict[str, str]:
    """Environment additions: the engine's, then the policy's (which win)."""
    return {**dict(cfg.env), **dict(cfg.policy(policy).env)}


# balanced pair order ----------------------------------------------------------------------------

def pair_orders(n_pairs: int, seed: int, salt: str = "") -> list[tuple[str, str]]:
    """Order of the two runs of each pair: pair 0 admit-first, pair 1 nocache-first, pairs 2..
    a shuffle seeded by (seed, salt). Same seed and salt, same order."""
    if n_pairs < 0:
        raise InputError(f"number of pairs must not be negative, got {n_pairs}")
    rng = random.Random(f"{seed}:pairs:{salt}")
    out = []
    for i in range(n_pairs):
        if i == 0:
            out.append(("admit", "nocache"))
        elif i == 1:
            out.append(("nocache", "admit"))
        else:
            o = ["admit", "nocache"]
            rng.shuffle(o)
            out.append((o[0], o[1]))
    return out


def pair_unit(cell: Cell) -> str:
    """What the two cells of a pair share (the scheduler's unit): e2e-{prompt}[-{arm}]."""
    arm = arm_text(cell.capacity_bytes, cell.mechanism)
    return f"{ENGINE_PREFIX}-{cell.prompt}" + ("" if arm == "ample" else f"-{arm}")


def pair_position(policy: str, first: str) -> int:
    """0 for the pair's first run, 1 for its second, 2 for the replay after it."""
    return 2 if policy == REPLAY else 0 if policy == first else 1


def order_label(first: str) -> str:
    return f"{first}-first"


# the spec of one run ----------------------------------------------------------------------------

def build_spec(cell: Cell | str, host, cfg: EngineConfig, *, run_id: str, pair_index: int,
               first: str, seed: int, campaign: str | None = None, position: int = 0,
               created: str = "1970-01-01T00:00:00Z", timeline_interval_ms: int = 200,
               host_lock_timeout_s: int | None = None, controller_version: str | None = None,
               controller: dict | None = None, extra: dict | None = None) -> dict:
    """spec.json of one engine run on `host` (inventory Host: name, transport, pool_dir,
    work_dir); `controller`: {bench} and {bench_data}, for an engine that uses them, which
    runs on the local host only (LOCAL_ONLY)."""
    if isinstance(cell, str):
        cell = parse_cell(cell)
    prompt, policy = cell.prompt, cell.policy       # both set exactly when cell.is_engine
    if prompt is None or policy is None:
        raise InputError(f"cell {cell.name} is not an engine cell",
                         hint="engine cells are e2e-{prompt}-{admit|nocache|replay}")
    if policy not in dict(cfg.policies):
        raise InputError(f"cell {cell.name}: the engine config has no {policy} policy",
                         hint=f"policies: {', '.join(p for p, _ in cfg.policies)}")
    check_run_id(run_id)
    if first not in POLICIES:
        raise InputError(f"pair order must start with admit or nocache, got {first!r}")
    if pair_index < 0:
        raise InputError(f"pair index must not be negative, got {pair_index}")
    if cfg.local_only and (host.transport != "local" or controller is None):
        raise InputError(f"host {host.name} cannot run this engine: {LOCAL_ONLY}",
                         hint="run it with --hosts local, or set engine.command to an engine "
                              "installed on that host")
    values = values_for(cfg, prompt, policy, pool_dir=host.pool_dir, work_dir=host.work_dir,
                        run_id=run_id, controller=controller)
    spec = {
        "format": 1, "run_id": run_id, "campaign": campaign, "position": position,
        "repetition": pair_index, "host": host.name, "cell": cell.name,
        "capacity_bytes": cell.capacity_bytes, "mechanism": cell.mechanism,
        "reclaim": cell.reclaim, "mode": cell.mode, "prefetch": "none", "delivery": None,
        "workload": {"trace": None, "engine": True, "prompt": prompt,
                     "n_tokens": cfg.n_tokens},
        "pool": host.pool_dir,
        "engine": {
            "argv": argv_for(cfg, values), "env": env_for(cfg, policy), "cwd": cfg.cwd,
            "timeout_s": cfg.timeout_s, "prompt": prompt, "prompt_file": values["prompt_file"],
            "policy": policy, "policy_args": [_subst(a, values) for a in cfg.policy(policy).args],
            "n_tokens": cfg.n_tokens, "min_tokens": cfg.min_tokens,
            "backend": cfg.backend_of(policy), "tokens_regex": cfg.tokens_regex,
            "load_regex": cfg.load_regex, "config_sha256": cfg.digest,
            "pair": {"index": pair_index, "order": order_label(first),
                     "position": pair_position(policy, first), "seed": seed},
        },
        "expect_boot": {"boot_id": None, "mem": None, "lru_gen": None},
        "timeline_interval_ms": timeline_interval_ms,
        "controller_version": controller_version or current_controller_version(),
        "created": created,
    }
    if cfg.prepare:
        spec["engine"]["prepare_argv"] = [_subst(a, values) for a in cfg.prepare]
    if cell.mechanism == "cgroup":      # the wall holds the whole engine: no agent headroom
        spec["cgroup_headroom_bytes"] = 0
    if host_lock_timeout_s is not None:
        spec["host_lock_timeout_s"] = host_lock_timeout_s
    spec.update(extra or {})
    return spec
