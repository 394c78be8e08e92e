"""Render an HTML file in Debian's headless Chromium and report what a reader's browser would
complain about: console warnings and errors, uncaught script exceptions, and every URL the
page asked for (anything not file:, data:, about: or blob: is a request leaving the file);
write a full-page PNG screenshot.

Chromium is driven over its DevTools protocol on a pipe (--remote-debugging-pipe: fd 3 in,
fd 4 out, one JSON message per NUL-terminated chunk), so the harness needs the standard
library and the chromium package only: no chromedriver, no Selenium (whose manager may try to
download a driver), no websocket client. The browser runs headless, without its sandbox (the
tests run as root), with a fresh profile removed afterwards, in its own process group that
is killed when it does not close by itself; every HTTP(S) connection it tries goes to a
proxy address nothing listens on, so a page that reaches out fails fast and is recorded, and
nothing leaves the machine (loopback addresses bypass any proxy in Chromium: such a request
may reach a local server, and is recorded all the same)."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# the binary itself, not /usr/bin/chromium: that launcher adds desktop flags from
# /etc/chromium.d and its /dev/shm probe errs on a host with two /dev/shm mounts (this one)
CHROMIUM = Path("/usr/lib/chromium/chromium")
MISSING = "needs Debian's chromium (apt-get install chromium)"
LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:")
VIEWPORT_HEIGHT = 800
TIMEOUT_S = 60.0
# a JavaScript expression for `evaluate`: the in-page links (href="#x") whose target id is
# missing from the document, each once, in document order
DANGLING_ANCHORS = """
[...new Set([...document.querySelectorAll('a[href^="#"]')].map(a => a.getAttribute('href')))]
  .filter(h => h.length > 1 && !document.getElementById(decodeURIComponent(h.slice(1))))
"""
# a JavaScript expression for `evaluate`: when the page scrolls sideways, what reaches past
# the window's right edge: the innermost elements whose box or overflowing content does, each
# as its table, pre, figure or image where it sits in one, named "tag#id.class after #id: right
# edge px" (the nearest element before it with an id, a section's heading), at most 5; [] when
# the page fits its window
OVERFLOWING = """
(() => {
  const w = document.documentElement.clientWidth;
  if (document.documentElement.scrollWidth <= w) return [];
  const right = el => {
    const r = el.getBoundingClientRect();
    const spill = getComputedStyle(el).overflowX === 'visible' ? r.left + el.scrollWidth : 0;
    return Math.max(r.right, spill);
  };
  const after = el => {
    let n = el.previousElementSibling || el.parentElement;
    while (n && !n.id) n = n.previousElementSibling || n.parentElement;
    return n ? ' after #' + n.id : '';
  };
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
    + (typeof el.className === 'string' && el.className ? '.' + el.className.split(' ')[0] : '');
  const wide = [...document.body.querySelectorAll('*')].filter(el => right(el) > w + 1);
  const inner = wide.filter(el => !wide.some(o => o !== el && el.contains(o)))
    .map(el => el.closest('table, pre, figure, svg, img') || el);
  return [...new Set(inner)].slice(0, 5)
    .map(el => name(el) + after(el) + ': ' + Math.round(right(el)) + ' px');
})()
"""
SETTLE_S = 0.3          # after the load event: late console messages and requests land


class BrowserError(RuntimeError):
    """Chromium did not start, answered a command with an error, or ran past the timeout.
    pid: the browser's, whose process group render() killed (0 before it started)."""
    pid = 0
    page_error = False      # the page's own script failed (chromium's log would not say why)


@dataclass
class Rendered:
    console: list[str] = field(default_factory=list)       # "error: text" / "warning: text"
    requests: list[str] = field(default_factory=list)      # every URL the page asked for
    exceptions: list[str] = field(default_factory=list)    # uncaught JS exceptions
    screenshot: Path | None = None
    size: tuple[int, int] = (0, 0)                         # the screenshot's pixels (w, h)
    checks: dict = field(default_factory=dict)             # name -> value of `evaluate`
    seconds: float = 0.0                                   # launch to screenshot written
    pid: int = 0                                           # the browser's (and its group's)
    profile: Path | None = None                            # its --user-data-dir, removed

    @property
    def leaving(self) -> list[str]:
        """The requests that leave the file (not file:, data:, about:, blob:)."""
        return [u for u in self.requests if not u.startswith(LOCAL_SCHEMES)]


def missing() -> str | None:
    """Why the browser cannot run here (the skip reason), or None."""
    return None if os.access(CHROMIUM, os.X_OK) else MISSING


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR; BrowserError when the file is not a PNG."""
    head = path.read_bytes()[:24]
    if len(head) < 24 or head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise BrowserError(f"{path} is not a PNG")
    w, h = struct.unpack(">II", head[16:24])
    return w, h


def _closed_port() -> socket.socket:
    """A loopback socket bound and never listening: connections to its port are refused, and
    no other process can take the port while we hold it."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s


class _Pipe:
    """The DevTools protocol over Chromium's pipe: send commands, collect events."""

    def __init__(self, to_browser: int, from_browser: int, deadline: float):
        self.wfd, self.rfd, self.deadline = to_browser, from_browser, deadline
        self.buf = b""
        self.next_id = 0
        self.events: list[dict] = []

    def _read_message(self) -> dict:
        while b"\0" not in self.buf:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise BrowserError("chromium did not answer within the timeout")
            ready, _, _ = select.select([self.rfd], [], [], left)
            if ready:
                chunk = os.read(self.rfd, 1 << 20)
                if not chunk:
                    raise BrowserError("chromium closed its DevTools pipe")
                self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self.next_id += 1
        msg: dict = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            data = data[os.write(self.wfd, data):]
        while True:
            reply = self._read_message()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error'].get('message')}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_event(self, method: str) -> dict:
        for i, ev in enumerate(self.events):
            if ev["method"] == method:
                return self.events.pop(i)
        while True:
            ev = self._read_message()
            if ev.get("method") == method:
                return ev
            if "method" in ev:
                self.events.append(ev)

    def drain(self, seconds: float) -> None:
        """Collect the events that arrive within `seconds`."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            ready, _, _ = select.select([self.rfd], [], [], until - time.monotonic())
            if not ready:
                break
            chunk = os.read(self.rfd, 1 << 20)
            if not chunk:
                break
            self.buf += chunk
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                ev = json.loads(raw)
                if "method" in ev:
                    self.events.append(ev)


def _args_text(args: list[dict]) -> str:
    return " ".join(str(a.get("value", a.get("description", a.get("type", "")))) for a in args)


def _collect(events: list[dict], out: Rendered) -> None:
    for ev in events:
        m, p = ev["method"], ev.get("params", {})
        if m == "Network.requestWillBeSent":
            out.requests.append(p["request"]["url"])
        elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "warning", "assert"):
            out.console.append(f"{p['type']}: {_args_text(p.get('args', []))}")
        elif m == "Log.entryAdded" and p["entry"].get("level") in ("error", "warning"):
            e = p["entry"]
            out.console.append(f"{e['level']}: {e.get('text', '')} {e.get('url', '')}".rstrip())
        elif m == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            exc = d.get("exception", {})
            out.exceptions.append(exc.get("description") or d.get("text", "exception"))


def render(html: Path, screenshot: Path, width: int = 1280, *,
           evaluate: dict[str, str] | None = None, javascript: bool = True,
           media: str = "screen", timeout: float = TIMEOUT_S) -> Rendered:
    """Open `html` in headless Chromium at `width` CSS pixels, wait for its load event, run
    each of `evaluate`'s JavaScript expressions (name -> expression, its JSON value kept in
    Rendered.checks), and write a full-page PNG to `screenshot`. javascript=False: the page's
    own scripts never run (what a reader with JavaScript off sees; `evaluate` still runs);
    media="print": the page's print style sheet applies (what a printout shows).
    BrowserError when the browser cannot start, errs or outlives `timeout` seconds."""
    if missing():
        raise BrowserError(MISSING)
    started = time.monotonic()
    deadline = started + timeout
    profile = Path(tempfile.mkdtemp(prefix="bench-chromium-"))
    proxy = _closed_port()
    # our ends, and the browser's ends it finds on fds 3 (commands in) and 4 (replies out)
    cmd_r, cmd_w = os.pipe()
    rep_r, rep_w = os.pipe()

    def onto_3_and_4() -> None:
        # via fds >= 10 first, so that placing one end on 3 or 4 cannot close the other
        a = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10)
        b = fcntl.fcntl(rep_w, fcntl.F_DUPFD, 10)
        os.dup2(a, 3)
        os.dup2(b, 4)

    argv = [str(CHROMIUM), "--headless", "--no-sandbox", "--remote-debugging-pipe",
            f"--user-data-dir={profile}", f"--window-size={width},{VIEWPORT_HEIGHT}",
            "--disable-gpu", "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--disable-default-apps", "--force-device-scale-factor=1",
            f"--proxy-server=http://127.0.0.1:{proxy.getsockname()[1]}", "about:blank"]
    log = tempfile.TemporaryFile()             # chromium's stderr, quoted when it fails
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=log, close_fds=False, preexec_fn=onto_3_and_4,
                            start_new_session=True)
    for fd in (cmd_r, rep_w):
        os.close(fd)
    out = Rendered(pid=proc.pid, profile=profile)
    cdp = _Pipe(cmd_w, rep_r, deadline)
    try:
        targets = cdp.send("Target.getTargets")["targetInfos"]
        page = next((t for t in targets if t["type"] == "page"), None)
        target = page["targetId"] if page else cdp.send(
            "Target.createTarget", {"url": "about:blank"})["targetId"]
        sid = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"]
        for domain in ("Page", "Network", "Runtime", "Log"):
            cdp.send(f"{domain}.enable", session=sid)
        cdp.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": VIEWPORT_HEIGHT,
                 "deviceScaleFactor": 1, "mobile": False}, session=sid)
        cdp.send("Emulation.setEmulatedMedia", {"media": media}, session=sid)
        if not javascript:
            cdp.send("Emulation.setScriptExecutionDisabled", {"value": True}, session=sid)
        nav = cdp.send("Page.navigate", {"url": html.resolve().as_uri()}, session=sid)
        if nav.get("errorText"):
            failed = BrowserError(f"chromium could not open {html}: {nav['errorText']}")
            failed.page_error = True
            raise failed
        cdp.wait_event("Page.loadEventFired")
        cdp.drain(SETTLE_S)
        for name, expr in (evaluate or {}).items():
            r = cdp.send("Runtime.evaluate", {"expression": expr, "returnByValue": True,
                                              "awaitPromise": True}, session=sid)
            if "exceptionDetails" in r:
                d = r["exceptionDetails"]
                why = d.get("exception", {}).get("description") or d.get("text")
                failed = BrowserError(f"check {name}: {why}")
                failed.page_error = True
                raise failed
            out.checks[name] = r["result"].get("value")
        size = cdp.send("Page.getLayoutMetrics", session=sid)
        css = size.get("cssContentSize") or size["contentSize"]
        shot = cdp.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": max(width, css["width"]),
                     "height": css["height"], "scale": 1}}, session=sid)
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        out.screenshot, out.size = screenshot, png_size(screenshot)
        cdp.drain(0)
        _collect(cdp.events, out)
        try:
            cdp.deadline = time.monotonic() + 5
            cdp.send("Browser.close")
        except BrowserError:
            pass                                    # the pipe closes as the browser exits
        out.seconds = time.monotonic() - started
        return out
    except BrowserError as e:
        _stop(proc, grace=0)
        log.seek(0)
        # its last lines, less the D-Bus complaints it makes wherever no session bus runs
        tail = [line for line in log.read().decode(errors="replace").strip().splitlines()
                if "dbus" not in line][-5:]
        err = BrowserError(str(e) if e.page_error else
                           f"{e}; chromium said: {' | '.join(tail) or 'nothing'}")
        err.pid, err.page_error = proc.pid, e.page_error
        raise err from None
    finally:
        log.close()
        _stop(proc)
        for fd in (cmd_w, rep_r):
            os.close(fd)
        proxy.close()
        shutil.rmtree(profile, ignore_errors=True)


def _stop(proc: subprocess.Popen, grace: float = 5) -> None:
    """Wait up to `grace` seconds for the browser we started to exit, then kill its process
    group (the browser and the helpers it forked, nothing else: start_new_session made the
    group)."""
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)     # helpers that outlived the browser, if any
    except ProcessLookupError:
        pass
    proc.wait()
