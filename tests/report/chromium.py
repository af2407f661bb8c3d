"""Debian's Chromium, headless, driven over the DevTools protocol on a pipe (`--remote-debugging-pipe`): loads a
page, reports its console errors and uncaught exceptions, runs a script in it, and takes a screenshot of its
1280×800 viewport scrolled to an element.

The command-line `--screenshot` cannot scroll (with a `#fragment` in the address headless Chromium 150 captures
a blank page), and `--enable-logging` mixes the page's console with Chromium's own messages; the protocol gives
both exactly. Nothing here needs a network: the browser runs with a fresh profile in a temporary folder.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time

VIEWPORT = (1280, 800)
TIMEOUT_S = 60.0


def chromium_path() -> str | None:
    """The Chromium binary: ``$XLADEV_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on PATH; None if none."""
    override = os.environ.get("XLADEV_CHROMIUM")
    if override:
        return override if os.access(override, os.X_OK) else None
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    """One headless browser with one page (use as a context manager)."""

    def __init__(self, binary: str, profile_dir: str):
        self._commands_r, self._commands_w = os.pipe()
        self._replies_r, self._replies_w = os.pipe()
        commands_r, replies_w = self._commands_r, self._replies_w

        def wire():  # the browser reads commands on fd 3 and writes replies on fd 4
            # Copied above 10 first: a pipe's own fd may be 3 or 4, and dup2 onto itself keeps close-on-exec.
            high = [fcntl.fcntl(commands_r, fcntl.F_DUPFD, 10), fcntl.fcntl(replies_w, fcntl.F_DUPFD, 10)]
            for target, fd in zip((3, 4), high):
                os.dup2(fd, target, inheritable=True)

        # --no-sandbox: CI runs as root in a container, where Chromium's sandbox cannot start. The rest pins what
        # would otherwise vary between runs: the GPU (none: software drawing), font hinting, the scale factor.
        self._process = subprocess.Popen(
            [binary, "--headless", "--remote-debugging-pipe", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--force-device-scale-factor=1", "--font-render-hinting=none", "--disable-lcd-text",
             "--no-first-run", "--disable-extensions", "--disable-background-networking", "--mute-audio",
             f"--user-data-dir={profile_dir}", "about:blank"],
            # close_fds=False: the copies on fds 3 and 4 must survive; every other fd of ours is non-inheritable.
            preexec_fn=wire, close_fds=False, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(commands_r)
        os.close(replies_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []
        self._session = None
        target = self._send("Target.createTarget", {"url": "about:blank"}, browser=True)["targetId"]
        self._session = self._send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                   browser=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self._send(f"{domain}.enable")
        width, height = VIEWPORT
        self._send("Emulation.setDeviceMetricsOverride",
                   {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Ends the browser (it started no other process of ours) and closes the pipes."""
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        for fd in (self._commands_w, self._replies_r):
            try:
                os.close(fd)
            except OSError:
                pass

    # ------------------------------------------------------------ protocol
    def _read_message(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies_r], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._replies_r, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed its pipe (it exited)")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _send(self, method: str, params: dict | None = None, browser: bool = False) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if not browser:
            message["sessionId"] = self._session
        os.write(self._commands_w, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            reply = self._read_message(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def _wait_for(self, method: str) -> dict:
        deadline = time.monotonic() + TIMEOUT_S
        for event in self.events:
            if event["method"] == method:
                return event
        while True:
            event = self._read_message(deadline)
            if "method" in event:
                self.events.append(event)
                if event["method"] == method:
                    return event

    # ------------------------------------------------------------ what the tests use
    def load(self, path: str) -> None:
        """Opens a local file and waits until it has loaded (its scripts have run)."""
        self.events.clear()
        self._send("Page.navigate", {"url": "file://" + os.path.abspath(path)})
        self._wait_for("Page.loadEventFired")

    def emulate_media(self, media: str) -> None:
        """Renders the page as for `media` (``print``, or ``""`` for the screen again)."""
        self._send("Emulation.setEmulatedMedia", {"media": media})

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page (JSON-serialisable values only; a promise: awaited)."""
        result = self._send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                 "awaitPromise": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"the page threw: {result['exceptionDetails']}")
        return result["result"].get("value")

    def console_errors(self) -> list[str]:
        """The page's uncaught exceptions, console.error calls and error log entries since it loaded."""
        self.evaluate("0")  # a round trip, so events sent before it are read
        errors = []
        for event in self.events:
            params = event.get("params", {})
            if event["method"] == "Runtime.exceptionThrown":
                details = params["exceptionDetails"]  # text: "Uncaught"; the exception: what was thrown
                thrown = details.get("exception", {}).get("description", "")
                errors.append(f"{details.get('text', 'exception')} {thrown}")
            elif event["method"] == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
                errors.append(" ".join(str(arg.get("value", arg.get("description", ""))) for arg in params["args"]))
            elif event["method"] == "Log.entryAdded" and params["entry"].get("level") == "error":
                errors.append(params["entry"].get("text", ""))
        return errors

    def screenshot(self, element_id: str | None = None) -> bytes:
        """A PNG of the 1280×800 viewport, scrolled so that the element `element_id` is at its top."""
        if element_id is not None:
            self.evaluate(f"document.getElementById({json.dumps(element_id)}).scrollIntoView(true)")
        data = self._send("Page.captureScreenshot", {"format": "png"})["data"]
        return base64.b64decode(data)
