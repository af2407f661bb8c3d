"""What the coverage sweep compares and how closely, its result records, and which OpInfos it selects."""

from __future__ import annotations

import dataclasses
from typing import Iterable

import torch


# ---- what is compared, and how closely ---------------------------------------------------------
TOLERANCES = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-7, 1e-7)}

# Per-op float32 tolerances (rtol, atol), each with its reason.
TOLERANCE_OVERRIDES: dict[str, tuple[float, float]] = {
    # softmax(QK^T)V backward sums over the key sequence twice; XLA and eager order the sums
    # differently, which moves near-zero gradients by ~1e-5.
    "nn.functional.scaled_dot_product_attention": (1e-4, 3e-5),
}

# Ops whose outputs cannot be compared with the CPU: random numbers (the device has its own RNG and
# cannot reproduce the CPU's stream) or uninitialised memory.
_RANDOM = "random output: the xla device RNG cannot reproduce the CPU's random stream"
_UNINIT = "uninitialised output (empty memory) has no value to compare"
SKIP: dict[str, str] = {
    **{name: _RANDOM for name in (
        "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal",
        "normal.in_place", "normal.number_mean", "uniform", "rand_like", "randint", "randint_like", "randn",
        "randn_like", "nn.functional.dropout", "nn.functional.dropout2d", "nn.functional.dropout3d",
        "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout.with_train", "nn.functional.rrelu",
        "nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d", "svd_lowrank",
        "pca_lowrank", "torch.ops.aten._flash_attention_forward", "torch.ops.aten._efficient_attention_forward",
    )},
    **{name: _UNINIT for name in (
        "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
    )},
    "resize_": "in-place resize of storage; xla tensors cannot change size in place (a documented limit)",
    "resize_as_": "in-place resize of storage; xla tensors cannot change size in place (a documented limit)",
    "item": "returns a Python number read from the device; exercised by every .item() test",
    "hash_tensor": "a hash of the bit pattern, not a numeric result",
    "to_sparse": "sparse layouts do not exist on xla",
    "sparse.sampled_addmm": "sparse layouts do not exist on xla",
    "sparse.mm.reduce": "sparse layouts do not exist on xla",
    "torch._scaled_mm": "float8 matmul: CUDA-only op with no CPU float32 samples",
    "torch._scaled_mm_v2": "float8 matmul: CUDA-only op with no CPU float32 samples",
    "bmm.triton_optimized": "CUDA/triton-only variant",
    **{name: "jiterator: CUDA/ROCm-only (the CPU rejects it)" for name in (
        "jiterator_unary", "jiterator_binary", "jiterator_4inputs_with_extra_args", "jiterator_binary_return_by_ref",
        "jiterator_2inputs_2outputs",
    )},
}

# check_op's reason when an op has samples in none of the compared dtypes (complex-only ops...).
NO_SAMPLES = "no float32, int64, bool or complex64 samples"

# Ties make integer and bool samples ambiguous for these: the order of equal elements is unspecified
# (sort is not stable by default, topk partially sorts), so only float32 samples (no ties) compare.
FLOAT_ONLY: dict[str, str] = {name: "ties in int64/bool samples leave the order of equal elements unspecified"
                              for name in ("sort", "argsort", "topk", "msort", "kthvalue", "mode", "median",
                                           "nanmedian")}

# Arguments PyTorch requires on the CPU even when the input is on a device.
CPU_ARGS: dict[str, str] = {
    "tensor_split": "tensor_indices_or_sections must be a CPU tensor (PyTorch checks it)",
}

# The default subset: a fixed list of ~200 OpInfos that covers every family of ops a model uses
# (elementwise, comparisons, reductions, matmuls, shape/view, indexing, nn.functional for MLPs, CNNs
# and transformers, losses, factories). CI runs it; `xladev coverage --full` / `make opinfo-full`
# sweeps the whole op_db.
DEFAULT_FAMILIES: dict[str, tuple[str, ...]] = {
    "unary elementwise": (
        "abs", "neg", "exp", "expm1", "log", "log1p", "log2", "sqrt", "rsqrt", "reciprocal", "square", "sin",
        "cos", "tan", "asin", "acos", "atan", "sinh", "tanh", "atanh", "sigmoid", "erf", "erfinv", "lgamma",
        "digamma", "floor", "ceil", "trunc", "frac", "round", "sign", "sgn", "nan_to_num", "logit", "bitwise_not",
        "logical_not", "clone",
    ),
    "binary elementwise": (
        "add", "sub", "mul", "div.no_rounding_mode", "div.trunc_rounding", "div.floor_rounding", "floor_divide",
        "remainder", "fmod", "pow", "__rpow__", "atan2", "maximum", "minimum", "fmax", "fmin", "hypot", "copysign",
        "xlogy", "lerp", "addcmul", "addcdiv", "clamp", "clamp_min", "clamp_max", "rsub", "logaddexp",
        "bitwise_and", "bitwise_or", "bitwise_xor", "logical_and", "logical_or", "where", "masked_fill",
    ),
    "comparisons and predicates": (
        "eq", "ne", "lt", "le", "gt", "ge", "isnan", "isinf", "isfinite", "isclose",
    ),
    "reductions and scans": (
        "sum", "mean", "prod", "amax", "amin", "max.reduction_no_dim", "max.reduction_with_dim",
        "min.reduction_with_dim", "argmax", "argmin", "any", "all", "var", "std", "var_mean", "logsumexp",
        "linalg.vector_norm", "norm", "cumsum", "cumprod", "cummax", "logcumsumexp", "nansum", "count_nonzero",
    ),
    "softmax and sorting": (
        "softmax", "log_softmax", "nn.functional.softmin", "sort", "argsort", "topk",
    ),
    "matmul family": (
        "mm", "bmm", "matmul", "mv", "dot", "addmm", "addmv", "baddbmm", "addbmm", "outer", "einsum", "tensordot",
        "nn.functional.linear",
    ),
    "shape and view": (
        "view", "reshape", "flatten", "unflatten", "squeeze", "unsqueeze", "permute", "transpose", "t", "movedim",
        "expand", "broadcast_to", "narrow", "select", "split", "chunk", "tensor_split", "unbind", "unfold",
        "diagonal", "diag_embed", "cat", "stack", "flip", "roll", "repeat", "tile", "tril", "triu", "as_strided",
        "constant_pad_nd",
    ),
    "indexing, gather and scatter": (
        "__getitem__", "index_select", "gather", "take_along_dim", "scatter", "scatter_add", "scatter_reduce.sum",
        "scatter_reduce.amax", "index_add", "index_copy", "index_fill", "index_put", "slice_scatter",
        "select_scatter", "masked_scatter", "masked_select", "nonzero", "repeat_interleave", "searchsorted",
        "nn.functional.one_hot",
    ),
    "nn.functional (MLP, CNN, transformer)": (
        "nn.functional.relu", "nn.functional.relu6", "nn.functional.gelu", "nn.functional.silu",
        "nn.functional.mish", "nn.functional.elu", "nn.functional.leaky_relu", "nn.functional.hardtanh",
        "nn.functional.hardswish", "nn.functional.hardsigmoid", "nn.functional.softplus",
        "nn.functional.logsigmoid", "nn.functional.threshold", "nn.functional.glu", "nn.functional.prelu",
        "nn.functional.layer_norm", "nn.functional.rms_norm", "nn.functional.group_norm",
        "nn.functional.batch_norm", "nn.functional.conv1d", "nn.functional.conv2d",
        "nn.functional.conv_transpose2d", "nn.functional.max_pool2d", "nn.functional.avg_pool2d",
        "nn.functional.adaptive_avg_pool2d", "nn.functional.embedding", "nn.functional.pad.reflect",
        "nn.functional.pad.replicate", "nn.functional.interpolate.nearest", "nn.functional.interpolate.bilinear",
        "nn.functional.pixel_shuffle", "nn.functional.unfold", "nn.functional.cosine_similarity",
        "nn.functional.normalize", "nn.functional.scaled_dot_product_attention",
    ),
    "losses": (
        "nn.functional.cross_entropy", "nn.functional.nll_loss", "nn.functional.mse_loss", "nn.functional.l1_loss",
        "nn.functional.smooth_l1_loss", "nn.functional.huber_loss", "nn.functional.binary_cross_entropy",
        "nn.functional.binary_cross_entropy_with_logits", "nn.functional.kl_div",
    ),
    "linear algebra": (
        "linalg.solve", "linalg.inv", "linalg.det", "linalg.cholesky", "linalg.qr", "linalg.svd", "linalg.eigh",
        "linalg.lu_factor", "linalg.solve_triangular", "linalg.pinv",
    ),
    "fft and complex numbers": (
        "fft.fft", "fft.ifft", "fft.rfft", "fft.irfft", "fft.hfft", "fft.fftn", "stft", "view_as_complex", "complex",
        "polar",
    ),
    "special functions": (
        "special.bessel_j0", "special.bessel_y1", "special.modified_bessel_k0", "special.airy_ai", "special.zeta",
        "special.chebyshev_polynomial_t", "special.shifted_chebyshev_polynomial_w", "special.hermite_polynomial_h",
        "special.legendre_polynomial_p",
    ),
    "order statistics, distances, histograms": (
        "median", "kthvalue", "mode", "cdist", "nn.functional.pdist", "histc", "histogram", "equal", "cov",
        "index_reduce.amax", "put",
    ),
    "embedding bags, CTC, resampling": (
        "nn.functional.embedding_bag", "nn.functional.ctc_loss", "grid_sampler_3d", "_upsample_bilinear2d_aa",
        "nn.functional.bilinear", "_segment_reduce.lengths", "nn.functional.multilabel_margin_loss",
    ),
    "random (checked by distribution)": (
        "bernoulli", "normal", "multinomial", "nn.functional.rrelu",
    ),
    "factories and conversions": (
        "zeros", "ones", "full", "zeros_like", "ones_like", "full_like", "new_zeros", "new_full", "arange",
        "linspace", "eye", "tril_indices", "fill", "to", "float", "long", "bool",
    ),
}


def default_op_names() -> list[str]:
    """The default subset's OpInfo names (`OpInfo.full_name`), in family order, without duplicates."""
    seen: dict[str, None] = {}
    for names in DEFAULT_FAMILIES.values():
        for name in names:
            seen.setdefault(name, None)
    return list(seen)


# ---- results -----------------------------------------------------------------------------------
@dataclasses.dataclass
class CheckResult:
    """The outcome of one direction (forward or backward) of one OpInfo.

    Attributes:
      status: "lowered", "fallback", "failing" or "skipped" (None when not checked).
      reason: for failing/skipped, a one-line explanation; for fallback, the ops that fell back.
      samples: how many samples were compared.
      fallbacks: aten ops (`aten::op.overload`) that ran on the CPU.
      lowered: aten overload packets (`aten::op`) that ran as jax lowerings.
    """

    status: str | None = None
    reason: str = ""
    samples: int = 0
    fallbacks: list[str] = dataclasses.field(default_factory=list)
    lowered: list[str] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.status in ("lowered", "fallback")


@dataclasses.dataclass
class OpResult:
    """Forward and backward results of one OpInfo."""

    name: str
    forward: CheckResult
    backward: CheckResult = dataclasses.field(default_factory=CheckResult)
    dtypes: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "OpResult":
        return cls(data["name"], CheckResult(**data["forward"]), CheckResult(**data["backward"]),
                   list(data.get("dtypes", [])), float(data.get("seconds", 0.0)))


@dataclasses.dataclass
class Summary:
    """Totals over a sweep."""

    results: list[OpResult]

    def count(self, status: str, direction: str = "forward") -> int:
        return sum(1 for r in self.results if getattr(r, direction).status == status)

    def lowered_aten_ops(self) -> list[str]:
        """Distinct aten packets that ran as lowerings in OpInfos whose forward parity passed."""
        found: set[str] = set()
        for r in self.results:
            if r.forward.passed:
                found.update(r.forward.lowered)
        return sorted(found)

    def fallback_aten_ops(self) -> list[str]:
        found: set[str] = set()
        for r in self.results:
            found.update(r.forward.fallbacks)
            found.update(r.backward.fallbacks)
        return sorted(found)

    def totals(self) -> dict:
        out = {}
        for direction in ("forward", "backward"):
            out[direction] = {s: self.count(s, direction) for s in ("lowered", "fallback", "failing", "skipped")}
        out["lowered_aten_ops"] = len(self.lowered_aten_ops())
        out["ops"] = len(self.results)
        return out

    def to_json(self) -> dict:
        return {"totals": self.totals(), "lowered_aten_ops": self.lowered_aten_ops(),
                "fallback_aten_ops": self.fallback_aten_ops(), "ops": [r.to_json() for r in self.results]}


# ---- selecting OpInfos -----------------------------------------------------------------------------
def op_db() -> list:
    from torch.testing._internal.common_methods_invocations import op_db as db

    return db


def select_ops(names: Iterable[str] | None = None, full: bool = False) -> list:
    """OpInfos by `full_name` (or by `name`, which selects every variant); the default subset when None.

    Raises:
      KeyError: a name matches no OpInfo.
    """
    db = op_db()
    if full:
        return list(db)
    wanted = list(names) if names is not None else default_op_names()
    by_full: dict[str, list] = {}
    for op in db:
        by_full.setdefault(op.full_name, []).append(op)
    by_name: dict[str, list] = {}
    for op in db:
        by_name.setdefault(op.name, []).append(op)
    out, seen = [], set()
    for name in wanted:
        found = by_full.get(name) or by_name.get(name)
        if not found:
            raise KeyError(f"no OpInfo named {name!r}")
        for op in found:
            if id(op) not in seen:
                seen.add(id(op))
                out.append(op)
    return out
