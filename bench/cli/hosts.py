"""`bench hosts ...`: the inventory, host keys, facts, deploy."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from bench.cli.options import DbOpt, HostNameArg, HostsDirOpt, JsonOpt, id_text, ids_text
from bench.errors import BenchError, InputError, error_data
from bench.results import fleet_views, views
from bench.results.views import compose
from bench.units import parse_size

hosts_app = typer.Typer(no_args_is_help=True, help="The fleet: inventory (NAME.toml files in "
                                                   "--hosts-dir, $BENCH_HOSTS, ./hosts or "
                                                   "~/.config/bench/hosts), host keys, facts, "
                                                   "agent deploy.")

HostsArg = Annotated[Optional[list[str]], typer.Argument(help="Host names (default: all).",
                                                         show_default=False,
                                                         callback=ids_text("HOSTS", "host name"))]


def _hosts(hosts_dir: Path | None, names: list[str] | None):
    from bench.hosts.inventory import load_inventory, select
    return select(load_inventory(hosts_dir), names)


@hosts_app.command("list")
def hosts_list(hosts_dir: HostsDirOpt = None, json_out: JsonOpt = False) -> None:
    """List the inventory's hosts. With none (a missing or empty inventory directory) it says
    where it looked and how to add hosts, and exits 0. Host files that do not load are named
    with their problems after the others (exit 2)."""
    from bench.hosts.inventory import broken_files, load_inventory, no_hosts
    inv = load_inventory(hosts_dir)
    rows = [h.as_dict() for h in inv.values()]
    if json_out:
        views.emit_json(rows)
    elif rows:
        views.print_table(fleet_views.hosts_table(rows))
    if inv.broken:
        _say_error(broken_files(inv))
        raise typer.Exit(2)
    if not rows:
        _say_error(no_hosts(inv.where))


def _note(text: str, label: str = "") -> None:
    """A line on stderr, whole (paths are never folded), literal text."""
    parts = ((label, "bold"), f" {text}") if label else (text,)
    views.err_console.print(compose(*parts), soft_wrap=True)


def _say_error(exc: BenchError) -> None:
    _note(exc.message)
    if exc.hint:
        _note(exc.hint, "fix:")


@hosts_app.command("check")
def hosts_check(hosts_dir: HostsDirOpt = None, json_out: JsonOpt = False) -> None:
    """Validate every inventory file (all problems, not just the first, each with its file,
    line and key; "did you mean" for a misspelt key), and the known_hosts, ssh config and
    identity files they name (a missing identity file included); exit 2 if any."""
    from bench.hosts.inventory import check_inventory, find_hosts_dir, no_hosts
    where = find_hosts_dir(hosts_dir)
    rows = check_inventory(hosts_dir)
    if json_out:
        views.emit_json(rows)
    elif rows:
        views.print_table(fleet_views.inventory_check_table(rows))
        _note(f"{where.path} ({where.origin})", "inventory:")
    if not rows:
        _say_error(no_hosts(where))
    if not all(r["ok"] for r in rows):
        raise typer.Exit(2)


@hosts_app.command("init")
def hosts_init(directory: Annotated[Optional[Path], typer.Option(
                   "--dir", help="Where to write (default: $BENCH_HOSTS, else "
                   "$XDG_CONFIG_HOME/bench/hosts, i.e. ~/.config/bench/hosts).")] = None,
               force: Annotated[bool, typer.Option(
                   "--force", help="Overwrite the example files if they exist.")] = False,
               json_out: JsonOpt = False) -> None:
    """Write a commented example inventory: local.toml (this machine, transport local, its
    MemTotal as memory.total) and gh200.toml.example (an SSH host to copy to NAME.toml).
    Refuses to overwrite them without --force (exit 2)."""
    from bench.hosts.templates import init_inventory
    res = init_inventory(directory, force=force)
    if json_out:
        views.emit_json(res)
        return
    for f in res["written"]:
        _note(f"wrote {f}")
    if res["active"]:
        _note(f"bench reads this inventory ({res['reads_origin']}): try `bench hosts list`")
    else:
        _note(f"bench reads {res['reads']} ({res['reads_origin']}) here; pass --hosts-dir "
              f"{res['dir']} or set BENCH_HOSTS={res['dir']} to use this one", "note:")


def _probe_targets(hosts_dir: Path | None, names: list[str] | None):
    """(the hosts to probe, {name: error} of the asked-for hosts whose file does not load)."""
    from bench.hosts.inventory import load_inventory, select
    inv = load_inventory(hosts_dir)
    wanted = names or sorted(set(inv) | set(inv.broken))
    skipped = {n: inv.broken[n] for n in wanted if n not in inv and n in inv.broken}
    rest = [n for n in wanted if n not in skipped]
    return (select(inv, rest) if rest or not skipped else []), skipped


@hosts_app.command("probe")
def hosts_probe(hosts: HostsArg = None, hosts_dir: HostsDirOpt = None,
                verbose: Annotated[bool, typer.Option("-v", "--verbose", help="Print every "
                                                      "page-cache setting of each host.")]
                = False,
                campaign: Annotated[Optional[str], typer.Option(
                    "--campaign", help="Flag hosts whose kernel, cmdline, agent, controller or "
                    "settings differ from the fingerprint this campaign recorded for them "
                    "(reads the database).", callback=id_text("--campaign", "campaign id"))] = None,
                db: DbOpt = None, json_out: JsonOpt = False) -> None:
    """Probe hosts in parallel: kernel, arch, page size, cmdline, boot_id, memory, MGLRU,
    cgroup backend, systemd, pool device, python3, agent hash, and the settings that move
    page-cache numbers (the pool device's read_ahead_kb, max_sectors_kb and scheduler, THP,
    vm sysctls, NUMA nodes, CPU governors). A host whose inventory file does not load is a
    failed row naming the file's problems; the other hosts are probed. Exit 1 if a host
    failed."""
    from bench.hosts.facts import probe_hosts
    targets, skipped = _probe_targets(hosts_dir, hosts)
    results = [r.as_dict() for r in probe_hosts(targets)] if targets else []
    results += [{"host": n, "ok": False, "error": error_data(e), "fact_errors": {},
                 "seconds": 0.0, "facts": {}} for n, e in skipped.items()]
    if campaign:
        from bench.store.db import open_store
        from bench.store.queries import probe_vs_campaign
        store = open_store(db, write=False)
        try:
            probe_vs_campaign(store, campaign, results)
        finally:
            store.close()
    if json_out:
        views.emit_json(results)
    else:
        views.print_table(fleet_views.probe_table(results))
        for r in results:
            if r["error"] and r["error"].get("hint"):
                views.say(compose((f"{r['host']}:", "bold"), f" fix: {r['error']['hint']}"))
        for line in fleet_views.probe_notes(results, verbose=verbose):
            views.say(line)
    if not all(r["ok"] for r in results):
        raise typer.Exit(1)


@hosts_app.command("facts")
def hosts_facts(hosts: Annotated[Optional[list[str]], typer.Argument(
                    help="Host names to write the facts for (default: gh200-a gh200-b, the "
                    "example inventory's).", show_default=False,
                    callback=ids_text("HOSTS", "host name"))] = None,
                example: Annotated[Optional[str], typer.Option(
                    "--example", metavar="NAME", help="The shipped example to print: gh200 "
                    "(aarch64, 64 KiB pages, 480 GB, cgroup v2, MGLRU).")] = None) -> None:
    """Print an example facts file (JSON, {host: facts}) to edit for your machines, for
    planning without reaching the hosts: `bench hosts facts --example gh200 A B > facts.json`,
    then `bench schedule --matrix M --hosts A,B --dry-run --facts facts.json`. For hosts bench
    can reach, `bench hosts probe --json > FILE` writes their real facts."""
    from bench.hosts.facts_example import DEFAULT_HOSTS, EXAMPLES, example_facts
    if example is None:
        raise InputError("bench hosts facts prints an example: name it with --example",
                         f"examples: {', '.join(EXAMPLES)}; for hosts bench can reach: "
                         "`bench hosts probe --json > FILE`")
    views.emit_json(example_facts(example, hosts or DEFAULT_HOSTS))


@hosts_app.command("deploy")
def hosts_deploy(hosts: HostsArg = None, hosts_dir: HostsDirOpt = None,
                 force: Annotated[bool, typer.Option("--force", help="Rebuild even when the "
                                                     "host's agent is current.")] = False,
                 json_out: JsonOpt = False) -> None:
    """Copy native/ sources and agents/ to each host's work_dir, build with make, check the
    agent's source_sha256 (skips hosts already current). Exit 1 if a host failed."""
    from bench.hosts.deploy import deploy_hosts
    results = deploy_hosts(_hosts(hosts_dir, hosts), force=force)
    if json_out:
        views.emit_json(results)
    else:
        views.print_table(fleet_views.deploy_table(results))
        for r in results:
            if r.get("error") and r["error"].get("output"):
                views.say(compose((r["host"], "bold"), f" build output:\n{r['error']['output']}"))
    if not all(r["ok"] for r in results):
        raise typer.Exit(1)


@hosts_app.command("trust")
def hosts_trust(host: HostNameArg,
                hosts_dir: HostsDirOpt = None,
                yes: Annotated[bool, typer.Option("--yes", help="Write without asking (only "
                                                  "after checking the fingerprint!).")] = False,
                replace: Annotated[Optional[str], typer.Option(
                    "--replace", metavar="OLD_FINGERPRINT",
                    help="Replace the pinned key with this SHA256 fingerprint (shown when a "
                    "changed key is refused) by the key the host offers now.")] = None,
                json_out: JsonOpt = False) -> None:
    """Fetch a host's SSH key (through ssh_config's HostName, Port, ProxyJump, as a
    connection goes), show its SHA256 fingerprint and append it to the host's known_hosts
    after confirmation, under the name OpenSSH and paramiko look up (HostName, or
    [HostName]:Port). A changed key, of any type, is refused with both fingerprints unless
    --replace names the old one; a revoked key is always refused."""
    from bench.hosts.ssh import fetch_host_key, pin_host_key, refuse
    (h,) = _hosts(hosts_dir, [host])
    if h.transport == "local":
        raise BenchError(f"{h.name} uses the local transport: there is no host key")
    offer = fetch_host_key(h)
    v, ep = offer.verdict, offer.endpoint
    info = {"host": h.name, "address": h.address, "hostname": ep.hostname, "port": ep.port,
            "user": ep.user, "known_hosts_name": v.name, "key_type": offer.key_type,
            "fingerprint": offer.fingerprint, "known_hosts": offer.known_hosts,
            "status": v.status, "replaced": [], "added": False}
    if v.status == "revoked" or (v.status == "changed" and replace is None):
        raise refuse(h, offer)
    if v.status == "unknown" and replace is not None:
        raise BenchError(f"{h.name}: nothing is pinned for {v.name} in {offer.known_hosts}, "
                         "so there is nothing to replace", "run it again without --replace")
    old = [f"{e.key_type} {e.fingerprint}" for e in v.pinned if e.fingerprint == replace]
    if v.status == "changed" and not old:
        raise InputError(f"{h.name}: --replace {replace} is not a key pinned for {v.name} in "
                         f"{offer.known_hosts} (pinned: "
                         + ", ".join(e.describe() for e in v.pinned) + ")",
                         "copy the old fingerprint from the refusal message")
    if v.status != "known":
        if not yes:
            if json_out:
                raise BenchError("--json needs --yes (no interactive confirmation)")
            views.say(f"{h.name} ({ep.where}) offers {offer.key_type} key {offer.fingerprint}")
            if v.authorities:
                views.say(f"({offer.known_hosts}:{v.authorities[0].line} trusts a host CA for "
                          f"{v.name}; bench cannot verify host certificates)")
            for o in old:
                views.say(f"it replaces the pinned key {o}")
            verb = "replace it in" if old else "append it to"
            if not typer.confirm(f"{verb} {offer.known_hosts} as {v.name}?", default=False):
                raise typer.Exit(1)
        pin_host_key(offer, replace)
        info["added"], info["replaced"] = True, old
    if json_out:
        views.emit_json(info)
    else:
        done = ("replaced " + ", ".join(info["replaced"]) + " with it in " if info["replaced"]
                else "added to " if info["added"] else "already in ")
        views.say(f"{h.name}: {offer.key_type} {offer.fingerprint} {done}"
                  f"{offer.known_hosts} (as {v.name})")


@hosts_app.command("collect")
def hosts_collect(host: HostNameArg,
                  run_id: Annotated[str, typer.Argument(help="Run id on that host.",
                                                        callback=id_text("RUN_ID", "run id"))],
                  hosts_dir: HostsDirOpt = None,
                  data_dir: Annotated[Optional[Path], typer.Option(
                      "--data-dir", help="Where bundles go (default $BENCH_DATA_DIR, else "
                      "~/.local/share/bench).")] = None,
                  json_out: JsonOpt = False) -> None:
    """Collect a run's bundle from a host (after a quarantine or a lost controller): the
    runner's status, then, if the run ended, the bundle into <data_dir>/bundles/<host>/<run_id>/
    with its manifest verified. Exit 1 while the run is still going."""
    from bench.execute.collect import collect_run
    (h,) = _hosts(hosts_dir, [host])
    res = collect_run(h, run_id, data_dir=data_dir)
    if json_out:
        views.emit_json(res)
    else:
        st = res["status"] or {}
        views.say(f"{h.name} run {run_id}: phase {st.get('phase')}, ok {st.get('ok')}"
                  + (f", reason: {st.get('reason')}" if st.get("reason") else ""))
        if res["collected"]:
            f = res["figures"] or {}
            med, dev = f.get("iteration_median_s"), f.get("device_gb_per_iteration")
            views.say(f"bundle {res['bundle']} (manifest verified); median iteration "
                      + ("-" if med is None else f"{med * 1e3:.3f} ms")
                      + ", device " + ("-" if dev is None else f"{dev:.4f} GB") + "/iteration")
        else:
            views.say("the run has not ended yet: collect again later")
    if not res["collected"]:
        raise typer.Exit(1)


@hosts_app.command("bandwidth")
def hosts_bandwidth(host: HostNameArg,
                    hosts_dir: HostsDirOpt = None,
                    threads: Annotated[int, typer.Option("--threads", help="Agent threads.")] = 8,
                    max_bytes: Annotated[str, typer.Option(
                        "--max-bytes", help="Read at most about this much of the pool per pass "
                        "(0 = all of it), e.g. 64G.")] = "0",
                    db: Annotated[Optional[str], typer.Option(
                        "--db", help="Database URL (default $BENCH_DB, else the local SQLite).")]
                    = None,
                    json_out: JsonOpt = False) -> None:
    """Raw read bandwidth of the host's pool device with the agent: drop_caches, then every
    pool file read once cold (pass 0) and once warm (pass 1); device bytes from the pool
    device's diskstats around each pass. Stored with the host's boot_id and fingerprint; the
    fastest cold figure of a device bounds the device throughput of that host's runs on it
    (retention rule throughput_possible: 4 x it), at ingest and `bench retention recheck`."""
    from bench.execute.bandwidth import measure_bandwidth
    from bench.store.bandwidth import store_bandwidth
    from bench.store.db import open_store
    (h,) = _hosts(hosts_dir, [host])
    m = measure_bandwidth(h, threads=threads, max_bytes=parse_size(max_bytes, "--max-bytes"))
    store = open_store(db)
    try:
        m["id"] = store_bandwidth(store, m)
    finally:
        store.close()
    if json_out:
        views.emit_json(m)
    else:
        for p in ("cold", "warm"):
            x = m[p]
            dev = x["device_bytes"]
            views.say(f"{h.name} (boot {m['boot_id']}, device {m['device']}): {p}: "
                      f"{x['bytes'] / 1e9:.3f} GB in {x['seconds']:.3f} s = "
                      f"{(x['gb_per_s'] or 0):.3f} GB/s; device read "
                      + ("-" if dev is None else f"{dev / 1e9:.3f} GB"))


def register(app: typer.Typer) -> None:
    app.add_typer(hosts_app, name="hosts")
    from bench.cli import hosts_pools   # `bench hosts pools` lives in its own module
    hosts_pools.register(hosts_app)
