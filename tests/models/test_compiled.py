"""The model zoo through `torch.compile(model, backend="xladev")` trains as eager PyTorch on the CPU does.

The same cases, batches, bounds and checks as the lazy path (tests/models/parity.py): TorchDynamo captures the
model's forward, AOTAutograd gives its forward and backward graphs, each runs as one XLA program; the loss
around the model and the optimizer step are recorded lazily, as a user's code around a compiled model is. No
case may break its graph or run an op on the CPU inside a step, and none may compile after its warm-up.
"""

from __future__ import annotations

import pytest

from tests.models import zoo
from tests.models.conftest import assert_parity

# One case by default (an nn.TransformerEncoder LM: attention, LayerNorm, dropout off, AdamW), as each case
# compiles its forward, backward and optimizer graphs (about 20 s on two cores); every case with `-m slow`.
DEFAULT = frozenset({"transformer_encoder"})


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in DEFAULT else pytest.mark.slow) for n in zoo.ALL])
def test_trains_like_eager_cpu_through_torch_compile(name, parity):
    assert_parity(parity(name, compiled=True))
