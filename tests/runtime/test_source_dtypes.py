"""index_put, index_copy and index_add refuse a source of another dtype on `xla` as eager CPU does.

PyTorch's meta kernels of index_put and index_add, and its decomposition of index_copy, accept a source
whose dtype differs from self's; the lowering would then have cast it silently. Every ordered pair of the
dtypes below is run through each op on both devices: the same error message, or the same values.
"""

from __future__ import annotations

import itertools

import pytest
import torch

import xladev

DTYPES = [torch.bool, torch.uint8, torch.int32, torch.int64, torch.bfloat16, torch.float32, torch.float64,
          torch.complex64]


def _ops(device):
    index = torch.tensor([2, 0], device=device)
    return {
        "index_put_": lambda self, src: self.index_put_((index,), src),
        "index_put": lambda self, src: self.index_put((index,), src, accumulate=True),
        "index_copy_": lambda self, src: self.index_copy_(0, index, src),
        "index_copy": lambda self, src: self.index_copy(0, index, src),
        "index_add_": lambda self, src: self.index_add_(0, index, src),
        "index_add": lambda self, src: self.index_add(0, index, src, alpha=1),
    }


def _outcome(op: str, self_dtype, source_dtype, device):
    self = torch.tensor([0, 1, 0, 1], device=device).to(self_dtype)
    source = torch.tensor([1, 1], device=device).to(source_dtype)
    try:
        result = _ops(device)[op](self, source)
    except RuntimeError as error:
        return "error", str(error)
    return "value", result.cpu().tolist(), result.dtype


@pytest.mark.parametrize("op", ["index_put_", "index_put", "index_copy_", "index_copy", "index_add_", "index_add"])
def test_every_dtype_pair_as_eager(op):
    device = xladev.device()
    differences = []
    for self_dtype, source_dtype in itertools.product(DTYPES, DTYPES):
        expected = _outcome(op, self_dtype, source_dtype, "cpu")
        got = _outcome(op, self_dtype, source_dtype, device)
        if got != expected:
            differences.append((self_dtype, source_dtype, expected, got))
    assert differences == []
    # Both outcomes were exercised: the check refuses mismatches and lets matching dtypes through.
    assert _outcome(op, torch.float32, torch.int64, device)[0] == "error"
    assert _outcome(op, torch.float32, torch.float32, device)[0] == "value"
