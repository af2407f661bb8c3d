"""Linear algebra on `xla`: lowered through jax, matching eager CPU, with PyTorch's errors and conventions.

Real compiles and runs, no mocks. Inputs are well-conditioned (diagonally dominant or SPD), so a
result is compared with eager CPU within bounds from float32 rounding: backward-stable factorisations
and solves are accurate to c · n · u · κ relative to the data (u = 2^-24 float32's unit roundoff,
n the order, κ the condition number; see xladev/coverage/_invariants.py for the derivation).
With n = 4 and κ ≤ 10 here, BOUND = 8 · n · u · κ · 2 (both sides round) is about 2e-5 relative.
Residuals (A x - b, L L^H - A) are held to the backward error alone, c · n · u · ||A|| ||x||.
"""

from __future__ import annotations

import pytest
import torch

import xladev
from xladev.events import Fallback, TransferFromDevice

U = 2.0 ** -24
N = 4
KAPPA = 10.0
REL = 2 * 8 * N * U * KAPPA  # relative forward error bound between two stable results


def _spd(*batch, n=N):
    """A symmetric positive-definite batch with eigenvalues in [1, ~4]: κ ≤ 10."""
    g = torch.randn(*batch, n, n) / n
    return g @ g.mT + torch.eye(n)


def _well(*batch, n=N):
    """A diagonally dominant (κ ≤ 10 in practice) general batch."""
    return torch.randn(*batch, n, n) / n + 2 * torch.eye(n)


def _close(actual, expected, rel=REL, what=""):
    actual = actual.detach().cpu()
    scale = expected.detach().abs().max().clamp_min(1.0)
    torch.testing.assert_close(actual, expected.detach(), rtol=0, atol=float(rel * scale), msg=what)


def _xla(*tensors, grad=False):
    out = tuple(t.detach().to("xla").requires_grad_(grad) for t in tensors)
    return out if len(out) > 1 else out[0]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---- residuals and reconstructions --------------------------------------------------------------------
def test_solve_residual_and_gradients_match_cpu(events):
    a, b = _well(2), torch.randn(2, N, 3)
    ad, bd = _xla(a, b, grad=True)
    events.clear()
    x = torch.linalg.solve(ad, bd)
    (x * torch.arange(3.0, device="xla")).sum().backward()
    assert [e.name for e in events.of(Fallback)] == []
    x_cpu = x.detach().cpu()
    # Backward error of LU with partial pivoting: ||A x - b|| <= c n u ||A|| ||x||.
    residual = a @ x_cpu - b
    assert residual.abs().max() <= 8 * N * U * a.abs().sum(-1).max() * x_cpu.abs().max() * N
    ac, bc = a.clone().requires_grad_(), b.clone().requires_grad_()
    (torch.linalg.solve(ac, bc) * torch.arange(3.0)).sum().backward()
    _close(ad.grad, ac.grad, what="grad A")
    _close(bd.grad, bc.grad, what="grad B")


def test_cholesky_reconstructs_and_backward_matches(events):
    a = _spd(3)
    ad = _xla(a, grad=True)
    events.clear()
    low = torch.linalg.cholesky(ad)
    low.sum().backward()
    assert [e.name for e in events.of(Fallback)] == []
    low_cpu = low.detach().cpu()
    assert torch.equal(low_cpu, low_cpu.tril())
    _close(low_cpu @ low_cpu.mT, a, rel=8 * N * U * 2, what="L L^T vs A")
    ac = a.clone().requires_grad_()
    torch.linalg.cholesky(ac).sum().backward()
    _close(ad.grad, ac.grad, what="grad")
    upper = torch.linalg.cholesky(_xla(a), upper=True).cpu()
    _close(upper, torch.linalg.cholesky(a, upper=True), what="upper=True")


def test_matrix_exp_matches_cpu():
    # ||A|| <= 1: the exponential's relative condition number (about ||A||) stays O(1).
    a = _well(2) / 4
    _close(torch.linalg.matrix_exp(_xla(a)), torch.linalg.matrix_exp(a))


# One graph forward and one backward for all of them: each compile costs more than the whole run.
FUNCTIONS = {
    "inv": torch.linalg.inv, "det": torch.linalg.det, "slogdet": lambda m: torch.linalg.slogdet(m)[1],
    "pinv": torch.linalg.pinv, "svdvals": torch.linalg.svdvals, "qr_R": lambda m: torch.linalg.qr(m)[1].abs(),
    "eigvalsh": lambda m: torch.linalg.eigvalsh(m @ m.mT),
}


def test_forward_and_backward_match_cpu(events):
    a = _well(2)
    ad = _xla(a, grad=True)
    events.clear()
    outs = {name: fn(ad) for name, fn in FUNCTIONS.items()}
    sum(out.sum() for out in outs.values()).backward()
    assert [e.name for e in events.of(Fallback)] == []
    ac = a.clone().requires_grad_()
    expected = {name: fn(ac) for name, fn in FUNCTIONS.items()}
    sum(out.sum() for out in expected.values()).backward()
    for name in FUNCTIONS:
        _close(outs[name], expected[name], what=name)
    _close(ad.grad, ac.grad, rel=REL * len(FUNCTIONS), what="grad of the sum")


def test_determinant_backward_of_transposed_view():
    """PyTorch's det backward reads A.is_contiguous() to know whether LU factors A or A^T."""
    a = _well()
    ad = _xla(a, grad=True)
    torch.linalg.det(ad.mT).backward()
    ac = a.clone().requires_grad_()
    torch.linalg.det(ac.mT).backward()
    _close(ad.grad, ac.grad)


def test_lstsq_and_triangular_solves_match_cpu():
    a, b = torch.randn(6, 3) + torch.eye(6, 3) * 3, torch.randn(6, 2)
    for driver in ("gels", "gelsy"):
        got = torch.linalg.lstsq(*_xla(a, b), driver=driver)
        want = torch.linalg.lstsq(a, b, driver=driver)
        _close(got.solution, want.solution, what=driver)
        for name in ("residuals", "rank"):
            assert getattr(got, name).shape == getattr(want, name).shape, (driver, name)
        assert torch.equal(got.rank.cpu(), want.rank)
    t = _well().triu()
    _close(torch.linalg.solve_triangular(*_xla(t, b[:N]), upper=True), torch.linalg.solve_triangular(t, b[:N], upper=True))
    _close(torch.linalg.solve_triangular(*_xla(t.mT, b[:N].mT), upper=False, left=False, unitriangular=True),
           torch.linalg.solve_triangular(t.mT, b[:N].mT, upper=False, left=False, unitriangular=True))


# ---- LAPACK conventions -------------------------------------------------------------------------------------
def test_lu_factor_pivots_info_and_householder_form_follow_lapack():
    a = torch.randn(2, 5, 3)
    lu, piv, info = torch.linalg.lu_factor_ex(_xla(a))
    lu_c, piv_c, info_c = torch.linalg.lu_factor_ex(a)
    assert piv.dtype == info.dtype == torch.int32
    assert torch.equal(piv.cpu(), piv_c) and torch.equal(info.cpu(), info_c)
    _close(lu, lu_c)
    p, low, up = torch.lu_unpack(lu, piv)
    assert torch.equal(p.cpu(), torch.lu_unpack(lu_c, piv_c)[0])
    _close(p.cpu() @ low.cpu() @ up.cpu(), a)
    h, tau = torch.geqrf(_xla(a))
    h_c, tau_c = torch.geqrf(a)
    _close(h, h_c)
    _close(tau, tau_c)
    _close(torch.linalg.householder_product(h, tau), torch.linalg.householder_product(h_c, tau_c))


def test_info_of_singular_and_indefinite_matrices_without_raising():
    singular = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]])
    indefinite = torch.stack([torch.eye(3), torch.diag(torch.tensor([1.0, 1.0, -1.0]))])
    assert torch.equal(torch.linalg.inv_ex(_xla(singular)).info.cpu(), torch.linalg.inv_ex(singular).info)
    assert torch.equal(torch.linalg.cholesky_ex(_xla(indefinite)).info.cpu(), torch.linalg.cholesky_ex(indefinite).info)
    assert torch.linalg.cholesky_ex(_xla(indefinite)).info.cpu().tolist() == [0, 3]


# ---- errors ------------------------------------------------------------------------------------------------
def _error_of(fn, *args):
    with pytest.raises(Exception) as caught:
        fn(*args)
    return type(caught.value), str(caught.value)


@pytest.mark.parametrize("case", ["inv", "cholesky", "cholesky_batch", "torch.cholesky", "solve"])
def test_errors_match_pytorch(case, events):
    singular = torch.tensor([[1.0, 2.0], [2.0, 4.0]])
    indefinite = torch.tensor([[1.0, 2.0], [2.0, 1.0]])
    fn, arg = {
        "inv": (torch.linalg.inv, singular),
        "cholesky": (torch.linalg.cholesky, indefinite),
        "cholesky_batch": (torch.linalg.cholesky, torch.stack([torch.eye(2), indefinite, indefinite])),
        "torch.cholesky": (torch.cholesky, indefinite),
        "solve": (lambda m: torch.linalg.solve(m, torch.ones(2, device=m.device)), singular),
    }[case]
    expected = _error_of(fn, arg)
    assert expected[0] is torch.linalg.LinAlgError
    events.clear()
    assert _error_of(fn, _xla(arg)) == expected
    assert [e.name for e in events.of(Fallback)] == []
    assert any("reading info" in e.kind for e in events.of(TransferFromDevice))  # the one host read


_LOW_PRECISION_CALLS = {
    "eigh": lambda x: torch.linalg.eigh(x), "svd": lambda x: torch.linalg.svd(x), "qr": lambda x: torch.linalg.qr(x),
    "cholesky": lambda x: torch.linalg.cholesky(x), "old cholesky": lambda x: torch.cholesky(x),
    "det": lambda x: torch.linalg.det(x), "solve": lambda x: torch.linalg.solve(x, x),
    "lu_factor": lambda x: torch.linalg.lu_factor(x), "lu": lambda x: torch.linalg.lu(x),
    "eigvals": lambda x: torch.linalg.eigvals(x), "lstsq": lambda x: torch.linalg.lstsq(x, x),
    "solve_triangular": lambda x: torch.linalg.solve_triangular(x, x, upper=True),
    "cholesky_solve": lambda x: torch.cholesky_solve(x, x), "cholesky_inverse": lambda x: torch.cholesky_inverse(x),
    "geqrf": lambda x: torch.geqrf(x), "householder_product": lambda x: torch.linalg.householder_product(x, x[:, 0]),
    "ormqr": lambda x: torch.ormqr(x, x[:, 0], x),
}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", list(_LOW_PRECISION_CALLS))
def test_half_and_bfloat16_factorisations_raise_eagers_error_at_the_call(name, dtype):
    """Eager refuses these for half and bfloat16 (CPU and CUDA alike): the same error, when called, not jax's at
    the compile of the step."""
    call = _LOW_PRECISION_CALLS[name]
    a = (torch.eye(4) * 4 + 0.5).to(dtype)
    with pytest.raises(Exception) as eager:
        call(a)
    with pytest.raises(type(eager.value)) as ours:
        call(a.to(xladev.device()))
    assert str(ours.value).splitlines()[0] == str(eager.value).splitlines()[0]
