"""A headless Chromium driven over the Chrome DevTools Protocol, for tests of HTML pages.

No driver package: Chromium's `--remote-debugging-pipe` speaks the protocol over file
descriptors 3 (commands in) and 4 (replies and events out), as NUL-terminated JSON messages,
so the standard library is enough. `find_chromium()` names the browser or None (the tests
skip then; they never install one).

    with Browser(find_chromium()) as b:
        b.open("file:///tmp/page.html")
        b.evaluate("document.title")
        b.mouse_move(100, 200)
        b.screenshot("page.png")
        assert not b.errors             # console errors and uncaught exceptions
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import signal
import tempfile
import time

BROWSERS = ("chromium", "chromium-browser")  # Debian's package, and its name elsewhere
TIMEOUT = 60.0  # seconds any one reply may take (a large page on a busy machine)


def find_chromium() -> str | None:
    """The Chromium executable on PATH, or None."""
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def _above_4(fd: int) -> int:
    """`fd` moved above 4, so that moving the pipe ends onto descriptors 3 and 4 in the
    child cannot overwrite one with the other (it stays close-on-exec: only the copies on 3
    and 4 reach the browser)."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class BrowserError(RuntimeError):
    """The browser went away, timed out or answered a command with an error."""


class Browser:
    """One headless Chromium with one page. `errors` collects the page's console errors and
    uncaught exceptions, as text, from the moment the page is attached."""

    def __init__(self, executable: str, width: int = 1400, height: int = 1000):
        self.profile = tempfile.mkdtemp(prefix="tw-chromium-")
        cmd_read, self._cmd = os.pipe()  # we write commands; the browser reads fd 3
        self._out, out_write = os.pipe()  # the browser writes fd 4; we read
        cmd_read, out_write = _above_4(cmd_read), _above_4(out_write)
        args = [executable, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--remote-debugging-pipe",
                f"--user-data-dir={self.profile}", f"--window-size={width},{height}",
                "about:blank"]
        self.log = os.path.join(self.profile, "stderr.txt")  # the browser's own messages
        # posix_spawn moves the pipe ends onto the descriptors the protocol uses, in the
        # child, with no Python code run there
        self.pid = os.posix_spawn(executable, args, os.environ, file_actions=[
            (os.POSIX_SPAWN_DUP2, cmd_read, 3), (os.POSIX_SPAWN_DUP2, out_write, 4),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_OPEN, 2, self.log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)])
        os.close(cmd_read)
        os.close(out_write)
        self._buffer = b""
        self._next_id = 0
        self._events: list[dict] = []
        self.errors: list[str] = []
        self.session = None
        try:
            self.session = self._attach(width, height)
        except BaseException:
            self.close()
            raise

    # -- the protocol --------------------------------------------------------------------

    def send(self, method: str, **params) -> dict:
        """Send one command (to the page, once attached) and return its result."""
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params}
        if self.session is not None:
            msg["sessionId"] = self.session
        os.write(self._cmd, json.dumps(msg).encode() + b"\0")
        reply = self._receive(lambda m: m.get("id") == self._next_id)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_event(self, method: str) -> dict:
        """The next event `method` (one that came already is taken first)."""
        for i, m in enumerate(self._events):
            if m.get("method") == method:
                return self._events.pop(i)
        return self._receive(lambda m: m.get("method") == method, keep=False)

    def _receive(self, wanted, keep: bool = True) -> dict:
        deadline = time.monotonic() + TIMEOUT
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                m = json.loads(raw)
                self._note_error(m)
                if wanted(m):
                    return m
                if keep and "method" in m:
                    self._events.append(m)
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._out], [], [], left)[0]:
                raise BrowserError(f"no reply from the browser in {TIMEOUT:.0f} s")
            chunk = os.read(self._out, 1 << 20)
            if not chunk:
                raise BrowserError(f"the browser closed its protocol pipe: {self._log_tail()}")
            self._buffer += chunk

    def _log_tail(self) -> str:
        try:
            with open(self.log, "rb") as f:
                return f.read()[-600:].decode(errors="replace")
        except OSError:
            return "(no log)"

    def _note_error(self, m: dict) -> None:
        """Keep console errors, uncaught exceptions and error log entries as text."""
        method, p = m.get("method"), m.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") == "error":
            self.errors.append(" ".join(str(a.get("value", a.get("description", "")))
                                        for a in p.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            d = p.get("exceptionDetails", {})
            self.errors.append(d.get("exception", {}).get("description") or d.get("text", ""))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            self.errors.append(p["entry"].get("text", ""))

    def _attach(self, width: int, height: int) -> str:
        targets = self.send("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        session = self.send("Target.attachToTarget", targetId=page["targetId"],
                            flatten=True)["sessionId"]
        self.session = session
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)
        return session

    # -- what tests do -------------------------------------------------------------------

    def open(self, url: str) -> None:
        """Navigate to `url` and wait until the page has loaded (its scripts have run)."""
        self._events = [e for e in self._events if e.get("method") != "Page.loadEventFired"]
        self.send("Page.navigate", url=url)
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (JSON-serialisable)."""
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression[:60]}: "
                               f"{result['exceptionDetails'].get('text', 'exception')}")
        return result["result"].get("value")

    def mouse_move(self, x: float, y: float) -> None:
        """A real mouse move to viewport coordinates (x, y): the page sees mousemove."""
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)

    def screenshot(self, path: str, full_page: bool = True) -> None:
        """A PNG of the page (its whole height with `full_page`)."""
        params = {"format": "png"}
        if full_page:
            w, h = self.evaluate("[document.documentElement.scrollWidth, "
                                 "document.documentElement.scrollHeight]")
            params.update(captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": w, "height": h, "scale": 1})
        data = self.send("Page.captureScreenshot", **params)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.session = None
            self.send("Browser.close")
        except (BrowserError, OSError):
            pass
        self._reap()
        for fd in (self._cmd, self._out):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def _reap(self, wait: float = 10.0) -> None:
        """Wait for the browser to exit (killed after `wait` seconds)."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                return
            time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
