"""Views of campaigns: the live view (rich on a terminal, plain journal lines otherwise) and the
campaign list."""

from __future__ import annotations

import time as _time
from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.text import Text

from bench.results.views import LiteralTable, compose, dur, err_console, styled, visible


def campaign_renderable(p: dict):
    """One rich renderable of a campaign snapshot (bench.execute.progress, as a dict): one row
    per host (phase, cell, run, pass and iteration as the host last reported them, elapsed,
    ETA), an overall bar, the last verdicts, quarantined hosts and warnings. Every name and
    message in it is literal text (bench.results.views)."""
    ctl, gone = p.get("controller"), p.get("controller_gone")
    head = compose((str(p["campaign"]), "bold"), f"  matrix {p['matrix']}  seed {p['seed']}  "
                   "state ", (str(p["state"]), "bold"), "  controller ",
                   f"pid {ctl['pid']} on {ctl['host']}" if ctl else
                   (f"gone (pid {gone.get('pid')} on {gone.get('host')} no longer runs)", "red")
                   if gone else ("none", "yellow"))
    t = LiteralTable(expand=False)
    for col in ("host", "phase", "cell", "run", "pass", "iteration", "elapsed", "done", "ETA"):
        t.add_column(col)
    for h in p["hosts"]:
        phase = styled(h["phase"], "red") if h["quarantined"] else h["phase"]
        has = h.get("passes") is not None
        t.add_row(h["host"], phase, h["cell"] or "-", h["run_id"] or "-",
                  f"{h['pass'] + 1}/{h['passes']}" if has else "-",
                  f"{h['iteration']}/{h['iterations']}" if has else "-",
                  dur(h["elapsed_s"]), f"{h['done']}/{h['total']}", dur(h["eta_s"]))
    bar = ProgressBar(total=max(1, p["total"]), completed=p["finished"], width=50)
    line = Text(f" {p['finished']}/{p['total']} runs finished, {p['failed']} failed, "
                f"ETA {dur(p['eta_s'])} ({eta_basis(p)})")
    parts: list[RenderableType] = [head, t, Group(bar, line)]
    if p.get("resume"):
        parts.append(compose(("not driven:", "yellow"), " no controller runs this campaign; `",
                             (str(p["resume"]), "bold"), "` goes on"))
    if p["verdicts"]:
        v = LiteralTable(title="last verdicts", show_header=False, box=None)
        for x in p["verdicts"]:
            color = "green" if x["verdict"] == "validated" else "yellow"
            v.add_row(x["t"][11:19], x["run_id"], styled(x["verdict"], color), x["message"])
        parts.append(v)
    for h, why in (p.get("quarantined") or {}).items():
        parts.append(compose(("quarantined", "red"), f" {h}: {why}"))
    for w in p.get("warnings") or []:
        parts.append(compose(("warning", "yellow"), f" {w['t'][11:19]} {w['message']}"))
    return Group(*parts)


def eta_basis(p: dict) -> str:
    """What the ETA rests on: the run time and whether it was measured; the reboots still
    planned, if any (a campaign whose hosts reboot no more says so, not a reboot time)."""
    runs = f"run ~{dur(p['run_seconds'])} {p.get('run_source', 'modelled')}"
    left = p.get("reboots_left")
    if left == 0:
        return runs + ", no reboot left"
    if left is None:        # a snapshot from before reboots_left: as it was shown then
        return runs + f", reboot ~{dur(p['reboot_seconds'])}"
    return (runs + f", {left} reboot{'s' if left > 1 else ''} ~{dur(p['reboot_seconds'])} "
            f"{p.get('reboot_source', 'modelled')}")


def campaign_live(snapshot, finished, interval: float = 1.0, journal=None) -> None:
    """Show a campaign until finished() is true: a rich Live view on a terminal, else plain
    timestamped lines (one per journal entry, from journal(after_id) -> rows)."""
    if err_console.is_terminal:
        with Live(campaign_renderable(snapshot()), console=err_console,
                  refresh_per_second=2) as live:
            while not finished():
                _time.sleep(interval)
                try:
                    live.update(campaign_renderable(snapshot()))
                except Exception:  # noqa: BLE001 - a busy database: next tick
                    pass
            live.update(campaign_renderable(snapshot()))
        return
    last = 0
    while True:
        done = finished()
        try:
            rows = journal(last) if journal else []
        except Exception:  # noqa: BLE001 - a busy database: next tick
            rows = []
        for j in rows:
            last = j.id
            if j.kind in ("lock", "live"):    # rows updated in place, not events
                continue
            print(visible(f"{j.t[:19].replace('T', ' ')} {j.kind:<10} {j.message}",
                          lines=False), flush=True)
        if done:
            return
        _time.sleep(interval)


def campaigns_table(rows: Sequence[dict]) -> LiteralTable:
    t = LiteralTable(title="campaigns")
    for col in ("campaign", "matrix", "seed", "state", "created", "finished", "progress",
                "states"):
        t.add_column(col)
    for r in rows:
        st = r["states"]
        total = sum(st.values())
        fin = st.get("validated", 0) + st.get("rejected", 0)
        t.add_row(r["id"], r["matrix"] or "-", str(r["seed"]), r["state"],
                  (r["created"] or "")[:19], f"{fin}/{total}",
                  f"{100 * fin / total:.0f}%" if total else "-",
                  ", ".join(f"{k} {v}" for k, v in sorted(st.items())))
    return t
