"""Headless Chromium driven through the DevTools protocol on a pipe (``--remote-debugging-pipe``: fd 3 in,
fd 4 out, one JSON message per NUL), so a test can set an exact viewport, run a measuring script in the page
and take a screenshot without chromedriver or a websocket library.

``--window-size`` is not enough: headless Chromium lays a page out at least 500 px wide, while a phone is
390 px; ``Emulation.setDeviceMetricsOverride`` sets the viewport a phone would have.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--remote-debugging-pipe")


class DevToolsError(RuntimeError):
    """Chromium answered a command with an error, closed the pipe, or did not answer in time."""


class Chromium:
    """One browser process and one page; use as a context manager."""

    def __init__(self, executable: str, profile: Path, timeout_s: float = 60.0) -> None:
        self.timeout_s = timeout_s
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def onto_fds_3_and_4() -> None:  # in the child, before exec: move both ends clear, then onto 3 and 4
            readable = fcntl.fcntl(to_browser_r, fcntl.F_DUPFD, 10)
            writable = fcntl.fcntl(from_browser_w, fcntl.F_DUPFD, 10)
            os.dup2(readable, 3)
            os.dup2(writable, 4)

        self.process = subprocess.Popen([executable, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                        close_fds=False, preexec_fn=onto_fds_3_and_4,
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer, self._next_id, self.events = b"", 0, list[dict[str, Any]]()
        target = self.command("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.command("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.page(f"{domain}.enable")

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.command("Browser.close")
        except (DevToolsError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)

    def command(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> Any:
        """Send one command and return its result; events that arrive meanwhile are kept in ``events``."""
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._receive()
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise DevToolsError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def page(self, method: str, params: dict[str, Any] | None = None) -> Any:
        return self.command(method, params, self._session)

    def open(self, url: str, width: int, height: int, *, mobile: bool) -> None:
        """Load ``url`` in a ``width`` × ``height`` CSS-pixel viewport (a phone's when ``mobile``)."""
        self.page("Emulation.setDeviceMetricsOverride", {"width": width, "height": height, "deviceScaleFactor": 1,
                                                         "mobile": mobile})
        self.events = [e for e in self.events if e.get("method") != "Page.loadEventFired"]
        self.page("Page.navigate", {"url": url})
        self._wait_for("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the page."""
        result = self.page("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise DevToolsError(f"script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> bytes:
        """A PNG of the viewport, written to ``path`` and returned."""
        png = base64.b64decode(self.page("Page.captureScreenshot", {"format": "png"})["data"])
        path.write_bytes(png)
        return png

    def errors(self) -> list[str]:
        """Console errors and uncaught exceptions reported so far."""
        found = []
        for event in self.events:
            params = event.get("params", {})
            if event.get("method") == "Runtime.exceptionThrown":
                found.append(str(params.get("exceptionDetails", {}).get("text")))
            elif event.get("method") == "Runtime.consoleAPICalled" and params.get("type") == "error":
                found.append(str(params.get("args")))
            elif event.get("method") == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(str(params["entry"].get("text")))
        return found

    def _wait_for(self, method: str) -> dict[str, Any]:
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method:
                    return self.events.pop(i)
            self.events.append(self._receive())

    def _receive(self) -> dict[str, Any]:
        deadline = time.monotonic() + self.timeout_s
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise DevToolsError(f"no answer from Chromium within {self.timeout_s:.0f} s")
            chunk = os.read(self._from_browser, 1 << 16)
            if not chunk:
                raise DevToolsError(f"Chromium closed the pipe (exit status {self.process.poll()})")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        return dict(json.loads(raw))


def png_size(png: bytes) -> tuple[int, int]:
    """(width, height) from a PNG's IHDR chunk."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR", "not a PNG"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
