"""Hostile names and messages that came in with bundles (host, campaign, a kernel log line that
becomes a verdict's reason) stored in a real database, then every reading command through the
CLI: no crash, the text shows literally, nothing a terminal would act on gets out. Before
bench.results.views made them literal, a campaign named `[/]x` made `bench campaigns`, `bench
runs` and `bench watch` fail with a MarkupError until the database was edited."""

from __future__ import annotations

import json

import pytest

from bench.cli import main
from bench.results import views
from bench.results.views import visible
from bench.store.ingest import ingest_bundle
from tests.support import hostile

NAMES = ["[/]x", "[link=file:///etc/passwd]x[/link]", "h\x1b]0;pwned\x07[bold]y", "a\\",
         ":smile:\u202e\x9b1m"]


@pytest.fixture
def hostile_db(store, db_url, bundles):
    """Bundles may not carry such names (the bundle contract refuses them) but a database may
    (written by an older bench, or by hand): the runs are ingested under plain names, with
    hostile text where bundles may hold it (a kernel log line, the runner's reason), then
    their host and campaign renamed in the store."""
    from sqlalchemy import update

    from bench.store import campaigns
    from bench.store.models import Host, Run
    for i, s in enumerate(NAMES):
        def edit(p, s=s):
            p["kmsg.txt"] = f"Buffer I/O error on dev vda {s}\n"
            p["status.json"]["reason"] = s
        campaigns.create_campaign(store, s)
        ingest_bundle(store, bundles(f"r{i}", "64m-cgroup-mglru", campaign=None,
                                     host=f"plain-{i}", position=i,
                                     edit=edit if i % 2 else None))
        with store.session() as ses, ses.begin():
            ses.execute(update(Run).where(Run.run_id == f"r{i}").values(campaign_id=s))
            ses.execute(update(Host).where(Host.name == f"plain-{i}").values(name=s))
    return db_url


@pytest.fixture(autouse=True)
def wide_consoles(monkeypatch):
    """Wide enough that no table folds a name (then it must show in one piece)."""
    for con in (views.console, views.err_console):
        monkeypatch.setattr(con, "width", 1000)


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out + out.err


def _check(text: str, names=NAMES) -> None:
    assert not hostile.UNSAFE & set(text), repr(text[:3000])
    for s in names:
        assert visible(s) in text, (s, text[:3000])


@pytest.mark.parametrize("argv", [
    ["campaigns"], ["runs"], ["runs", "--rejected"],
    ["results", "--cell", "64m-cgroup-mglru", "-v"],
    ["results", "--matrix", "reclaim"],
])
def test_reading_commands_show_stored_hostile_text_literally(hostile_db, capsys, argv):
    rc, text = _run(capsys, *argv, "--db", hostile_db)
    assert rc == 0, text
    if argv[0] in ("campaigns", "runs") and "--rejected" not in argv:
        _check(text)
    elif argv[0] == "results" and "-v" in argv:
        _check(text, NAMES[1::2])           # the kernel log lines, in the verdicts' reasons
    else:
        _check(text, [])
    json_rc, json_text = _run(capsys, *argv, "--db", hostile_db, "--json")
    assert json_rc == 0 and json.loads(json_text) is not None


def test_watch_once_shows_the_newest_campaigns_hostile_name(hostile_db, capsys):
    rc, text = _run(capsys, "watch", "--once", "--db", hostile_db)
    assert rc == 0, text
    _check(text, NAMES[-1:])


@pytest.mark.parametrize("name", NAMES)
def test_a_hostile_name_is_no_id_on_the_command_line(hostile_db, capsys, name):
    """Such a name is in the database, but not a campaign id or host name a user can give:
    refused in one line that shows it escaped, before the database is read."""
    for argv in (["watch", name, "--once"], ["results", "--cell", "64m-cgroup-mglru",
                                             "--campaign", name],
                 ["results", "--cell", "64m-cgroup-mglru", "--host", name]):
        rc, text = _run(capsys, *argv, "--db", hostile_db)
        assert rc == 2 and "is not a" in text, text
        _check(text, [repr(name)])


def test_errors_quoting_hostile_text_are_literal(hostile_db, capsys):
    """The error printer: a refused ingest names the bundle path, a missing campaign its id."""
    rc, text = _run(capsys, "watch", "nope[/]\x1b[2J", "--once", "--db", hostile_db)
    assert rc != 0
    _check(text, [])
    assert "error:" in text


@pytest.mark.parametrize("fmt", ["html", "md"])
def test_report_shows_stored_hostile_text_literally(hostile_db, capsys, tmp_path, fmt):
    """`bench report` of the newest campaign (hostile name, hostile host, a hostile kernel log
    line in a verdict's reason): every value as text, nothing a terminal or browser acts on."""
    from html import unescape
    from html.parser import HTMLParser
    out = tmp_path / f"r.{fmt}"
    rc, text = _run(capsys, "report", "--db", hostile_db, "-o", out)
    assert rc == 0, text
    page = out.read_text()
    assert not hostile.UNSAFE & set(page), repr(page[:3000])
    name = visible(NAMES[-1], lines=False)          # the newest campaign's name and host
    shown = unescape(page)
    if fmt == "md":                                 # Markdown backslashes its punctuation
        assert name.replace("\\", "") in shown.replace("\\", "")
    else:
        assert name in shown
    if fmt == "html":
        tags: list[tuple[str, dict]] = []
        p = HTMLParser()
        p.handle_starttag = lambda tag, attrs: tags.append((tag, dict(attrs)))  # type: ignore  # a parser without a subclass
        p.feed(page)
        assert "script" not in {t for t, _ in tags}
        assert all(a["href"].startswith("#") for _, a in tags if a.get("href"))
