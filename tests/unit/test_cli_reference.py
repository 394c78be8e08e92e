"""docs/cli.md is the real `--help` of every command (bench.cli.reference): regenerated in
memory and compared, section by section, so a failure names the commands whose help moved."""

from __future__ import annotations

from pathlib import Path

import typer

from bench.cli import reference

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_docs_cli_md_is_the_commands_help():
    parts = reference.sections()
    current = DOC.read_text()
    stale = reference.differing(current, parts)
    assert stale == [], (f"docs/cli.md differs from --help in: {', '.join(stale)}; regenerate "
                         "it: .venv/bin/python -m bench.cli.reference")
    assert current == reference.render(parts)       # the header and order too


def test_every_visible_command_has_a_section():
    from bench.cli.app import COMMANDS
    paths = [p for p, _ in reference.sections()]
    assert paths[0] == "bench"
    hidden = {"rules"}      # placement's deprecated old name (bench.cli.placement)
    assert {p.split()[1] for p in paths[1:]} == (set(COMMANDS) - hidden) | {"version"}
    assert {"bench trace synth", "bench hosts reboot", "bench campaigns rm"} <= set(paths)
    assert all(len(line) <= reference.WIDTH for line in DOC.read_text().splitlines())


def test_a_changed_or_gone_command_is_named():
    parts = reference.sections()
    text = reference.render(parts)
    edited = text.replace("Comma list of lru, lfu", "Comma list of lru", 1)
    assert reference.differing(edited, parts) == ["bench sim"]
    extra = text + "\n## bench gone\n\n```text\nUsage: bench gone\n```\n"
    assert reference.differing(extra, parts) == ["bench gone"]
    assert reference.differing(text, parts) == []


def test_hidden_commands_are_left_out():
    app = typer.Typer(rich_markup_mode=None)

    @app.command()
    def shown() -> None:
        """Shown."""

    @app.command(hidden=True)
    def old() -> None:
        """An alias kept for one release."""

    root = typer.main.get_command(app)
    ctx = root.context_class(root, info_name="demo", terminal_width=reference.WIDTH)
    assert [p for p, _ in reference.walk(ctx)] == ["demo", "demo shown"]


def test_check_mode_exits_1_naming_the_command(tmp_path, capsys):
    out = tmp_path / "cli.md"
    assert reference.main(["--out", str(out)]) == 0
    assert reference.main(["--check", "--out", str(out)]) == 0
    out.write_text(out.read_text().replace("## bench hosts reboot\n", "## bench hosts reboot\n\nX"))
    assert reference.main(["--check", "--out", str(out)]) == 1
    assert "bench hosts reboot" in capsys.readouterr().err
