"""Isolation: each op is checked in a worker process, so a crash or a hang costs only that op."""

from __future__ import annotations

import dataclasses
import json
import queue
import threading
import time
from typing import Iterable

from xladev.coverage._check import check_op
from xladev.coverage._plan import CheckResult, OpResult, Summary, op_db
from xladev.coverage._sample import short_error


# ---- isolation: each op runs in a worker process --------------------------------------------------
# A worker crash (an abort in native code) or a hang costs only the op that caused it: the parent
# records it as failing and starts a fresh worker for the next op.
class Worker:
    """A child process that checks ops on request, one JSON line in and one out."""

    def __init__(self, options: dict | None = None) -> None:
        self.options = dict(options or {})
        self.proc = None
        self._log = None

    def _start(self) -> None:
        import subprocess
        import sys
        import tempfile

        self._log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "xladev.coverage", "--worker", json.dumps(self.options)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, bufsize=1)
        self._lines = queue.Queue()
        threading.Thread(target=_pump, args=(self.proc.stdout, self._lines), daemon=True).start()

    def check(self, name: str, timeout_s: float = 300.0) -> OpResult:
        """Checks one OpInfo by `full_name`; a crash or a timeout comes back as a failing result."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self._log.seek(0)
        self._log.truncate()  # keep only this op's stderr (the child shares the file offset)
        start = time.perf_counter()
        forward = None
        try:
            self.proc.stdin.write(name + "\n")
            self.proc.stdin.flush()
            while True:
                try:
                    line = self._lines.get(timeout=max(1.0, timeout_s - (time.perf_counter() - start)))
                except queue.Empty:
                    line = None
                if not line:
                    break
                data = json.loads(line)
                if "name" in data:
                    return OpResult.from_json(data)
                forward = CheckResult(**data["forward"])  # the forward part, sent before the backward starts
        except OSError:
            line = ""
        reason = f"timeout: no result after {timeout_s:.0f}s" if line is None else \
            f"the worker process died ({self._last_error()})"
        self.close()
        crashed = CheckResult("failing", reason)
        if forward is None:
            return OpResult(name, crashed, CheckResult("skipped", "the forward check did not finish"),
                            seconds=time.perf_counter() - start)
        return OpResult(name, forward, crashed, seconds=time.perf_counter() - start)

    def _last_error(self) -> str:
        code = self.proc.wait(timeout=30) if self.proc else None
        self._log.seek(0)
        lines = [line.strip() for line in self._log.read().splitlines() if line.strip()]
        fatal = [line for line in lines if "terminate called" in line or "Fatal Python error" in line]
        detail = (fatal or lines[-1:] or ["no output"])[0]
        return f"exit status {code}: {detail}"[:300]

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


def _pump(stream, lines: queue.Queue) -> None:
    """Moves a worker's output lines into a queue (a reader thread: select() on a buffered pipe can miss lines)."""
    try:
        for line in stream:
            lines.put(line)
    except (OSError, ValueError):
        pass
    lines.put("")


def worker_main(options: dict) -> int:
    import os
    import sys
    import warnings

    # Results go to the original stdout; anything the ops print goes to stderr.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    warnings.simplefilter("ignore")
    import xladev  # noqa: F401  (registers the device)

    ops = {op.full_name: op for op in op_db()}
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        def on_forward(forward):
            out.write(json.dumps({"forward": dataclasses.asdict(forward)}) + "\n")

        result = check_op(ops[name], on_forward=on_forward, **options)
        out.write(json.dumps(result.to_json()) + "\n")
    return 0


class Pool:
    """Worker processes that check submitted ops in parallel; results are read back by name."""

    def __init__(self, workers: int = 1, options: dict | None = None, timeout_s: float = 300.0,
                 progress=None) -> None:
        self.options = options or {}
        self.timeout_s = timeout_s
        self.progress = progress
        self.results: dict[str, OpResult] = {}
        self._queue: queue.Queue = queue.Queue()
        self._done = threading.Condition()
        self._submitted: set[str] = set()
        self._threads = [threading.Thread(target=self._serve, daemon=True, name=f"coverage-worker-{i}")
                         for i in range(max(1, workers))]
        for t in self._threads:
            t.start()

    def submit(self, names: Iterable[str]) -> None:
        for name in names:
            if name not in self._submitted:
                self._submitted.add(name)
                self._queue.put(name)

    def result(self, name: str) -> OpResult:
        self.submit([name])
        with self._done:
            self._done.wait_for(lambda: name in self.results)
            return self.results[name]

    def _serve(self) -> None:
        worker = Worker(self.options)
        try:
            while True:
                name = self._queue.get()
                if name is None:
                    return
                try:
                    result = worker.check(name, self.timeout_s)
                except Exception as exc:  # a harness error must not leave result() waiting forever
                    worker.close()
                    result = OpResult(name, CheckResult("failing", f"coverage harness error: {short_error(exc)}"))
                with self._done:
                    self.results[name] = result
                    self._done.notify_all()
                if self.progress is not None:
                    self.progress(result)
        finally:
            worker.close()

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join()


def sweep(ops: list, workers: int = 1, isolated: bool = True, progress=None, timeout_s: float = 300.0,
          **options) -> Summary:
    """Checks each OpInfo in `ops` and returns the results in the same order.

    Args:
      workers: parallel worker processes (only with `isolated`).
      isolated: run ops in worker processes, so a crash or hang costs one op, not the sweep.
      progress: called with each OpResult as it completes.
      options: forwarded to `check_op`.
    """
    names = [op.full_name for op in ops]
    if not isolated:
        import xladev  # noqa: F401

        results = []
        for op in ops:
            results.append(check_op(op, **options))
            if progress is not None:
                progress(results[-1])
        return Summary(results)
    pool = Pool(workers, options, timeout_s, progress)
    try:
        pool.submit(names)
        return Summary([pool.result(n) for n in names])
    finally:
        pool.close()
