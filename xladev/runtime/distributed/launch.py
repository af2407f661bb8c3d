"""`xladev.launch`: runs a function in several processes on this host, one replica each.

Each process is started with Python's `spawn` method and torchrun's environment (`RANK`, `WORLD_SIZE`,
`LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`) plus the jax coordinator's address, so the
same code runs under `torchrun` and under `launch`, and `dist.init_process_group("xla", init_method="xla://")`
works in both. The processes join through jax's distributed runtime on their first use of the device
(world.py).

The launcher watches its processes. When one fails (an exception, or it dies), the others are given a
short grace to stop by themselves (their next collective fails naming the rank, faults.py), then stopped;
`launch` raises `LaunchError` naming the first rank that failed and its error. No run outlives that.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import pickle
import sys
import threading
import time
import traceback
from typing import Any, Callable

from xladev._flags import config
from xladev.errors import XladevError
from xladev.runtime.graph.world import free_port

# How long the other processes get to stop by themselves once one failed, before they are terminated.
_GRACE_S = 20.0


class LaunchError(XladevError, RuntimeError):
    """A process of `xladev.launch` failed. The message names the rank, and its error or exit status.

    Attributes:
      failures: {rank: description} of every process that failed, the first failure first.
    """

    def __init__(self, message: str, failures: dict[int, str]):
        super().__init__(message)
        self.failures = failures


def _child(fn: Callable, args: tuple, rank: int, conn, news) -> None:
    """The body of a launched process: `fn(rank, *args)`, its result or error sent to the launcher.

    `news` brings word from the launcher: a rank that ended (so this one need not wait for the
    coordination service to notice), or, at its end of file, that the launcher itself is gone.
    """
    threading.Thread(target=_listen, args=(news, rank), name="xladev-launcher-news", daemon=True).start()
    try:
        result = fn(rank, *args)
    except SystemExit as exc:
        # `sys.exit(code)` ends the rank with that status, as under torch.multiprocessing and PyTorch/XLA's launcher
        # (its TPU tests end each process with `sys.exit(0 if ok else 1)`): 0 (or None) is a normal end.
        code = exc.code
        if code is None or code == 0:
            conn.send(("ok", pickle.dumps(None)))
            return
        conn.send(("error", f"exited with status {code if isinstance(code, int) else 1} (sys.exit({code!r}))", ""))
        raise
    except BaseException as exc:  # noqa: BLE001  (reported to the launcher, then the process fails)
        text = traceback.format_exc()
        try:
            conn.send(("error", f"{type(exc).__name__}: {exc}", text))
        finally:
            sys.stderr.write(text)
            sys.stderr.flush()
        # A normal exit: the process leaves the job with the others (world.py), its outputs closed.
        sys.exit(1)
    try:
        # Plain pickle: torch's multiprocessing pickler would share tensors through this process's memory,
        # which is gone once it exits.
        payload = pickle.dumps(result)
    except Exception as exc:  # an unpicklable result: say so rather than lose the run
        payload = pickle.dumps(f"<result of rank {rank} could not be sent back: {exc}>")
    conn.send(("ok", payload))


def _listen(news, rank: int) -> None:
    """Marks ranks the launcher saw end as gone; ends this process if the launcher is gone."""
    from xladev.runtime.graph.world import job

    while True:
        try:
            gone_rank, reason = news.recv()
        except (EOFError, OSError):
            sys.stderr.write(f"xladev: rank {rank}: the launcher (xladev.launch) is gone; stopping\n")
            sys.stderr.flush()
            os._exit(1)
        job.gone(gone_rank, reason)


def launch(fn: Callable, args: tuple = (), nprocs: int | None = None, start_method: str = "spawn",
           env: dict[str, str] | None = None) -> list[Any]:
    """Runs `fn(rank, *args)` in `nprocs` processes on this host, each one replica on its own `xla:0`.

    With one process, `fn(0, *args)` runs in this process (as PyTorch/XLA's `launch` does).

    Args:
      fn: the per-process function; a module-level function (it is pickled for `spawn`).
      args: its other arguments (pickled).
      nprocs: processes to start; None takes CPU_NUM_DEVICES (PyTorch/XLA's count of CPU replicas), else 1.
      start_method: only 'spawn': jax's runtime cannot be forked.
      env: extra environment variables for the processes (e.g. XLADEV_EVENT_LOG).

    Returns:
      What `fn` returned in each process, by rank.

    Raises:
      LaunchError: a process failed; the message names its rank and error (the others were stopped).
      ValueError: nprocs < 1, or another start method.
    """
    count = nprocs if nprocs is not None else (config.cpu_num_devices or 1)
    if count < 1:
        raise ValueError(f"launch: nprocs={count}; at least one process is needed")
    if start_method != "spawn":
        raise ValueError(f"launch: start_method={start_method!r} is not supported: jax's runtime cannot be forked; "
                         "use 'spawn'")
    if count == 1:
        return [fn(0, *args)]
    context = multiprocessing.get_context("spawn")
    master_port, coordinator_port = free_port(), free_port()
    shared = {"WORLD_SIZE": str(count), "LOCAL_WORLD_SIZE": str(count), "MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": str(master_port), "XLADEV_COORDINATOR_ADDRESS": f"127.0.0.1:{coordinator_port}",
              "PJRT_LOCAL_PROCESS_COUNT": str(count)}
    if config.pjrt_device == "CPU":
        shared["CPU_NUM_DEVICES"] = "1"  # one replica per process
    shared.update(env or {})
    processes, conns, news = [], [], []
    for rank in range(count):
        child_env = dict(shared, RANK=str(rank), LOCAL_RANK=str(rank), PJRT_LOCAL_PROCESS_RANK=str(rank))
        receive, send = context.Pipe(duplex=False)
        news_in, news_out = context.Pipe(duplex=False)
        process = context.Process(target=_child, args=(fn, args, rank, send, news_in), name=f"xladev-rank{rank}")
        with _environment(child_env):  # a spawned child copies os.environ when it starts
            process.start()
        send.close()
        news_in.close()
        processes.append(process)
        conns.append(receive)
        news.append(news_out)
    try:
        return _supervise(processes, conns, news)
    finally:
        for out in news:
            out.close()


class _environment:
    """Sets environment variables for the block, then restores them."""

    def __init__(self, values: dict[str, str]):
        self.values = values
        self.saved: dict[str, str | None] = {}

    def __enter__(self):
        for key, value in self.values.items():
            self.saved[key] = os.environ.get(key)
            os.environ[key] = value

    def __exit__(self, *exc):
        for key, value in self.saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _tell(news: list, processes: list, rank: int, text: str) -> None:
    """Tells the other running processes that `rank` ended with `text`."""
    for other, (out, p) in enumerate(zip(news, processes)):
        if other != rank and p.exitcode is None:
            try:
                out.send((rank, text))
            except (OSError, ValueError):
                pass


def _supervise(processes: list, conns: list, news: list) -> list[Any]:
    """Waits for the launched processes; on a failure, stops the rest after a grace and raises LaunchError."""
    results: dict[int, Any] = {}
    failures: dict[int, str] = {}
    open_conns = {id(c): (rank, c) for rank, c in enumerate(conns)}
    told: set[int] = set()
    deadline = None
    while True:
        alive = [p for p in processes if p.exitcode is None]
        if not alive and not open_conns:
            break
        if deadline is not None and time.monotonic() > deadline:
            for p in alive:
                p.terminate()
            for p in alive:
                p.join(5)
                if p.exitcode is None:
                    p.kill()
                    p.join()
            for rank, p in enumerate(processes):
                if rank not in failures and rank not in results:
                    failures[rank] = f"stopped by the launcher {_GRACE_S:g} s after rank {next(iter(failures))} failed"
            break
        waitables = [c for _, c in open_conns.values()] + [p.sentinel for p in alive]
        ready = multiprocessing.connection.wait(waitables, timeout=0.5)
        for item in ready:
            entry = open_conns.get(id(item))
            if entry is None:
                continue
            rank, conn = entry
            try:
                message = conn.recv()
            except (EOFError, OSError):
                del open_conns[id(item)]
                continue
            if message[0] == "ok":
                results[rank] = pickle.loads(message[1])
            else:  # the rank printed its traceback on its stderr too
                failures.setdefault(rank, message[1])
        for rank, p in enumerate(processes):
            if p.exitcode is not None and p.exitcode != 0 and rank not in told:
                told.add(rank)
                failures.setdefault(rank, _exit_text(p.exitcode))
                _tell(news, processes, rank, f"its process {_exit_text(p.exitcode)}")
        if failures and deadline is None:
            deadline = time.monotonic() + _GRACE_S
    for p in processes:
        p.join()
    for rank, p in enumerate(processes):
        if rank not in results and rank not in failures:
            failures[rank] = _exit_text(p.exitcode) if p.exitcode else "ended without a result"
    if failures:
        first = next(iter(failures))
        others = "; ".join(f"rank {r}: {text}" for r, text in failures.items() if r != first)
        message = f"xladev.launch: rank {first} failed: {failures[first]}" + (f" (then {others})" if others else "")
        raise LaunchError(message, failures)
    return [results[r] for r in range(len(processes))]


def _exit_text(code: int) -> str:
    if code < 0:
        import signal

        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with status {code}"

