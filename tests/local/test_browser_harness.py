"""The headless-browser harness (tests/support/browser.py) catches what it is there to catch:
a console error, an uncaught exception, a request leaving the file, a link to a missing
anchor, a page that never loads; and lets a clean page through with a full-page screenshot.
Each page here is written for the test and rendered by Debian's real Chromium."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import browser

pytestmark = pytest.mark.skipif(browser.missing() is not None, reason=browser.MISSING)

# a 1x1 PNG, used both as a data: URI and as a file beside the page
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c63f8cfc0f01f0005000201a5d2c5b0000000"
    "0049454e44ae426082")


def _page(tmp_path: Path, body: str, name: str = "page.html") -> Path:
    p = tmp_path / name
    p.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>t</title></head>"
                 f"<body style='margin:0'>{body}</body></html>")
    return p


def _live_members(pgid: int) -> list[int]:
    """Processes of process group pgid that are still running (zombies left aside)."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()      # after "pid (comm) "
        if int(fields[2]) == pgid and fields[0] != "Z":
            found.append(int(d.name))
    return found


def test_a_clean_tall_page_passes_with_a_full_page_screenshot(tmp_path):
    (tmp_path / "pixel.png").write_bytes(PIXEL)
    import base64
    data = "data:image/png;base64," + base64.b64encode(PIXEL).decode()
    # 3000 CSS px tall, the last 100 px red: the screenshot must reach below the 800 px
    # viewport and carry what was drawn there
    page = _page(tmp_path, f"<img src='pixel.png' style='display:block'>"
                           f"<img src='{data}' style='display:block'>"
                           "<div style='height:2898px;background:#fff'></div>"
                           "<div style='height:100px;background:#f00'></div>")
    shot = tmp_path / "shot.png"
    r = browser.render(page, shot, width=1024)
    assert (r.console, r.exceptions, r.leaving) == ([], [], [])
    assert r.requests[0] == page.resolve().as_uri()
    assert (tmp_path / "pixel.png").as_uri() in r.requests     # file: requests are recorded
    assert r.size == browser.png_size(shot) == (1024, 3000)
    assert r.size[1] > browser.VIEWPORT_HEIGHT
    from matplotlib.image import imread
    px = imread(shot)
    assert tuple(px[-1, 500, :3]) == (1.0, 0.0, 0.0)            # the red block, at the bottom
    assert tuple(px[1000, 500, :3]) == (1.0, 1.0, 1.0)
    # the browser and its helpers are gone, and so is its profile
    assert _live_members(r.pid) == []
    assert r.profile is not None and not r.profile.exists()


def test_a_console_error_and_a_warning_are_caught(tmp_path):
    page = _page(tmp_path, "<script>console.error('boom ' + (6 * 7));"
                           "console.warn('careful'); console.log('fine')</script>")
    r = browser.render(page, tmp_path / "shot.png")
    assert r.console == ["error: boom 42", "warning: careful"]
    assert r.exceptions == [] and r.leaving == []


def test_an_uncaught_exception_is_caught(tmp_path):
    page = _page(tmp_path, "<script>null.x</script>")
    r = browser.render(page, tmp_path / "shot.png")
    assert len(r.exceptions) == 1 and "TypeError" in r.exceptions[0]


def test_a_request_leaving_the_file_is_caught(tmp_path):
    # a loopback port nothing listens on, and a name that would need DNS and the network:
    # both are recorded as asked for, and neither reaches anything
    page = _page(tmp_path, "<img src='http://127.0.0.1:9/x.png'>"
                           "<link rel='stylesheet' href='https://cdn.invalid/style.css'>")
    r = browser.render(page, tmp_path / "shot.png")
    assert sorted(r.leaving) == ["http://127.0.0.1:9/x.png", "https://cdn.invalid/style.css"]
    # the failed loads are console errors too (what a reader's browser shows)
    assert any("127.0.0.1:9/x.png" in c for c in r.console)


def test_a_link_to_a_missing_anchor_is_found(tmp_path):
    page = _page(tmp_path, "<a href='#run-a'>a</a> <a href='#run-b'>b</a> <a href='#run-a'>a</a>"
                           "<a href='#'>top</a><section id='run-a'>A</section>")
    r = browser.render(page, tmp_path / "shot.png",
                       evaluate={"dangling": browser.DANGLING_ANCHORS,
                                 "links": "document.links.length"})
    assert r.checks == {"dangling": ["#run-b"], "links": 4}


def test_a_page_that_never_loads_times_out_and_its_browser_is_killed(tmp_path):
    page = _page(tmp_path, "<script>for (;;) {}</script>")
    with pytest.raises(browser.BrowserError, match="timeout") as caught:
        browser.render(page, tmp_path / "shot.png", timeout=4)
    assert caught.value.pid and _live_members(caught.value.pid) == []
    assert not (tmp_path / "shot.png").exists()


def test_an_element_wider_than_the_window_is_named(tmp_path):
    long = "<td>" + "y" * 300 + "</td>"
    page = _page(tmp_path, "<div id='ok'>short</div><section id='provenance'><div><pre "
                           "id='cmd' class='command x'>" + "x" * 400 + "</pre></div></section>"
                           f"<h2 id='groups'>groups</h2><table><tr>{long}{long}</tr></table>")
    r = browser.render(page, tmp_path / "shot.png", width=800,
                       evaluate={"overflowing": browser.OVERFLOWING})
    # the pre inside the section, and the table (once, not each of its cells) after a heading
    pre, table = r.checks["overflowing"]
    assert pre.startswith("pre#cmd.command after #provenance: ") and int(pre.split()[-2]) > 800
    assert table.startswith("table after #groups: ")
    assert r.size[0] > 800                       # the screenshot shows the overflow too


def test_a_check_that_throws_says_why(tmp_path):
    page = _page(tmp_path, "<p>x</p>")
    with pytest.raises(browser.BrowserError, match="check broken: TypeError") as caught:
        browser.render(page, tmp_path / "shot.png", evaluate={"broken": "null.id"})
    assert caught.value.page_error and _live_members(caught.value.pid) == []


def test_with_javascript_off_the_pages_scripts_do_not_run_and_checks_still_do(tmp_path):
    page = _page(tmp_path, "<div id='x'>static</div><script>console.error('ran');"
                           "document.getElementById('x').textContent = 'scripted'</script>")
    check = {"text": "document.getElementById('x').textContent"}
    on = browser.render(page, tmp_path / "on.png", evaluate=check)
    off = browser.render(page, tmp_path / "off.png", evaluate=check, javascript=False)
    assert (on.checks["text"], on.console) == ("scripted", ["error: ran"])
    assert (off.checks["text"], off.console) == ("static", [])


def test_print_media_applies_the_print_style_sheet(tmp_path):
    page = _page(tmp_path, "<style>@media print { #nav { display: none } }</style>"
                           "<nav id='nav'>menu</nav><p>text</p>")
    shown = {"nav": "getComputedStyle(document.getElementById('nav')).display"}
    screen = browser.render(page, tmp_path / "screen.png", evaluate=shown)
    printed = browser.render(page, tmp_path / "print.png", evaluate=shown, media="print")
    assert (screen.checks["nav"], printed.checks["nav"]) == ("block", "none")
