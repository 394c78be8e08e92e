"""`bench report [CAMPAIGN...]`: the next-morning page of one or more campaigns, as one
self-contained HTML file (or Markdown): bench.results.report_data gathers it from the store,
report_html / report_md render it, report_figures draws the inline figures."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from bench.cli.options import DbOpt, ids_text
from bench.errors import InputError
from bench.results import views


class Format(str, Enum):
    html = "html"
    md = "md"


def report(
    campaigns: Annotated[Optional[list[str]], typer.Argument(
        help="Campaign ids (default: the newest finished campaign that is not hidden; "
             "`bench campaigns` lists them).", show_default=False, metavar="CAMPAIGN",
        callback=ids_text("CAMPAIGN", "campaign id"))] = None,
    out: Annotated[Optional[Path], typer.Option(
        "-o", "--out", help="File to write (default: report-CAMPAIGN.html, or .md with "
                            "--format md, in the current directory); a name ending in .md "
                            "writes Markdown.", show_default=False)] = None,
    fmt: Annotated[Optional[Format], typer.Option(
        "--format", help="html: one self-contained page (inline CSS and SVG figures, no "
                         "network, no JavaScript, prints well); md: the same content as "
                         "Markdown, figures as the commands that draw them. Default: from "
                         "-o's suffix, else html.", show_default=False)] = None,
    db: DbOpt = None,
) -> None:
    """The next-morning report of a campaign: summary (runs validated, rejected, failed,
    skipped; duration and reboots against the plan; findings), per figure the table (median,
    min-max, n retained/rejected, spread, flagged when n < 3 or spread > 10%) beside the
    figure, the paper's numbers beside the measured ones, rejected runs with their rule,
    failed runs with the recovery ladder's steps, skipped cells, provenance (fingerprints,
    drift, the commands to rerun) and a section per run. Prints the file's path."""
    from bench.cli.outpath import output_file
    from bench.store.db import open_store
    kind = fmt.value if fmt else ("md" if out is not None and out.suffix.lower() == ".md"
                                  else "html")
    store = open_store(db, write=False)
    try:
        ids = list(campaigns or []) or [_default(store)]
        _check(store, ids)
    finally:
        store.close()
    if out is None:
        out = Path(f"report-{ids[0]}" + (f"-and-{len(ids) - 1}-more" if len(ids) > 1
                                          else "") + f".{kind}")
    write_report(ids, output_file(out, "-o"), kind, db)
    views.say(f"wrote {out}")
    print(out)


def write_report(ids: list[str], out: Path, kind: str, db: str | None) -> Path:
    """The report of campaigns `ids` (which exist) written to OUT as `kind` (html or md)."""
    from bench.results import report_data
    from bench.store.db import open_store
    store = open_store(db, write=False)
    try:
        data = report_data.gather(store, ids, db)
    finally:
        store.close()
    if kind == "md":
        from bench.results import report_md
        from bench.results.report_figures import has_matplotlib
        text = report_md.render(data, drawn=has_matplotlib())
    else:
        from bench.results import report_html
        from bench.results.report_figures import svgs
        drawn = svgs(data)
        if drawn is None:
            views.say("warning: no figures (matplotlib is missing): pip install 'bench[plot]'")
        text = report_html.render(data, drawn)
    _write(out, text)
    return out


def _default(store) -> str:
    """The newest finished campaign not hidden, said on stderr; else the newest one (said
    with its state); none at all is one line with the fix."""
    from bench.store.campaigns import campaign_list
    from bench.store.states import CAMPAIGN_FINISHED
    rows = campaign_list(store)
    if not rows:
        raise InputError("no campaign in the database to report on",
                         hint="run one first (`bench demo`, or `bench schedule --matrix NAME`),"
                              " or name the database with --db")
    done = [c for c in rows if c.state in CAMPAIGN_FINISHED]
    pick = (done or rows)[0]
    views.say(f"report of campaign {pick.id} ({pick.state}, created {pick.created}): the "
              + ("newest finished campaign" if done else "newest campaign; none has finished"))
    return pick.id


def _check(store, ids: list[str]) -> None:
    from bench.store.campaigns import campaign_row
    missing = [cid for cid in ids if campaign_row(store, cid) is None]
    if missing:
        raise InputError(f"no campaign {', '.join(missing)} in the database",
                         hint="`bench campaigns --all` lists them")


def _write(out: Path, text: str) -> None:
    """Through a temporary file beside OUT, so a failed write leaves no partial report."""
    from bench.paths import write_replacing
    from bench.plan.planfile import write_error
    try:
        write_replacing(out, lambda f: f.write(text.encode("utf-8")))
    except OSError as exc:
        raise write_error(out, exc) from None


def register(app: typer.Typer) -> None:
    app.command("report")(report)
