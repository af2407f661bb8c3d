"""Why an op runs on the CPU, and what to do about it: the one table behind every fallback message.

The runtime's debug analysis (PT_XLA_DEBUG_LEVEL), `xladev report`, `xladev coverage` and
docs/ops.md all name a CPU-fallback op's reason from here, as one of three:

* ``data-dependent output shape``: the output's size depends on the values (nonzero, unique...).
  XLA compiles static shapes, so the op cannot be part of a graph; every new size would also be a
  new graph after it.
* ``no XLA equivalent``: XLA has no operation for it and no static-shape formulation exists.
* ``not yet done``: it could be lowered; xladev has not done it yet (the entry says what is missing).

An op missing from the table has no known reason: it is reported as not lowered yet, with generic
advice. `REMEDIES` also holds advice for ops that xladev lowers but PyTorch/XLA reports as not
lowered in its own logs, which `xladev report` reads too.

Pure data and lookups: nothing here touches the runtime.
"""

from __future__ import annotations

import dataclasses

DATA_DEPENDENT = "data-dependent output shape"
NO_XLA_EQUIVALENT = "no XLA equivalent"
NOT_YET_DONE = "not yet done"
REASONS = (DATA_DEPENDENT, NO_XLA_EQUIVALENT, NOT_YET_DONE)


@dataclasses.dataclass(frozen=True)
class CpuOp:
    """An op that stays on the CPU in xladev.

    Attributes:
      reason: one of REASONS.
      why: one sentence on what makes it so, for this op.
    """

    reason: str
    why: str


_MASK_ADVICE = ("Avoid data-dependent shapes: boolean-mask indexing (x[mask]), nonzero, masked_select "
                "and one-argument torch.where all call nonzero. Rewrite with masked arithmetic on the full "
                "tensor: torch.where(mask, x, 0), (x * mask).sum() / mask.sum(); use "
                "torch.nonzero_static(x, size=N) if indices are really needed.")
_MEDIAN_ADVICE = ("Compute it with lowered ops: x.sort(dim).values.select(dim, (n - 1) // 2) or "
                  "torch.kthvalue(x, (n + 1) // 2, dim); use mean if a robust statistic is not needed.")
_UNIQUE_ADVICE = ("torch.unique has a data-dependent size. If the value range is known, count with "
                  "one_hot(x, num_classes).sum(0) or scatter_add into a fixed-size tensor.")
_DATA = "its output has as many elements as the data says, which XLA cannot compile"
_MASKED_WRITE = ("x[mask] = v with one value of v per True mask element needs their count; a scalar or a broadcast "
                 "row is lowered")
_BUNCH_KAUFMAN = "XLA and jax have no Bunch-Kaufman (LAPACK sytrf) factorisation"
_CUSTOM_OP = ("a torch.library custom op (torch_nn namespace) reaches the device whole; running its Python "
              "implementation on the device instead of the CPU is not written")
_LDL_ADVICE = "Use torch.linalg.cholesky (positive-definite) or torch.linalg.lu_factor instead."
_LINEAR_CE_ADVICE = "Call F.linear then F.cross_entropy: both are lowered."

# Keys are base op names (no ``aten::``, no overload); an in-place variant (``index_put_``) is looked up
# under its out-of-place name, which has the same reason and remedy.

# Base op name -> why it stays on the CPU in xladev.
STAYS_ON_CPU: dict[str, CpuOp] = {
    "nonzero": CpuOp(DATA_DEPENDENT, "one row per nonzero element: " + _DATA),
    "argwhere": CpuOp(DATA_DEPENDENT, "calls nonzero: " + _DATA),
    "masked_select": CpuOp(DATA_DEPENDENT, "one element per True mask element: " + _DATA),
    "unique": CpuOp(DATA_DEPENDENT, "one element per distinct value: " + _DATA),
    "_unique": CpuOp(DATA_DEPENDENT, "one element per distinct value: " + _DATA),
    "_unique2": CpuOp(DATA_DEPENDENT, "one element per distinct value: " + _DATA),
    "unique_dim": CpuOp(DATA_DEPENDENT, "one slice per distinct slice: " + _DATA),
    "unique_consecutive": CpuOp(DATA_DEPENDENT, "one element per run of equal values: " + _DATA),
    "unique_dim_consecutive": CpuOp(DATA_DEPENDENT, "one slice per run of equal slices: " + _DATA),
    "bincount": CpuOp(DATA_DEPENDENT, "max(x) + 1 bins: " + _DATA),
    "repeat_interleave": CpuOp(DATA_DEPENDENT, "without output_size, the total of the repeats sets the size: " + _DATA),
    "index": CpuOp(DATA_DEPENDENT, "x[mask] with a boolean mask has one element per True mask element: " + _DATA),
    "index_put": CpuOp(DATA_DEPENDENT, _MASKED_WRITE),
    "linalg_lstsq": CpuOp(DATA_DEPENDENT, "with driver gelsd, gelss or gelsy on a tall matrix, residuals are returned "
                                          "only when every matrix has full rank, which the values decide"),
    "linalg_ldl_factor_ex": CpuOp(NO_XLA_EQUIVALENT, _BUNCH_KAUFMAN + ", and its pivot format cannot be built from "
                                                     "the factorisations they have"),
    "linalg_ldl_factor": CpuOp(NO_XLA_EQUIVALENT, _BUNCH_KAUFMAN),
    "linalg_ldl_solve": CpuOp(NO_XLA_EQUIVALENT, "solves with the Bunch-Kaufman factors, which only the CPU makes"),
    "convolution": CpuOp(NO_XLA_EQUIVALENT, "integer convolutions on a GPU only: XLA's GPU backend convolves "
                                           "through cuDNN, which has no integer kernels (on the CPU backend they "
                                           "are lowered)"),
    "_linear_cross_entropy_batch_chunked": CpuOp(NOT_YET_DONE, _CUSTOM_OP),
    "_linear_cross_entropy_batch_chunked_no_reduction": CpuOp(NOT_YET_DONE, _CUSTOM_OP),
}

# Base op name -> a concrete rewrite. Covers the ops above and ops PyTorch/XLA leaves on the CPU.
REMEDIES: dict[str, str] = {
    "nonzero": _MASK_ADVICE, "masked_select": _MASK_ADVICE, "argwhere": _MASK_ADVICE,
    "masked_scatter": _MASK_ADVICE.replace("masked_select", "masked_scatter"),
    "median": _MEDIAN_ADVICE, "nanmedian": "Mask the NaNs out first, then: " + _MEDIAN_ADVICE,
    "quantile": "Sort once and index (x.sort(dim).values) instead of torch.quantile.",
    "unique": _UNIQUE_ADVICE, "_unique": _UNIQUE_ADVICE, "_unique2": _UNIQUE_ADVICE, "unique_dim": _UNIQUE_ADVICE,
    "unique_consecutive": _UNIQUE_ADVICE, "unique_dim_consecutive": _UNIQUE_ADVICE,
    "repeat_interleave": "Pass output_size= to repeat_interleave so the result shape is static.",
    "bincount": "Use torch.zeros(n).scatter_add_(0, x, ones) with a fixed n instead of bincount.",
    "index": _MASK_ADVICE, "index_put": "Write through the mask with torch.where(mask, v, x) when v broadcasts.",
    "linalg_ldl_factor_ex": _LDL_ADVICE, "linalg_ldl_factor": _LDL_ADVICE,
    "linalg_ldl_solve": "Use torch.linalg.cholesky + cholesky_solve, or lu_factor + lu_solve, instead.",
    "linalg_lstsq": "Use driver='gels' (full-rank problems) or torch.linalg.pinv(A) @ B.",
    "convolution": "Convolve in floating point: x.float() and w.float(), then round the result back.",
    "_linear_cross_entropy_batch_chunked": _LINEAR_CE_ADVICE,
    "_linear_cross_entropy_batch_chunked_no_reduction": _LINEAR_CE_ADVICE,
    "histc": "Bucketize into a fixed number of bins with torch.bucketize + scatter_add_.",
    "equal": "torch.equal returns a Python bool; keep it on the device: (a == b).all().",
    "allclose": "torch.allclose returns a Python bool; keep it on the device: torch.isclose(a, b).all().",
}


def op_base_name(counter_name: str) -> str:
    """``aten::median.dim_values`` -> ``median``."""
    name = counter_name.split("::", 1)[-1]
    return name.split(".", 1)[0]


def _lookup(table: dict, counter_name: str):
    """`table`'s entry for the op, an in-place variant (``index_put_``) under its out-of-place name."""
    base = op_base_name(counter_name)
    found = table.get(base)
    if found is None and base.endswith("_") and not base.endswith("__"):
        found = table.get(base[:-1])
    return found


def cpu_op(counter_name: str) -> CpuOp | None:
    """The table entry of an op (``aten::nonzero`` or ``nonzero``), or None when it has no known reason."""
    return _lookup(STAYS_ON_CPU, counter_name)


def reason(counter_name: str) -> str:
    """The op's reason for running on the CPU: one of REASONS, or ``not lowered yet`` when unknown."""
    entry = cpu_op(counter_name)
    return entry.reason if entry else "not lowered yet"


def is_data_dependent(counter_name: str) -> bool:
    """Whether the op's output shape depends on tensor values."""
    entry = cpu_op(counter_name)
    return entry is not None and entry.reason == DATA_DEPENDENT


def explanation(counter_name: str) -> str:
    """One sentence for messages: the reason and what makes it so, e.g. ``data-dependent output shape
    (one row per nonzero element: ...)``."""
    entry = cpu_op(counter_name)
    if entry is None:
        return "not lowered yet: xladev has no lowering for it"
    return f"{entry.reason} ({entry.why})"


def remedy(counter_name: str) -> str:
    """The concrete fix for a CPU-fallback op, or generic advice for ops with no known remedy."""
    found = _lookup(REMEDIES, counter_name)
    if found:
        return found
    return (f"{counter_name} has no XLA lowering. Rewrite it with lowered ops, move it out of the step "
            "(or to the CPU explicitly, once), and open a PyTorch/XLA GitHub issue with the lowering request.")


def markdown_table() -> str:
    """The table of docs/ops.md: every op that stays on the CPU, its reason and the fix, grouped by reason.

    docs/ops.md holds this text verbatim (tests/test_docs.py checks it), so the doc never drifts from
    the messages.
    """
    order = {reason: i for i, reason in enumerate(REASONS)}
    lines = ["| op | reason | why | what to do |", "| --- | --- | --- | --- |"]
    for name, entry in sorted(STAYS_ON_CPU.items(), key=lambda item: (order[item[1].reason], item[0])):
        lines.append(f"| `{name}` | {entry.reason} | {entry.why} | {remedy(name)} |")
    return "\n".join(lines) + "\n"
