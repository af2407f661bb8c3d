"""torch.nn's attention modules train on `xla` as in eager PyTorch on the CPU.

nn.TransformerEncoder (post-norm, ReLU, a key padding mask; trained with SGD and momentum),
nn.TransformerDecoder (pre-norm, GELU, a causal mask, cross-attention to a memory) and
nn.MultiheadAttention on its own (distinct key and value widths, a padding mask, the averaged attention
weights in the loss). Checks and bounds: `tests/models/parity.py`, `tests/models/tolerances.py`.
"""

from __future__ import annotations

import pytest

from tests.models import zoo
from tests.models.conftest import assert_parity



@pytest.mark.parametrize("name", [pytest.param(name, marks=zoo.marks(name)) for name in zoo.NN_ATTENTION])
def test_trains_like_eager_cpu(name, parity):
    assert_parity(parity(name))
