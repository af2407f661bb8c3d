"""Checking one op: its OpInfo samples on the CPU (the oracle) and on `xla`, forward and backward."""

from __future__ import annotations

import gc
import time

import torch
from torch.utils import _pytree as pytree

from xladev.runtime.graph import meta
from xladev.coverage._invariants import OUTPUT_CHECKS
from xladev.coverage._plan import (
    CPU_ARGS, FLOAT_ONLY, NO_SAMPLES, SKIP, TOLERANCE_OVERRIDES, TOLERANCES, CheckResult, OpResult,
)
from xladev.coverage._random_check import RANDOM_CHECKS, check_random
from xladev.coverage._sample import (
    _call, _dtype_name, _fresh_cpu, _Incomparable, _Random, _read_back, _same, _samples, _tensors, _to_xla, _Watch,
    settle, short_error,
)


# ---- comparing ------------------------------------------------------------------------------------------
def _tolerance(value, name: str) -> tuple[float, float]:
    dtype = value.dtype if isinstance(value, torch.Tensor) else (torch.float32 if isinstance(value, float) else None)
    if dtype is not None and dtype.is_complex:
        dtype = dtype.to_real()  # complex64's components are float32s, rounded as float32s
    if dtype in TOLERANCES:
        return TOLERANCE_OVERRIDES.get(name, TOLERANCES[dtype]) if dtype == torch.float32 else TOLERANCES[dtype]
    return 0.0, 0.0  # integers and bools are exact; other dtypes fall to assert_close's defaults below


def _compare(actual, expected, name: str, sample=None) -> None:
    """assert_close on each leaf, with the tolerance of the expected leaf's dtype (exact for integers).

    An op whose outputs are not unique (a factorisation's signs, the order of eigenvalues) or whose
    accuracy follows its conditioning is compared by its entry in `OUTPUT_CHECKS` instead.
    """
    check = OUTPUT_CHECKS.get(name)
    if check is not None and sample is not None:
        check(actual, expected, sample)
        return
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


def _forward_sample(op, sample, watch) -> str | None:
    """Compares one sample's outputs; returns None when they match, else why not."""
    try:
        expected = _call(op, _fresh_cpu(sample))
    except Exception as exc:
        raise _Incomparable(f"the CPU rejects the sample: {short_error(exc)}") from None
    if not _same(expected, _call(op, _fresh_cpu(sample))):
        raise _Random("random output: two CPU runs of the same sample differ")
    def run_on_xla():
        xla_sample = _to_xla(sample, keep_args_on_cpu=op.full_name in CPU_ARGS)
        with watch.ops_of_interest():
            result = _call(op, xla_sample)
        return _read_back(result, "an output")

    return _mismatch(op, run_on_xla, expected, watch, sample)


def _mismatch(op, run_on_xla, expected, watch, sample=None) -> str | None:
    """Runs the xla side and compares it with `expected`; None when they match, else why not.

    Raises:
      _Incomparable: the mismatch comes from device random numbers the CPU cannot reproduce.
    """
    draws = watch.random_draws
    try:
        _compare(run_on_xla(), expected, op.full_name, sample)
    except KeyboardInterrupt:
        raise
    except AssertionError as exc:
        _raise_if_random(watch, draws)
        return short_error(exc)
    except Exception as exc:
        return short_error(exc)
    return None


def _raise_if_random(watch, draws_before: int) -> None:
    """After a mismatch: a sample that drew device random numbers (attention with dropout_p > 0; the
    OpInfo seeds the CPU generator, which the device RNG cannot follow) cannot be compared."""
    if watch.random_draws > draws_before:
        raise _Incomparable("a random sample: it draws device random numbers (the CPU's stream cannot be reproduced)")


def _differentiable_outputs(sample, out) -> list[torch.Tensor]:
    """The outputs whose sum is differentiated; a complex output counts through its real and imaginary parts."""
    out = sample.output_process_fn_grad(out)
    return [torch.view_as_real(t.resolve_conj()) if t.is_complex() else t for t in pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())]


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
        raise _Incomparable(f"the CPU backward rejects the sample: {short_error(exc)}") from None

    def run_on_xla():
        xla = _to_xla(sample, requires_grad=True, keep_args_on_cpu=op.full_name in CPU_ARGS)
        leaves = [t for t in _tensors(xla) if t.requires_grad]
        with watch.ops_of_interest():
            grads = list(_gradients(op, xla, leaves))
        return _read_back(grads, "a gradient")

    return _mismatch(op, run_on_xla, list(expected), watch, None)


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
    return settle(result, watch, failure, notes[0] if notes else "no samples")


def _isolate() -> None:
    """Starts each op from empty meta memos, so that its result never depends on the ops checked before
    it in the same process. Two runtime memos leak between unrelated calls: the ops found without a
    meta kernel are remembered per op, not per signature (after one `x[mask]`, every later
    `x[indices]` falls back), and the meta cache key flattens arguments (`sum(x, [1])` and
    `sum(x, [], True)` share a key). Clearing them costs some meta inference, nothing else."""
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
        if name in RANDOM_CHECKS:
            return check_random(op, budget_s=budget_s)
        return OpResult(name, CheckResult("skipped", SKIP[name]), CheckResult("skipped", SKIP[name]))
    supported = op.supported_dtypes("cpu")
    primary = next((d for d in (torch.float32, torch.int64, torch.bool, torch.complex64) if d in supported), None)
    if primary is None:
        reason = NO_SAMPLES
        return OpResult(name, CheckResult("skipped", reason), CheckResult("skipped", reason))
    plan = [(primary, max_samples)]
    if extra_dtypes and primary is torch.float32 and name not in FLOAT_ONLY:
        plan += [(d, 1) for d in (torch.int64, torch.bool) if d in supported]
    try:
        forward_plan = [(d, _samples(op, d, False, n)) for d, n in plan]
    except Exception as exc:
        forward = CheckResult("skipped", f"sample generation failed: {short_error(exc)}")
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
            back = CheckResult("skipped", f"sample generation failed: {short_error(exc)}")
        else:
            back = _run_check(op, backward_plan, _backward_sample, budget_s)
    return OpResult(name, forward, back, [_dtype_name(d) for d, _ in plan], time.perf_counter() - start)
