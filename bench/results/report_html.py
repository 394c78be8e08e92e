"""`bench report` as one self-contained HTML page, from the dict of bench.results.report_data
through the blocks of report_text: inline CSS (with print rules), inline SVG figures, no script
and no external reference, so it opens offline and prints. Pure: data in, a str out.

Every value shown is escaped (views.visible, then html.escape): host names, journal messages
and verdict reasons come from hosts and bundles. The SVG figures come from matplotlib
(bench.results.figstyle), which escapes the text it draws."""

from __future__ import annotations

import re
from collections.abc import Mapping
from html import escape

from bench.results import report_text as rt
from bench.results.views import visible

PLOT_HINT = "figures need matplotlib: pip install 'bench[plot]'"

CSS = """
:root { --fg: #1b1b1b; --muted: #5a5a5a; --line: #d4d4d4; --warn: #8a4b00; --bad: #a1141b; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
       max-width: 1180px; margin: 1.5em auto; padding: 0 1em; }
h1 { font-size: 1.5em; margin-bottom: .2em; } h2 { border-bottom: 1px solid var(--line);
padding-bottom: .2em; margin-top: 2em; } h3 { margin-top: 1.5em; }
nav ol { columns: 2; padding-left: 1.2em; } .muted { color: var(--muted); }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 2px 6px; vertical-align: top;
         text-align: left; } th { background: #f3f3f3; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
th { white-space: nowrap; }
dl.kv { display: grid; grid-template-columns: max-content 1fr; gap: 2px 12px; }
dl.kv dt { font-weight: 600; } dl.kv dd { margin: 0; }
.pair { display: grid; grid-template-columns: fit-content(45%) minmax(0, 1fr); gap: 1em;
        align-items: start; }
.pair > div { min-width: 0; overflow-x: auto; }
@media (max-width: 900px) { .pair { grid-template-columns: minmax(0, 1fr); } }
.pair.stacked { grid-template-columns: minmax(0, 1fr); }
figure { margin: 0; } figure svg { width: 100%; height: auto; display: block; }
td { overflow-wrap: anywhere; }
td.key { white-space: nowrap; overflow-wrap: normal; }
.flag { color: var(--warn); font-weight: 600; } .bad { color: var(--bad); font-weight: 600; }
.findings li, .warnings li { margin: .2em 0; } code { background: #f3f3f3; padding: 0 3px; }
pre { background: #f6f6f6; padding: .5em; white-space: pre-wrap; word-break: break-all; }
article.run { border-top: 1px dashed var(--line); margin-top: 1em; }
@media print {
  body { max-width: none; margin: 0; font-size: 11px; } nav { display: none; }
  h2 { break-before: page; } h2#summary-h { break-before: avoid; }
  .pair { display: block; } figure, table, article.run { break-inside: avoid; }
  a { color: inherit; text-decoration: none; }
}
"""


def e(x: object) -> str:
    """A value as HTML text: what a terminal or a bidi-aware viewer would act on made visible
    (views.visible, as every view shows it), then HTML-escaped."""
    return escape(visible(x), quote=True)


def _cell(c: object) -> str:
    if isinstance(c, rt.Link):
        return f'<a href="#{e(rt.anchor(c.run_id))}">{e(c.run_id)}</a>'
    return e(c)


_NUMBER = re.compile(r"[-+]?\d[\d.,/\-]*(%|x)?")


def _is_num(c: object) -> bool:
    """A number, a range or an n (right-aligned); text that starts with a digit is not."""
    return bool(_NUMBER.fullmatch(str(c)))


# columns naming what a row is: kept whole (a prose column beside them would otherwise
# squeeze them to a letter a line, since every cell may break anywhere)
KEY_COLUMNS = {"run", "host", "cell", "group", "state now", "rule", "campaign", "time", "kind"}


def table(t: rt.Table, cls: str = "") -> str:
    head, rows = t
    if not rows:
        return '<p class="muted">none</p>'
    klass = f' class="{e(cls)}"' if cls else ""
    out = [f"<table{klass}><thead><tr>"
           + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    for r in rows:
        tds = []
        for h, c in zip(head, r):
            klass = ' class="num"' if _is_num(c) and not isinstance(c, rt.Link) else ""
            if h in KEY_COLUMNS:
                klass = ' class="key"'
            if h == "flagged" and c != "-":
                klass = ' class="flag"'
            tds.append(f"<td{klass}>{_cell(c)}</td>")
        out.append("<tr>" + "".join(tds) + "</tr>")
    return "".join(out) + "</tbody></table>"


def kv(pairs: list[tuple[str, str]]) -> str:
    return '<dl class="kv">' + "".join(f"<dt>{e(k)}</dt><dd>{e(v)}</dd>"
                                       for k, v in pairs) + "</dl>"


def ul(lines: list[str], cls: str = "") -> str:
    if not lines:
        return ""
    return (f'<ul class="{e(cls)}">' + "".join(f"<li>{e(x)}</li>" for x in lines) + "</ul>")


def render(data: dict, svgs: Mapping[str, str | None] | None) -> str:
    """The page. `svgs`: {figure kind: inline <svg> text (report_figures), or None when that
    figure could not be drawn}; None altogether when matplotlib is absent."""
    parts = [f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
             f'<meta name="viewport" content="width=device-width, initial-scale=1">'
             f"<title>{e(rt.title(data))}</title><style>{CSS}</style></head><body>",
             f"<header><h1>{e(rt.title(data))}</h1><p class=\"muted\">Everything on this page "
             "is read from the bench database; rerun with the commands under Provenance."
             "</p></header>",
             "<nav><ol>" + "".join(f'<li><a href="#{k}">{e(v)}</a></li>'
                                   for k, v in rt.SECTIONS) + "</ol></nav>"]
    parts += [_summary(data), _figures(data, svgs), _reference(data), _exceptions(data),
              _provenance(data), _runs(data), "</body></html>"]
    return "\n".join(parts) + "\n"


def _h2(key: str) -> str:
    return f'<h2 id="{key}">{e(dict(rt.SECTIONS)[key])}</h2>'


def _summary(data: dict) -> str:
    out = [_h2("summary")]
    for c in data["campaigns"]:
        if len(data["campaigns"]) > 1:
            out.append(f"<h3>{e(c['id'])}</h3>")
        out.append(kv(rt.summary_pairs(c)))
    out.append("<h3>Findings</h3>")
    out.append(ul(data["findings"], "findings") or
               '<p class="muted">no mechanism agreement, balloon cross-check or mem= point '
               "in these campaigns' cells</p>")
    return "\n".join(out)


def _figures(data: dict, svgs: Mapping[str, str | None] | None) -> str:
    out = [_h2("figures")]
    if not data["figures"] and not data.get("engine"):
        out.append('<p class="muted">no retained run in a matrix shape: no figure</p>')
    for en in data.get("engine", []):
        out.append(f'<h3 id="engine-{e(en["campaign"])}">{e(rt.ENGINE_TITLE)}: '
                   f'{e(en["campaign"])}</h3><div>{table(rt.engine_table(en))}'
                   f'<p class="muted">{e(rt.ENGINE_LEGEND)}</p>'
                   f'{ul(rt.engine_lines(en), "groups")}</div>')
    for f in data["figures"]:
        svg = None if svgs is None else svgs.get(f["kind"])
        missing = PLOT_HINT if svgs is None else f"no figure drawn for {f['kind']}"
        fig = (f"<figure>{svg}<figcaption class=\"muted\">{e(f['title'])}</figcaption>"
               "</figure>" if svg else f'<p class="muted">{e(missing)}</p>')
        head, _rows = tbl = rt.figure_table(f)
        # a table with group and host columns does not fit beside its figure: stacked
        cls = "pair" if len(head) <= 7 else "pair stacked"
        out.append(f'<h3 id="figure-{e(f["kind"])}">{e(f["title"])}</h3>'
                   f'<div class="{cls}"><div>{table(tbl)}'
                   f'<p class="muted">{e(rt.FIGURE_LEGEND)}</p>'
                   f'{ul(rt.group_lines(f), "groups")}{ul(f["warnings"], "warnings")}</div>'
                   f'<div class="fig">{fig}</div></div>')
    return "\n".join(out)


def _reference(data: dict) -> str:
    out = [_h2("reference")]
    for ref in data["reference"]:
        out.append(ul(rt.reference_lines(ref)))
        if ref.get("ratios"):
            out.append(table(rt.ratio_table(ref)))
        if ref["rows"]:
            out.append(table(rt.reference_table(ref)))
    return "\n".join(out)


def _exceptions(data: dict) -> str:
    return "\n".join([_h2("exceptions"), "<h3>Rejected runs</h3>",
                      table(rt.rejected_table(data)), "<h3>Failed runs</h3>",
                      table(rt.failed_table(data)), "<h3>Cells skipped at planning</h3>",
                      table(rt.skipped_table(data))])


def _provenance(data: dict) -> str:
    p = data["provenance"]
    drift = ul(p["drift"], "warnings") or '<p>no fingerprint drift: each host kept one ' \
        "fingerprint, and the hosts agree on kernel, controller and agent</p>"
    cmds = "\n".join([p["report"], *p["rerun"], *p["figures"]])
    groups = "".join(f"<h4>{e(head)}</h4>{kv(pairs)}" for head, pairs in
                     rt.provenance_groups(data)) or '<p class="muted">no result group</p>'
    return "\n".join([_h2("provenance"), "<h3>Result groups</h3>", groups,
                      "<h3>Fingerprint drift</h3>", drift,
                      "<h3>Commands</h3><p>This report, the campaign again (a new campaign "
                      "with the same matrix, hosts and seed), and each figure:</p>",
                      f"<pre>{e(cmds)}</pre>"])


def _runs(data: dict) -> str:
    out = [_h2("runs")]
    for r in data["runs"]:
        bad = r["state"] in ("rejected", "failed") or r["retained"] is False
        failed = rt.verdict_table(r)
        cls = ' class="bad"' if bad else ""
        out.append(f'<article class="run" id="{e(rt.anchor(r["run_id"]))}">'
                   f'<h3{cls}>{e(r["run_id"])}: {e(r["cell"])} on '
                   f'{e(r["host"])} ({e(r["state"])})</h3>{kv(rt.run_pairs(r))}'
                   f"<h4>Verdicts</h4>{table(failed) if failed[1] else ''}"
                   f"<p>{e(rt.passed_line(r))}</p>"
                   f"<h4>Timeline</h4>{table(rt.timeline_table(r))}</article>")
    return "\n".join(out)
