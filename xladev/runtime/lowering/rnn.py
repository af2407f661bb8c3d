"""Recurrent networks: the fused LSTM and GRU cells with their backward, and sequence packing.

On any device but the CPU, PyTorch's composite `lstm`/`gru` (behind `nn.LSTM`/`nn.GRU`) record two
matmuls per time step and hand the gate pre-activations to `_thnn_fused_lstm_cell` or
`_thnn_fused_gru_cell`; autograd then calls `_thnn_fused_lstm_cell_backward_impl` or
`_thnn_fused_gru_cell_backward` with the forward's workspace. None of these has a CPU kernel, so all
four are lowered here. `nn.RNN` uses plain linear ops and needs nothing of its own. Packed sequences
(`pack_padded_sequence`) keep their `batch_sizes` on the host; `_pack_padded_sequence` below makes them.

The workspace layouts are this module's own (only these lowerings read them); their shapes are the
ones PyTorch's CUDA kernels promise:
  LSTM [B, 4H]: the activated gates i, f, g, o (sigmoid, sigmoid, tanh, sigmoid).
  GRU  [B, 5H]: r, z, n, the previous hidden state, and the hidden side of n's pre-activation
                (W_hn h + b_hn), which the reset gate's gradient needs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

import torch

from xladev.runtime.lowering.registry import lowers
from xladev.runtime.graph.meta import SHAPE_RULES

aten = torch.ops.aten


# ---- LSTM -------------------------------------------------------------------------------------------
@lowers(aten._thnn_fused_lstm_cell.default)
def _lstm_cell(ctx, input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + (input_bias + hidden_bias)
    i, f, g, o = jnp.split(gates, 4, axis=1)
    i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
    cy = f * cx + i * g
    hy = o * jnp.tanh(cy)
    return hy, cy, jnp.concatenate([i, f, g, o], axis=1)


@lowers(aten._thnn_fused_lstm_cell_backward_impl.default)
def _lstm_cell_backward(ctx, grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """(grad of the gate pre-activations, grad of cx, grad of the bias or None); an undefined grad is zero."""
    if grad_hy is None and grad_cy is None:
        return None, None, None
    i, f, g, o = jnp.split(workspace, 4, axis=1)
    tanh_cy = jnp.tanh(cy)
    grad_c = jnp.zeros_like(cy) if grad_cy is None else grad_cy
    if grad_hy is not None:
        grad_c = grad_c + grad_hy * o * (1 - tanh_cy * tanh_cy)
        grad_o = grad_hy * tanh_cy * o * (1 - o)
    else:
        grad_o = jnp.zeros_like(o)
    grad_i = grad_c * g * i * (1 - i)
    grad_f = grad_c * cx * f * (1 - f)
    grad_g = grad_c * i * (1 - g * g)
    grad_gates = jnp.concatenate([grad_i, grad_f, grad_g, grad_o], axis=1)
    return grad_gates, grad_c * f, jnp.sum(grad_gates, axis=0) if has_bias else None


# ---- GRU --------------------------------------------------------------------------------------------
@lowers(aten._thnn_fused_gru_cell.default)
def _gru_cell(ctx, input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    if input_bias is not None:
        input_gates = input_gates + input_bias
        hidden_gates = hidden_gates + hidden_bias
    in_r, in_z, in_n = jnp.split(input_gates, 3, axis=1)
    h_r, h_z, h_n = jnp.split(hidden_gates, 3, axis=1)
    r = jax.nn.sigmoid(in_r + h_r)
    z = jax.nn.sigmoid(in_z + h_z)
    n = jnp.tanh(in_n + r * h_n)
    hy = n + z * (hx - n)
    return hy, jnp.concatenate([r, z, n, hx, h_n], axis=1)


@lowers(aten._thnn_fused_gru_cell_backward.default)
def _gru_cell_backward(ctx, grad_hy, workspace, has_bias):
    """(grad of input gates, grad of hidden gates, grad of hx, grad of input bias, grad of hidden bias)."""
    r, z, n, hx, h_n = jnp.split(workspace, 5, axis=1)
    grad_z = grad_hy * (hx - n) * z * (1 - z)
    grad_n = grad_hy * (1 - z) * (1 - n * n)
    grad_r = grad_n * h_n * r * (1 - r)
    grad_input = jnp.concatenate([grad_r, grad_z, grad_n], axis=1)
    grad_hidden = jnp.concatenate([grad_r, grad_z, grad_n * r], axis=1)
    if not has_bias:
        return grad_input, grad_hidden, grad_hy * z, None, None
    return grad_input, grad_hidden, grad_hy * z, jnp.sum(grad_input, axis=0), jnp.sum(grad_hidden, axis=0)


# ---- shape rules ------------------------------------------------------------------------------------
# PyTorch has no meta kernel for the GRU cell ops, and the LSTM cell's fails on a bias-free LSTM
# (it reads `.device` of the absent biases). These rules check what CUDA's kernels check.
def _check_cell(input_gates, hidden_gates, input_bias, hidden_bias, prev, factor: int) -> None:
    torch._check(input_gates.dim() == 2, lambda: f"expected 2-D gates, got {input_gates.dim()}-D")
    torch._check(input_gates.shape == hidden_gates.shape,
                 lambda: f"input gates {list(input_gates.shape)} != hidden gates {list(hidden_gates.shape)}")
    width = input_gates.size(1)
    torch._check(width % factor == 0, lambda: f"gates width {width} is not a multiple of {factor}")
    torch._check(list(prev.shape) == [input_gates.size(0), width // factor],
                 lambda: f"previous state {list(prev.shape)} != [{input_gates.size(0)}, {width // factor}]")
    torch._check((input_bias is None) == (hidden_bias is None), lambda: "both biases or neither must be given")
    for bias in (input_bias, hidden_bias):
        torch._check(bias is None or list(bias.shape) == [width],
                     lambda: f"bias {list(bias.shape)} != [{width}]")


def _empty(*shape, like):
    return torch.empty(shape, dtype=like.dtype, device="meta")


def _lstm_cell_shape(input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    _check_cell(input_gates, hidden_gates, input_bias, hidden_bias, cx, 4)
    batch, hidden = cx.shape
    return _empty(batch, hidden, like=cx), _empty(batch, hidden, like=cx), _empty(batch, 4 * hidden, like=input_gates)


def _gru_cell_shape(input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    _check_cell(input_gates, hidden_gates, input_bias, hidden_bias, hx, 3)
    batch, hidden = hx.shape
    return _empty(batch, hidden, like=hx), _empty(batch, 5 * hidden, like=input_gates)


def _gru_cell_backward_shape(grad_hy, workspace, has_bias):
    torch._check(grad_hy.dim() == 2 and workspace.dim() == 2, lambda: "expected 2-D grad_hy and workspace")
    batch, hidden = grad_hy.shape
    torch._check(list(workspace.shape) == [batch, 5 * hidden],
                 lambda: f"workspace {list(workspace.shape)} != [{batch}, {5 * hidden}]")
    gates = _empty(batch, 3 * hidden, like=grad_hy)
    bias = _empty(3 * hidden, like=grad_hy) if has_bias else None
    return gates, _empty(batch, 3 * hidden, like=grad_hy), _empty(batch, hidden, like=grad_hy), bias, bias


SHAPE_RULES[aten._thnn_fused_lstm_cell.default] = _lstm_cell_shape
SHAPE_RULES[aten._thnn_fused_gru_cell.default] = _gru_cell_shape
SHAPE_RULES[aten._thnn_fused_gru_cell_backward.default] = _gru_cell_backward_shape


# ---- packing ----------------------------------------------------------------------------------------
def _pack_padded_sequence(input, lengths, batch_first):
    """`_pack_padded_sequence` on xla: the time steps' valid rows, concatenated, and the CPU `batch_sizes`.

    PyTorch's kernel reads `lengths` on the host and slices the input; on xla it would reach the device
    with a CPU `lengths` and go to the CPU fallback, which would also move `batch_sizes` to the device,
    where `lstm.data` and friends cannot read it. Registered as the xla autograd kernel, it slices and
    concatenates with ordinary (differentiable, lowered) ops, so its backward needs nothing of its own.
    Under `torch.inference_mode()` autograd kernels are skipped: the op then reaches the device itself
    and fails the CPU fallback's same-device check (no_grad is fine).

    Raises:
      RuntimeError: the same checks as PyTorch's kernel (CPU int64 lengths, sorted, positive).
    """
    steps_first = input.transpose(0, 1) if batch_first else input
    torch._check(lengths.device.type == "cpu" and lengths.dim() == 1 and lengths.dtype == torch.int64,
                 lambda: "'lengths' argument should be a 1D CPU int64 tensor, but got "
                         f"{lengths.dim()}D {lengths.device} {lengths.dtype} tensor")
    torch._check(steps_first.numel() > 0, lambda: "Cannot pack empty tensors.")
    lens = lengths.tolist()
    batch = steps_first.size(1)
    torch._check(len(lens) == batch,
                 lambda: f"Expected `len(lengths)` to be equal to batch_size, but got {len(lens)} (batch_size={batch})")
    torch._check(lens[-1] > 0, lambda: "Length of all samples has to be greater than 0, but found an element "
                                       "in 'lengths' that is <= 0")
    torch._check(all(a >= b for a, b in zip(lens, lens[1:])),
                 lambda: "`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You can "
                         "pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep this "
                         "requirement if you do not need ONNX exportability.")
    torch._check(lens[0] <= steps_first.size(0),
                 lambda: f"the longest length {lens[0]} exceeds the {steps_first.size(0)} time steps of the input")
    # Walk the lengths from the shortest: each run of time steps shared by the first `size` sequences
    # becomes one block of rows, as in PyTorch's kernel.
    blocks, batch_sizes, done = [], [], 0
    for size in range(batch, 0, -1):
        length = lens[size - 1]
        if length > done:
            blocks.append(steps_first[done:length, :size].reshape((-1,) + tuple(steps_first.shape[2:])))
            batch_sizes += [size] * (length - done)
            done = length
    return torch.cat(blocks), torch.tensor(batch_sizes, dtype=torch.int64)


# Kept alive for the life of the process: dropping the library would drop the registration.
_lib = torch.library.Library("aten", "IMPL")
_lib.impl("_pack_padded_sequence", _pack_padded_sequence, "AutogradPrivateUse1")
