"""`bench report --format md`: the report's content as Markdown, from the dict of
bench.results.report_data through the blocks of report_text (the same the HTML shows). Figures
are not embedded: each figure's place says the command that draws it. Pure: data in, a str out.

Every value is escaped for a Markdown table cell or line (md()): host names, journal messages
and verdict reasons come from hosts and bundles, and must show as text, never as markup, a
link or HTML."""

from __future__ import annotations

import re
from html import escape

from bench.results import report_text as rt
from bench.results.views import visible

# what could start markup inside a line: emphasis, code, links ([ and ]), table cells (|),
# strike-through; < and > and & are HTML-escaped first (no raw HTML), line starts never hold
# a value (every line starts with the report's own text)
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~])")


def md(x: object) -> str:
    """Text as literal Markdown: control and invisible characters made visible (views.visible,
    so `cat report.md` in a terminal acts on nothing), HTML escaped, Markdown punctuation
    backslashed, newlines as spaces (a table row is one line)."""
    s = " ".join(visible(x, lines=False).split())
    return _MD_SPECIAL.sub(r"\\\1", escape(s, quote=False))


def _cell(c: object) -> str:
    if isinstance(c, rt.Link):
        return f"[{md(c.run_id)}](#{_anchor_text(c.run_id)})"
    return md(c)


def _anchor_text(run_id: str) -> str:
    return escape(rt.anchor(run_id), quote=True).replace(" ", "%20").replace(")", "%29")


def table(t: rt.Table) -> list[str]:
    head, rows = t
    if not rows:
        return ["none", ""]
    out = ["| " + " | ".join(md(h) for h in head) + " |",
           "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(_cell(c) for c in r) + " |" for r in rows]
    return out + [""]


def render(data: dict, drawn: bool = False) -> str:
    """The Markdown report. `drawn`: whether matplotlib is present (else each figure's place
    also says how to get figures)."""
    out = [f"# {md(rt.title(data))}", "",
           "Everything here is read from the bench database; rerun with the commands under "
           "Provenance.", ""]
    out += _h2("summary")
    for c in data["campaigns"]:
        if len(data["campaigns"]) > 1:
            out += [f"### {md(c['id'])}", ""]
        out += [f"- **{md(k)}**: {md(v)}" for k, v in rt.summary_pairs(c)] + [""]
    out += ["### Findings", ""]
    out += [f"- {md(x)}" for x in data["findings"]] or [
        "no mechanism agreement, balloon cross-check or mem= point in these campaigns' cells"]
    out += [""] + _figures(data, drawn)
    out += _h2("reference")
    for ref in data["reference"]:
        out += [f"- {md(x)}" for x in rt.reference_lines(ref)] + [""]
        if ref.get("ratios"):
            out += table(rt.ratio_table(ref))
        if ref["rows"]:
            out += table(rt.reference_table(ref))
    out += _h2("exceptions")
    out += ["### Rejected runs", ""] + table(rt.rejected_table(data))
    out += ["### Failed runs", ""] + table(rt.failed_table(data))
    out += ["### Cells skipped at planning", ""] + table(rt.skipped_table(data))
    p = data["provenance"]
    out += _h2("provenance") + ["### Result groups", ""]
    for head, pairs in rt.provenance_groups(data):
        out += [f"- {md(head)}"] + [f"  - {md(k)}: {md(v)}" for k, v in pairs]
    out += [""]
    out += ["### Fingerprint drift", ""]
    out += [f"- {md(x)}" for x in p["drift"]] or [
        "no fingerprint drift: each host kept one fingerprint, and the hosts agree on kernel, "
        "controller and agent"]
    out += ["", "### Commands", "", "```"]
    # a fenced block shows its text literally; only a fence inside could end it early
    out += [visible(x, lines=False).replace("```", "'''")
            for x in (p["report"], *p["rerun"], *p["figures"])]
    out += ["```", ""] + _h2("runs")
    for r in data["runs"]:
        out += [f'<a id="{_anchor_text(r["run_id"])}"></a>', "",
                f"### {md(r['run_id'])}: {md(r['cell'])} on {md(r['host'])} ({md(r['state'])})",
                ""]
        out += [f"- {md(k)}: {md(v)}" for k, v in rt.run_pairs(r)] + [""]
        failed = rt.verdict_table(r)
        out += ["Verdicts:", ""] + (table(failed) if failed[1] else []) + [
            md(rt.passed_line(r)), ""]
        out += ["Timeline:", ""] + table(rt.timeline_table(r))
    return "\n".join(out).rstrip() + "\n"


def _figures(data: dict, drawn: bool) -> list[str]:
    """The figures section: each figure's table, legend, groups and command; Table 3."""
    out = _h2("figures")
    for f in data["figures"]:
        out += [f"### {md(f['title'])}", ""] + table(rt.figure_table(f))
        out += [md(rt.FIGURE_LEGEND), ""]
        out += [f"- {md(x)}" for x in rt.group_lines(f)]
        out += [f"- warning: {md(x)}" for x in f["warnings"]] + [""]
        cmds = " and ".join(md(c) for c in f["commands"])
        out += [f"Figure: {cmds} draws it"
                + ("" if drawn else " (figures need matplotlib: pip install 'bench[plot]')")
                + "; the HTML report (`--format html`) inlines it.", ""]
    for e in data.get("engine", []):
        out += [f"### {md(rt.ENGINE_TITLE)}: {md(e['campaign'])}", ""] + table(
            rt.engine_table(e))
        out += [md(rt.ENGINE_LEGEND), ""] + [f"- {md(x)}" for x in rt.engine_lines(e)] + [""]
    return out


def _h2(key: str) -> list[str]:
    return [f"## {md(dict(rt.SECTIONS)[key])}", ""]
