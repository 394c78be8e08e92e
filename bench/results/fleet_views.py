"""Views of the fleet: inventory, its check, host facts, deploy, labs."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from bench.results.views import mem_gb, size_text


def hosts_table(hosts: Sequence[dict]) -> Table:
    t = Table(title="Inventory")
    for col in ("host", "transport", "address", "tags", "memory", "mem floor", "reboot",
                "work dir"):
        t.add_column(col)
    for h in hosts:
        r = h["reboot"]
        addr = "-" if h["transport"] == "local" else f"{h['user']}@{h['address']}:{h['port']}"
        t.add_row(h["name"], h["transport"], addr,
                  " ".join(f"{k}={v}" for k, v in h["tags"].items()) or "-",
                  size_text(h.get("mem_total")), size_text(h.get("mem_floor")),
                  r["method"] if r["allowed"] else "never", h["work_dir"])
    return t


def inventory_check_table(rows: Sequence[dict]) -> Table:
    t = Table(title="Inventory check")
    for col in ("file", "ok", "problem"):
        t.add_column(col)
    for r in rows:
        problem = "-" if r["ok"] else r["error"] + (f" (fix: {r['hint']})" if r.get("hint") else "")
        t.add_row(r["file"], "yes" if r["ok"] else "[red]no[/]", problem)
    return t


def probe_table(results: Sequence[dict]) -> Table:
    t = Table(title="Host facts")
    for col in ("host", "kernel", "arch", "page", "MemTotal", "MemAvail", "swap", "mglru",
                "cgroup", "systemd", "pool device", "python", "agent", "boot_id / error"):
        t.add_column(col)
    for r in results:
        f = r["facts"]
        if r["error"]:
            t.add_row(r["host"], *["-"] * 12,
                      f"[red]{r['error']['type']}: {r['error']['message']}[/]")
            continue
        dev = f.get("pool_device")
        devs = "-" if not dev else f"{dev['name']} ({dev['devno']})" + (
            f" on {','.join(dev['leaves'])}" if dev["leaves"] != [dev["name"]] else "")
        agent = f.get("agent")
        t.add_row(r["host"], str(f.get("kernel", "-")), str(f.get("arch", "-")),
                  str(f.get("page_size", "-")), mem_gb(f.get("mem_total_bytes")),
                  mem_gb(f.get("mem_available_bytes")), mem_gb(f.get("swap_total_bytes")),
                  f.get("mglru") or "absent",
                  (f.get("cgroup") or {}).get("backend", "-"),
                  "yes" if f.get("systemd_pid1") else "no", devs, f.get("python3") or "-",
                  agent["source_sha256"][:12] if agent else "-",
                  str(f.get("boot_id", "-")) + (
                      "" if not r["fact_errors"]
                      else f" [yellow]({', '.join(r['fact_errors'])} failed)[/]"))
    return t


def deploy_table(results: Sequence[dict]) -> Table:
    t = Table(title="Deploy")
    for col in ("host", "status", "agent source_sha256", "seconds", "error"):
        t.add_column(col)
    for r in results:
        err = r.get("error")
        t.add_row(r["host"], r["status"], (r.get("source_sha256") or "-")[:16],
                  str(r.get("seconds", "-")),
                  "-" if not err else f"[red]{err['type']}: {err['message']}[/]")
    return t


def lab_table(status: dict) -> Table:
    t = Table(title=f"Lab ({status['kind']}) in {status['state_dir']}"
                    + ("" if status["up"] else ": down"))
    for col in ("host", "address", "netns", "sshd", "boot_id", "cmdline"):
        t.add_column(col)
    for h in status["hosts"]:
        t.add_row(h["name"], h["address"], h["netns"] + ("" if h["netns_exists"] else " (gone)"),
                  f"up (pid {h['sshd_pid']})" if h["sshd"] else "[red]down[/]", h["boot_id"],
                  h["cmdline"])
    if status["up"]:
        t.caption = f"inventory: {status['hosts_dir']} (use --hosts-dir or BENCH_HOSTS)"
    return t


def vm_lab_table(rows: Sequence[dict]) -> Table:
    t = Table(title="Lab (vm: qemu guests)" + ("" if rows else ": down"))
    for col in ("host", "qemu", "ssh port", "ssh", "boot_id / cmdline", "inventory"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["name"], f"pid {r['pid']}" if r["running"] else "[red]stopped[/]",
                  str(r["port"]), r.get("ssh", "-"), r.get("detail", "-"), str(r["inventory"]))
    return t
