"""`torch.einsum` on xla tensors is one contraction (XLA's dot_general), as PyTorch/XLA lowers it, not PyTorch's
decomposition into reshapes and a bmm; values and gradients against eager CPU, errors as eager's."""

from __future__ import annotations

import pytest
import torch

import xladev
from tests.models.tolerances import U

EQUATIONS = [
    ("...n,mn->...m", [(4, 3, 2), (5, 2)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("ii->i", [(4, 4)]),
    ("i,j->ij", [(3,), (4,)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 8), (2, 2, 5, 8)]),
    ("ij->", [(3, 4)]),
]


@pytest.mark.parametrize("equation,shapes", EQUATIONS, ids=[e for e, _ in EQUATIONS])
def test_einsum_matches_eager_with_its_gradients(dev, equation, shapes):
    torch.manual_seed(0)
    cpu = [torch.randn(*shape, requires_grad=True) for shape in shapes]
    lazy = [t.detach().to(dev).requires_grad_() for t in cpu]
    want, got = torch.einsum(equation, *cpu), torch.einsum(equation, *lazy)
    # A sum of n terms in another order differs by at most n·u·Σ|terms|. No sum here runs over more terms than the
    # largest tensor has elements (n), each term a product of at most two randn values (|x| < 5 at this seed) in
    # the forward, three with the backward's weights.
    n = max(t.numel() for t in [*cpu, want])
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=0, atol=n * U * 25 * n)
    weights = torch.randn(want.shape)
    (want * weights).sum().backward()
    (got * weights.to(dev)).sum().backward()
    for c, x in zip(cpu, lazy):
        torch.testing.assert_close(x.grad.cpu(), c.grad, rtol=0, atol=n * U * 125 * n)


def test_a_batched_contraction_is_one_dot_without_reshapes(dev):
    a, w = torch.randn(4, 3, 2).to(dev), torch.randn(5, 2).to(dev)
    hlo = xladev.debug.get_tensors_hlo([torch.einsum("...n,mn->...m", a, w)])
    assert hlo.count(" dot(") == 1 and " reshape(" not in hlo and " transpose(" not in hlo, hlo


def test_einsum_errors_are_eagers(dev):
    for operands in ((torch.ones(2, 3), torch.ones(4, 2)),):
        with pytest.raises(RuntimeError) as eager:
            torch.einsum("ij,jk->ik", *operands)
        with pytest.raises(RuntimeError) as lazy:
            torch.einsum("ij,jk->ik", *(t.to(dev) for t in operands))
        assert str(lazy.value) == str(eager.value)


def test_mixed_dtypes_and_the_sublist_form_take_torchs_way(dev):
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    want = torch.einsum(a, [0, 1], b, [1, 2], [0, 2])
    got = torch.einsum(a.to(dev), [0, 1], b.to(dev), [1, 2], [0, 2])
    torch.testing.assert_close(got.cpu(), want, rtol=0, atol=3 * U * 25 * 3)  # 3 products per element, as above
    # Mixed dtypes: refused as eager refuses them (torch's shape function names the dtypes `torch.float32`
    # where the CPU kernel says `Float`).
    with pytest.raises(RuntimeError, match="expected scalar type Float but found Double"):
        torch.einsum("ij,jk->ik", a, b.double())
    with pytest.raises(RuntimeError, match="expected scalar type torch.float32 but found torch.float64"):
        torch.einsum("ij,jk->ik", a.to(dev), b.double().to(dev))
