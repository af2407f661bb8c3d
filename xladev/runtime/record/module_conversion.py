"""`module.to('xla')` and back keep PyTorch's rule: a tensor shared by two modules stays one tensor.

Why this exists: `nn.Module._apply` keeps a Parameter object (and so every tie to it) only when the old
and new tensors have "compatible shallow-copy types", which PyTorch decides in C++ from the dispatch
keys; for a Python wrapper-subclass device that is never the case, so `_apply` builds a fresh Parameter
for every module that holds a shared weight. HuggingFace models tie `lm_head.weight` to the input
embedding, and an optimizer then trains the two copies apart without a word.

The fix uses PyTorch's own mechanism for subclasses: while a conversion crosses the `xla` device,
`_apply` runs with `torch.__future__`'s swap mode, which swaps each Parameter's contents in place
(`torch.utils.swap_tensors`), so the Parameter objects, the ties between modules and any optimizer
built before the move all stay valid, as they do for `cuda`. The conversion function is memoised per
source tensor, so a shared buffer or gradient is converted (and uploaded) once. If a swap is impossible
(a weak reference to a parameter, say), the conversion runs PyTorch's plain path and the ties are then
restored from the map of which module slots held the same tensor before.
"""

from __future__ import annotations

import threading

import torch
from torch import nn

from xladev.runtime.record.tensor import XlaTensor

_original_apply = nn.Module._apply
_local = threading.local()
_future_lock = threading.Lock()
_installed = False


def install() -> None:
    """Routes `nn.Module._apply` (behind `.to()`, `.cpu()`, `.double()`...) through `_apply`. Idempotent."""
    global _installed
    if not _installed:
        nn.Module._apply = _apply
        _installed = True


def _is_device_tensor(t) -> bool:
    return isinstance(t, XlaTensor)


def _slots(module: nn.Module) -> list[tuple[nn.Module, str, str, torch.Tensor]]:
    """Every (module, table, name, tensor) below `module`, shared submodules and tensors included."""
    found = []
    for sub in module.modules(remove_duplicate=False):
        for table in ("_parameters", "_buffers"):
            for name, t in getattr(sub, table).items():
                if t is not None:
                    found.append((sub, table, name, t))
    return found


def _apply(self: nn.Module, fn, recurse: bool = True):
    # Nested calls (children) and calls inside a conversion run PyTorch's code as is.
    if getattr(_local, "active", False) or not recurse:
        return _original_apply(self, fn, recurse)
    slots = _slots(self)
    if not slots:
        return _original_apply(self, fn, recurse)
    memo: dict[int, tuple] = {}

    def convert_once(t):
        hit = memo.get(id(t))
        # A swap changes a tensor's class in place (a gradient is swapped with its converted copy),
        # so a hit counts only while both tensors are still what they were.
        if hit is not None and hit[0] is t and type(t) is hit[2] and type(hit[1]) is hit[3]:
            return hit[1]
        out = fn(t)
        memo[id(t)] = (t, out, type(t), type(out))  # holds `t` so its id is not reused meanwhile
        return out

    probe = slots[0][3]
    with torch.no_grad():
        crosses = _is_device_tensor(probe) or _is_device_tensor(convert_once(probe))
    if not crosses:
        memo.clear()
        return _original_apply(self, fn, recurse)
    _local.active = True
    try:
        try:
            _with_swap(self, convert_once)
        except RuntimeError as exc:
            if "Couldn't swap" not in str(exc):
                raise
            # Some Parameter cannot be swapped in place: convert the rest PyTorch's plain way and
            # re-tie below. Parameters already swapped are on the target device and convert to themselves.
            _original_apply(self, convert_once, True)
        _retie(slots)
    finally:
        _local.active = False
    return self


def _with_swap(module: nn.Module, fn) -> None:
    with _future_lock:
        before = torch.__future__.get_swap_module_params_on_conversion()
        torch.__future__.set_swap_module_params_on_conversion(True)
        try:
            _original_apply(module, fn, True)
        finally:
            torch.__future__.set_swap_module_params_on_conversion(before)


def _retie(slots) -> None:
    """Makes every module slot that held one tensor before the conversion hold one tensor after it."""
    first: dict[int, torch.Tensor] = {}
    for module, table, name, old in slots:
        current = getattr(module, table)[name]
        kept = first.setdefault(id(old), current)
        if current is not kept:
            getattr(module, table)[name] = kept
