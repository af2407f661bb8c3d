"""`torch_xla.experimental.scan` on xladev: `scan(fn, init, xs)`, traced once into one `xla::scan` node
(runtime/record/scan.py), lowered to `jax.lax.scan`."""

from __future__ import annotations

from typing import Any, Callable

from torch.utils._pytree import tree_flatten, tree_unflatten

from torch_xla import _xladev
from xladev.runtime.record import scan as _scan

__all__ = ["scan", "tree_flatten_none", "value_and_grad_partitioned"]

# fn -> {its signature: its trace}, for calls with is_fn_pure=True (xladev's cache, under PyTorch/XLA's name).
_SCAN_COMPUTATION_CACHE = _scan.SCAN_COMPUTATION_CACHE


def _default_partition():
    from functorch.compile import default_partition

    return default_partition


def scan(fn: Callable, init: Any, xs: Any, partition_fn: Callable | None = None,
         is_fn_pure: bool = False) -> tuple[Any, Any]:
    """PyTorch/XLA's `scan`: `carry = init; for i: carry, y_i = fn(carry, xs[i])`, returning the last carry
    and the stacked ys, with `fn` traced and compiled once.

    Args:
      fn: `fn(carry, x) -> (new_carry, y)` on pytrees of xla tensors.
      init: the first carry.
      xs: a pytree of xla tensors scanned along their leading dimension.
      partition_fn: `functorch.compile.default_partition` (the default: the backward reads the activations the
        forward saved) or any other (`min_cut_rematerialization_partition`: the backward computes each
        iteration's forward again).
      is_fn_pure: keep `fn`'s trace for later calls with the same signature (never when `fn` reads xla tensors it
        was not given).

    Returns:
      (final carry, stacked ys).

    Raises:
      ValueError: `fn` is not callable, `xs` is empty or uneven, or `fn` changes the carry's shape.
    """
    partition_fn = _default_partition() if partition_fn is None else partition_fn
    return _scan.scan(fn, init, xs, partition_fn=partition_fn, is_fn_pure=is_fn_pure)


def tree_flatten_none(pytree: Any) -> tuple[list, Callable[[list], Any]]:
    """The leaves of `pytree` without its None leaves, and a function that puts a list of such leaves back
    into the pytree with its Nones."""
    leaves, spec = tree_flatten(pytree)
    kept = [leaf for leaf in leaves if leaf is not None]

    def unflatten(values: list) -> Any:
        it = iter(values)
        return tree_unflatten([None if leaf is None else next(it) for leaf in leaves], spec)

    return kept, unflatten


def value_and_grad_partitioned(*args, **kwargs):
    """Not provided: xladev traces `fn` with its own recorder, not with AOTAutograd, and keeps the forward and
    backward bodies inside the `xla::scan` nodes.

    Raises:
      NotImplementedError: always.
    """
    raise NotImplementedError("torch_xla.experimental.scan.value_and_grad_partitioned is not supported by xladev: "
                              "scan traces fn with xladev's own recorder (no AOTAutograd graphs); call scan itself")


__getattr__ = _xladev.module_getattr(__name__)
