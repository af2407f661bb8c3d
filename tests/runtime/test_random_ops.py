"""Random ops on the device RNG: distributions (support, moments, reproducibility), no CPU fallback.

Draws cannot equal the CPU's (another generator), so they are checked by distribution with the
coverage sweep's own checks (xladev/coverage/_random_check.py: every statistic bounded at 6
standard errors, so a correct sampler fails with probability < 2e-9 per statistic). What is
deterministic given the draw (fractional max pooling given its samples, rrelu's output and gradient
given its noise, the gamma sampler's gradient) is compared with eager CPU exactly or at float32 rounding.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.distributions as D
import torch.nn.functional as F

import xladev
from xladev.events import Fallback, bus
from xladev.coverage._random_check import _distribution
from xladev.coverage._random_specs import RANDOM_CHECKS, cdf_at, mean_within, require
from xladev.coverage._sample import _Watch

DEV = "xla"


@pytest.fixture
def no_fallback():
    """Fails the test if any aten op ran on the CPU while it ran."""
    seen: list[str] = []
    sub = bus.subscribe(lambda event: seen.append(event.name), (Fallback,))
    yield seen
    xladev.mark_step()
    sub.close()
    assert not seen, f"CPU fallbacks: {sorted(set(seen))}"


# ---- distributions: the coverage checks, run here on a representative subset -------------------------
@pytest.mark.parametrize("name", ["cauchy", "multinomial", "nn.functional.fractional_max_pool2d"])
def test_distribution(name):
    watch = _Watch()
    with watch.active():
        _distribution(RANDOM_CHECKS[name], watch)  # raises AssertionError when a statistic is off
    assert not watch.fallbacks, watch.fallbacks
    assert watch.random_draws > 0  # drawn on the device RNG, not copied from the CPU


def test_a_wrong_sampler_fails_the_checks():
    """The bounds have power: a normal with std 2.1 instead of 2 (or mean off by 0.05) is rejected."""
    torch.manual_seed(0)
    x = torch.randn(1 << 16) * 2.1 + 1.5
    with pytest.raises(AssertionError, match="variance"):
        RANDOM_CHECKS["normal"].check(x)
    with pytest.raises(AssertionError, match="mean"):
        mean_within(torch.randn(1 << 16) + 0.05, 0.0, 1.0, "shifted")


# ---- normal overloads and *_like --------------------------------------------------------------------------
def test_normal_overloads_shapes_dtypes_and_errors(no_fallback):
    mean, std = torch.zeros(3, dtype=torch.float64), torch.ones(2, 3)
    for args in [(mean, std), (mean, 2.0), (1.0, std)]:
        cpu = torch.normal(*args)
        out = torch.normal(*[a.to(DEV) if isinstance(a, torch.Tensor) else a for a in args])
        assert out.device.type == "xla" and (out.shape, out.dtype) == (cpu.shape, cpu.dtype)
        assert torch.isfinite(out.cpu()).all()
    with pytest.raises(RuntimeError, match="std >= 0.0"):
        torch.normal(mean.to(DEV), -1.0)


def test_complex_normal_splits_the_variance(no_fallback):
    """PyTorch fills real and imaginary parts each with variance std**2 / 2."""
    x = torch.empty(1 << 16, dtype=torch.complex64, device=DEV).normal_(1.0, 2.0).cpu()
    for part in (x.real, x.imag):
        mean_within(part, 1.0, 2.0 / math.sqrt(2), "complex normal part")
        cdf_at(part, {1.0: 0.5}, "complex normal part")


def test_like_ops(no_fallback):
    x = torch.zeros(4, 5, device=DEV)
    assert torch.randn_like(x, dtype=torch.float64).dtype == torch.float64
    low_high, high = torch.randint_like(x, 3, 9), torch.randint_like(x, 9)
    xladev.mark_step()
    low_high, high = low_high.cpu(), high.cpu()
    require((low_high >= 3) & (low_high < 9) & (low_high == low_high.round()), "randint_like out of [3, 9)")
    require((high >= 0) & (high < 9), "randint_like out of [0, 9)")
    assert torch.rand_like(x, device="cpu").device.type == "cpu"  # another device: made there


# ---- fractional max pooling: deterministic given its samples -----------------------------------------------
@pytest.mark.parametrize("d, shape, kernel, out", [(2, (2, 3, 9, 10), [3, 2], [4, 5]),
                                                    (3, (2, 2, 7, 8, 6), [2, 3, 2], [4, 3, 3]),
                                                    (2, (3, 8, 8), [2, 2], [5, 4])])
def test_fractional_max_pool_matches_cpu(d, shape, kernel, out, no_fallback):
    torch.manual_seed(0)
    x = torch.randn(shape, requires_grad=True)
    samples = torch.rand(shape[0] if len(shape) == d + 2 else 1, shape[-d - 1], d)
    op = getattr(torch.ops.aten, f"fractional_max_pool{d}d")
    values, indices = op(x, kernel, out, samples)
    xd = x.detach().to(DEV).requires_grad_()
    dvalues, dindices = op(xd, kernel, out, samples.to(DEV))
    torch.testing.assert_close(dvalues.cpu(), values, rtol=0, atol=0)
    torch.testing.assert_close(dindices.cpu(), indices, rtol=0, atol=0)
    weight = torch.randn(values.shape)
    (grad,) = torch.autograd.grad((values * weight).sum(), x)
    (dgrad,) = torch.autograd.grad((dvalues * weight.to(DEV)).sum(), xd)
    torch.testing.assert_close(dgrad.cpu(), grad)  # overlapping windows add in another order: rounding


# ---- rrelu ------------------------------------------------------------------------------------------------
def test_rrelu_training_writes_noise_and_differentiates_through_it(no_fallback):
    x = torch.tensor([-2.0, -0.5, 0.0, 0.5, 3.0], device=DEV, requires_grad=True)
    noise = torch.empty(5, device=DEV)
    y = torch.ops.aten.rrelu_with_noise(x, noise, 0.1, 0.4, True)
    (grad,) = torch.autograd.grad(y.sum(), x)
    noise, y, grad, xc = noise.cpu(), y.detach().cpu(), grad.cpu(), x.detach().cpu()
    require((noise[:3] >= 0.1) & (noise[:3] <= 0.4), "x <= 0: the noise is a U(0.1, 0.4) draw")
    require(noise[3:] == 1.0, "x > 0: the noise is 1")
    torch.testing.assert_close(y, xc * noise, rtol=0, atol=0)
    torch.testing.assert_close(grad, noise, rtol=0, atol=0)


def test_rrelu_evaluation_matches_cpu(no_fallback):
    x = torch.linspace(-2, 2, 9, requires_grad=True)
    xd = x.detach().to(DEV).requires_grad_()
    y, yd = F.rrelu(x, 0.1, 0.4, training=False), F.rrelu(xd, 0.1, 0.4, training=False)
    torch.testing.assert_close(yd.cpu(), y.detach())
    torch.testing.assert_close(torch.autograd.grad(yd.sum(), xd)[0].cpu(), torch.autograd.grad(y.sum(), x)[0])


# ---- torch.distributions --------------------------------------------------------------------------------
def test_distributions_sample_on_the_device(no_fallback):
    """Sampling without fallback, moments within 6 sigma; log_prob with argument validation."""
    n = 1 << 14
    full = lambda v: torch.full((n,), v, device=DEV)  # noqa: E731
    cases = [  # (distribution, mean, std)
        (D.Normal(full(1.0), full(2.0), validate_args=False), 1.0, 2.0),
        (D.Uniform(full(-1.0), full(1.0), validate_args=False), 0.0, 1 / math.sqrt(3)),
        (D.Bernoulli(probs=full(0.3), validate_args=False), 0.3, math.sqrt(0.21)),
        (D.Gamma(full(2.0), full(4.0), validate_args=False), 0.5, math.sqrt(2.0) / 4),
        (D.Poisson(full(3.0), validate_args=False), 3.0, math.sqrt(3.0)),
        (D.Binomial(10, probs=full(0.4), validate_args=False), 4.0, math.sqrt(2.4)),
    ]
    samples = [dist.sample() for dist, _, _ in cases]
    categories = D.Categorical(probs=torch.tensor([0.2, 0.3, 0.5], device=DEV), validate_args=False).sample((n,))
    simplex = D.Dirichlet(torch.ones(64, 3, device=DEV), validate_args=False).sample()
    xladev.mark_step()  # one graph for every draw
    for (dist, mean, std), x in zip(cases, samples):
        assert x.device.type == "xla" and x.shape == (n,)
        mean_within(x.cpu(), mean, std, type(dist).__name__)
    categories = categories.cpu()
    for k, p in enumerate([0.2, 0.3, 0.5]):
        mean_within((categories == k).double(), p, math.sqrt(p * (1 - p)), f"Categorical P({k})")
    simplex = simplex.cpu()
    torch.testing.assert_close(simplex.sum(-1), torch.ones(64))
    require(simplex > 0, "Dirichlet samples on the open simplex")
    normal = D.Normal(torch.zeros(8, device=DEV), torch.ones(8, device=DEV))  # validates its arguments
    assert torch.isfinite(normal.log_prob(normal.sample()).cpu()).all()


def test_gamma_rsample_gradient(no_fallback):
    """The reparameterised gradient d sample / d alpha = -(dF/dalpha) / (dF/dx), F the regularised
    incomplete gamma function, against that formula in float64 (dF/dalpha by central differences, error
    ~1e-10) and against the CPU. PyTorch's CPU kernel approximates it to within 6e-4 relative (measured
    against the same reference over alpha in [0.05, 200]), so the CPU comparison allows 1e-3; jax's
    float32 series stays within 2e-5 there, so the reference comparison allows 1e-4."""
    torch.manual_seed(0)
    # alpha >= 0.2: a draw below float32's smallest normal (clamped there, its gradient meaningless) has
    # probability < 1e-7.
    alpha = torch.tensor([0.2, 0.5, 1.0, 2.5, 7.0, 30.0], device=DEV).repeat_interleave(4).requires_grad_()
    sample = torch._standard_gamma(alpha)
    (grad,) = torch.autograd.grad(sample.sum(), alpha)
    a, x, grad = alpha.detach().cpu(), sample.detach().cpu(), grad.cpu()
    a64, x64 = a.double(), x.double()
    h = 1e-5 * a64
    dF_dalpha = (torch.special.gammainc(a64 + h, x64) - torch.special.gammainc(a64 - h, x64)) / (2 * h)
    dF_dx = torch.exp((a64 - 1) * x64.log() - x64 - torch.lgamma(a64))
    torch.testing.assert_close(grad.double(), -dF_dalpha / dF_dx, rtol=1e-4, atol=0)
    torch.testing.assert_close(grad, torch._standard_gamma_grad(a, x), rtol=1e-3, atol=0)


def test_randperm_draws_a_uniform_permutation_on_the_device(no_fallback):
    """A permutation of 0..n-1, reproducible under manual_seed, with no rank correlation between position
    and value: for a uniform permutation Spearman's rho has mean 0 and standard deviation 1/sqrt(n-1),
    so |rho| < 6/sqrt(n-1) fails a correct sampler with probability < 2e-9."""
    n = 1 << 14
    torch.manual_seed(11)
    first = torch.randperm(n, device="xla")
    assert first.device.type == "xla" and first.dtype == torch.int64
    values = first.cpu()
    assert torch.equal(values.sort().values, torch.arange(n))
    torch.manual_seed(11)
    assert torch.equal(torch.randperm(n, device="xla").cpu(), values)
    assert not torch.equal(torch.randperm(n, device="xla").cpu(), values)
    position = torch.arange(n, dtype=torch.float64)
    rho = torch.corrcoef(torch.stack([position, values.double()]))[0, 1]
    assert abs(float(rho)) < 6 / math.sqrt(n - 1)
    assert torch.randperm(6, device="xla", dtype=torch.float32).cpu().sort().values.tolist() == [0, 1, 2, 3, 4, 5]
