"""`torch_xla.core.xla_builder` (`xb`) on xladev: `call_jax`, and PyTorch/XLA's hand-written builder over jax.

`xb.call_jax(jax_func, args, kwargs=None, name=None, override_hash=None)` records the function as one
`xla::call_jax` node of the step's graph (xladev's `runtime/record/jax_call.py`; docs/runtime.md, "jax functions in
the graph"). `xb.Op`, `xb.Type` and `xb.Shape` build a computation from XLA's operations, each one the `jax.lax`
operation of the same semantics (`_builder_ops.py`); `torch_xla.core.xla_op_registry.register` runs one on xla
tensors. Building an XLA computation object of its own (`create_computation`, `mkop`, `computation_from_module_proto`)
is not provided: a computation is a jax function here.
"""

from __future__ import annotations

from xladev.runtime.record.jax_call import SPECIALIZATIONS as _JAX_TO_XLA_COMPUTATION_CACHE
from xladev.runtime.record.jax_call import call_jax

from torch_xla import _xladev
from torch_xla.core._builder_ops import (
    PT_XLA_TYPE_MAP as _PT_XLA_TYPE_MAP, XLA_PT_TYPE_MAP as _XLA_PT_TYPE_MAP, Op, Shape, Type, mkshape, tensor_shape,
)

__all__ = ["Op", "Shape", "Type", "call_jax", "mkshape", "tensor_shape"]


def _jax_to_xla_computation_cache_elements() -> int:
    """How many specializations (function, argument structure, static values, shapes, jax config) are traced
    and kept: PyTorch/XLA's count of jax computations its tests read."""
    return len(_JAX_TO_XLA_COMPUTATION_CACHE)


__getattr__ = _xladev.module_getattr(__name__)
