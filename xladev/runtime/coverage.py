"""Op coverage measured with PyTorch's own OpInfo samples (`common_methods_invocations.op_db`).

For each OpInfo the sweep runs a few samples on the CPU (the oracle) and on `xla` (inputs moved with
`.to('xla')`, results read back with `.cpu()`), compares them with `torch.testing.assert_close`, and
classifies the op:

  lowered   every compared sample matches and no CPU fallback ran
  fallback  every compared sample matches, but some aten op ran on the CPU (a `FallbackOp` event)
  failing   a mismatch or an exception (`reason` says which, briefly)
  skipped   nothing to compare: random or uninitialised outputs, or no sample the CPU accepts

Differentiable ops also get a backward check: the input gradients of `sum(outputs)` on `xla`
against the CPU, for float32 samples, classified the same way.

The aten ops that ran as lowerings are read from `OpsRecorded` events (the recorder counts each
lowered op by its overload packet, `aten::add`), so the sweep knows which distinct aten ops it
actually exercised through jax.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import queue
import threading
import time
from typing import Iterable

import torch
from torch.utils import _pytree as pytree

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
NO_SAMPLES = "no float32, int64 or bool samples"

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


# ---- running one sample ------------------------------------------------------------------------------
class _Incomparable(Exception):
    """The CPU itself rejects the sample (or it has nothing to differentiate): not counted."""


class _Random(Exception):
    """Two CPU runs of the same sample differ: the op is random and cannot be compared."""


class _Watch:
    """Collects CPU fallbacks and lowered op names from the event bus while active.

    Lowered ops are only counted inside `ops_of_interest()`: the op under test, not the transfers
    around it (uploading an input records `empty_strided`, for instance).
    """

    def __init__(self) -> None:
        self.fallbacks: set[str] = set()
        self.lowered: set[str] = set()
        self.random_draws = 0
        self._counting = False

    def __call__(self, event) -> None:
        from xladev.events import FallbackOp, OpsRecorded

        if isinstance(event, FallbackOp):
            self.fallbacks.add(event.name)
        elif isinstance(event, OpsRecorded) and self._counting:
            self.lowered.update(n for n in event.counts if n.startswith("aten::"))
            self.random_draws += event.counts.get("xla::rng", 0)  # random ops record as xla::rng

    @contextlib.contextmanager
    def active(self):
        import xladev
        from xladev.events import FallbackOp, OpsRecorded, bus

        xladev.mark_step()  # flush what earlier code recorded, so it is not counted here
        sub = bus.subscribe(self, (FallbackOp, OpsRecorded))
        try:
            yield self
        finally:
            try:
                xladev.mark_step()
            finally:
                sub.close()

    @contextlib.contextmanager
    def ops_of_interest(self):
        """Counts the ops recorded inside the block; a barrier on each side delimits them."""
        import xladev

        xladev.mark_step()  # the inputs' uploads are flushed uncounted
        self._counting = True
        try:
            yield
            xladev.mark_step()  # a barrier always flushes the op counts into an OpsRecorded event
        finally:
            self._counting = False


def _is_xla(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "xla"


def _xla_device_arg(value):
    """`device='cpu'` in a factory sample becomes the xla device."""
    if isinstance(value, torch.device) and value.type == "cpu":
        return torch.device("xla", 0)
    if isinstance(value, str) and value == "cpu":
        return "xla"
    return value


def _to_xla(sample, requires_grad: bool = False, keep_args_on_cpu: bool = False):
    def move(t):
        if isinstance(t, torch.dtype):
            return t
        out = t.detach().to("xla")
        if requires_grad and t.requires_grad:
            out.requires_grad_(True)
        return out

    args = sample.args
    moved = sample.transform(move)
    if keep_args_on_cpu:
        moved.args = args
    moved.args = tuple(_xla_device_arg(a) for a in moved.args)
    if "device" in moved.kwargs:
        moved.kwargs = dict(moved.kwargs, device=_xla_device_arg(moved.kwargs["device"]))
    return moved


def _fresh_cpu(sample):
    """A copy of the sample, so that an op writing to its inputs cannot change the next run."""

    def copy(t):
        if isinstance(t, torch.dtype):
            return t
        out = t.detach().clone()
        if t.requires_grad:
            out.requires_grad_(True)
        return out

    return sample.transform(copy)


def _call(op, sample):
    return op(sample.input, *sample.args, **sample.kwargs)


def _read_back(value, what: str):
    """CPU copies of the device tensors in `value` (a tensor, a number or a nest of them)."""

    def down(v):
        if isinstance(v, torch.Tensor):
            if not _is_xla(v):
                raise AssertionError(f"{what} is on {v.device}, not on xla")
            return v.detach().cpu()
        return v

    return pytree.tree_map(down, value)


def _tolerance(value, name: str) -> tuple[float, float]:
    dtype = value.dtype if isinstance(value, torch.Tensor) else (torch.float32 if isinstance(value, float) else None)
    if dtype in TOLERANCES:
        return TOLERANCE_OVERRIDES.get(name, TOLERANCES[dtype]) if dtype == torch.float32 else TOLERANCES[dtype]
    return 0.0, 0.0  # integers and bools are exact; other dtypes fall to assert_close's defaults below


def _compare(actual, expected, name: str) -> None:
    """assert_close on each leaf, with the tolerance of the expected leaf's dtype (exact for integers)."""
    exp_leaves, exp_spec = pytree.tree_flatten(expected)
    act_leaves, act_spec = pytree.tree_flatten(actual)
    if len(exp_leaves) != len(act_leaves):
        raise AssertionError(f"output structure differs: {act_spec} != {exp_spec}")
    for i, (a, e) in enumerate(zip(act_leaves, exp_leaves)):
        rtol, atol = _tolerance(e, name)
        kwargs = {} if isinstance(e, torch.Tensor) and e.dtype not in TOLERANCES and e.is_floating_point() \
            else {"rtol": rtol, "atol": atol}
        try:
            torch.testing.assert_close(a, e, equal_nan=True, **kwargs)
        except AssertionError as exc:
            where = f"output {i}: " if len(exp_leaves) > 1 else ""
            raise AssertionError(where + str(exc)) from None


def _short(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    text = " ".join(lines[:4]) if isinstance(exc, AssertionError) else (lines[0] if lines else "")
    return f"{type(exc).__name__}: {text}"[:300]


def _same(a, b) -> bool:
    try:
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
        return True
    except Exception:
        return False


def _tensors(sample) -> list[torch.Tensor]:
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return [t for t in leaves if isinstance(t, torch.Tensor)]


def _forward_sample(op, sample, watch) -> str | None:
    """Compares one sample's outputs; returns None when they match, else why not."""
    try:
        expected = _call(op, _fresh_cpu(sample))
    except Exception as exc:
        raise _Incomparable(f"the CPU rejects the sample: {_short(exc)}") from None
    if not _same(expected, _call(op, _fresh_cpu(sample))):
        raise _Random("random output: two CPU runs of the same sample differ")
    def run_on_xla():
        xla_sample = _to_xla(sample, keep_args_on_cpu=op.full_name in CPU_ARGS)
        with watch.ops_of_interest():
            result = _call(op, xla_sample)
        return _read_back(result, "an output")

    return _mismatch(op, run_on_xla, expected, watch)


def _mismatch(op, run_on_xla, expected, watch) -> str | None:
    """Runs the xla side and compares it with `expected`; None when they match, else why not.

    Raises:
      _Incomparable: the mismatch comes from device random numbers the CPU cannot reproduce.
    """
    draws = watch.random_draws
    try:
        _compare(run_on_xla(), expected, op.full_name)
    except KeyboardInterrupt:
        raise
    except AssertionError as exc:
        _raise_if_random(watch, draws)
        return _short(exc)
    except Exception as exc:
        return _short(exc)
    return None


def _raise_if_random(watch, draws_before: int) -> None:
    """After a mismatch: a sample that drew device random numbers (attention with dropout_p > 0; the
    OpInfo seeds the CPU generator, which the device RNG cannot follow) cannot be compared."""
    if watch.random_draws > draws_before:
        raise _Incomparable("a random sample: it draws device random numbers (the CPU's stream cannot be reproduced)")


def _differentiable_outputs(sample, out) -> list[torch.Tensor]:
    out = sample.output_process_fn_grad(out)
    return [t for t in pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]


def _gradients(op, sample, leaves) -> tuple:
    outputs = _differentiable_outputs(sample, _call(op, sample))
    if not outputs:
        raise _Incomparable("no differentiable output")
    return torch.autograd.grad(sum(o.sum() for o in outputs), leaves, allow_unused=True)


def _backward_sample(op, sample, watch) -> str | None:
    """Compares the input gradients of sum(outputs); returns None when they match, else why not."""
    cpu_sample = _fresh_cpu(sample)
    cpu_leaves = [t for t in _tensors(cpu_sample) if t.requires_grad]
    if not cpu_leaves:
        raise _Incomparable("no input requires grad")
    try:
        expected = _gradients(op, cpu_sample, cpu_leaves)
    except _Incomparable:
        raise
    except Exception as exc:
        raise _Incomparable(f"the CPU backward rejects the sample: {_short(exc)}") from None

    def run_on_xla():
        xla = _to_xla(sample, requires_grad=True, keep_args_on_cpu=op.full_name in CPU_ARGS)
        leaves = [t for t in _tensors(xla) if t.requires_grad]
        with watch.ops_of_interest():
            grads = list(_gradients(op, xla, leaves))
        return _read_back(grads, "a gradient")

    return _mismatch(op, run_on_xla, list(expected), watch)


_SEED = 1234


def _samples(op, dtype, requires_grad: bool, limit: int) -> list:
    """The first `limit` samples, seeded before each one as `OpInfo.sample_inputs` does.

    `sample_inputs_func` is called directly: `OpInfo.sample_inputs` inspects the Python stack to find
    the calling test (a quarter of a second per call), which a sweep does not need.
    """
    torch.manual_seed(_SEED)
    samples = iter(op.sample_inputs_func(op, "cpu", dtype, requires_grad))
    out = []
    while len(out) < limit:
        torch.manual_seed(_SEED + len(out))
        try:
            out.append(next(samples))
        except StopIteration:
            break
    return out


def _run_check(op, plan, runner, budget_s: float) -> CheckResult:
    """Runs `runner(op, sample, watch)` over the (dtype, samples) pairs of `plan` and classifies the outcome."""
    result = CheckResult()
    watch = _Watch()
    start = time.perf_counter()
    notes: list[str] = []
    failure = None
    with watch.active():
        for dtype, samples in plan:
            for i, sample in enumerate(samples):
                if result.samples and time.perf_counter() - start > budget_s:
                    break  # the time guard: enough evidence, keep the sweep bounded
                try:
                    why = runner(op, sample, watch)
                except _Incomparable as exc:
                    notes.append(str(exc))
                    continue
                except _Random as exc:
                    return CheckResult("skipped", str(exc))
                if why is not None:
                    failure = f"{_dtype_name(dtype)} sample {i}: {why}"
                    break
                result.samples += 1
            if failure:
                break
    if failure:
        gc.collect()  # drop device tensors a failed sample left in reference cycles
    result.fallbacks = sorted(watch.fallbacks)
    result.lowered = sorted(watch.lowered)
    if failure:
        result.status, result.reason = "failing", failure
    elif not result.samples:
        result.status, result.reason = "skipped", (notes[0] if notes else "no samples")
    elif result.fallbacks:
        result.status, result.reason = "fallback", ", ".join(result.fallbacks)
    else:
        result.status = "lowered"
    return result


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


def _isolate() -> None:
    """Starts each op from empty meta memos, so that its result never depends on the ops checked before
    it in the same process. Two runtime memos leak between unrelated calls: the ops found without a
    meta kernel are remembered per op, not per signature (after one `x[mask]`, every later
    `x[indices]` falls back), and the meta cache key flattens arguments (`sum(x, [1])` and
    `sum(x, [], True)` share a key). Clearing them costs some meta inference, nothing else."""
    from xladev.runtime import meta

    meta._unsupported.clear()
    meta._cache.clear()
    meta._view_cache.clear()


def check_op(op, *, max_samples: int = 3, extra_dtypes: bool = True, backward: bool = True,
             max_backward_samples: int = 2, budget_s: float = 20.0, on_forward=None) -> OpResult:
    """Checks one OpInfo forward (and backward when differentiable) against the CPU, in this process.

    Args:
      op: the OpInfo.
      max_samples: samples compared forward in the op's main dtype (float32 where supported).
      extra_dtypes: also compare one int64 and one bool sample where the op supports them.
      backward: run the gradient check for differentiable ops.
      max_backward_samples: float32 samples compared backward.
      budget_s: no further sample starts after this many seconds (per direction).
      on_forward: called with the forward CheckResult before the backward check starts.
    """
    start = time.perf_counter()
    name = op.full_name
    _isolate()
    if name in SKIP:
        return OpResult(name, CheckResult("skipped", SKIP[name]), CheckResult("skipped", SKIP[name]))
    supported = op.supported_dtypes("cpu")
    primary = next((d for d in (torch.float32, torch.int64, torch.bool) if d in supported), None)
    if primary is None:
        reason = NO_SAMPLES
        return OpResult(name, CheckResult("skipped", reason), CheckResult("skipped", reason))
    plan = [(primary, max_samples)]
    if extra_dtypes and primary is torch.float32 and name not in FLOAT_ONLY:
        plan += [(d, 1) for d in (torch.int64, torch.bool) if d in supported]
    try:
        forward_plan = [(d, _samples(op, d, False, n)) for d, n in plan]
    except Exception as exc:
        forward = CheckResult("skipped", f"sample generation failed: {_short(exc)}")
    else:
        forward = _run_check(op, forward_plan, _forward_sample, budget_s)
    if on_forward is not None:
        on_forward(forward)
    back = CheckResult()
    if backward and op.supports_autograd and torch.float32 in op.supported_backward_dtypes("cpu") \
            and forward.status != "skipped":
        try:
            backward_plan = [(torch.float32, _samples(op, torch.float32, True, max_backward_samples))]
        except Exception as exc:
            back = CheckResult("skipped", f"sample generation failed: {_short(exc)}")
        else:
            back = _run_check(op, backward_plan, _backward_sample, budget_s)
    return OpResult(name, forward, back, [_dtype_name(d) for d, _ in plan], time.perf_counter() - start)


# ---- isolation: each op runs in a worker process --------------------------------------------------
# A worker crash (an abort in native code) or a hang costs only the op that caused it: the parent
# records it as failing and starts a fresh worker for the next op.
class Worker:
    """A child process that checks ops on request, one JSON line in and one out."""

    def __init__(self, options: dict | None = None) -> None:
        self.options = dict(options or {})
        self.proc = None
        self._log = None

    def _start(self) -> None:
        import subprocess
        import sys
        import tempfile

        self._log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "xladev.runtime.coverage", "--worker", json.dumps(self.options)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, bufsize=1)
        self._lines = queue.Queue()
        threading.Thread(target=_pump, args=(self.proc.stdout, self._lines), daemon=True).start()

    def check(self, name: str, timeout_s: float = 300.0) -> OpResult:
        """Checks one OpInfo by `full_name`; a crash or a timeout comes back as a failing result."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        self._log.seek(0)
        self._log.truncate()  # keep only this op's stderr (the child shares the file offset)
        start = time.perf_counter()
        forward = None
        try:
            self.proc.stdin.write(name + "\n")
            self.proc.stdin.flush()
            while True:
                try:
                    line = self._lines.get(timeout=max(1.0, timeout_s - (time.perf_counter() - start)))
                except queue.Empty:
                    line = None
                if not line:
                    break
                data = json.loads(line)
                if "name" in data:
                    return OpResult.from_json(data)
                forward = CheckResult(**data["forward"])  # the forward part, sent before the backward starts
        except OSError:
            line = ""
        reason = f"timeout: no result after {timeout_s:.0f}s" if line is None else \
            f"the worker process died ({self._last_error()})"
        self.close()
        crashed = CheckResult("failing", reason)
        if forward is None:
            return OpResult(name, crashed, CheckResult("skipped", "the forward check did not finish"),
                            seconds=time.perf_counter() - start)
        return OpResult(name, forward, crashed, seconds=time.perf_counter() - start)

    def _last_error(self) -> str:
        code = self.proc.wait(timeout=30) if self.proc else None
        self._log.seek(0)
        lines = [line.strip() for line in self._log.read().splitlines() if line.strip()]
        fatal = [line for line in lines if "terminate called" in line or "Fatal Python error" in line]
        detail = (fatal or lines[-1:] or ["no output"])[0]
        return f"exit status {code}: {detail}"[:300]

    def close(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            for stream in (self.proc.stdin, self.proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


def _pump(stream, lines: queue.Queue) -> None:
    """Moves a worker's output lines into a queue (a reader thread: select() on a buffered pipe can miss lines)."""
    try:
        for line in stream:
            lines.put(line)
    except (OSError, ValueError):
        pass
    lines.put("")


def _worker_main(options: dict) -> int:
    import os
    import sys
    import warnings

    # Results go to the original stdout; anything the ops print goes to stderr.
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    warnings.simplefilter("ignore")
    import xladev  # noqa: F401  (registers the device)

    ops = {op.full_name: op for op in op_db()}
    for line in sys.stdin:
        name = line.strip()
        if not name:
            continue
        def on_forward(forward):
            out.write(json.dumps({"forward": dataclasses.asdict(forward)}) + "\n")

        result = check_op(ops[name], on_forward=on_forward, **options)
        out.write(json.dumps(result.to_json()) + "\n")
    return 0


class Pool:
    """Worker processes that check submitted ops in parallel; results are read back by name."""

    def __init__(self, workers: int = 1, options: dict | None = None, timeout_s: float = 300.0,
                 progress=None) -> None:
        self.options = options or {}
        self.timeout_s = timeout_s
        self.progress = progress
        self.results: dict[str, OpResult] = {}
        self._queue: queue.Queue = queue.Queue()
        self._done = threading.Condition()
        self._submitted: set[str] = set()
        self._threads = [threading.Thread(target=self._serve, daemon=True, name=f"coverage-worker-{i}")
                         for i in range(max(1, workers))]
        for t in self._threads:
            t.start()

    def submit(self, names: Iterable[str]) -> None:
        for name in names:
            if name not in self._submitted:
                self._submitted.add(name)
                self._queue.put(name)

    def result(self, name: str) -> OpResult:
        self.submit([name])
        with self._done:
            self._done.wait_for(lambda: name in self.results)
            return self.results[name]

    def _serve(self) -> None:
        worker = Worker(self.options)
        try:
            while True:
                name = self._queue.get()
                if name is None:
                    return
                try:
                    result = worker.check(name, self.timeout_s)
                except Exception as exc:  # a harness error must not leave result() waiting forever
                    worker.close()
                    result = OpResult(name, CheckResult("failing", f"coverage harness error: {_short(exc)}"))
                with self._done:
                    self.results[name] = result
                    self._done.notify_all()
                if self.progress is not None:
                    self.progress(result)
        finally:
            worker.close()

    def close(self) -> None:
        for _ in self._threads:
            self._queue.put(None)
        for t in self._threads:
            t.join()


def sweep(ops: list, workers: int = 1, isolated: bool = True, progress=None, timeout_s: float = 300.0,
          **options) -> Summary:
    """Checks each OpInfo in `ops` and returns the results in the same order.

    Args:
      workers: parallel worker processes (only with `isolated`).
      isolated: run ops in worker processes, so a crash or hang costs one op, not the sweep.
      progress: called with each OpResult as it completes.
      options: forwarded to `check_op`.
    """
    names = [op.full_name for op in ops]
    if not isolated:
        import xladev  # noqa: F401

        results = []
        for op in ops:
            results.append(check_op(op, **options))
            if progress is not None:
                progress(results[-1])
        return Summary(results)
    pool = Pool(workers, options, timeout_s, progress)
    try:
        pool.submit(names)
        return Summary([pool.result(n) for n in names])
    finally:
        pool.close()


if __name__ == "__main__":
    import sys

    if len(sys.argv) >= 2 and sys.argv[1] == "--worker":
        sys.exit(_worker_main(json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}))
    sys.exit("usage: python -m xladev.runtime.coverage --worker [OPTIONS_JSON]  (see `xladev coverage`)")
