"""`torch_xla.core.xla_op_registry` on xladev: an operation written with `xb.Op` runs on xla tensors.

`register(name, opfn)` returns an operation; calling it with xla tensors (and Python keyword arguments, static)
traces `opfn` on `xb.Op`s of them through jax and records it as one node of the step's graph (xladev's `call_jax`):
it compiles with the rest of the step, once per shapes and keyword values. One tensor comes back for a single
result, a tuple for a tuple op.
"""

from __future__ import annotations

from xladev.runtime.record.jax_call import call_jax

from torch_xla.core._builder_ops import run_ops

__all__ = ["Op", "register"]


class Op:
    """An operation on xla tensors written with `xb.Op` (PyTorch/XLA's `xla_op_registry.Op`).

    Args:
      name: its name (the graph's node is `_op_<name>`).
      opfn: a function of `xb.Op`s returning an `xb.Op` (a tuple op for several results).
    """

    def __init__(self, name: str, opfn):
        self._name = name
        self._opfn = opfn

        def lowering(*values, **kwargs):
            return run_ops(opfn, values, kwargs)

        lowering.__name__ = f"_op_{name}"
        self._lowering = lowering

    def __call__(self, *args, **kwargs):
        """Runs the operation on xla tensors `args`; `kwargs` are Python values passed to `opfn`.

        Returns:
          A tensor, or a tuple of tensors for a tuple result.
        """
        result = call_jax(self._lowering, tuple(args), kwargs or None, name=f"_op_{self._name}")
        if isinstance(result, (tuple, list)):
            return result[0] if len(result) == 1 else tuple(result)
        return result


def register(name: str, opfn) -> Op:
    """An operation on xla tensors from `opfn`, a function of `xb.Op`s (see `Op`)."""
    return Op(name, opfn)
