"""`scaled_dot_product_attention` on xla tensors is one node forward and one backward (record/attention.py), with
eager's values and gradients; what that node does not take goes through torch's math path as before."""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn.functional as F

import xladev.debug as xd
from tests.models.tolerances import U

CASES = {
    "plain": {},
    "scale": {"scale": 0.3},
    "negative scale": {"scale": -0.3},
    "causal": {"is_causal": True},
    "bool mask": {"mask": "bool"},
    "float mask": {"mask": "float"},
}


def _inputs(seed: int, batch=(2, 3), length=8, keys=10, width=16, value_width=4):
    torch.manual_seed(seed)
    q = torch.randn(*batch, length, width)
    k = torch.randn(*batch, keys if length != keys else length, width)
    v = torch.randn(*batch, k.shape[-2], value_width)
    return q, k, v


def _mask(kind: str, q, k):
    scores = (*q.shape[:-1], k.shape[-2])
    if kind == "bool":
        mask = torch.rand(scores[-2:]) > 0.3
        mask[2] = False  # a query that may attend to nothing: zeros out, zero gradients (torch's _safe_softmax)
        return mask
    mask = torch.randn(scores[0], 1, *scores[-2:])  # broadcast over the heads
    mask[..., 3, :] = float("-inf")
    return mask


def _bound(q, k, v) -> float:
    # Each score is a dot of E terms, each output a softmax-weighted sum of S values: in another order, float32
    # differs by a few (E + S) rounding errors of the values' size (|randn| < 5 here), through the backward too.
    width, keys = q.shape[-1], k.shape[-2]
    return 8 * (width + keys) * U * 25


@pytest.mark.parametrize("case", list(CASES))
def test_attention_matches_eager_with_its_gradients(dev, case):
    options = dict(CASES[case])
    mask_kind = options.pop("mask", None)
    q, k, v = _inputs(0, length=10 if options.get("is_causal") else 8)
    mask = None if mask_kind is None else _mask(mask_kind, q, k)
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    cpu_mask = mask.clone().requires_grad_() if mask_kind == "float" else mask
    lazy = [t.to(dev).requires_grad_() for t in (q, k, v)]
    lazy_mask = None if mask is None else mask.to(dev).requires_grad_(mask_kind == "float")
    want = F.scaled_dot_product_attention(*cpu, attn_mask=cpu_mask, **options)
    got = F.scaled_dot_product_attention(*lazy, attn_mask=lazy_mask, **options)
    bound = _bound(q, k, v)
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=0, atol=bound)
    weights = torch.randn(want.shape)
    (want * weights).sum().backward()
    (got * weights.to(dev)).sum().backward()
    pairs = list(zip(lazy, cpu)) + ([(lazy_mask, cpu_mask)] if mask_kind == "float" else [])
    for x, c in pairs:
        grad = x.grad.cpu()
        assert not grad.isnan().any()
        torch.testing.assert_close(grad, c.grad, rtol=0, atol=bound)
    if mask_kind == "bool":
        assert torch.equal(got.cpu()[..., 2, :], torch.zeros_like(got.cpu()[..., 2, :]))
        assert torch.equal(lazy[0].grad.cpu()[..., 2, :], torch.zeros(2, 3, 16))


def _ops(text: str) -> list[str]:
    return re.findall(r"= (?:\S+ )?((?:aten|xla)::\w+)", text)


def test_a_causal_call_is_one_node_forward_and_one_backward(dev):
    q, k, v = (t.to(dev).requires_grad_() for t in _inputs(1, length=10))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    forward = xd.get_tensors_text([out])
    assert "name='scaled_dot_product_attention'" in forward
    assert not {"aten::bmm", "aten::_softmax", "aten::matmul"} & set(_ops(forward)), forward
    out.backward(torch.ones(out.shape, device=dev))
    backward = xd.get_tensors_text([q.grad, k.grad, v.grad])
    assert "name='scaled_dot_product_attention_backward'" in backward
    assert not {"aten::bmm", "aten::_softmax_backward_data"} & set(_ops(backward)), backward


def test_grouped_query_attention_repeats_the_key_and_value_heads(dev):
    torch.manual_seed(2)
    q, k, v = torch.randn(2, 4, 8, 16), torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16)
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    lazy = [t.to(dev).requires_grad_() for t in (q, k, v)]
    want = F.scaled_dot_product_attention(*cpu, is_causal=True, enable_gqa=True)
    got = F.scaled_dot_product_attention(*lazy, is_causal=True, enable_gqa=True)
    assert "name='scaled_dot_product_attention'" in xd.get_tensors_text([got])
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=0, atol=_bound(q, k, v))
    got.sum().backward()
    want.sum().backward()
    for x, c in zip(lazy, cpu):
        torch.testing.assert_close(x.grad.cpu(), c.grad, rtol=0, atol=2 * _bound(q, k, v))  # two heads' sums
    with pytest.raises(RuntimeError) as eager:
        F.scaled_dot_product_attention(q, k[:, :1].expand(2, 3, 8, 16), v[:, :1].expand(2, 3, 8, 16), enable_gqa=True)
    with pytest.raises(RuntimeError) as lazy_error:  # 4 query heads over 3 key heads: torch's own error
        F.scaled_dot_product_attention(*(t.to(dev) for t in (q, k[:, :1].expand(2, 3, 8, 16),
                                                              v[:, :1].expand(2, 3, 8, 16))), enable_gqa=True)
    assert type(lazy_error.value) is type(eager.value)


def test_dropout_takes_torchs_math_path(dev):
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 4, 8, 16) for _ in range(3))
    out = F.scaled_dot_product_attention(q.to(dev), k.to(dev), v.to(dev), dropout_p=0.5)
    text = xd.get_tensors_text([out])
    assert "scaled_dot_product_attention" not in text and "aten::bmm" in _ops(text)


def test_torchs_errors_stay_torchs(dev):
    q, k, v = _inputs(3)
    with pytest.raises(RuntimeError) as eager:
        F.scaled_dot_product_attention(q, k[..., :5], v)
    with pytest.raises(RuntimeError) as lazy:
        F.scaled_dot_product_attention(q.to(dev), k[..., :5].to(dev), v.to(dev))
    assert type(lazy.value) is type(eager.value)
    mask = torch.ones(8, 10, dtype=torch.bool)
    with pytest.raises(RuntimeError, match="attn_mask should not be set when is_causal=True"):
        F.scaled_dot_product_attention(q.to(dev), k.to(dev), v.to(dev), attn_mask=mask.to(dev), is_causal=True)


def test_torch_compile_of_attention_matches_eager(dev):
    q, k, v = _inputs(4, length=10)

    def layer(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).sum(-1)

    compiled = torch.compile(layer, backend="xladev")
    lazy = [t.to(dev).requires_grad_() for t in (q, k, v)]
    cpu = [t.clone().requires_grad_() for t in (q, k, v)]
    got, want = compiled(*lazy), layer(*cpu)
    torch.testing.assert_close(got.cpu(), want.detach(), rtol=0, atol=_bound(q, k, v))
    got.sum().backward()
    want.sum().backward()
    for x, c in zip(lazy, cpu):
        torch.testing.assert_close(x.grad.cpu(), c.grad, rtol=0, atol=_bound(q, k, v))
