"""Handlers of small ops with a static output shape: what their lowerings alone cannot do.

- `equal`, `allclose` return a Python bool: the comparison is recorded on the device and only its
  one-element answer is read back (a value access, like `.item()`), never the inputs.
- `split_with_sizes_copy`, `unbind_copy` return a list of tensors, which the recorder does not take
  as one node's output: each piece is recorded as a view of the input, then copied.
- `logspace.out` computes the factory's values on the device and writes them into `out`.
- `as_strided_scatter` is lowered for a contiguous input only (the strides address PyTorch's layout).
- `combinations` has a static size (n choose r, or n+r-1 choose r with replacement), but PyTorch's
  composite builds it with masked_select. On xla it gathers through a constant table of index tuples
  instead (an autograd kernel, so the gradient flows through the gather).

The lowerings are in `lowering/static_misc.py`.
"""

from __future__ import annotations

import torch

from xladev.runtime.record.dispatch import handle, handle_regular
from xladev.runtime.record.fallback import run_on_cpu
from xladev.runtime.graph.meta import _to_meta
from xladev.runtime.record.recording import record, write_into
from xladev.runtime.record.special_handlers import special
from xladev.runtime.record.tensor import XlaTensor
from xladev.runtime.execute.transfers import download

aten = torch.ops.aten


def _read_bool(t, what: str) -> bool:
    """The value of a one-element device bool, read back as the cause `what`."""
    return bool(download([t], what)[0].item())


@special(aten.equal.default)
def _equal(func, args, kwargs):
    a, b = args[0], args[1]
    if tuple(a.shape) != tuple(b.shape):
        return False  # sizes alone decide: nothing to read from the device
    if a.numel() == 0:
        return True
    same = handle(aten.all.default, (handle(aten.eq.Tensor, (a, b), {}),), {})
    return _read_bool(same, "torch.equal")


@special(aten.allclose.default)
def _allclose(func, args, kwargs):
    names = ("self", "other", "rtol", "atol", "equal_nan")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    close = handle(aten.isclose.default, (bound["self"], bound["other"], bound.get("rtol", 1e-05),
                                          bound.get("atol", 1e-08), bound.get("equal_nan", False)), {})
    if close.numel() == 0:
        return True
    return _read_bool(handle(aten.all.default, (close,), {}), "torch.allclose")


def _validate(func, args, kwargs):
    """Runs `func` on meta tensors: PyTorch's own argument checks and error messages."""
    return func(*_to_meta(tuple(args)), **{k: _to_meta(v) for k, v in kwargs.items()})


@special(aten.split_with_sizes_copy.default)
def _split_with_sizes_copy(func, args, kwargs):
    _validate(func, args, kwargs)
    pieces = handle(aten.split_with_sizes.default, args, kwargs)
    return [handle(aten.clone.default, (p,), {}) for p in pieces]


@special(aten.unbind_copy.int)
def _unbind_copy(func, args, kwargs):
    _validate(func, args, kwargs)
    x = args[0]
    dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
    dim = dim % max(x.dim(), 1)
    return [handle(aten.clone.default, (handle(aten.select.int, (x, dim, i), {}),), {}) for i in range(x.shape[dim])]


@special(aten.logspace.out)
def _logspace_out(func, args, kwargs):
    out = kwargs["out"]
    if not isinstance(out, XlaTensor):
        return run_on_cpu(func, args, kwargs)
    result = record(aten.logspace.default, args, {"dtype": out.dtype}, device_index=out._st.device_index)
    if tuple(out.shape) != tuple(result.shape):  # `out` must be resized: not in place on xla
        return run_on_cpu(func, args, kwargs)
    write_into(out, result)
    return out


@special(aten.as_strided_scatter.default)
def _as_strided_scatter_special(func, args, kwargs):
    """The strides address the input's storage as PyTorch's clone lays it out: lowered for contiguous inputs."""
    if not args[0].is_contiguous():
        return run_on_cpu(func, args, kwargs)
    return handle_regular(func, args, kwargs)


# ---- combinations ---------------------------------------------------------------------------------------
def _combinations_autograd(self, r=2, with_replacement=False):
    """`torch.combinations` on xla: `self[table]` with the (count, r) table of index tuples, in
    itertools' lexicographic order, which is PyTorch's."""
    import itertools

    torch._check(self.dim() == 1, lambda: f"Expect a 1D vector, but got shape {list(self.shape)}")
    torch._check(r >= 0, lambda: f"Expect a non-negative number, but got {r}")
    if r == 0:
        return self.new_empty(0)
    choose = itertools.combinations_with_replacement if with_replacement else itertools.combinations
    table = torch.tensor(list(choose(range(self.shape[0]), r)), dtype=torch.long).reshape(-1, r)
    return self[table.to(self.device)]


# Kept alive for the life of the process: dropping the library would drop the registration.
_lib = torch.library.Library("aten", "IMPL")
_lib.impl("combinations", _combinations_autograd, "AutogradPrivateUse1")
