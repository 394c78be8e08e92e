"""A campaign's hosts checked before the campaign exists: `bench schedule` (with or without
--dry-run) gets every named host's facts here, then plans with them as data
(bench.matrix.expand, bench.matrix.schedule: pure), so that the cells a host cannot run are
skipped at planning time with the reason instead of failing at run time.

Where a host's facts come from, first that applies:

1. `given`: facts the user handed in (`--facts FILE`, the output of `bench hosts probe --json`;
   dry runs only: a campaign sees its hosts itself);
2. the cache: `<data_dir>/facts/<host>.json`, written by every probe here, reused while younger
   than `max_age_s` (300 s by default: a dry run and the campaign right after it probe once)
   and only for the same target (transport, address, port, user);
3. a probe (bench.hosts.facts.probe_hosts): every host in parallel, read-only, each connection
   bounded by the host's ssh.connect_timeout (not its reboot.up_timeout).

A host whose probe fails (unreachable, authentication, host key, a probe that died) stops the
command before anything is written: `HostsUnreachable` names every such host at once. Facts
files are private (0600 in a 0700 directory, bench.paths) and read size-bounded; a cache file
that does not parse is ignored (probed again), a `--facts` file that does not parse is an
InputError naming it.

`run_spec` is the preflight of one run (every run of a campaign, `bench run` included): the
host's facts read again (boot-fixed ones reused) and the run's spec built against them."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from bench.errors import BenchError, HostError, InputError
from bench.execute.hostrun import now_iso
from bench.hosts.deploy import REPO, source_hash
from bench.hosts.facts import HostResult, probe_for_run, probe_hosts
from bench.hosts.inventory import Host
from bench.hosts.transport import Transport
from bench.matrix.cells import Cell
from bench.matrix.expand import balloon_lock_problem
from bench.matrix.runspec import RunOptions, build_spec
from bench.paths import private_dir, write_private
from bench.plan.planinfo import PlanInfo

DEFAULT_MAX_AGE_S = 300.0
MAX_FACTS_FILE = 16 << 20          # a --facts file (many hosts' settings) is read up to this
MAX_CACHE_FILE = 4 << 20           # one host's cached facts
CACHE_FORMAT = 1


class HostsUnreachable(BenchError):
    """One or more hosts of a campaign could not be probed; nothing was written."""

    def __init__(self, failures: Mapping[str, dict], dry_run: bool):
        what = "nothing planned" if dry_run else "no campaign created"
        parts = []
        for h, e in failures.items():
            msg = str(e.get("message") or e.get("type"))
            parts.append(msg if msg.startswith(f"{h}: ") else f"{h}: {msg}")
        offline = ("; to plan without reaching them, write their facts (`bench hosts facts "
                   f"--example gh200 {' '.join(failures)} > facts.json`, then edit it) and add "
                   "--facts facts.json") if dry_run else ""
        super().__init__(f"cannot probe {len(failures)} host(s), {what}: " + "; ".join(parts),
                         hint="bring them up (`bench hosts probe NAME` shows what a probe "
                              "sees), fix what the message names, or leave them out of --hosts"
                              + offline)
        self.failures = dict(failures)


@dataclass
class HostFacts:
    """What the preflight learnt: host name -> facts, and where each came from."""
    facts: dict[str, dict] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)    # probed | cached | file
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"sources": dict(self.sources), "seconds": round(self.seconds, 3)}


def target(host: Host) -> list:
    """What a host's cached facts are valid for: where the controller reaches it."""
    return [host.transport, host.address, host.port, host.user]


def _cache_path(data_dir: Path, host: Host) -> Path:
    return Path(data_dir) / "facts" / f"{host.name}.json"


def read_cached(data_dir: Path, host: Host, max_age_s: float,
                now: Callable[[], float] = time.time) -> dict | None:
    """The host's cached facts when younger than max_age_s and for the same target; else None
    (also for a cache file that is missing, too large or does not parse)."""
    if max_age_s <= 0:
        return None
    p = _cache_path(data_dir, host)
    try:
        with open(p, "rb") as f:
            raw = f.read(MAX_CACHE_FILE + 1)
        if len(raw) > MAX_CACHE_FILE:
            return None
        d = json.loads(raw)
    except (OSError, ValueError):
        return None
    if not isinstance(d, dict) or d.get("format") != CACHE_FORMAT or d.get("host") != host.name \
            or d.get("target") != target(host) or not isinstance(d.get("facts"), dict):
        return None
    t = d.get("probed_at")
    if not isinstance(t, (int, float)) or not 0 <= now() - t <= max_age_s:
        return None
    return d["facts"]


def write_cached(data_dir: Path, host: Host, facts: dict,
                 now: Callable[[], float] = time.time) -> None:
    """Keep a probe's facts for the next preflight (best effort: a cache that cannot be
    written costs a probe next time, nothing else)."""
    try:
        d = private_dir(Path(data_dir) / "facts")
        write_private(d / f"{host.name}.json", json.dumps(
            {"format": CACHE_FORMAT, "host": host.name, "target": target(host),
             "probed_at": now(), "facts": facts}, default=str).encode())
    except OSError:
        pass


_WRITE_IT = ("write it with `bench hosts probe --json > FILE`, or start from an example: "
             "`bench hosts facts --example gh200 HOST... > FILE`")


def load_facts_file(path: Path) -> dict[str, dict]:
    """Facts from a file: `bench hosts probe --json` output (a list of {host, facts, error}) or
    an object {host: facts} (`bench hosts facts --example`; its keys starting with "_", such as
    `_about`, are comments). Hosts the probe could not read (error set) are left out."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FACTS_FILE + 1)
    except OSError as exc:
        raise InputError(f"{path}: cannot read the facts file: {exc.strerror}") from None
    if len(raw) > MAX_FACTS_FILE:
        raise InputError(f"{path}: facts file is larger than {MAX_FACTS_FILE >> 20} MiB")
    try:
        d = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{path}: not JSON ({str(exc)[:120]})",
                         hint=_WRITE_IT) from None
    if isinstance(d, dict):
        d = [{"host": k, "facts": v} for k, v in d.items() if not k.startswith("_")]
    if not isinstance(d, list):
        raise InputError(f"{path}: expected a list of probe results or an object of facts",
                         hint=_WRITE_IT)
    out: dict[str, dict] = {}
    for i, r in enumerate(d):
        if not isinstance(r, dict) or not isinstance(r.get("host"), str) \
                or not isinstance(r.get("facts"), dict):
            raise InputError(f"{path}: entry {i} is not {{\"host\": NAME, \"facts\": {{...}}}}",
                             hint=_WRITE_IT)
        if not r.get("error"):
            _check_types(path, r["host"], r["facts"])
            out[r["host"]] = r["facts"]
    return out


# the facts planning reads, as the probe writes them (each may be null: the fact is unknown)
_FACT_TYPES: dict[str, tuple[type, str]] = {
    **{k: (int, "a whole number of bytes") for k in (
        "mem_total_bytes", "mem_available_bytes", "swap_total_bytes", "swap_free_bytes",
        "page_size")},
    **{k: (str, "a string") for k in ("kernel", "arch", "cmdline", "mem", "mglru", "python3",
                                      "boot_id")},
    **{k: (dict, "an object") for k in ("cgroup", "pool_device", "settings")},
    "systemd_pid1": (bool, "true or false"),
}


def _check_types(path: Path, host: str, facts: dict) -> None:
    """An edited facts file with a value of the wrong type is refused with the key (a size
    written "480G" would otherwise plan as if the fact were missing)."""
    for key, (want, what) in _FACT_TYPES.items():
        v = facts.get(key)
        if v is None:
            continue
        if not isinstance(v, want) or (want is int and isinstance(v, bool)):
            raise InputError(f"{path}: {host}: {key} must be {what} or null, got "
                             f"{json.dumps(v)[:60]}",
                             hint="as `bench hosts probe --json` writes it: sizes in bytes "
                                  "(480 GB is 480000000000), mglru as the kernel's mask "
                                  '("0x0007")')


def host_facts(hosts: Sequence[Host], *, data_dir: Path, dry_run: bool,
               max_age_s: float = DEFAULT_MAX_AGE_S, given: Mapping[str, dict] | None = None,
               transport_for: Callable[[Host], Transport] | None = None,
               clock: Callable[[], float] = time.monotonic) -> HostFacts:
    """Every host's facts (module doc) or HostsUnreachable naming every host that failed."""
    t0 = clock()
    out = HostFacts()
    todo = []
    for h in hosts:
        if given is not None and h.name in given:
            out.facts[h.name], out.sources[h.name] = dict(given[h.name]), "file"
            continue
        cached = read_cached(data_dir, h, max_age_s)
        if cached is not None:
            out.facts[h.name], out.sources[h.name] = cached, "cached"
        else:
            todo.append(h)
    results: list[HostResult] = probe_hosts(todo, transport_for) if todo else []
    failed = {}
    for h, r in zip(todo, results):
        if r.error is not None:
            failed[h.name] = r.error
            continue
        out.facts[h.name], out.sources[h.name] = r.facts, "probed"
        write_cached(data_dir, h, r.facts)
    out.seconds = clock() - t0
    if failed:
        raise HostsUnreachable(failed, dry_run)
    return out


def facts_note(hf: HostFacts) -> str:
    """One line on where the facts came from: `facts: a probed, b cached (0.4s)`."""
    by: dict[str, list[str]] = {}
    for h, src in hf.sources.items():
        by.setdefault(src, []).append(h)
    parts = [f"{', '.join(names)} {src}" for src, names in by.items()]
    return f"host facts: {'; '.join(parts) or 'none'} ({hf.seconds:.1f}s)"


@dataclass
class RunSpec:
    facts: dict
    spec: dict


def run_spec(host: Host, cell: Cell, plan: PlanInfo, run_id: str, options: RunOptions,
             t: Transport, known: dict | None = None) -> RunSpec:
    """Read-only: probe what a run reads of the host (bench.hosts.facts.probe_for_run;
    `known`: its facts from an earlier run's preflight, reused within the same boot) and build
    its spec (InputError/SafetyError when the cell does not fit it, a balloon that would lock
    more than options.balloon_max_bytes included)."""
    pr = probe_for_run(t, host, known)
    if pr.error:
        raise pr.exception or HostError(host.name, pr.error["message"])
    facts = pr.facts
    if not facts.get("python3"):
        raise HostError(host.name, "python3 with its standard library is not installed (the "
                        "runner needs json, hashlib, fcntl, subprocess)",
                        "install python3 (>= 3.8; Debian's python3-minimal is not enough)")
    opts = replace(options, source_sha256=source_hash(REPO / "native"), created=now_iso())
    spec = build_spec(cell, host, plan, run_id=run_id, facts=facts, options=opts)
    if cell.mechanism == "balloon":
        why = balloon_lock_problem(cell.capacity_bytes, facts.get("mem_available_bytes"),
                                   options.balloon_max_bytes, "the balloon cap")
        if why is not None:
            raise InputError(f"{host.name}: {cell.name}: {why}",
                             hint="raise the cap (bench run --balloon-max, a matrix's "
                                  "protocol.balloon_max) or choose a larger C")
    return RunSpec(facts, spec)
