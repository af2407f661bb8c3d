"""What each random OpInfo is checked for: the statistics, the support checks and the RANDOM_CHECKS table.

Every statistic is bounded at Z standard errors of a draw of N values: with Z = 6 a correct sampler
fails one with probability < 2e-9. coverage/_random_check.py runs these checks.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch

N = 1 << 16  # draws per distribution check
Z = 6.0  # standard errors allowed per statistic


# ---- statistics -------------------------------------------------------------------------------------
def normal_cdf(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def mean_within(x: torch.Tensor, mean: float, std: float, what: str) -> None:
    """The sample mean of `x` (iid draws) is within Z standard errors of `mean`."""
    x = x.double().flatten()
    bound = Z * std / math.sqrt(x.numel())
    got = x.mean().item()
    if not abs(got - mean) <= bound:
        raise AssertionError(f"{what}: sample mean {got:.5g}, expected {mean:.5g} ± {bound:.3g}")


def std_within(x: torch.Tensor, std: float, kurtosis: float, what: str) -> None:
    """The sample variance is within Z standard errors of std**2 (its variance is (mu4 - s^4) / n)."""
    x = x.double().flatten()
    var = std * std
    bound = Z * var * math.sqrt((kurtosis - 1.0) / x.numel())
    got = x.var().item()
    if not abs(got - var) <= bound:
        raise AssertionError(f"{what}: sample variance {got:.5g}, expected {var:.5g} ± {bound:.3g}")


def fraction_within(hits: torch.Tensor, p: float, what: str) -> None:
    """The fraction of True in `hits` (iid Bernoulli(p)) is within Z standard errors of p."""
    hits = hits.flatten()
    bound = Z * math.sqrt(p * (1.0 - p) / hits.numel())
    got = hits.double().mean().item()
    if not abs(got - p) <= bound:
        raise AssertionError(f"{what}: frequency {got:.5g}, expected {p:.5g} ± {bound:.3g}")


def cdf_at(x: torch.Tensor, points: dict, what: str) -> None:
    """P(X <= q) = F for each (q, F) in `points`: quantile checks, robust to heavy tails."""
    for q, p in points.items():
        fraction_within(x <= q, p, f"{what} P(X <= {q:.4g})")


def pmf(x: torch.Tensor, probs: dict, what: str) -> None:
    """The frequency of each value k in `probs` matches its probability."""
    for k, p in probs.items():
        fraction_within(x == k, p, f"{what} P(X = {k})")


def require(condition, what: str) -> None:
    ok = condition if isinstance(condition, bool) else bool(condition.all())
    if not ok:
        raise AssertionError(what)


# ---- what is checked, per OpInfo ------------------------------------------------------------------------
@dataclasses.dataclass
class RandomCheck:
    """How one random OpInfo is checked.

    Attributes:
      draw: fn(device) -> a large draw (N values) through the op's PyTorch function.
      check: fn(values on the CPU) raising AssertionError when support or moments are off.
      support: fn(sample, output on the CPU) raising AssertionError when an OpInfo sample's output
        leaves the support (None: shape and dtype only).
      deterministic: fn(sample) -> True when the sample draws nothing (its values are compared exactly).
      grad_exact: the input gradients do not depend on the draw (compared with the CPU's by value).
    """

    draw: Callable
    check: Callable
    support: Callable | None = None
    deterministic: Callable | None = None
    grad_exact: bool = False


def _full(value, device, n=N):
    return torch.full((n,), value, device=device)


def _unit_normal(x, mean=0.0, std=1.0, what="normal"):
    mean_within(x, mean, std, what)
    std_within(x, std, 3.0, what)
    cdf_at(x, {mean: 0.5, mean - std: normal_cdf(-1.0), mean + 2 * std: normal_cdf(2.0)}, what)


def _finite(sample, out):
    require(torch.isfinite(out), "non-finite values")


def _within(low, high):
    def support(sample, out):
        lo, hi = low(sample), high(sample)
        require((out >= lo) & (out <= hi), f"values outside [{lo}, {hi}]")
    return support


def _uniform(low, high, what):
    def check(x):
        require((x >= low) & (x <= high), f"{what}: values outside [{low}, {high}]")
        width = high - low
        mean_within(x, (low + high) / 2, width / math.sqrt(12), what)
        cdf_at(x, {low + width / 4: 0.25, low + width / 2: 0.5, low + 0.9 * width: 0.9}, what)
    return check


def _integers(low, high, what):
    def check(x):
        require((x >= low) & (x < high) & (x == x.round()), f"{what}: values outside the integers [{low}, {high})")
        pmf(x, {k: 1.0 / (high - low) for k in range(low, high)}, what)
    return check


def _exponential(x, lambd=2.0):
    require(x >= 0, "exponential: negative values")
    mean_within(x, 1 / lambd, 1 / lambd, "exponential")
    cdf_at(x, {math.log(2) / lambd: 0.5, 0.1: 1 - math.exp(-0.1 * lambd)}, "exponential")


def _geometric(x, p=0.3):
    require((x >= 1) & (x == x.round()), "geometric: values not integers >= 1")
    mean_within(x, 1 / p, math.sqrt(1 - p) / p, "geometric")
    pmf(x, {1: p, 2: p * (1 - p), 3: p * (1 - p) ** 2}, "geometric")


def _log_normal(x, mean=0.5, std=0.75):
    require(x > 0, "log_normal: values <= 0")
    _unit_normal(x.double().log(), mean, std, "log of log_normal")


def _cauchy(x, median=1.0, sigma=2.0):
    # No mean or variance exists: the median and quartiles (and one tail point) instead.
    cdf_at(x, {median: 0.5, median - sigma: 0.25, median + sigma: 0.75,
               median + 5 * sigma: 0.5 + math.atan(5) / math.pi}, "cauchy")


_WEIGHTS = [1.0, 2.0, 3.0, 4.0, 0.0]


def _multinomial_draw(device):
    w = torch.tensor(_WEIGHTS, device=device)
    with_replacement = torch.multinomial(w, N, True)
    without = torch.multinomial(w.expand(N // 4, len(_WEIGHTS)), 3, False)
    return with_replacement, without


def _multinomial(draws):
    with_replacement, without = draws
    p = [w / sum(_WEIGHTS) for w in _WEIGHTS]
    require(with_replacement != 4, "multinomial: a zero-weight category was drawn")
    pmf(with_replacement, dict(enumerate(p[:4])), "multinomial with replacement")
    require(without != 4, "multinomial without replacement: a zero-weight category was drawn")
    ordered = without.sort(dim=1).values
    require(ordered[:, 1:] != ordered[:, :-1], "multinomial without replacement: repeated indices in a row")
    pmf(without[:, 0], dict(enumerate(p[:4])), "multinomial without replacement, first pick")
    second = {j: sum(p[i] * p[j] / (1 - p[i]) for i in range(4) if i != j) for j in range(4)}
    pmf(without[:, 1], second, "multinomial without replacement, second pick")


def _multinomial_support(sample, out):
    probs, n = sample.input, sample.args[0]
    replacement = sample.kwargs.get("replacement", sample.args[1] if len(sample.args) > 1 else False)
    k = probs.shape[-1]
    require((out >= 0) & (out < k), "indices out of range")
    if not replacement:
        ordered = out.sort(dim=-1).values
        require(ordered[..., 1:] != ordered[..., :-1], "repeated indices without replacement")
    if replacement or bool(((probs > 0).sum(-1) >= n).all()):
        require(probs.gather(-1, out.reshape(probs.shape[:-1] + (-1,))) > 0, "a zero-weight category drawn")


def _dropout_check(p, scale, dropped_value, what, group=None):
    def check(x):
        dropped = (x - dropped_value).abs() <= 1e-6 * max(1.0, abs(dropped_value))
        kept = (x - scale).abs() <= 1e-6 * abs(scale)
        require(dropped | kept, f"{what}: values other than {dropped_value:.6g} and {scale:.6g}")
        if group is not None:  # a whole channel is dropped or kept
            channels = dropped.reshape(dropped.shape[:2] + (-1,))
            require(channels.all(-1) | ~channels.any(-1), f"{what}: a channel partly dropped")
            dropped = channels[..., 0]
        fraction_within(dropped, p, f"{what} dropped")
    return check


def _alpha_values(p):
    """(kept value for an input of 1, dropped value) of alpha dropout: SELU's saturation -scale*alpha
    and the affine correction a, b that keep zero mean and unit variance."""
    saturation = -1.0507009873554805 * 1.6732632423543772
    a = 1.0 / math.sqrt((1 - p) * (1 + p * saturation ** 2))
    return a - a * saturation * p, a * saturation - a * saturation * p


def _dropout_support(sample, out):
    x, p = sample.input, sample.kwargs.get("p", 0.5)
    scaled = x / (1 - p)
    require((out == 0) | ((out - scaled).abs() <= 1e-6 * scaled.abs().clamp_min(1.0)), "not 0 or x / (1 - p)")


def _draws_nothing(sample):
    p, training = sample.kwargs.get("p", 0.5), sample.kwargs.get("training", True)
    return not training or p == 0 or p == 1


def _rrelu_draw(device):
    x = torch.cat([torch.full((N,), -2.0, device=device), torch.full((16,), 3.0, device=device)])
    return torch.nn.functional.rrelu(x, 0.1, 0.4, training=True)


def _rrelu(y):
    require(y[N:] == 3.0, "rrelu: a positive input changed")
    slope = y[:N].double() / -2.0
    _uniform(0.1, 0.4, "rrelu slope")(slope)


def _rrelu_support(sample, out):
    x = sample.input
    lower, upper = sample.kwargs.get("lower", 1 / 8), sample.kwargs.get("upper", 1 / 3)
    positive = x > 0
    require(torch.where(positive, out == x, (out <= lower * x + 1e-6) & (out >= upper * x - 1e-6)),
            "outside [upper * x, lower * x] for x <= 0")


def _pool_draw(d):
    def draw(device):
        planes, size, out = (4096, 9, 4) if d == 2 else (2048, 5, 3)
        x = torch.arange(size ** d, dtype=torch.float32).reshape((1,) + (size,) * d).expand((planes,) + (size,) * d)
        pool = getattr(torch.nn.functional, f"fractional_max_pool{d}d")
        return pool(x.contiguous().to(device), 2, output_size=out, return_indices=True)[1]
    return draw


def _pool_check(d):
    """An increasing input puts each window's maximum at its last corner: the indices give the windows'
    starts, whose distribution follows from the uniform samples (computed here on a fine grid of u)."""
    size, out = (9, 4) if d == 2 else (5, 3)

    def check(indices):
        coords = []
        for axis in range(d):
            stride = size ** (d - 1 - axis)
            coords.append((indices // stride) % size - 1)  # the window's start: its maximum minus (k - 1)
        u = (torch.arange(100_000, dtype=torch.float64) + 0.5) / 100_000
        alpha = torch.tensor((size - 2) / (out - 1), dtype=torch.float32)
        u32 = u.float()
        start1 = ((1 + u32) * alpha).long() - (u32 * alpha).long()
        expected = {int(k): (start1 == k).double().mean().item() for k in start1.unique()}
        for axis, c in enumerate(coords):
            first = c[(slice(None),) + (0,) * d]
            require(first == 0, "the first window does not start at 0")
            last = c[(slice(None),) + (out - 1,) * d]
            require(last == size - 2, "the last window does not end at the input's end")
            index = [slice(None)] + [0] * d
            index[1 + axis] = 1
            pmf(c[tuple(index)], expected, f"window 1's start along axis {axis}")
    return check


def _pool_support(sample, out):
    values = out[0] if isinstance(out, tuple) else out
    require(torch.isin(values, sample.input), "pooled values that are not input elements")


_normal_draw = lambda device: torch.normal(_full(1.5, device), _full(2.0, device))  # noqa: E731
_std = lambda x: _unit_normal(x, 1.5, 2.0)  # noqa: E731
_alpha_kept, _alpha_dropped = _alpha_values(0.3)

RANDOM_CHECKS: dict[str, RandomCheck] = {
    "bernoulli": RandomCheck(lambda dev: torch.bernoulli(_full(0.3, dev)),
                             lambda x: (require((x == 0) | (x == 1), "bernoulli: not 0/1"),
                                        fraction_within(x == 1, 0.3, "bernoulli")),
                             lambda s, out: require((out == 0) | (out == 1), "not 0/1"), grad_exact=True),
    "cauchy": RandomCheck(lambda dev: torch.empty(N, device=dev).cauchy_(1.0, 2.0), _cauchy),
    "exponential": RandomCheck(lambda dev: torch.empty(N, device=dev).exponential_(2.0), _exponential,
                               lambda s, out: require(out >= 0, "negative values")),
    "geometric": RandomCheck(lambda dev: torch.empty(N, device=dev).geometric_(0.3), _geometric,
                             lambda s, out: require((out >= 1) & (out == out.round()), "not integers >= 1")),
    "log_normal": RandomCheck(lambda dev: torch.empty(N, device=dev).log_normal_(0.5, 0.75), _log_normal,
                              lambda s, out: require(out > 0, "values <= 0")),
    "multinomial": RandomCheck(_multinomial_draw, _multinomial, _multinomial_support),
    "normal": RandomCheck(_normal_draw, _std, _finite, grad_exact=True),
    "normal.in_place": RandomCheck(lambda dev: torch.empty(N, device=dev).normal_(1.5, 2.0), _std, _finite),
    "normal.number_mean": RandomCheck(
        lambda dev: torch.cat([torch.normal(1.5, _full(2.0, dev, N // 2)),
                               torch.normal(1.5, 2.0, size=(N // 2,), device=dev)]), _std, _finite,
        grad_exact=True),
    "uniform": RandomCheck(lambda dev: torch.empty(N, device=dev).uniform_(-1.0, 3.0), _uniform(-1.0, 3.0, "uniform"),
                           _within(lambda s: s.args[0], lambda s: s.args[1])),
    # PyTorch's "rand_like" OpInfo calls randn_like: its samples are checked as normal draws, the
    # distribution check draws from rand_like itself.
    "rand_like": RandomCheck(lambda dev: torch.rand_like(_full(0.0, dev)), _uniform(0.0, 1.0, "rand_like"), _finite),
    "randint": RandomCheck(lambda dev: torch.randint(3, 8, (N,), device=dev), _integers(3, 8, "randint"),
                           _within(lambda s: s.input if isinstance(s.args[0], int) else 0,
                                   lambda s: (s.args[0] if isinstance(s.args[0], int) else s.input) - 1)),
    "randint_like": RandomCheck(lambda dev: torch.randint_like(_full(0.0, dev), 3, 8),
                                _integers(3, 8, "randint_like"),
                                _within(lambda s: s.args[0] if len(s.args) > 1 else 0, lambda s: s.args[-1] - 1)),
    "randn": RandomCheck(lambda dev: torch.randn(N, device=dev), _unit_normal, _finite),
    "randn_like": RandomCheck(lambda dev: torch.randn_like(_full(0.0, dev)), _unit_normal, _finite),
    "nn.functional.dropout": RandomCheck(
        lambda dev: torch.nn.functional.dropout(_full(1.0, dev), 0.3, True),
        _dropout_check(0.3, 1 / 0.7, 0.0, "dropout"), _dropout_support, _draws_nothing),
    "nn.functional.dropout2d": RandomCheck(
        lambda dev: torch.nn.functional.dropout2d(torch.ones(N // 16, 16, 2, 2, device=dev), 0.3, True),
        _dropout_check(0.3, 1 / 0.7, 0.0, "dropout2d", group=True), _dropout_support, _draws_nothing),
    "nn.functional.dropout3d": RandomCheck(
        lambda dev: torch.nn.functional.dropout3d(torch.ones(N // 16, 16, 1, 2, 2, device=dev), 0.3, True),
        _dropout_check(0.3, 1 / 0.7, 0.0, "dropout3d", group=True), _dropout_support, _draws_nothing),
    "nn.functional.alpha_dropout": RandomCheck(
        lambda dev: torch.nn.functional.alpha_dropout(_full(1.0, dev), 0.3, True),
        _dropout_check(0.3, _alpha_kept, _alpha_dropped, "alpha_dropout"), _finite, _draws_nothing),
    "nn.functional.feature_alpha_dropout.with_train": RandomCheck(
        lambda dev: torch.nn.functional.feature_alpha_dropout(torch.ones(N // 16, 16, 2, 2, device=dev), 0.3, True),
        _dropout_check(0.3, _alpha_kept, _alpha_dropped, "feature_alpha_dropout", group=True), _finite,
        _draws_nothing),
    "nn.functional.rrelu": RandomCheck(_rrelu_draw, _rrelu, _rrelu_support,
                                       lambda s: not s.kwargs.get("training", False)),
    "nn.functional.fractional_max_pool2d": RandomCheck(_pool_draw(2), _pool_check(2), _pool_support),
    "nn.functional.fractional_max_pool3d": RandomCheck(_pool_draw(3), _pool_check(3), _pool_support),
}


