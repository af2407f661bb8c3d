"""Autocast on the `xla` device: `torch.autocast("xla")` applies PyTorch/XLA's mixed-precision policy.

The device is PyTorch's PrivateUse1 backend renamed to `xla`, so its autocast dispatch key is
`AutocastPrivateUse1` (torch prints it `Autocastxla`). Torch has no kernels for that key, so every op
reached it and failed with a dispatcher dump. `register()` gives the key what PyTorch/XLA's C++ gives
its own `AutocastXLA` key: a fallthrough for every op, and a casting kernel for each op of the policy
tables below (PyTorch/XLA's `torch_xla/csrc/autocast_mode.cpp`, the same ops and overloads).

A kernel casts the op's floating-point `xla` tensors (never float64 ones, never CPU ones) and then runs
the op with autocast excluded, as torch's own autocast kernels do. It sits above autograd, so backward
sees the casts and runs each op in the dtype its forward used. The casts are recorded into the graph
like any op: the IR and HLO dumps show `aten::_to_copy` and `convert` to `bf16`.

Unlike torch's C++ kernels these do not cache the cast of a weight within an autocast region: a weight
used twice is cast twice in the graph, which XLA merges into one (the values are the same).
"""

from __future__ import annotations

import torch

# PyTorch/XLA's lists also name the named-tensor overloads (softmax.Dimname, log_softmax.Dimname,
# prod.dim_Dimname, index_copy.dimname): torch.ops does not expose them to Python, so they fall through.

# The ops that run in the autocast dtype (bfloat16 by default): PyTorch/XLA's "lower_precision_fp" list.
LOWER_PRECISION_FP = (
    "conv1d", "conv1d.padding", "conv2d", "conv2d.padding", "conv3d", "conv3d.padding", "bmm", "mm", "baddbmm",
    "addmm", "addbmm", "linear", "matmul", "conv_tbc", "conv_transpose1d", "conv_transpose2d.input",
    "conv_transpose3d.input", "prelu", "relu", "max_pool2d", "einsum",
)
# The ops that run in float32 whatever their inputs' floating dtype: PyTorch/XLA's "fp32" list.
FP32 = (
    "batch_norm", "_softmax", "softmax.int", "log_softmax.int", "binary_cross_entropy", "pow.Tensor_Scalar", "prod",
    "prod.dim_int", "cdist", "trace",
    "cholesky", "cholesky_inverse", "cholesky_solve", "inverse", "reflection_pad1d", "reflection_pad2d",
    "replication_pad1d", "replication_pad2d", "replication_pad3d", "mse_loss", "cosine_embedding_loss", "nll_loss",
    "nll_loss2d", "hinge_embedding_loss", "smooth_l1_loss", "cross_entropy_loss", "l1_loss", "margin_ranking_loss",
    "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss", "ctc_loss.IntList", "ctc_loss.Tensor", "kl_div",
    "multilabel_margin_loss", "binary_cross_entropy_with_logits", "qr", "svd", "triangular_solve",
    "multilabel_margin_loss_forward", "linalg_svd", "linalg_inv_ex",
)
# The ops that run in the widest floating dtype among their inputs and the autocast dtype: "promote".
PROMOTE = ("stack", "cat", "index_copy")
POLICIES = (("lower_precision_fp", LOWER_PRECISION_FP), ("fp32", FP32), ("promote", PROMOTE))

DEFAULT_DTYPE = torch.bfloat16  # PyTorch/XLA's default for torch.autocast("xla") (torch's for PrivateUse1: float16)
DEVICE_TYPE = "xla"
_KEY = "AutocastPrivateUse1"
_EXCLUDE = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

_libraries: list = []  # the registrations live as long as these Library objects


def _eligible(t) -> bool:
    # torch's is_autocast_eligible for PrivateUse1, and its rule that float64 is never cast.
    return (isinstance(t, torch.Tensor) and t.device.type == DEVICE_TYPE and t.is_floating_point()
            and t.dtype is not torch.float64)


def _cast(value, dtype):
    """`value` with each eligible tensor in it (also inside lists and tuples) cast to `dtype`."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if _eligible(value) and value.dtype is not dtype else value
    if isinstance(value, (list, tuple)):
        return type(value)(_cast(v, dtype) for v in value)
    return value


def _widest(values, dtype):
    """The autocast dtype promoted with every eligible tensor's dtype among `values` (the promote policy)."""
    for value in values:
        if isinstance(value, (list, tuple)):
            dtype = _widest(value, dtype)
        elif _eligible(value):
            dtype = torch.promote_types(dtype, value.dtype)
    return dtype


def _kernel(op, policy: str):
    def cast_then_run(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            if policy == "fp32":
                dtype = torch.float32
            else:
                dtype = torch.get_autocast_dtype(DEVICE_TYPE)
                if policy == "promote":
                    dtype = _widest((*args, *kwargs.values()), dtype)
            return op(*_cast(args, dtype), **{k: _cast(v, dtype) for k, v in kwargs.items()})

    cast_then_run.__name__ = f"autocast_{policy}_{op.__name__}"
    return cast_then_run


def _overload(name: str):
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def register() -> None:
    """Gives `AutocastPrivateUse1` a fallthrough for every op and a casting kernel per policy op. Once only.

    Also makes bfloat16 the autocast dtype of `xla` on the calling thread (PyTorch/XLA's default), so that
    `torch.autocast("xla")` without a dtype casts to bfloat16 there.
    """
    if _libraries:
        return
    fallback = torch.library.Library("_", "IMPL")
    fallback.fallback(torch.library.fallthrough_kernel, _KEY)
    kernels = torch.library.Library("aten", "IMPL")
    for policy, names in POLICIES:
        for name in names:
            kernels.impl(name, _kernel(_overload(name), policy), _KEY)
    _libraries.extend((fallback, kernels))
    torch.set_autocast_dtype(DEVICE_TYPE, DEFAULT_DTYPE)
    _answer_the_xla_queries()


def _answer_the_xla_queries() -> None:
    """torch's deprecated `torch.*_autocast_xla_*` functions read and set the `AutocastXLA` key's state, which
    this device (PrivateUse1 named `xla`) never uses: each becomes its `torch.*_autocast_*("xla")` equivalent, with
    torch's deprecation warning, so that PyTorch/XLA code asking `torch.is_autocast_xla_enabled()` is answered."""
    import functools
    import warnings

    def deprecated(name: str, fn):
        @functools.wraps(getattr(torch, name))
        def query(*args):
            warnings.warn(f"torch.{name}() is deprecated. Please use torch.{fn.__name__}('xla', ...) instead.",
                          DeprecationWarning, stacklevel=2)
            return fn(DEVICE_TYPE, *args)

        setattr(torch, name, query)

    deprecated("is_autocast_xla_enabled", torch.is_autocast_enabled)
    deprecated("set_autocast_xla_enabled", torch.set_autocast_enabled)
    deprecated("get_autocast_xla_dtype", torch.get_autocast_dtype)
    deprecated("set_autocast_xla_dtype", torch.set_autocast_dtype)
