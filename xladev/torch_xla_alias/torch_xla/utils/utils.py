"""`torch_xla.utils.utils` (`xu`) on xladev: the small helpers PyTorch/XLA's examples and tests use.

Plain Python with nothing of the device in it: environment readers, synthetic data for a loader, walks over
nested containers, timing and printing helpers, temporary folders. The names, arguments and behaviour are
PyTorch/XLA's, so its test helpers (which call `as_list`, `TmpFolder`, `for_each_instance`...) run unchanged.
"""

from __future__ import annotations

import copy
import os
import shutil
import socket
import sys
import tempfile
import time
from concurrent import futures
from typing import Any, Callable

from torch_xla import _xladev

__all__ = [
    "Cleaner", "DataWrapper", "FnDataGenerator", "LazyProperty", "SampleGenerator", "TimedScope", "TmpFolder",
    "as_list", "check_env_flag", "eprint", "flatten_nested_tuple", "for_each_instance", "for_each_instance_rewrite",
    "get_free_tcp_ports", "get_print_fn", "getenv_as", "list_copy_append", "null_print", "parallel_work", "shape",
    "timed",
]

_TRUE_WORDS = ("true", "yes", "on", "y", "1")


def getenv_as(name: str, to_type: Callable[[str], Any], defval: Any = None) -> Any:
    """The environment variable `name` converted with `to_type`, or `defval` when unset.

    `bool` reads the usual words for true (`1`, `true`, `yes`, `on`, `y`, any case); anything else is false.
    """
    value = os.environ.get(name)
    if value is None:
        return defval
    if to_type is bool:
        return value.strip().lower() in _TRUE_WORDS
    return to_type(value)


def check_env_flag(name: str, default: str = "") -> bool:
    """Whether the environment variable `name` (or `default` when unset) reads as true."""
    return os.environ.get(name, default).strip().upper() in ("ON", "1", "YES", "TRUE", "Y")


def as_list(value: Any) -> list | tuple:
    """`value` itself when it is a list or tuple, else `[value]`."""
    return value if isinstance(value, (list, tuple)) else [value]


class Cleaner:
    """Calls `func()` when the object is garbage-collected."""

    def __init__(self, func: Callable[[], Any]) -> None:
        self.func = func

    def __del__(self) -> None:
        self.func()


class LazyProperty:
    """A value computed by `gen_fn()` on the first read of `.value`, then kept."""

    def __init__(self, gen_fn: Callable[[], Any]) -> None:
        self._gen_fn = gen_fn
        self._value = None

    @property
    def value(self) -> Any:
        if self._gen_fn is not None:
            self._value, self._gen_fn = self._gen_fn(), None
        return self._value


class TmpFolder:
    """A new temporary folder (`.name`), removed with its contents when the object is garbage-collected."""

    def __init__(self) -> None:
        self.name = tempfile.mkdtemp()
        # rmtree bound now: at interpreter exit the module's globals may already be gone when this runs.
        self.cleaner = Cleaner(lambda name=self.name, rmtree=shutil.rmtree: rmtree(name, ignore_errors=True))


class SampleGenerator:
    """Yields the same sample `sample_count` times: synthetic data for a loader.

    Args:
      data: what each iteration yields (for example `(images, labels)`).
      sample_count: how many times.
    """

    def __init__(self, data: Any, sample_count: int) -> None:
        self._data = data
        self._count = sample_count

    def __len__(self) -> int:
        return self._count

    def __iter__(self):
        for _ in range(self._count):
            yield self._data


class FnDataGenerator:
    """Yields `count` batches `(data, func(data))`, each `data = gen_tensor(batch_size, *dims)`.

    Args:
      func: computes the target from a batch.
      batch_size: the first dimension of each batch.
      gen_tensor: makes a batch, e.g. `torch.randn`.
      dims: the other dimensions (`[1]` when None).
      count: how many batches.
    """

    def __init__(self, func: Callable, batch_size: int, gen_tensor: Callable, dims=None, count: int = 1) -> None:
        self._func, self._batch_size, self._gen_tensor = func, batch_size, gen_tensor
        self._dims = list(dims) if dims else [1]
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __iter__(self):
        for _ in range(self._count):
            data = self._gen_tensor(self._batch_size, *self._dims)
            yield data, self._func(data)


class DataWrapper:
    """A user structure whose tensors the device helpers move: subclasses list them and rebuild from copies."""

    def get_tensors(self) -> list:
        """The CPU tensors to send to the device."""
        raise NotImplementedError(f"{type(self).__name__}.get_tensors is not implemented")

    def from_tensors(self, tensors: list) -> Any:
        """A new instance holding `tensors`, the device copies of `get_tensors()` in the same order."""
        raise NotImplementedError(f"{type(self).__name__}.from_tensors is not implemented")


def _children(value: Any) -> list:
    if isinstance(value, dict):
        return [item for pair in value.items() for item in pair]
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    if isinstance(value, DataWrapper):
        return list(value.get_tensors())
    if hasattr(value, "__dict__"):
        return list(vars(value).values())
    return []


def for_each_instance(value: Any, select_fn: Callable[[Any], bool], fn: Callable[[Any], Any]) -> None:
    """Calls `fn(x)` on every `x` within `value` (dict keys and values, sequences, sets, `DataWrapper`s,
    objects' attributes) for which `select_fn(x)` is true, each object once; a selected object is not entered."""
    seen: set[int] = set()
    stack = [value]
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if select_fn(item):
            fn(item)
        else:
            stack.extend(reversed(_children(item)))


def for_each_instance_rewrite(value: Any, select_fn: Callable[[Any], bool], fn: Callable[[Any], Any]) -> Any:
    """A copy of `value` with each selected `x` replaced by `fn(x)`; an object met twice maps to one copy.

    Dicts and sets are rebuilt, lists and tuples become lists (as PyTorch/XLA's does), `DataWrapper`s are rebuilt
    with `from_tensors`, other objects with attributes are shallow-copied with rewritten attributes.
    """
    done: dict[int, Any] = {}

    def rewrite(item: Any) -> Any:
        if id(item) in done:
            return done[id(item)]
        if select_fn(item):
            result = done[id(item)] = fn(item)
        elif isinstance(item, dict):
            result = done[id(item)] = {}
            for key, val in item.items():
                new_key = rewrite(key)  # the key first: `result[rewrite(key)] = rewrite(val)` runs the value first
                result[new_key] = rewrite(val)
        elif isinstance(item, (set, frozenset)):
            result = done[id(item)] = set()
            result.update(rewrite(x) for x in item)
        elif isinstance(item, (list, tuple)):
            result = done[id(item)] = []
            result.extend(rewrite(x) for x in item)
        elif isinstance(item, DataWrapper):
            result = done[id(item)] = item.from_tensors([rewrite(x) for x in item.get_tensors()])
        elif hasattr(item, "__dict__"):
            result = done[id(item)] = copy.copy(item)
            for key, val in list(vars(result).items()):
                setattr(result, key, rewrite(val))
        else:
            result = done[id(item)] = item
        return result

    return rewrite(value)


def shape(inputs: Any) -> list[int]:
    """The dimensions of nested equal-length lists or tuples (`[[1, 2], [3, 4]]` gives `[2, 2]`); `[]` otherwise.

    Raises:
      AssertionError: the nested sequences do not all have the same shape.
    """
    if not isinstance(inputs, (list, tuple)):
        return []
    shapes = [shape(item) for item in inputs]
    if not all(s == shapes[0] for s in shapes):
        raise AssertionError(f"ragged nesting: element shapes {shapes}")
    return [len(inputs)] + (shapes[0] if shapes else [])


def flatten_nested_tuple(inputs: Any) -> tuple:
    """The leaves of nested lists and tuples, in order, as one tuple."""
    if not isinstance(inputs, (list, tuple)):
        return (inputs,)
    return tuple(leaf for item in inputs for leaf in flatten_nested_tuple(item))


def list_copy_append(ilist: list, item: Any) -> list:
    """A new list: `ilist`'s items, then `item`."""
    return [*ilist, item]


def null_print(*args: Any, **kwargs: Any) -> None:
    """Prints nothing."""


def eprint(*args: Any, **kwargs: Any) -> None:
    """`print` to standard error."""
    print(*args, file=sys.stderr, **kwargs)


def get_print_fn(debug: bool | None = None) -> Callable[..., None]:
    """`eprint` when `debug` (the `DEBUG` environment variable as a number when None), else `null_print`."""
    if debug is None:
        debug = bool(int(os.environ.get("DEBUG", "0")))
    return eprint if debug else null_print


def timed(fn: Callable[[], Any], msg: str = "", printfn: Callable[..., None] | None = eprint) -> Any:
    """Runs `fn()`, prints `msg` followed by its duration as `12.345ms`, and returns its result."""
    printfn = get_print_fn() if printfn is None else printfn
    start = time.time()
    result = fn()
    printfn(f"{msg}{1000.0 * (time.time() - start):.3f}ms")
    return result


class TimedScope:
    """`with TimedScope(msg):` prints `msg` and the block's duration on exit, unless `set_error` was called."""

    def __init__(self, msg: str = "", printfn: Callable[..., None] | None = eprint) -> None:
        self._msg = msg
        self._printfn = get_print_fn() if printfn is None else printfn
        self._error = None
        self._start = 0.0

    def __enter__(self) -> "TimedScope":
        self._start = time.time()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._error is None:
            self._printfn(f"{self._msg}{1000.0 * (time.time() - self._start):.3f}ms")

    def set_error(self, error: Any) -> None:
        """Marks the scope as failed: its duration is not printed."""
        self._error = error


def get_free_tcp_ports(n: int = 1) -> list[int]:
    """`n` TCP ports the system gave out as free a moment ago."""
    ports = []
    for _ in range(n):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", 0))
            ports.append(sock.getsockname()[1])
    return ports


def parallel_work(num_workers: int, fn: Callable, *args: Any) -> list:
    """`fn` mapped over `args` on `num_workers` threads, the results in order.

    Raises:
      Exception: the first exception a call raised.
    """
    with futures.ThreadPoolExecutor(max_workers=num_workers) as pool:
        return list(pool.map(fn, *args))


__getattr__ = _xladev.module_getattr(__name__)
