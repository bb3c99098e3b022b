"""A report page in a real browser: headless Chromium driven over the Chrome DevTools Protocol.

Why a browser: the report's HTML is generated, and only a browser says whether it loads cleanly and
whether its inline SVG plots are actually laid out at a visible size. The tests check every tiny study's
`report.html` with it, and the README's screenshots are taken with it (docs/screenshots.py).

Debian's `chromium` (`make chromium`; `BERTOLOGY_CHROMIUM` names another Chrome) is started once with
flags that need no network, no sandbox and no GPU; each page opens in a fresh tab, so nothing one page
logs is blamed on the next. The protocol is plain JSON over one WebSocket (`websocket-client`, a dev
dependency), so no browser download and no driver binary are needed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

# No network, no first-run UI, no background fetches; --no-sandbox: CI runs as root in a container.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio")

# In the page, once loaded: its state and the laid-out size of every <svg>. Closed <details> are opened
# first, since an SVG inside one is hidden by the reader's choice, not by a broken page. An SVG is named by
# its id or the heading it follows, for the failure message.
MEASURE = """(() => {
  document.querySelectorAll('details').forEach(d => { d.open = true; });
  return {
    readyState: document.readyState,
    svgs: [...document.querySelectorAll('svg')].map((s, i) => {
      const r = s.getBoundingClientRect();
      const heading = [...document.querySelectorAll('h1, h2, h3, h4')]
        .filter(h => h.compareDocumentPosition(s) & Node.DOCUMENT_POSITION_FOLLOWING).pop();
      return {index: i, width: r.width, height: r.height,
              label: s.id || (heading ? 'under "' + heading.textContent.trim() + '"' : '')};
    }),
  };
})()"""


class BrowserMissing(FileNotFoundError):
    """No Chromium to run: `make chromium` installs Debian's."""


class BrowserError(RuntimeError):
    """Chromium did not start, or did not answer in time."""


def find_chromium() -> str:
    """`BERTOLOGY_CHROMIUM` if set, else `chromium` on PATH."""
    named = os.environ.get("BERTOLOGY_CHROMIUM")
    if named:
        found = named if os.access(named, os.X_OK) else None
    else:
        found = shutil.which("chromium")
    if not found:
        raise BrowserMissing(f"no Chromium at {named!r} (BERTOLOGY_CHROMIUM)" if named else
                             "no `chromium` on PATH; `make chromium` installs Debian's")
    return found


@dataclass
class Page:
    """What one page load showed: its problems are console errors, uncaught exceptions, failed loads, a
    document that did not complete, and SVGs laid out with no width or height."""

    url: str
    ready_state: str
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # what the page fetched besides itself (not data:)
    svgs: list[dict] = field(default_factory=list)  # index, width, height, label

    @property
    def empty_svgs(self) -> list[dict]:
        return [s for s in self.svgs if not (s["width"] > 0 and s["height"] > 0)]

    @property
    def problems(self) -> list[str]:
        state = [] if self.ready_state == "complete" else [f"document.readyState is {self.ready_state!r}"]
        return [*state, *self.errors, *(f"<svg> #{s['index']} {s['label']!r} is {s['width']}x{s['height']}"
                                        for s in self.empty_svgs)]


class Chromium:
    """One headless Chromium process; `open` loads a page in a fresh tab and reports on it."""

    def __init__(self, executable: str | None = None, *, width: int = 1280, height: int = 900,
                 timeout: float = 60.0):
        import websocket  # websocket-client: a dev dependency, needed only here

        executable = executable or find_chromium()
        self.width, self.height, self.timeout = width, height, timeout
        self._profile = Path(tempfile.mkdtemp(prefix="bertology-chromium-"))
        self._log = (self._profile.parent / f"{self._profile.name}.log").open("w+b")
        self._proc = subprocess.Popen(
            [executable, *FLAGS, f"--user-data-dir={self._profile}",
             "--remote-debugging-port=0", f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, start_new_session=True)
        self._id = 0
        self._events: list[dict] = []
        try:
            # With port 0 Chromium picks a free one and writes it (and the browser's path) to this file.
            active = self._profile / "DevToolsActivePort"
            deadline = time.monotonic() + timeout
            while not (active.exists() and len(active.read_text().split()) == 2):
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise BrowserError(f"Chromium did not start (exit {self._proc.poll()}): {self._log_tail()}")
                time.sleep(0.05)
            port, path = active.read_text().split()
            self._ws = websocket.create_connection(f"ws://127.0.0.1:{port}{path}", timeout=timeout,
                                                   suppress_origin=True)
        except BaseException:
            self.close()
            raise

    def _log_tail(self) -> str:
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-2000:]

    def _send(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        """One command; the events that arrive before its answer are kept for `open` to read."""
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        self._ws.send(json.dumps(message))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            reply = json.loads(self._ws.recv())
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise BrowserError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)
        raise BrowserError(f"{method}: no answer in {self.timeout} s")

    def _wait_for(self, event: str, session: str) -> None:
        deadline = time.monotonic() + self.timeout
        while not any(e.get("method") == event and e.get("sessionId") == session for e in self._events):
            if time.monotonic() > deadline:
                raise BrowserError(f"no {event} in {self.timeout} s")
            self._events.append(json.loads(self._ws.recv()))

    def open(self, page: str | Path, screenshot: str | Path | None = None) -> Page:
        """Load `page` (a path or URL) in a fresh tab, wait for its load event, measure it; with
        `screenshot`, also save a full-page PNG there (the whole document, not just the viewport)."""
        url = page if isinstance(page, str) and "://" in page else Path(page).resolve().as_uri()
        target = self._send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self._send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        try:
            for domain in ("Page", "Runtime", "Log", "Network"):
                self._send(f"{domain}.enable", session=session)
            self._send("Emulation.setDeviceMetricsOverride", {"width": self.width, "height": self.height,
                                                              "deviceScaleFactor": 1, "mobile": False}, session)
            self._events = [e for e in self._events if e.get("sessionId") != session]
            navigated = self._send("Page.navigate", {"url": url}, session)
            if navigated.get("errorText"):
                raise BrowserError(f"{url}: {navigated['errorText']}")
            self._wait_for("Page.loadEventFired", session)
            measured = self._send("Runtime.evaluate", {"expression": MEASURE, "returnByValue": True},
                                  session)["result"]["value"]
            if screenshot is not None:
                self._screenshot(session, Path(screenshot))
            events = [e for e in self._events if e.get("sessionId") == session]
            result = Page(url, measured["readyState"], svgs=measured["svgs"], **_problems(events, url))
        finally:
            self._events = [e for e in self._events if e.get("sessionId") != session]
            self._send("Target.closeTarget", {"targetId": target})
        return result

    def _screenshot(self, session: str, out: Path) -> None:
        size = self._send("Page.getLayoutMetrics", session=session)["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": max(size["width"], self.width), "height": size["height"], "scale": 1}
        shot = self._send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True,
                                                     "clip": clip}, session)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        if getattr(self, "_ws", None) is not None:
            with contextlib.suppress(Exception):  # it may close the socket before answering; killed below anyway
                self._send("Browser.close")
            self._ws.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # its own process group: the renderers and GPU process go too
            os.killpg(self._proc.pid, signal.SIGKILL)
            self._proc.wait()
        self._log.close()
        Path(self._log.name).unlink(missing_ok=True)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _problems(events: list[dict], url: str) -> dict:
    """Console errors, uncaught exceptions, error log entries and failed loads, in the order they came;
    and every URL the page requested besides itself and data: URLs."""
    errors, requests, urls = [], [], {}
    for event in events:
        method, p = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and p["type"] in ("error", "assert"):
            errors.append(f"console.{p['type']}: " + " ".join(
                str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            d = p["exceptionDetails"]
            errors.append(f"uncaught: {d.get('exception', {}).get('description') or d.get('text')}")
        elif method == "Log.entryAdded" and p["entry"]["level"] == "error":
            errors.append(f"log: {p['entry']['text']} {p['entry'].get('url', '')}".rstrip())
        elif method == "Network.requestWillBeSent":
            urls[p["requestId"]] = p["request"]["url"]
            if p["request"]["url"] != url and not p["request"]["url"].startswith("data:"):
                requests.append(p["request"]["url"])
        elif method == "Network.loadingFailed" and not p.get("canceled"):
            errors.append(f"failed to load {urls.get(p['requestId'], '?')}: {p['errorText']}")
        elif method == "Network.responseReceived" and p["response"].get("status", 0) >= 400:
            errors.append(f"HTTP {p['response']['status']} for {p['response']['url']}")
    return {"errors": errors, "requests": requests}
