"""Pallas kernels and flash attention on the xla device, against PyTorch eager on the CPU.

The kernels are real Pallas kernels (`pl.pallas_call` without `interpret=True`, as a GPU or TPU script writes
them): on this CPU device call_jax traces them in Pallas's interpret mode, so they compile to XLA loops.
"""

from __future__ import annotations

import math

import pytest
import torch

import xladev.debug as xd
from xladev.runtime.record import pallas_kernels
from xladev.runtime.record.jax_call import CallJaxError, call_jax
from xladev.runtime.record.pallas_kernels import flash_attention, make_kernel_from_pallas

jax = pytest.importorskip("jax")
jnp = jax.numpy
pl = pytest.importorskip("jax.experimental.pallas")

EPS32 = 2.0 ** -24  # float32's unit roundoff


def _add_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = x_ref[...] + y_ref[...]


@jax.jit
def add_vectors(x, y):
    return pl.pallas_call(_add_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)


def _matmul_kernel(x_ref, y_ref, o_ref):
    o_ref[...] = jnp.dot(x_ref[...], y_ref[...], precision=jax.lax.Precision.HIGHEST)


def tiled_matmul(x, y, *, block: int):
    """x @ y, one output tile of `block` x `block` per grid cell."""
    m, n = x.shape[0], y.shape[1]
    return pl.pallas_call(
        _matmul_kernel, grid=(m // block, n // block),
        in_specs=[pl.BlockSpec((block, x.shape[1]), lambda i, j: (i, 0)),
                  pl.BlockSpec((y.shape[0], block), lambda i, j: (0, j))],
        out_specs=pl.BlockSpec((block, block), lambda i, j: (i, j)),
        out_shape=jax.ShapeDtypeStruct((m, n), x.dtype))(x, y)


def _add_sub_kernel(x_ref, y_ref, sum_ref, diff_ref):
    sum_ref[...] = x_ref[...] + y_ref[...]
    diff_ref[...] = x_ref[...] - y_ref[...]


def add_sub(x, y):
    shape = jax.ShapeDtypeStruct(x.shape, x.dtype)
    return pl.pallas_call(_add_sub_kernel, out_shape=(shape, shape))(x, y)


def test_add_kernel_as_pytorch_xla_docs_write_it(dev):
    torch.manual_seed(0)
    q, k = torch.randn(3, 2, 128, 4), torch.randn(3, 2, 128, 4)
    pt_kernel = make_kernel_from_pallas(add_vectors, lambda x, y: [(x.shape, x.dtype)])
    out = pt_kernel(q.to(dev), k.to(dev))
    assert out.device.type == "xla"
    assert torch.equal(out.cpu(), q + k)  # one rounding, as eager's
    assert "name='add_vectors'" in xd.get_tensors_text([pt_kernel(q.to(dev), k.to(dev))])


def test_tiled_matmul_kernel(dev):
    torch.manual_seed(1)
    a, b = torch.randn(64, 32), torch.randn(32, 48)
    kernel = make_kernel_from_pallas(tiled_matmul, lambda x, y, **_: [((x.shape[0], y.shape[1]), x.dtype)])
    out = kernel(a.to(dev), b.to(dev), block=16).cpu()
    exact = a.double() @ b.double()
    # A float32 dot product of K terms is within K * eps * sum |a_i b_i| of the exact one.
    bound = 32 * EPS32 * (a.abs().double() @ b.abs().double())
    assert ((out.double() - exact).abs() <= bound).all()
    torch.testing.assert_close(out, a @ b, rtol=1e-5, atol=1e-5)


def test_kernel_with_two_outputs_returns_a_tuple(dev):
    x, y = torch.randn(8, 128), torch.randn(8, 128)
    kernel = make_kernel_from_pallas(add_sub, lambda a, b: [(a.shape, a.dtype), (a.shape, a.dtype)])
    total, diff = kernel(x.to(dev), y.to(dev))
    assert torch.equal(total.cpu(), x + y) and torch.equal(diff.cpu(), x - y)


def test_declared_outputs_must_match_the_kernel(dev):
    x = torch.ones(8, device=dev)
    wrong = make_kernel_from_pallas(add_vectors, lambda a, b: [(a.shape, torch.int32)])
    with pytest.raises(ValueError, match=r"make_kernel_from_pallas: add_vectors returns \[\(\[8\], torch.float32\)\], "
                                         r"but output_shape_dtype_fn declares \[\(\[8\], torch.int32\)\]"):
        wrong(x, x)
    not_a_list = make_kernel_from_pallas(add_vectors, lambda a, b: (a.shape, a.dtype))
    with pytest.raises(TypeError, match="output_shape_dtype_fn must return a list of"):
        not_a_list(x, x)


# ---- flash attention -------------------------------------------------------------------------------------
def eager_attention(q, k, v, *, causal=False, sm_scale=1.0, ab=None, q_seg=None, kv_seg=None):
    """PyTorch eager: softmax((q k^T + ab) * sm_scale, masked) v, the mask as PyTorch/XLA's tests build it."""
    logits = q @ k.transpose(-2, -1)
    if ab is not None:
        logits = logits + ab
    logits = logits * sm_scale
    mask = torch.zeros(logits.shape[-2:], dtype=torch.bool)
    if causal:
        mask = torch.ones_like(mask).triu(1)
    if q_seg is not None:
        mask = mask | (q_seg[:, None, :, None] != kv_seg[:, None, None, :])
    logits = logits.masked_fill(mask, torch.finfo(logits.dtype).min)
    return torch.softmax(logits, dim=-1) @ v


def qkv(*shape, seed=0):
    torch.manual_seed(seed)
    return [torch.randn(*shape, requires_grad=True) for _ in range(3)]


# Attention over 32 keys of 8-wide heads in float32: outputs and gradients of magnitude ~1, each a few sums
# of 32 terms: within some hundred float32 ulps.
ATTENTION = dict(rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_forward_and_backward(dev, causal):
    q, k, v = qkv(2, 3, 32, 8)
    scale = 1 / math.sqrt(8)
    xs = [t.detach().to(dev).requires_grad_() for t in (q, k, v)]
    out = flash_attention(*xs, causal=causal, sm_scale=scale)
    expected = eager_attention(q, k, v, causal=causal, sm_scale=scale)
    torch.testing.assert_close(out.cpu(), expected.detach(), **ATTENTION)
    grad = torch.randn_like(expected)
    out.backward(grad.to(dev))
    expected.backward(grad)
    for x, t in zip(xs, (q, k, v)):
        torch.testing.assert_close(x.grad.cpu(), t.grad, **ATTENTION)


def test_flash_attention_defaults_to_pytorch_xla_scale_of_one(dev):
    q, k, v = qkv(1, 2, 16, 4, seed=1)
    out = flash_attention(*(t.detach().to(dev) for t in (q, k, v)))
    torch.testing.assert_close(out.cpu(), eager_attention(q, k, v).detach(), **ATTENTION)


def test_flash_attention_bias_and_segments(dev):
    q, k, v = qkv(2, 2, 32, 8, seed=2)
    ab = torch.randn(2, 2, 32, 32, requires_grad=True)
    segments = torch.cat([torch.zeros(2, 16), torch.ones(2, 16)], dim=1)
    xs = [t.detach().to(dev).requires_grad_() for t in (q, k, v, ab)]
    seg = segments.to(dev)
    out = flash_attention(xs[0], xs[1], xs[2], False, seg, seg, 0.5, ab=xs[3])
    expected = eager_attention(q, k, v, sm_scale=0.5, ab=ab, q_seg=segments, kv_seg=segments)
    torch.testing.assert_close(out.cpu(), expected.detach(), **ATTENTION)
    out.sum().backward()
    expected.sum().backward()
    for x, t in zip(xs, (q, k, v, ab)):
        torch.testing.assert_close(x.grad.cpu(), t.grad, **ATTENTION)


def test_flash_attention_is_one_named_node(dev):
    q = torch.randn(1, 2, 16, 4, device=dev)
    ir = xd.get_tensors_text([flash_attention(q, q, q, causal=True)])
    assert ir.count("xla::call_jax(") == 1 and "name='flash_attention'" in ir


def test_flash_attention_refuses_inputs_that_do_not_fit(dev):
    q = torch.randn(1, 2, 16, 4, device=dev)
    with pytest.raises(ValueError, match="flash_attention: pass both q_segment_ids and kv_segment_ids, or neither"):
        flash_attention(q, q, q, False, torch.zeros(1, 16, device=dev))
    with pytest.raises(ValueError, match=r"flash_attention: q \[1, 2, 16, 4\], k \[1, 2, 16, 8\]"):
        flash_attention(q, torch.randn(1, 2, 16, 8, device=dev), torch.randn(1, 2, 16, 8, device=dev))
    with pytest.raises(ValueError, match=r"flash_attention: ab must be \[1, 2, 16, 16\], got \[1, 2, 16\]"):
        flash_attention(q, q, q, ab=torch.zeros(1, 2, 16, device=dev))


def _pallas_gpu_path(dev, backward: bool) -> None:
    # The GPU path (jax's Pallas flash-attention kernel on PyTorch/XLA's layout) run here in interpret mode:
    # the same layout changes and kernels a CUDA device runs, checked against eager.
    q, k, v = qkv(1, 2, 32, 16, seed=3)
    scale = 1 / math.sqrt(16)
    xs = [t.detach().to(dev).requires_grad_(backward) for t in (q, k, v)]
    out = call_jax(pallas_kernels._pallas_attention, (*xs, None), {"causal": True, "sm_scale": scale})
    expected = eager_attention(q, k, v, causal=True, sm_scale=scale)
    torch.testing.assert_close(out.cpu(), expected.detach(), **ATTENTION)
    if backward:
        out.sum().backward()  # the kernel's own backward kernels (jax's custom_vjp), through jax.vjp
        expected.sum().backward()
        for x, t in zip(xs, (q, k, v)):
            torch.testing.assert_close(x.grad.cpu(), t.grad, **ATTENTION)


def test_pallas_gpu_kernel_path_matches_eager_in_interpret_mode(dev):
    _pallas_gpu_path(dev, backward=False)


@pytest.mark.slow  # some 15 s: the backward kernels' interpreted loops compile slowly on the CPU
def test_pallas_gpu_kernel_path_backward_in_interpret_mode(dev):
    _pallas_gpu_path(dev, backward=True)


def test_a_kernel_without_a_backward_says_so_when_differentiated(dev):
    # A Pallas kernel has no reverse-mode rule of its own (jax's flash attention defines one with custom_vjp).
    x = torch.ones(8, device=dev, requires_grad=True)
    out = make_kernel_from_pallas(add_vectors, lambda a, b: [(a.shape, a.dtype)])(x, x)
    with pytest.raises(CallJaxError, match="call_jax: jax could not differentiate add_vectors: "):
        out.sum().backward()
