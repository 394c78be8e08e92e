"""`bench hosts bandwidth`: the pool device's raw read bandwidth of one host, cold and warm,
measured with the agent and stored with that host's fingerprint and boot (never carried to
another machine)."""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.errors import CommandFailed, HostError, InputError
from bench.execute.hostrun import now_iso
from bench.execute.staging import complete_pool, ensure_file
from bench.hosts.deploy import deploy
from bench.hosts.facts import as_host_json, probe
from bench.hosts.inventory import Host
from bench.hosts.lock import HostLock
from bench.hosts.ssh import transport_for as ssh_transport_for
from bench.hosts.transport import Transport
from bench.judge.counters import counters, device_bytes
from bench.judge.measured import fingerprint_of
from bench.plan.planfile import REPLAY, Plan, encode
from bench.trace.parse import NORMAL, Iteration, Pass
from bench.version import controller_version


def all_experts_plan(layers: int, experts: int, expert_bytes: int, max_bytes: int = 0) -> Plan:
    """A replay plan of one iteration reading every pool file once (layer by layer, each
    router pass one layer's experts); with max_bytes, only the first experts of each layer
    so that about max_bytes are read."""
    per_layer = experts
    if max_bytes:
        per_layer = max(1, min(experts, max_bytes // (expert_bytes * layers)))
    passes = tuple(Pass(layer, tuple(range(per_layer))) for layer in range(layers))
    it = Iteration(0, NORMAL, 1, passes)
    return Plan(REPLAY, layers, experts, expert_bytes, (it,),
                {"purpose": "bandwidth", "experts_per_layer_read": per_layer})


def host_fingerprint(facts: dict, agent_sha256: str | None) -> dict:
    """The fingerprint of bench.judge.measured.fingerprint (its one definition), from probed
    facts instead of a bundle: kernel, cmdline, the page-cache settings of the pool's device,
    the agent deploy just checked and this controller's version."""
    return fingerprint_of(host={**as_host_json(facts), "agent_source_sha256": agent_sha256},
                          spec={"controller_version": controller_version()})


BW_SCRIPT = ('mkdir -p "$1" && sync && echo 3 > /proc/sys/vm/drop_caches && shift && exec "$@"')


def measure_bandwidth(host: Host, *, transport_for: Callable[[Host], Transport] | None = None,
                      threads: int = 8, max_bytes: int = 0,
                      data_dir: Path | None = None) -> dict:
    """Cold and warm read bandwidth of the host's pool with the agent: drop_caches, then a
    2-pass replay of a plan reading every pool file once (pass 0 cold, pass 1 warm); device
    bytes are the pool device's sectors read between the agent's own pass snapshots. Holds
    the controller's host lock and the runner's host.lock (never during a run)."""
    if not 1 <= threads <= 1024:
        raise InputError(f"threads must be 1..1024, got {threads}")
    t = (transport_for or ssh_transport_for)(host)
    try:
        with HostLock(t, host, purpose="bench hosts bandwidth"):
            pr = probe(t, host)
            if pr.error:
                raise pr.exception or HostError(host.name, pr.error["message"])
            facts = pr.facts
            dep = deploy(t, host)
            pool, geo = complete_pool(t, host)
            plan = all_experts_plan(*geo, max_bytes=max_bytes)
            texts, agent_out = _replay(t, host, plan, threads, pool)
    finally:
        t.close()
    recs = [json.loads(line) for line in agent_out.splitlines() if line.strip()]
    summary: dict = next((x for x in recs if x.get("summary")), {})
    walls = summary.get("pass_wall_ns") or [
        sum(x["wall_ns"] for x in recs if x.get("pass") == p and "wall_ns" in x) for p in (0, 1)]
    dev = facts.get("pool_device") or {}
    devs = ([dev["name"]] if dev.get("name") else []) + \
        [d for d in dev.get("leaves") or [] if d != dev.get("name")]
    snaps = {k: counters({"proc_diskstats": v}, devs) for k, v in texts.items()}
    per_pass = plan.logical_bytes

    def one(p: int) -> dict:
        secs = walls[p] / 1e9
        db = device_bytes(snaps[f"pass{p}-start"], snaps[f"pass{p}-end"], devs)
        return {"seconds": secs, "bytes": per_pass, "device_bytes": db,
                "gb_per_s": per_pass / secs / 1e9 if secs else None,
                "device_gb_per_s": db / secs / 1e9 if secs and db is not None else None}

    agent_sha = (dep.get("agent") or {}).get("source_sha256") or dep.get("source_sha256")
    return {"host": host.name, "boot_id": facts.get("boot_id"), "cmdline": facts.get("cmdline"),
            "mem_total_bytes": facts.get("mem_total_bytes"), "mglru": facts.get("mglru"),
            "fingerprint": host_fingerprint(facts, agent_sha),
            "device": devs[0] if devs else None, "devices": devs, "pool_dir": pool,
            "geometry": list(geo), "threads": threads, "bytes_per_pass": per_pass,
            "experts_per_layer_read": plan.meta["experts_per_layer_read"],
            "cold": one(0), "warm": one(1), "agent_ok": summary.get("ok"),
            "measured_at": now_iso()}


def _replay(t: Transport, host: Host, plan: Plan, threads: int,
            pool: str) -> tuple[dict[str, str], str]:
    """Ship the plan, replay it twice after drop_caches under the runner's host.lock; the
    pass snapshots of /proc/diskstats and the agent's output."""
    data = encode(plan)
    sha = hashlib.sha256(data).hexdigest()
    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as fh:
        fh.write(data)
        local = Path(fh.name)
    try:
        remote_plan = f"{host.work_dir}/plans/{sha}.bin"
        ensure_file(t, local, remote_plan, sha)
    finally:
        local.unlink()
    out = f"{host.work_dir}/bandwidth/{int(time.time() * 1000)}"
    argv = ["flock", "--nonblock", "--conflict-exit-code", "75",
            f"{host.work_dir}/host.lock", "sh", "-c", BW_SCRIPT, "bench-bw", out,
            f"{host.work_dir}/native/bench-agent", "replay", "--pool", pool,
            "--plan", remote_plan, "--threads", str(threads), "--passes", "2",
            "--snapshot-dir", f"{out}/snapshots", "--snapshot-file", "/proc/diskstats",
            "--out", f"{out}/agent.jsonl"]
    try:
        r = t.run(argv, timeout=300 + 2 * plan.logical_bytes / 20e6, check=False)
        if r.rc == 75:
            raise HostError(host.name, "a run holds the host (runner host.lock)",
                            "measure bandwidth when no run is going")
        if r.rc != 0:
            raise CommandFailed(host.name, ["bench-agent", "replay", "(bandwidth)"],
                                r.rc, r.stderr or r.stdout)
        texts = {name: t.run(["cat", f"{out}/snapshots/{name}/proc_diskstats"],
                             timeout=30).stdout
                 for name in ("pass0-start", "pass0-end", "pass1-start", "pass1-end")}
        agent_out = t.run(["cat", f"{out}/agent.jsonl"], timeout=30).stdout
    finally:
        t.run(["rm", "-rf", out], timeout=60, check=False)
    return texts, agent_out
