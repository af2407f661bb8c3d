"""Class-index losses take the targets eager takes, and refuse the others with eager's words.

Before, the targets went straight to torch's decomposition, whose gather failed with other words for a float
target ("gather(): Expected dtype int32/int64 for index"), took an int32 one that eager refuses, and refused the
Byte indices eager takes. PyTorch/XLA's own tests pass a float target of another shape to CrossEntropyLoss; eager
CPU refuses it, and so does xladev now, in eager's words.
"""

from __future__ import annotations

import pytest
import torch

from tests.parity_bounds import GRAD_REL, loss_rtol


def _loss_and_grad(device: str, shape: tuple, dtype: torch.dtype, weighted: bool):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(*shape, generator=gen)
    target = torch.randint(0, shape[1], (shape[0],) + shape[2:], generator=gen).to(dtype)
    weight = torch.rand(shape[1], generator=gen) if weighted else None
    x = x.to(device).requires_grad_()
    try:
        loss = torch.nn.functional.cross_entropy(x, target.to(device),
                                                 weight=None if weight is None else weight.to(device))
        loss.backward()
    except RuntimeError as exc:
        return str(exc), None
    return float(loss), x.grad.cpu()


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.int32, torch.float32, torch.bool])
@pytest.mark.parametrize("shape", [(5, 4), (2, 3, 4, 5)], ids=["classes", "per-pixel"])
def test_cross_entropy_takes_and_refuses_the_targets_eager_does(dev, shape, dtype, weighted):
    want, want_grad = _loss_and_grad("cpu", shape, dtype, weighted)
    have, have_grad = _loss_and_grad(dev.type, shape, dtype, weighted)
    if isinstance(want, str):
        assert have == want  # eager's refusal, word for word
        return
    assert abs(have - want) <= loss_rtol(shape[0] * shape[1]) * abs(want)
    torch.testing.assert_close(have_grad, want_grad, rtol=0, atol=GRAD_REL * float(want_grad.abs().max()))
