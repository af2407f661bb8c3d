"""`torch_xla.utils.utils` (`xu`) on xladev: environment readers and the synthetic-data loader of PyTorch/XLA's
examples. Plain Python with nothing of the device in it; the names and behaviour are PyTorch/XLA's."""

from __future__ import annotations

import os
from typing import Any, Callable

from torch_xla import _xladev

__all__ = ["getenv_as", "check_env_flag", "SampleGenerator"]

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


__getattr__ = _xladev.module_getattr(__name__)
