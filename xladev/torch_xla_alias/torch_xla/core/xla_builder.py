"""`torch_xla.core.xla_builder` (`xb`) on xladev: `call_jax`, running a jax function inside the lazy graph.

`xb.call_jax(jax_func, args, kwargs=None, name=None, override_hash=None)` records the function as one
`xla::call_jax` node of the step's graph (xladev's `runtime/record/jax_call.py`; docs/runtime.md, "jax functions in
the graph"). PyTorch/XLA's hand-written XLA builder (`xb.Op`, `create_computation`, `mkop`...) is not provided.
"""

from __future__ import annotations

from xladev.runtime.record.jax_call import SPECIALIZATIONS as _JAX_TO_XLA_COMPUTATION_CACHE
from xladev.runtime.record.jax_call import call_jax

from torch_xla import _xladev

__all__ = ["call_jax"]


def _jax_to_xla_computation_cache_elements() -> int:
    """How many specializations (function, argument structure, static values, shapes, jax config) are traced
    and kept: PyTorch/XLA's count of jax computations its tests read."""
    return len(_JAX_TO_XLA_COMPUTATION_CACHE)


__getattr__ = _xladev.module_getattr(__name__)
