"""End-to-end engine cells (paper §9, Table 3): a configured inference engine decodes instead of
the replay agent, once with page-cache admission (`admit`) and once under the engine's nocache
reader (`nocache`), in balanced pairs. Pure: data in, data out (docs/engine.md).

- `parse_engine(table, source)`: the matrix's `[engine]` table -> EngineConfig, every key
  validated (regexes compiled, placeholders checked) with errors naming the dotted key.
- `argv_for` / `env_for`: the engine's argv and environment additions of one run. Placeholders
  ({prompt_file} {prompt} {policy} {n_tokens} {pool_dir} {work_dir} {run_dir} {run_id}) are
  substituted per argv element, never through a shell; an element that is exactly
  {policy_args} is replaced by the policy's argument list (else those arguments are appended).
- `pair_orders(n, seed, salt)`: balanced pair order: pair 0 admit-first, pair 1 nocache-first,
  pairs 2.. a seeded shuffle (same seed, same order).
- the gates over captured output and the pair statistics are judgement: bench.judge.engine.
- `build_spec(...)`: the spec.json of one engine run (docs/bundle.md, `engine` section).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass

from bench.matrix.cells import Cell, POLICY_MODES, engine_cell, parse_cell
from bench.errors import InputError
from bench.matrix.runspec import CONTROLLER_VERSION, check_run_id

POLICIES = tuple(POLICY_MODES)                    # admit, nocache
ORDERS = ("admit-first", "nocache-first")
PLACEHOLDERS = ("prompt_file", "prompt", "policy", "n_tokens", "pool_dir", "work_dir",
                "run_dir", "run_id")
POLICY_ARGS = "{policy_args}"
KEYS = ("command", "cwd", "env", "timeout_s", "n_tokens", "min_tokens", "pairs", "backend",
        "tokens_regex", "load_regex", "policies", "prompts")
POLICY_KEYS = ("args", "env")
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

    def as_dict(self) -> dict:
        return {"args": list(self.args), "env": dict(self.env)}


@dataclass(frozen=True)
class EngineConfig:
    command: tuple[str, ...]
    backend: str
    tokens_regex: str
    load_regex: str
    prompts: tuple[tuple[str, str], ...]           # (label, prompt file), in file order
    policies: tuple[tuple[str, Policy], ...]       # admit, nocache
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    timeout_s: int = DEFAULT_TIMEOUT_S
    n_tokens: int = DEFAULT_N_TOKENS
    min_tokens: int = DEFAULT_N_TOKENS
    pairs: int = DEFAULT_PAIRS

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

    def cells(self) -> list[Cell]:
        """Per prompt (in file order) its admit and its nocache cell."""
        return [engine_cell(p, pol) for p in self.prompt_names for pol in POLICIES]

    def as_dict(self) -> dict:
        return {"command": list(self.command), "cwd": self.cwd, "env": dict(self.env),
                "timeout_s": self.timeout_s, "n_tokens": self.n_tokens,
                "min_tokens": self.min_tokens, "pairs": self.pairs, "backend": self.backend,
                "tokens_regex": self.tokens_regex, "load_regex": self.load_regex,
                "policies": {k: v.as_dict() for k, v in self.policies},
                "prompts": dict(self.prompts)}

    @property
    def digest(self) -> str:
        """Identity of the configuration (recorded in every spec: the pairs of a campaign
        must have run under one configuration)."""
        return hashlib.sha256(json.dumps(self.as_dict(), sort_keys=True).encode()).hexdigest()


# parsing ----------------------------------------------------------------------------------------

class _P:
    def __init__(self, source: str):
        self.source = source

    def fail(self, key: str, msg: str, hint: str | None = None) -> EngineConfigError:
        return EngineConfigError(f"{self.source}: key 'engine.{key}': {msg}", hint)

    def keys(self, data: dict, prefix: str, allowed) -> None:
        for k in data:
            if k not in allowed:
                raise self.fail(prefix + k, "unknown key", "allowed keys: " + ", ".join(allowed))

    def typed(self, data: dict, key: str, full: str, kind, what: str, default=None,
              required: bool = False):
        if key not in data:
            if required:
                raise self.fail(full, "missing (required)")
            return default
        v = data[key]
        if isinstance(v, bool) or not isinstance(v, kind):
            raise self.fail(full, f"must be {what}, got {type(v).__name__} {v!r}")
        return v

    def pos_int(self, data: dict, key: str, default: int, lo: int = 1) -> int:
        v = self.typed(data, key, key, int, "an integer", default)
        if v < lo:
            raise self.fail(key, f"must be at least {lo}, got {v}")
        return v

    def strlist(self, data, key: str, full: str, default=None) -> tuple[str, ...]:
        v = self.typed(data, key, full, list, "a list of strings", default)
        for i, x in enumerate(v or ()):
            if not isinstance(x, str):
                raise self.fail(f"{full}[{i}]", f"must be a string, got {x!r}")
            if "\0" in x:
                raise self.fail(f"{full}[{i}]", "contains a NUL byte")
        return None if v is None else tuple(v)

    def env(self, data, key: str, full: str) -> tuple[tuple[str, str], ...]:
        v = self.typed(data, key, full, dict, "a table of NAME = \"value\"", {})
        out = []
        for name, value in v.items():
            if not ENV_NAME.match(name):
                raise self.fail(f"{full}.{name}", "is not an environment variable name",
                                "letters, digits and _, not starting with a digit")
            if not isinstance(value, str) or "\0" in value:
                raise self.fail(f"{full}.{name}", f"must be a string, got {value!r}")
            out.append((name, value))
        return tuple(out)

    def regex(self, data, key: str, group: str) -> str:
        text = self.typed(data, key, key, str, "a regular expression (string)", required=True)
        try:
            rx = re.compile(text, re.MULTILINE)
        except re.error as exc:
            raise self.fail(key, f"not a valid regular expression: {exc}") from None
        if group not in rx.groupindex and rx.groups != 1:
            raise self.fail(key, f"needs exactly one capturing group or a group named "
                                 f"(?P<{group}>...), has {rx.groups}",
                            f"e.g. '^{'output token ids' if group == 'tokens' else 'load time'}"
                            f": (.*)$'")
        return text


def parse_engine(data, source: str) -> EngineConfig:
    """Validate a matrix's `[engine]` table (`source` names the file in messages)."""
    p = _P(source)
    if not isinstance(data, dict):
        raise EngineConfigError(f"{source}: key 'engine': must be a table",
                                "keys: " + ", ".join(KEYS))
    p.keys(data, "", KEYS)
    command = p.strlist(data, "command", "command", None)
    if command is None:
        raise p.fail("command", "missing (required)",
                     'an argv list, e.g. ["/opt/engine/bin/decode", "--prompt-file", '
                     '"{prompt_file}", "{policy_args}"]')
    if not command or not command[0]:
        raise p.fail("command[0]", "the engine program must not be empty")
    for i, el in enumerate(command):
        if el == POLICY_ARGS:
            continue
        try:
            _subst(el, dict.fromkeys(PLACEHOLDERS, "x"))
        except InputError as exc:
            raise p.fail(f"command[{i}]", exc.message,
                         f"placeholders: {', '.join('{' + x + '}' for x in PLACEHOLDERS)}, "
                         f"{POLICY_ARGS} as a whole element; write {{{{ and }}}} for braces"
                         ) from None
    if command.count(POLICY_ARGS) > 1:
        raise p.fail("command", f"{POLICY_ARGS} appears more than once")
    cwd = p.typed(data, "cwd", "cwd", str, "an absolute path", None)
    if cwd is not None and not cwd.startswith("/"):
        raise p.fail("cwd", f"{cwd!r} is not an absolute path")
    env = p.env(data, "env", "env")
    backend = p.typed(data, "backend", "backend", str, "a string", required=True)
    if not backend.strip() or "\n" in backend:
        raise p.fail("backend", "must be a non-empty single line",
                     "the backend string the engine prints when it runs as intended")
    tokens_rx = p.regex(data, "tokens_regex", "tokens")
    load_rx = p.regex(data, "load_regex", "seconds")
    timeout_s = p.pos_int(data, "timeout_s", DEFAULT_TIMEOUT_S)
    n_tokens = p.pos_int(data, "n_tokens", DEFAULT_N_TOKENS)
    min_tokens = p.pos_int(data, "min_tokens", n_tokens)
    if min_tokens > n_tokens:
        raise p.fail("min_tokens", f"{min_tokens} is above n_tokens {n_tokens}")
    pairs = p.pos_int(data, "pairs", DEFAULT_PAIRS)

    pols = p.typed(data, "policies", "policies", dict, "a table with admit and nocache",
                   required=True)
    p.keys(pols, "policies.", POLICIES)
    policies = []
    for name in POLICIES:
        t = p.typed(pols, name, f"policies.{name}", dict, "a table (args, env)", required=True)
        p.keys(t, f"policies.{name}.", POLICY_KEYS)
        args = p.strlist(t, "args", f"policies.{name}.args", ())
        for i, a in enumerate(args):
            try:
                _subst(a, dict.fromkeys(PLACEHOLDERS, "x"))
            except InputError as exc:
                raise p.fail(f"policies.{name}.args[{i}]", exc.message) from None
        policies.append((name, Policy(args, p.env(t, "env", f"policies.{name}.env"))))
    a, n = policies[0][1], policies[1][1]
    if a == n and not any("{policy}" in el for el in command):
        raise p.fail("policies", "admit and nocache give the engine the same arguments and "
                                 "environment, and the command has no {policy}",
                     "tell the engine which reader to use: args, env or {policy}")

    prompts = p.typed(data, "prompts", "prompts", dict, "a table of label = \"prompt file\"",
                      required=True)
    if not prompts:
        raise p.fail("prompts", "must name at least one prompt")
    plist = []
    for label, path in prompts.items():
        if not LABEL.match(label):
            raise p.fail(f"prompts.{label}", "is not a prompt label",
                         "1-32 of a-z, 0-9 and _ (it becomes part of the cell name)")
        if not isinstance(path, str) or not path or "\0" in path:
            raise p.fail(f"prompts.{label}", f"must be a file path, got {path!r}")
        if not path.startswith("/") and cwd is None:
            raise p.fail(f"prompts.{label}", f"{path!r} is relative and no cwd is given",
                         "give an absolute path on the host, or set engine.cwd")
        plist.append((label, path))
    return EngineConfig(command=command, backend=backend, tokens_regex=tokens_rx,
                        load_regex=load_rx, prompts=tuple(plist), policies=tuple(policies),
                        cwd=cwd, env=env, timeout_s=timeout_s, n_tokens=n_tokens,
                        min_tokens=min_tokens, pairs=pairs)


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
               run_id: str) -> dict:
    return {"prompt_file": cfg.prompt_file(prompt), "prompt": prompt, "policy": policy,
            "n_tokens": cfg.n_tokens, "pool_dir": pool_dir, "work_dir": work_dir,
            "run_dir": f"{work_dir.rstrip('/')}/runs/{run_id}", "run_id": run_id}


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


def order_label(first: str) -> str:
    return f"{first}-first"


# the spec of one run ----------------------------------------------------------------------------

def build_spec(cell: Cell | str, host, cfg: EngineConfig, *, run_id: str, pair_index: int,
               first: str, seed: int, campaign: str | None = None, position: int = 0,
               created: str = "1970-01-01T00:00:00Z", timeline_interval_ms: int = 200,
               host_lock_timeout_s: int | None = None, controller_version: str | None = None,
               extra: dict | None = None) -> dict:
    """spec.json of one engine run on `host` (inventory Host: name, pool_dir, work_dir)."""
    if isinstance(cell, str):
        cell = parse_cell(cell)
    if not cell.is_engine:
        raise InputError(f"cell {cell.name} is not an engine cell",
                         hint="engine cells are e2e-{prompt}-{admit|nocache}")
    check_run_id(run_id)
    if first not in POLICIES:
        raise InputError(f"pair order must start with admit or nocache, got {first!r}")
    if pair_index < 0:
        raise InputError(f"pair index must not be negative, got {pair_index}")
    prompt, policy = cell.prompt, cell.policy
    values = values_for(cfg, prompt, policy, pool_dir=host.pool_dir, work_dir=host.work_dir,
                        run_id=run_id)
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
            "policy": policy, "n_tokens": cfg.n_tokens, "min_tokens": cfg.min_tokens,
            "backend": cfg.backend, "tokens_regex": cfg.tokens_regex,
            "load_regex": cfg.load_regex, "config_sha256": cfg.digest,
            "pair": {"index": pair_index, "order": order_label(first),
                     "position": 0 if policy == first else 1, "seed": seed},
        },
        "expect_boot": {"boot_id": None, "mem": None, "lru_gen": None},
        "timeline_interval_ms": timeline_interval_ms,
        "controller_version": controller_version or CONTROLLER_VERSION,
        "created": created,
    }
    if host_lock_timeout_s is not None:
        spec["host_lock_timeout_s"] = host_lock_timeout_s
    spec.update(extra or {})
    return spec
