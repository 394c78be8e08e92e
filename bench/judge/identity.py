"""What a result is (docs/design.md, "What a result is (identity)"): the one definition of a result
group. Pure: stored run rows in, groups and their differences out.

Runs are pooled only when they share the group key

    (cell, host, workload digest, fingerprint digest)

- cell: the canonical cell name (cells.name);
- host: hosts.name;
- workload: what the run replayed, read from its stored spec.json (runs.spec, docs/bundle.md):
  - replay runs: `trace_sha256` (spec workload.trace_sha256), `plan_sha256`, `pool_bytes`,
    `threads` and `passes` (spec agent.*), `batch` (workload.batch) and `domain`
    (workload.domain; specs do not carry one today, so it is null: a domain is another trace,
    which its sha256 already tells apart). The pool shape L x E x S: a spec names no geometry,
    so the key holds what is stored, `pool_bytes` (= L x E x S) and the plan's sha256, whose
    header fixes L, E and S (the agent refuses a pool of any other geometry): two runs with
    one plan_sha256 and one pool_bytes read pools of one shape. A prefetch cell's hint plan
    belongs to the cell (its prefetch label), not to the workload: a prefetch cell and its
    no-prefetch baseline replay one workload (the `hint_provenance` rule checks the hints);
  - engine runs (docs/engine.md): `config_sha256` (spec engine.config_sha256), `prompt` and
    `n_tokens`.
  The trace's file name (`trace`) is shown, never compared: a renamed file is the same trace.
  The workload digest is the first 12 hex digits of sha256 over the JSON (sorted keys) of the
  compared fields: short and stable, what `--workload PREFIX` matches.
- fingerprint: fingerprints.digest (bench.judge.measured.fingerprint_of: kernel, arch, command
  line less mem=/lru_gen, agent source hash, controller version, page-cache settings), shown
  with its main fields.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Sequence

from bench.errors import InputError
from bench.units import format_size

WORKLOAD_DIGEST_LEN = 12
REPLAY_FIELDS = ("trace_sha256", "plan_sha256", "pool_bytes", "threads", "passes", "batch",
                 "domain")
ENGINE_FIELDS = ("config_sha256", "prompt", "n_tokens")
FINGERPRINT_FIELDS = ("kernel", "arch", "cmdline", "agent_sha256", "controller_version",
                      "definition")
KEY_PARTS = ("host", "workload", "fingerprint")
_HEX = re.compile(r"^[0-9a-f]+$")


def _digest(fields: dict) -> str:
    text = json.dumps(fields, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:WORKLOAD_DIGEST_LEN]


def workload_of(spec: dict | None) -> dict:
    """The workload identity of a run's stored spec: {"digest", "kind" (replay|engine),
    the compared fields, "trace" (the file name, shown only)}."""
    spec = spec or {}
    w = spec.get("workload") or {}
    engine = spec.get("engine")
    if isinstance(engine, dict):
        fields = {"kind": "engine", "config_sha256": engine.get("config_sha256"),
                  "prompt": engine.get("prompt", w.get("prompt")),
                  "n_tokens": engine.get("n_tokens", w.get("n_tokens"))}
        return {"digest": _digest(fields), **fields, "trace": None}
    agent = spec.get("agent") or {}
    fields = {"kind": "replay", "trace_sha256": w.get("trace_sha256"),
              "plan_sha256": spec.get("plan_sha256"), "pool_bytes": spec.get("pool_bytes"),
              "threads": agent.get("threads"), "passes": agent.get("passes"),
              "batch": w.get("batch"), "domain": w.get("domain")}
    return {"digest": _digest(fields), **fields, "trace": w.get("trace"),
            "tokens_per_iteration": _tokens_per_iteration(w, spec)}


def _tokens_per_iteration(w: dict, spec: dict) -> float | None:
    """Accepted tokens per plan iteration (shown, not compared: the plan's digest already
    decides it), from which a view turns seconds per iteration into seconds per accepted
    token; None for specs written before plans recorded their tokens."""
    tokens, iters = w.get("accepted_tokens"), spec.get("plan_iterations")
    if not (isinstance(tokens, int) and isinstance(iters, int)) or isinstance(tokens, bool) \
            or isinstance(iters, bool) or tokens <= 0 or iters <= 0:
        return None
    return tokens / iters


def fingerprint_view(digest: str | None, data: dict | None) -> dict:
    """A stored fingerprint's digest with its main fields (the settings stay in the store:
    `differences` names those that differ)."""
    data = data or {}
    return {"digest": digest, **{k: data.get(k) for k in FINGERPRINT_FIELDS}}


def key_of(run: dict) -> tuple:
    """(cell, host, workload digest, fingerprint digest) of a run row carrying `cell`, `host`,
    `workload` (workload_of) and `fingerprint` (fingerprint_view)."""
    return (run["cell"], run["host"], run["workload"]["digest"], run["fingerprint"]["digest"])


def _sort_key(g: dict) -> tuple:
    w, f = g["workload"], g["fingerprint"]
    return (g["cell"], g["host"], w.get("trace") or "", w["digest"], f["digest"] or "")


def group_runs(runs: Iterable[dict], *, with_cell: bool = True) -> list[dict]:
    """Runs split by their group key, in a stable order (cell, host, trace name, digests):
    [{"cell", "host", "workload", "fingerprint", "runs": [...]}]. `with_cell=False` groups by
    (host, workload, fingerprint) alone (comparisons and curves span cells); `cell` is then
    None."""
    groups: dict[tuple, dict] = {}
    for r in runs:
        k = key_of(r)
        if not with_cell:
            k = (None,) + k[1:]
        g = groups.setdefault(k, {"cell": k[0], "host": r["host"], "workload": r["workload"],
                                  "fingerprint": r["fingerprint"], "runs": []})
        g["runs"].append(r)
    return sorted(groups.values(), key=_sort_key)


def label_groups(groups: Sequence[dict]) -> list[dict]:
    """Give each (host, workload, fingerprint) a short id g1, g2, ... in order of group_runs."""
    for i, g in enumerate(groups, 1):
        g["id"] = f"g{i}"
    return list(groups)


def _short(v) -> str:
    if isinstance(v, str) and len(v) > 16 and _HEX.fullmatch(v):
        return v[:12]
    return "-" if v is None else str(v)


def differences(groups: Sequence[dict]) -> dict:
    """What tells the groups apart: {"host": [names], "workload": {field: [values]},
    "fingerprint": {field: [values]}}, only the parts that differ. Fingerprint fields come from
    the stored fingerprint data when the runs carry it (`fingerprint_data`), settings included,
    else from the shown fields."""
    out: dict = {}
    hosts = sorted({g["host"] for g in groups})
    if len(hosts) > 1:
        out["host"] = hosts
    for part, fields in (("workload", ("kind",) + REPLAY_FIELDS + ENGINE_FIELDS),
                         ("fingerprint", FINGERPRINT_FIELDS + ("settings",))):
        seen: dict[str, list] = {}
        for g in groups:
            data = _part_data(g, part)
            for f in fields:
                if f not in data:
                    continue
                vals = seen.setdefault(f, [])
                if data[f] not in vals:
                    vals.append(data[f])
        diff = {f: vals for f, vals in seen.items() if len(vals) > 1}
        if part == "fingerprint" and "settings" in diff:
            diff["settings"] = _settings_keys(diff["settings"])
        if diff:
            out[part] = diff
    return out


def _part_data(g: dict, part: str) -> dict:
    if part == "fingerprint":
        runs = g.get("runs") or []
        data = runs[0].get("fingerprint_data") if runs else None
        if data is not None:
            return data
    return g[part] or {}


def _settings_keys(values: list) -> list[str]:
    """The setting names whose value differs between the (flattened) settings dicts."""
    dicts = [v or {} for v in values]
    keys = sorted({k for d in dicts for k in d})
    return [k for k in keys if len({json.dumps(d.get(k)) for d in dicts}) > 1] or ["recorded"]


def describe_differences(diff: dict) -> str:
    """`differences` as one line: host (a, b); workload trace_sha256 (bbbbbbbbbbbb,
    eeeeeeeeeeee); fingerprint kernel (6.8.0, 6.1.0)."""
    parts = []
    if "host" in diff:
        parts.append(f"host ({', '.join(diff['host'])})")
    for part in ("workload", "fingerprint"):
        if part in diff:
            fields = []
            for f, vals in diff[part].items():
                shown = vals if f == "settings" else [_short(v) for v in vals]
                fields.append(f"{f} ({', '.join(map(str, shown))})")
            parts.append(f"{part} " + ", ".join(fields))
    return "; ".join(parts) or "nothing"


def workload_text(w: dict | None) -> str:
    """A workload in one line: digest, trace name and the compared fields that vary."""
    if not w:
        return "-"
    if w.get("kind") == "engine":
        return (f"{w['digest']} engine config {_short(w.get('config_sha256'))}, prompt "
                f"{w.get('prompt')}, {w.get('n_tokens')} tokens")
    pool = w.get("pool_bytes")
    bits = [f"pool {format_size(pool)}" if isinstance(pool, int) else "pool -",
            f"{w.get('threads')} threads", f"{w.get('passes')} passes",
            f"batch {w.get('batch')}"]
    if w.get("domain") is not None:
        bits.append(f"domain {w['domain']}")
    return (f"{w['digest']} {w.get('trace') or '-'} (trace {_short(w.get('trace_sha256'))}, "
            f"plan {_short(w.get('plan_sha256'))}, " + ", ".join(bits) + ")")


def fingerprint_text(f: dict | None) -> str:
    if not f or not f.get("digest"):
        return "- (no fingerprint stored)"
    return (f"{f['digest']} (kernel {f.get('kernel') or '-'}, controller "
            f"{f.get('controller_version') or '-'})")


def group_text(g: dict) -> str:
    """One group's key in one line: host, workload, fingerprint."""
    return (f"host {g['host'] or '-'}; workload {workload_text(g['workload'])}; "
            f"fingerprint {fingerprint_text(g['fingerprint'])}")


def select_workload(runs: Sequence[dict], prefix: str | None) -> list[dict]:
    """The runs whose workload digest starts with `prefix` (None: all). A prefix that is not
    hex, that matches no stored workload, or that matches several is an InputError naming
    the candidates."""
    if prefix is None:
        return list(runs)
    p = prefix.lower()
    if not p or not _HEX.fullmatch(p):
        raise InputError(f"--workload {prefix!r} is not a hex digest prefix",
                         hint="give the first digits of a workload digest as `bench results "
                              "--cell C` shows it")
    digests = {r["workload"]["digest"]: r["workload"] for r in runs}
    hits = sorted(d for d in digests if d.startswith(p))
    if len(hits) > 1:
        raise InputError(f"--workload {prefix} is ambiguous: it matches "
                         + "; ".join(workload_text(digests[d]) for d in hits),
                         hint="give more digits of the digest")
    if not hits:
        known = ", ".join(sorted(digests)) or "none"
        raise InputError(f"no stored runs with workload {prefix} in this scope",
                         hint=f"workloads stored here: {known}")
    return [r for r in runs if r["workload"]["digest"] == hits[0]]


def pair_runs(a: Sequence[dict], b: Sequence[dict]) -> list[tuple[dict, dict]]:
    """Pairs of one run of each side, matched on (campaign, repetition): the caller gives runs
    of one group (one host, workload and fingerprint), so a pair never crosses a host, a
    workload or a campaign. Runs outside any campaign pair with nothing (no paired design), and
    a (campaign, repetition) held by more than one run of a side pairs nothing (ambiguous)."""
    def index(runs: Sequence[dict]) -> dict[tuple, list[dict]]:
        out: dict[tuple, list[dict]] = {}
        for r in runs:
            if r.get("campaign_id") is not None:
                out.setdefault((r["campaign_id"], r.get("repetition")), []).append(r)
        return out
    ia, ib = index(a), index(b)
    return [(ia[k][0], ib[k][0]) for k in sorted(ia, key=str)
            if k in ib and len(ia[k]) == 1 and len(ib[k]) == 1]

