"""Asynchronous step closures (`add_step_closure(..., run_async=True)`): one background thread, errors kept.

As PyTorch/XLA's async closure handler does, the first exception a closure raises is kept and re-raised
on the training thread at the next barrier or `wait_device_ops()`; a pool thread has no one to tell.
One raised after the last of those (a closure of the last step, in a script that ends without waiting) is
the process's failure at exit (`wait_at_exit`, runtime/execute/exiting.py).
"""

from __future__ import annotations

import os

_pool = None
# The first exception raised by a closure since the last check; later ones are dropped meanwhile.
_errors: list[BaseException] = []


def _run(fn, args) -> None:
    try:
        fn(*args)
    except BaseException as exc:  # kept for the training thread
        if not _errors:
            _errors.append(exc)


def submit(fn, args: tuple) -> None:
    """Runs `fn(*args)` on the closure thread (started on first use)."""
    global _pool
    if _pool is None:
        from concurrent.futures import ThreadPoolExecutor

        _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="xladev-closure")
    _pool.submit(_run, fn, args)


def raise_error() -> None:
    """Re-raises (once) the exception of a closure that failed since the last check."""
    if _errors:
        raise _errors.pop()


def discard_error() -> None:
    """Forgets the failure of a closure not yet re-raised (`Executor.reset`)."""
    _errors.clear()


def wait_at_exit() -> BaseException | None:
    """Waits for the closures still queued or running (the interpreter is exiting).

    Returns:
      The first failure not re-raised yet, or None.
    """
    pool = _pool
    if pool is not None:
        pool.shutdown(wait=True)
    return _errors.pop() if _errors else None


def _forget_in_child() -> None:
    # A forked child has no closure thread, and its parent's closures and failures are its parent's.
    global _pool
    _pool = None
    _errors.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def wait() -> None:
    """Waits for the closures submitted so far, then re-raises a failure among them."""
    if _pool is not None:
        _pool.submit(lambda: None).result()
    raise_error()
