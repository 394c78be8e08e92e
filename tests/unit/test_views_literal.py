"""Everything a host, a bundle, the database, a file or a user supplies is shown as text, never
as markup, in every view: a hostile corpus (tests/support/hostile.py: rich markup, broken
markup, backslashes before brackets, emoji codes, terminal escape sequences, bidi overrides,
replaced and undecodable bytes, very long strings) goes into every string field of every table
and text view; none crashes, each short string shows literally (as visible() writes it), and
nothing a terminal would act on reaches the output. Bench's own colours still work."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from rich.console import Group

from bench.cli import schedule as cli_schedule
from bench.cli.run import _table as run_table
from bench.execute.progress import HostProgress, Progress
from bench.execute.campaign.onerun import HostRunResult
from bench.results import campaign_views, fleet_views, plan_views, store_views, trace_views, views
from bench.results.views import compose, lit, styled, visible
from tests.support import hostile
from tests.support.hostile import raw, recording_console
from tests.support.traces import header, rec

REPO = Path(__file__).resolve().parents[2]
T = "2026-11-29T19:05:00+00:00"


def _stat(**kw) -> dict:
    return dict({"median_s": 1.0, "device_gb_per_iteration": 0.5, "scan_steal": 1.1,
                 "served_fraction": 0.5, "locked_fraction": None, "n_retained": 1,
                 "n_rejected": 0, "spread": 0.0, "flags": ["n=1 < 3: no spread"]}, **kw)


def _store_views(s: str) -> dict:
    workload = {"digest": s, "kind": "replay", "trace": s, "trace_sha256": s, "plan_sha256": s,
                "pool_bytes": 1 << 20, "threads": 2, "passes": 2, "batch": 1, "domain": s}
    fingerprint = {"digest": s, "kernel": s, "controller_version": s}
    group = {"id": s, "host": s, "workload": workload, "fingerprint": fingerprint,
             "campaigns": [s]}
    cell = {"cell": s, "group": s, "host": s, "workload": workload, "fingerprint": fingerprint,
            "campaigns": [s], "split": {"groups": 2, "warning": s}, "n_retained": 1,
            "n_rejected": 1,
            "median_s": 1.0, "min_s": 0.9, "max_s": 1.1, "spread": 0.2,
            "device_gb_per_iteration": 0.5, "nominal_miss_gb_per_iteration": 0.4,
            "amplification": 1.2, "scan_steal": 1.1, "cgroup_scan_steal": None,
            "served_fraction": 0.5, "locked_fraction": 0.8, "mglru": s, "warnings": [s]}
    rows = [{"group": s, "host": s, "capacity_bytes": 1 << 30, "reclaim": s, "mechanism": s, "n_retained": 1,
             "n_rejected": 0, "median_s": 1.0, "spread": 0.1, "device_gb_per_iteration": 0.5,
             "a_over_c_dev": 0.3, "nominal_miss_gb_per_iteration": 0.4, "amplification": 1.1,
             "mglru": _stat(), "classic": _stat(flags=[s]), "mglru_over_classic": 0.9,
             "flags": [s],
             "pagecache": _stat(), "pinned": _stat(), s: _stat()}]
    head = {"host": s, "campaign": s, "workload": s, "rows": rows,
            "groups": [group, dict(group, id="g2", host="other")], "warnings": [s]}
    engine = {"matrix": "end-to-end", "host": s, "campaign": s, "warnings": [s], "prompts": [
        {"prompt": s, "admit_median_s": 10.0, "nocache_median_s": 20.0, "speedup": 2.0,
         "speedup_min": 1.5, "speedup_max": 2.5, "hashes_match": False, "mismatched": [s],
         "pairs": 3, "incomplete": [s], "n_retained": 6, "n_rejected": 1, "group": s,
         "flags": [s],
         "host": s}], "groups": [group, dict(group, id="g2", host="other")]}
    ratios = {"n_a": 2, "n_b": 2, "time_ratio_of_medians": 1.1, "time_median_pair_ratio": 1.0,
              "time_pair_ratio_min": 0.9, "time_pair_ratio_max": 1.1, "time_pairs": 2,
              "device_ratio_of_medians": 1.0, "device_median_pair_ratio": 1.0,
              "device_pair_ratio_min": 0.9, "device_pair_ratio_max": 1.1, "device_pairs": 2,
              "flags": [s]}
    return {
        "runs": store_views.runs_table([{
            "run_id": s, "campaign": s, "host": s, "cell": s, "repetition": 1, "retained": False,
            "iteration_median_s": 1.0, "device_gb_per_iteration": 0.5, "failed": [s]}]),
        "cell": store_views.cell_result_table(cell),
        "verdicts": store_views.verdict_table({"run_id": s, "retained": False, "verdicts": [
            {"rule": s, "version": 1, "passed": False, "reason": s}]}),
        "capacity": store_views.matrix_table(dict(head, matrix="capacity")),
        "reclaim": store_views.matrix_table(dict(head, matrix="reclaim")),
        "equal-memory": store_views.matrix_table(dict(head, matrix="equal-memory",
                                                      modes=["pagecache", "pinned", s])),
        "prefetch": store_views.matrix_table(dict(head, matrix="prefetch", prefetch=["none", s])),
        "end-to-end": store_views.matrix_table(engine),
        "compare": store_views.compare_table(dict(
            ratios, a=s, b=s, mechanism_agreement=0.01, warnings=[s], pooled={"reason": s},
            groups=[dict(group, **ratios)])),
        "split": store_views.cell_split_line([cell]),
        "recheck": store_views.recheck_table([{"run_id": s, "rule": s, "reason": s, "old": {
            "version": 1, "passed": True}, "new": {"version": 2, "passed": False}}]),
    }


def _campaign_views(s: str) -> dict:
    hp = HostProgress(host=s, phase=s, run_id=s, pass_no=0, passes=2, iteration=3, iterations=9,
                      cell=s, state=s, elapsed_s=12.0, eta_s=30.0, done=1, total=4,
                      quarantined=s)
    p = Progress(campaign=s, matrix=s, seed=7, state=s, controller={"pid": 42, "host": s},
                 total=4, finished=1, failed=0, counts={s: 1}, hosts=[hp], eta_s=30.0,
                 run_seconds=10.0, reboot_seconds=60.0,
                 verdicts=[{"t": T, "run_id": s, "verdict": s, "message": s}],
                 warnings=[{"t": T, "message": s}], quarantined={s: s})
    return {"live": campaign_views.campaign_renderable(p.as_dict()),
            "campaigns": campaign_views.campaigns_table([{
                "id": s, "matrix": s, "seed": 7, "state": s, "created": s,
                "states": {s: 1, "validated": 2}}])}


def _fleet_views(s: str) -> dict:
    facts = {"kernel": s, "arch": s, "page_size": 4096, "mem_total_bytes": 1 << 34,
             "mem_available_bytes": 1 << 33, "swap_total_bytes": 0, "mglru": s,
             "cgroup": {"backend": s}, "systemd_pid1": True, "python3": s, "boot_id": s,
             "agent": {"source_sha256": s}, "pool_device": {"name": s, "devno": s,
                                                             "leaves": [s, "other"]}}
    return {
        "hosts": fleet_views.hosts_table([{
            "name": s, "transport": "ssh", "user": s, "address": s, "port": 22, "tags": {s: s},
            "mem_total": 1 << 30, "mem_floor": None, "reboot": {"allowed": True, "method": s},
            "work_dir": s}]),
        "check": fleet_views.inventory_check_table([{"file": s, "ok": False, "error": s,
                                                     "hint": s}]),
        "probe": fleet_views.probe_table([
            {"host": s, "facts": {}, "error": {"type": s, "message": s}, "fact_errors": []},
            {"host": s, "facts": facts, "error": None, "fact_errors": [s]}]),
        "deploy": fleet_views.deploy_table([{"host": s, "status": s, "source_sha256": s,
                                             "seconds": 1.5, "error": {"type": s,
                                                                       "message": s}}]),
        "lab": fleet_views.lab_table({"kind": s, "state_dir": s, "up": True, "hosts_dir": s,
                                      "hosts": [{"name": s, "address": s, "netns": s,
                                                 "netns_exists": False, "sshd_pid": 7,
                                                 "sshd": False, "boot_id": s, "cmdline": s}]}),
        "vm-lab": fleet_views.vm_lab_table([{"name": s, "pid": 7, "running": False,
                                             "port": 2222, "ssh": s, "detail": s,
                                             "inventory": s}]),
    }


def _trace_views(s: str) -> dict:
    src = f"/traces/{s}" if "/" not in s else s
    summary = {"source": src, "iterations": 9, "normal": 7, "spec_accept": 1,
               "spec_fallback": 1, "accepted_tokens": 10, "passes": 10, "reads": 100,
               "reads_per_iteration": 11.1, "reads_per_accepted_token": 10.0,
               "prefill_records_excluded": 0, "dry_run_iterations_excluded": 0}
    loc = {"traces": [{"source": src, "zipf_alpha": 1.1, "reuse": {"w1": .3, "w8": .5, "w64": .8},
                       "top8_share": {"first_layer": .1, "last_layer": .2, "min": .1, "max": .3},
                       "union_coverage": {"min": 1, "max": 2, "of": 3}, "pool_coverage": .5,
                       "top_set": 8}], "jaccard_range": (0.1, 0.2)}
    rec = {"provenance": {"source": s}, "recall": .5, "per_layer_range": [.1, .9],
           "precision": .4, "hinted": 3}
    return {
        "parse": trace_views.parse_table([summary]),
        "stats": trace_views.stats_table(loc),
        "sim": trace_views.sim_table([{"trace": src, "regime": s, "budget": 8, "policy": s,
                                       "train": src, "hits": 1, "accesses": 2,
                                       "hit_rate": .5}], title=s),
        "demand": trace_views.demand_table([{
            "trace": src, "capacity": s, "capacity_experts": 4, "misses_per_iteration": 1.0,
            "nominal_miss_gb_per_iteration": 1.0, "logical_gb_per_iteration": 2.0,
            "hit_rate": .5}]),
        "recall": trace_views.recall_table({"hints": rec, "previous_token_baseline": rec}),
        "check": lit("\n".join(trace_views.check_lines([[s, s]]))),   # printed by say()
    }


def _plan_views(s: str) -> dict:
    plan, exp, m = cli_schedule.build_plan("smoke", ["local"], REPO / "hosts", 3, "c")
    md, pd, ed = m.as_dict(), plan.as_dict(), exp.as_dict()
    md.update(name=s, description=s, source=s, reference=s)
    pd["campaign"] = s
    for h in pd["hosts"]:
        h["host"] = s
        for r in h["runs"]:
            r.update(run_id=s, cell=s)
    ed["skipped"] = [{"point": s, "host": s, "reason": s}]
    ed["warnings"] = [s]
    from bench.matrix.load import load_matrix
    e2e = load_matrix("end-to-end").as_dict()
    e2e.update(name=s, description=s, source=s)
    e2e["engine"]["command"] = [s, s]
    e2e["engine"]["backend"] = s
    return {
        "list": plan_views.matrix_list_table([{
            "name": s, "points": 3, "repetitions": 1, "description": s,
            "hosts": {"tags": {s: [s]}, "placement": s}}]),
        "matrix": plan_views.matrix_text(md),
        "plan": plan_views.plan_text(md, pd, ed),
        "engine-matrix": plan_views.matrix_text(e2e),
    }


def _cli_views(s: str) -> dict:
    r = HostRunResult(host=s, run_id=s, cell=s, stage=s, error={"message": s},
                      status={"phase": s, "ok": False}, ingest={"retained": False, "failed": [s]},
                      bundle=s, seconds=3.0)
    q = HostRunResult(host=s, run_id=s, cell=s, quarantined=True)
    return {"run": run_table([r, q]),
            "say": compose(("warning:", "yellow"), f" {s}"), "lit": lit(s),
            "styled": styled(s, "red")}


def all_views(s: str) -> dict:
    out = {}
    for make in (_store_views, _campaign_views, _fleet_views, _trace_views, _plan_views,
                 _cli_views):
        for k, v in make(s).items():
            out[f"{make.__name__[1:]}.{k}"] = v
    return out


NAMES = sorted(all_views("x"))


def render(view, width: int = 4000, color: bool = False):
    con = recording_console(width, color)
    if isinstance(view, str):
        con.file.write(view)        # text views are printed with print()
        con.print("", end="")
    else:
        con.print(view)
    return con


@pytest.mark.parametrize("s", hostile.SHORT, ids=repr)
def test_every_view_shows_short_hostile_text_literally(s):
    shown = visible(s)
    for name, view in all_views(s).items():
        con = render(view)
        out = raw(con)
        assert not hostile.UNSAFE & set(out), (name, out)
        text = out if isinstance(view, str) else con.export_text()
        expected = shown.rsplit("/", 1)[-1] if name.startswith("trace_views.") else shown
        if name == "trace_views.recall":            # provenance is shown as JSON
            expected = visible(json.dumps(s)[1:-1])
        assert expected in text, (name, expected, text[:2000])
        assert "\x1b]8;" not in out                                 # no hyperlink appeared


@pytest.mark.parametrize("s", hostile.LONG, ids=lambda s: repr(s[:20]))
def test_every_view_survives_long_and_multi_line_text(s):
    for name, view in all_views(s).items():
        for width in (80, 4000):
            out = raw(render(view, width))
            assert not hostile.UNSAFE & set(out), (name, width)


def test_the_corpus_reaches_every_view():
    """A string put into every field shows up in every view (so the tests above test it)."""
    for name, view in all_views("CANARY").items():
        con = render(view)
        assert "CANARY" in (raw(con) if isinstance(view, str) else con.export_text()), name


def test_visible_escapes_controls_only():
    assert visible("plain [bold] \\ text é ✓") == "plain [bold] \\ text é ✓"
    assert visible("\x1b[2J\x07\x00\x7f\x9b") == "\\x1b[2J\\x07\\x00\\x7f\\u009b"
    assert visible("a\u202eb\u200bc") == "a\\u202eb\\u200bc"
    assert visible("byte \udcff") == "byte \\xff"            # surrogateescape -> the byte
    assert visible("tab\tnl\n") == "tab\tnl\n"
    assert visible("tab\tnl\n", lines=False) == "tab\\x09nl\\x0a"
    # the text of an escape is not the character: its backslash shows doubled
    assert visible("\\x1b") == "\\\\x1b" != visible("\x1b")


def test_bench_own_colours_still_work():
    t = fleet_views.inventory_check_table([{"file": "[red]f", "ok": False, "error": "e"}])
    out = raw(render(t, color=True))
    assert "\x1b[31m" in out and "no" in out                  # bench's red
    assert "[red]f" in out                                    # the file name, literal
    g = campaign_views.campaign_renderable(_progress_plain())
    assert isinstance(g, Group)
    out = raw(render(g, color=True))
    assert "\x1b[1m" in out                                   # bold campaign name
    assert "\x1b[33m" in out and "none" in out                # no controller: yellow


def _progress_plain() -> dict:
    return Progress(campaign="c1", matrix="smoke", seed=1, state="running", controller=None,
                    total=1, finished=0, failed=0, counts={}, hosts=[], eta_s=0.0,
                    run_seconds=1.0, reboot_seconds=1.0).as_dict()


def test_say_and_show_print_literal_text(monkeypatch):
    out, err = recording_console(), recording_console()
    monkeypatch.setattr(views, "console", out)
    monkeypatch.setattr(views, "err_console", err)
    views.say("[/]x \x1b[31m")
    views.show("[bold]y :smile:")
    views.say(compose(("ok", "green"), " [/]z"))
    assert err.export_text() == "[/]x \\x1b[31m\nok [/]z\n"
    assert out.export_text() == "[bold]y :smile:\n"


def test_views_and_cli_hand_no_str_to_rich_markup():
    """Where a str would be parsed as markup: Text.from_markup, rich's own Table (its str cells,
    headers, titles), markup escapes, print() of an f-string by a console. Only views.py may
    touch rich's Table, and it wraps it."""
    bad = []
    for path in sorted((REPO / "bench").rglob("*.py")):
        tree = ast.parse(path.read_text())
        rel = path.relative_to(REPO)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("from_markup", "render_markup"):
                bad.append(f"{rel}:{node.lineno} {node.attr}")
            if isinstance(node, ast.ImportFrom) and node.module in ("rich.table", "rich.markup") \
                    and rel.as_posix() != "bench/results/views.py":
                bad.append(f"{rel}:{node.lineno} imports {node.module}")
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr == "print" and node.args \
                    and isinstance(node.args[0], (ast.JoinedStr, ast.BinOp, ast.Constant)) \
                    and isinstance(node.func.value, (ast.Name, ast.Attribute)) \
                    and "console" in ast.unparse(node.func.value):
                bad.append(f"{rel}:{node.lineno} console.print of a str")
    assert bad == []


# through the CLI, without a database -------------------------------------------------------

@pytest.fixture
def cli(monkeypatch, capsys):
    """main(argv) -> (rc, stdout + stderr), with consoles wide enough that nothing folds."""
    from bench.cli import main
    for con in (views.console, views.err_console):
        monkeypatch.setattr(con, "width", 1000)

    def run(*argv):
        rc = main([str(a) for a in argv])
        out = capsys.readouterr()
        return rc, out.out + out.err
    return run


NAMES = ["[/]x", "[link=file:///etc/passwd]x[/link]", "h\x1b]0;pwned\x07[bold]y", "a\\",
         ":smile:\u202e\x9b1m"]


def _folded(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("s", NAMES, ids=repr)
def test_cli_messages_and_tables_with_hostile_paths_and_files(cli, tmp_path, s):
    d = tmp_path / s.replace("/", "|")
    rc, text = cli("lab", "status", "--state-dir", d)            # a table title (it folds)
    assert rc == 0 and _folded(visible(str(d))) in _folded(text), text
    assert not hostile.UNSAFE & set(text), text
    rc, text = cli("pool", "check", d)                          # the error printer
    assert rc != 0 and visible(str(d)) in text and not hostile.UNSAFE & set(text), text
    trace = tmp_path / (s.replace("/", "|") + ".jsonl")
    trace.write_text("\n".join([header(), rec(0, [1, 2], 0), rec(1, [3, 4], 0),
                                rec(2, [5, 6], 0)]) + "\n")
    rc, text = cli("trace", "parse", trace)                     # a table cell
    assert rc == 0 and visible(trace.name) in text and not hostile.UNSAFE & set(text), text
    out = trace.with_suffix(".bin")
    rc, text = cli("plan", trace, "-o", out)                    # key: value lines
    assert rc == 0 and visible(str(out)) in text and not hostile.UNSAFE & set(text), text


@pytest.mark.parametrize("s", NAMES, ids=repr)
def test_dry_run_plan_of_a_matrix_with_a_hostile_description(cli, tmp_path, s):
    text = (REPO / "bench" / "data" / "matrices" / "smoke.toml").read_text()
    m = tmp_path / "m.toml"
    m.write_text(text.replace('description = "', 'description = ' + json.dumps(s)[:-1], 1))
    rc, out = cli("matrix", "show", m)
    assert rc == 0, out
    assert visible(s) in out and not hostile.UNSAFE & set(out), out
    # the same text as a campaign id is no campaign id: refused in one line, shown escaped
    rc, out = cli("schedule", "--matrix", m, "--hosts", "local", "--hosts-dir", REPO / "hosts",
                  "--seed", "3", "--campaign", s, "--dry-run", "--data-dir", tmp_path)
    assert rc == 2 and "is not a campaign id" in out and not hostile.UNSAFE & set(out), out


def test_plain_journal_lines_show_one_line_each(capsys):
    """Without a terminal, `bench watch`/`schedule` print journal lines: a message from a host
    cannot start a fake line or reach the terminal."""
    from types import SimpleNamespace
    msg = "r1: failed: agent said \x1b[2J\nFAKE 2026 state done\r"
    rows = [SimpleNamespace(id=1, kind="state", t=T, message=msg)]
    campaign_views.campaign_live(lambda: _progress_plain(), lambda: True, interval=0,
                                 journal=lambda after: rows if after == 0 else [])
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and visible(msg, lines=False) in out
    assert not hostile.UNSAFE & set(out)
