"""Op coverage measured with PyTorch's own OpInfo samples (`common_methods_invocations.op_db`).

For each OpInfo the sweep runs a few samples (float32; int64, bool or complex64 for ops without float32
samples) on the CPU (the oracle) and on `xla` (inputs moved with
`.to('xla')`, results read back with `.cpu()`), compares them with `torch.testing.assert_close`, and
classifies the op:

  lowered   every compared sample matches and no CPU fallback ran
  fallback  every compared sample matches, but some aten op ran on the CPU (a `Fallback` event)
  failing   a mismatch or an exception (`reason` says which, briefly)
  skipped   nothing to compare: random or uninitialised outputs, or no sample the CPU accepts

Differentiable ops also get a backward check: the input gradients of `sum(outputs)` on `xla`
against the CPU, for float32 samples, classified the same way.

The aten ops that ran as lowerings are read from `Ops` events (the recorder counts each
lowered op by its overload packet, `aten::add`), so the sweep knows which distinct aten ops it
actually exercised through jax.
"""

from xladev.coverage._check import check_op
from xladev.coverage._plan import (
    CPU_ARGS, DEFAULT_FAMILIES, FLOAT_ONLY, NO_SAMPLES, SKIP, TOLERANCE_OVERRIDES, TOLERANCES, CheckResult, OpResult,
    Summary, default_op_names, op_db, select_ops,
)
from xladev.coverage._pool import Pool, Worker, sweep

__all__ = [
    "CPU_ARGS", "DEFAULT_FAMILIES", "FLOAT_ONLY", "NO_SAMPLES", "SKIP", "TOLERANCE_OVERRIDES", "TOLERANCES",
    "CheckResult", "OpResult", "Summary", "default_op_names", "op_db", "select_ops", "check_op", "Pool", "Worker",
    "sweep",
]
