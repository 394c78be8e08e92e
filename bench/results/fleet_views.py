"""Views of the fleet: inventory, its check, host facts, deploy, labs."""

from __future__ import annotations

from collections.abc import Sequence

from bench.judge.measured import settings_fingerprint
from bench.results.views import LiteralTable, compose, mem_gb, size_text, styled


def hosts_table(hosts: Sequence[dict]) -> LiteralTable:
    t = LiteralTable(title="Inventory")
    for col in ("host", "transport", "address", "tags", "memory", "mem floor", "reboot",
                "work dir"):
        t.add_column(col)
    for h in hosts:
        r = h["reboot"]
        addr = "-" if h["transport"] == "local" else (
            (f"{h['user']}@" if h.get("user") else "") + str(h["address"])
            + (f":{h['port']}" if h.get("port") else ""))
        t.add_row(h["name"], h["transport"], addr,
                  " ".join(f"{k}={v}" for k, v in h["tags"].items()) or "-",
                  size_text(h.get("mem_total")), size_text(h.get("mem_floor")),
                  r["method"] if r["allowed"] else "never", h["work_dir"])
    return t


def inventory_check_table(rows: Sequence[dict]) -> LiteralTable:
    t = LiteralTable(title="Inventory check")
    for col in ("file", "ok", "problem"):
        t.add_column(col)
    for r in rows:
        problem = "-" if r["ok"] else r["error"] + (f" (fix: {r['hint']})" if r.get("hint") else "")
        t.add_row(r["file"], "yes" if r["ok"] else styled("no", "red"), problem)
    return t


def settings_brief(settings: dict | None) -> str:
    """The page-cache settings in one cell: per queue device `dev ra=KB sched`, THP enabled,
    swappiness, NUMA nodes with memory, CPU governors (literal text: the table shows it so)."""
    if not settings:
        return "-"
    parts = [f"{dev} ra={q.get('read_ahead_kb')} {q.get('scheduler') or '?'}"
             for dev, q in (settings.get("block") or {}).items()]
    parts.append(f"thp {(settings.get('thp') or {}).get('enabled') or '-'}")
    parts.append(f"swappiness {(settings.get('vm') or {}).get('swappiness')}")
    nodes = (settings.get("numa") or {}).get("nodes") or {}
    parts.append("numa " + (" ".join(f"{n}:{mem_gb(b)}" for n, b in nodes.items()) or "-"))
    govs = (settings.get("cpufreq") or {}).get("governors") or {}
    parts.append("gov " + (",".join(govs) or "-"))
    return ", ".join(parts)


def _campaign_cell(c: dict | None):
    if c is None:
        return "-"
    if c["matches"] is None:
        return styled("no reference", "yellow")
    if c["matches"]:
        return styled(f"matches {c['reference']}", "green")
    return styled(f"DIFFERS ({len(c['differences'])})", "red")


def probe_table(results: Sequence[dict]) -> LiteralTable:
    t = LiteralTable(title="Host facts")
    cols = ["host", "kernel", "arch", "page", "MemTotal", "MemAvail", "swap", "mglru", "cgroup",
            "systemd", "pool device", "python", "agent", "page-cache settings",
            "boot_id / error"]
    with_campaign = any("campaign" in r for r in results)
    if with_campaign:
        cols.insert(-1, "vs campaign")
    for col in cols:
        t.add_column(col)
    for r in results:
        f = r["facts"]
        if r["error"]:
            t.add_row(r["host"], *["-"] * (len(cols) - 2),
                      styled(f"{r['error']['type']}: {r['error']['message']}", "red"))
            continue
        dev = f.get("pool_device")
        devs = "-" if not dev else f"{dev['name']} ({dev['devno']})" + (
            f" on {','.join(dev['leaves'])}" if dev["leaves"] != [dev["name"]] else "")
        agent = f.get("agent")
        row = [r["host"], str(f.get("kernel", "-")), str(f.get("arch", "-")),
               str(f.get("page_size", "-")), mem_gb(f.get("mem_total_bytes")),
               mem_gb(f.get("mem_available_bytes")), mem_gb(f.get("swap_total_bytes")),
               f.get("mglru") or "absent", (f.get("cgroup") or {}).get("backend", "-"),
               "yes" if f.get("systemd_pid1") else "no", devs, f.get("python3") or "-",
               agent["source_sha256"][:12] if agent else "-", settings_brief(f.get("settings"))]
        if with_campaign:
            row.append(_campaign_cell(r.get("campaign")))
        row.append(compose(str(f.get("boot_id", "-")), (
            "" if not r["fact_errors"] else f" ({', '.join(r['fact_errors'])} failed)",
            "yellow")))
        t.add_row(*row)
    return t


def probe_notes(results: Sequence[dict], *, verbose: bool = False) -> list:
    """Lines under the probe table: how each host differs from its campaign's reference
    fingerprint, and (verbose) every page-cache setting as the fingerprint names it."""
    out = []
    for r in results:
        c = r.get("campaign")
        if c and c["matches"] is False:
            out.append(compose((f"{r['host']}:", "bold"), " ", (
                f"differs from campaign {c['id']}'s reference {c['reference']} (probed vs "
                "reference): " + "; ".join(c["differences"]), "red")))
        elif c and c["matches"] is None:
            out.append(compose((f"{r['host']}:", "bold"), f" campaign {c['id']} has no run on "
                               "this host: nothing to compare"))
        if verbose and not r["error"]:
            flat = settings_fingerprint(r["facts"].get("settings"))
            out.append(compose((r["host"], "bold"), " settings: " + (
                ", ".join(f"{k}={v}" for k, v in flat.items()) if flat else "not probed")))
    return out


def deploy_table(results: Sequence[dict]) -> LiteralTable:
    t = LiteralTable(title="Deploy")
    for col in ("host", "status", "agent source_sha256", "seconds", "error"):
        t.add_column(col)
    for r in results:
        err = r.get("error")
        t.add_row(r["host"], r["status"], (r.get("source_sha256") or "-")[:16],
                  str(r.get("seconds", "-")),
                  "-" if not err else styled(f"{err['type']}: {err['message']}", "red"))
    return t


def lab_table(status: dict) -> LiteralTable:
    t = LiteralTable(title=f"Lab ({status['kind']}) in {status['state_dir']}"
                     + ("" if status["up"] else ": down"))
    for col in ("host", "address", "netns", "sshd", "boot_id", "cmdline"):
        t.add_column(col)
    for h in status["hosts"]:
        t.add_row(h["name"], h["address"], h["netns"] + ("" if h["netns_exists"] else " (gone)"),
                  f"up (pid {h['sshd_pid']})" if h["sshd"] else styled("down", "red"), h["boot_id"],
                  h["cmdline"])
    if status["up"]:
        t.caption = f"inventory: {status['hosts_dir']} (use --hosts-dir or BENCH_HOSTS)"
    return t


def vm_lab_table(rows: Sequence[dict]) -> LiteralTable:
    t = LiteralTable(title="Lab (vm: qemu guests)" + ("" if rows else ": down"))
    for col in ("host", "qemu", "ssh port", "ssh", "boot_id / cmdline", "inventory"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["name"], f"pid {r['pid']}" if r["running"] else styled("stopped", "red"),
                  str(r["port"]), r.get("ssh", "-"), r.get("detail", "-"), str(r["inventory"]))
    return t
