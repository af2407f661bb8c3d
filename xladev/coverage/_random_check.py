"""Random ops in the coverage sweep: checked by distribution, not by value.

The device RNG cannot reproduce the CPU generator's stream, so a random op is checked for what must
hold of any correct sampler: no CPU fallback, the CPU's output shape and dtype, values in the
distribution's support, moments within sampling error, and the same numbers again after the same
`manual_seed` (different numbers after another).

Each OpInfo's own samples give the shapes, dtypes, support and fallback checks (and an exact
comparison with the CPU where the sample draws nothing: dropout with p = 0, rrelu in evaluation). A
large draw through the same PyTorch function (`N` values) gives the distribution checks. Every
statistic is bounded at Z standard errors: with Z = 6 a correct sampler fails one with probability
< 2e-9 (the sample means are normal to within the CLT's error at this N).
"""

from __future__ import annotations

import time

import torch
from torch.utils import _pytree as pytree

from xladev.coverage._plan import TOLERANCES, CheckResult, OpResult
from xladev.coverage._random_specs import RANDOM_CHECKS, RandomCheck, require
from xladev.coverage._sample import _call, _samples, _to_xla, _Watch, settle, short_error


# ---- running the checks -----------------------------------------------------------------------------------
def _leaves(value) -> list:
    return [v for v in pytree.tree_leaves(value) if isinstance(v, torch.Tensor)]


def _cpu(value):
    return pytree.tree_map(lambda v: v.detach().cpu() if isinstance(v, torch.Tensor) else v, value)


def _same_layout(actual, expected, what: str) -> None:
    """The same nest of tensors with the same shapes and dtypes."""
    got, want = _leaves(actual), _leaves(expected)
    require(len(got) == len(want), f"{what}: {len(got)} tensors, the CPU gives {len(want)}")
    for a, e in zip(got, want):
        require(a.device.type == "xla", f"{what} on {a.device}, not on xla")
        require(tuple(a.shape) == tuple(e.shape) and a.dtype == e.dtype,
                f"{what}: {tuple(a.shape)} {a.dtype}, the CPU gives {tuple(e.shape)} {e.dtype}")


def _close(actual, expected, what: str) -> None:
    for a, e in zip(_leaves(actual), _leaves(expected)):
        rtol, atol = TOLERANCES.get(e.dtype, (0.0, 0.0))
        try:
            torch.testing.assert_close(a, e, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as exc:
            raise AssertionError(f"{what}: {short_error(exc)}") from None


def _forward_sample(op, spec: RandomCheck, sample, watch) -> None:
    expected = _call(op, sample)
    with watch.ops_of_interest():
        result = _call(op, _to_xla(sample))
    _same_layout(result, expected, "output")
    result = _cpu(result)
    if spec.deterministic is not None and spec.deterministic(sample):
        _close(result, expected, "a sample that draws nothing")
    elif spec.support is not None:
        try:
            spec.support(sample, result)
        except AssertionError as exc:
            raise AssertionError(f"support: {exc}") from None


def _backward_sample(op, spec: RandomCheck, sample, watch) -> bool:
    """Input gradients of sum(outputs): shapes (values too when they do not depend on the draw)."""
    def grads(s):
        leaves = [t for t in _leaves((s.input, s.args, s.kwargs)) if t.requires_grad]
        outs = [o for o in _leaves(s.output_process_fn_grad(_call(op, s)))
                if o.requires_grad and o.is_floating_point()]
        if not leaves or not outs:
            return None
        return torch.autograd.grad(sum(o.sum() for o in outs), leaves, allow_unused=True), leaves

    cpu = grads(sample)
    if cpu is None:
        return False
    with watch.ops_of_interest():
        got, leaves = grads(_to_xla(sample, requires_grad=True))
    for g, e, leaf in zip(got, cpu[0], leaves):
        require((g is None) == (e is None), "a gradient is missing on one side")
        if g is not None:
            require(tuple(g.shape) == tuple(leaf.shape) and g.dtype == e.dtype, "gradient shape or dtype")
            g = g.cpu()
            if spec.grad_exact:
                _close(g, e, "gradient")
            else:
                require(torch.isfinite(g), "non-finite gradient")
    return True


def _distribution(spec: RandomCheck, watch) -> None:
    """The large draw: support and moments, then reproducibility under `manual_seed`."""
    def draw(seed):
        torch.manual_seed(seed)
        with watch.ops_of_interest():
            values = spec.draw("xla")
        return _cpu(values)

    first = draw(7)
    spec.check(first)
    again, other = draw(7), draw(8)
    require(all(torch.equal(a, b) for a, b in zip(_leaves(first), _leaves(again))),
            "the same seed gave different numbers")
    require(not all(torch.equal(a, b) for a, b in zip(_leaves(first), _leaves(other))),
            "different seeds gave the same numbers")


def _run(direction: str, fn, watch) -> CheckResult:
    result = CheckResult()
    failure = None
    try:
        with watch.active():
            result.samples = fn()
    except AssertionError as exc:
        failure = f"{direction}: {exc}"[:300]
    except Exception as exc:  # an error on the device side is a failure too, with its message
        failure = f"{direction}: {short_error(exc)}"
    return settle(result, watch, failure)


def _each_sample(samples, check, deadline: float) -> int:
    """Runs `check(sample)` (True when it compared something) on each sample until the deadline."""
    count = 0
    for i, sample in enumerate(samples):
        if count and time.perf_counter() > deadline:
            break  # the time guard: enough evidence, keep the sweep bounded
        try:
            count += bool(check(sample))
        except AssertionError as exc:
            raise AssertionError(f"sample {i}: {exc}") from None
    return count


def check_random(op, *, budget_s: float = 20.0, max_samples: int = 8):
    """Checks one random OpInfo by distribution.

    Args:
      op: the OpInfo (its name is a key of RANDOM_CHECKS).
      budget_s: no further OpInfo sample starts after this many seconds per direction (the
        distribution check always runs).
      max_samples: OpInfo samples checked per direction.

    Returns:
      An OpResult; forward "lowered" when every check holds without a CPU fallback. Backward, for
      differentiable ops: gradient shapes (and values, where they do not depend on the draw).
    """
    start = time.perf_counter()
    spec = RANDOM_CHECKS[op.full_name]
    dtype = torch.float32 if torch.float32 in op.supported_dtypes("cpu") else torch.int64

    def forward():
        samples = _samples(op, dtype, False, max_samples)
        count = _each_sample(samples, lambda s: _forward_sample(op, spec, s, watch) or True, start + budget_s)
        _distribution(spec, watch)
        return count + 1

    def backward():
        samples = _samples(op, torch.float32, True, max_samples)
        return _each_sample(samples, lambda s: _backward_sample(op, spec, s, watch), time.perf_counter() + budget_s)

    watch = _Watch()
    fwd = _run("forward", forward, watch)
    back = CheckResult()
    if op.supports_autograd and torch.float32 in op.supported_backward_dtypes("cpu"):
        watch = _Watch()
        back = _run("backward", backward, watch)
    return OpResult(op.full_name, fwd, back, [str(dtype).replace("torch.", "")], time.perf_counter() - start)
