"""`torch_xla.experimental.scan_layers` on xladev: a stack of identical layers as one scan (runtime/record/scan.py)."""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch

from torch_xla import _xladev
from torch_xla.experimental.scan import _default_partition
from xladev.runtime.record import scan as _scan

__all__ = ["scan_layers"]

# (id(partition_fn), id(first layer)) -> the function scanned for pure layers (xladev's cache, PyTorch/XLA's name).
_ONE_LAYER_CACHE = _scan.ONE_LAYER_CACHE


def scan_layers(layers: Iterable[torch.nn.Module], input_data: Any, partition_fn: Callable | None = None,
                is_layer_pure: bool = False) -> Any:
    """PyTorch/XLA's `scan_layers`: `nn.Sequential(*layers)(input_data)`, with one layer traced and compiled once
    and run over the layers' stacked weights.

    Args:
      layers: modules of one structure (same parameter and buffer names and shapes).
      input_data: the first layer's input.
      partition_fn, is_layer_pure: as `scan`'s `partition_fn` and `is_fn_pure`.

    Returns:
      The last layer's output.

    Raises:
      ValueError: the layers differ in parameter or buffer names or shapes.
    """
    partition_fn = _default_partition() if partition_fn is None else partition_fn
    return _scan.scan_layers(layers, input_data, partition_fn=partition_fn, is_layer_pure=is_layer_pure)


__getattr__ = _xladev.module_getattr(__name__)
