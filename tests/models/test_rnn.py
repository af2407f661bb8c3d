"""Recurrent networks train on `xla` as in eager PyTorch on the CPU.

Two-layer bidirectional batch_first nn.LSTM, nn.GRU and nn.RNN (tanh), on a padded batch and on the
same batch packed with `pack_padded_sequence` (lengths 6, 4, 2). Checks and bounds:
`tests/models/parity.py`, `tests/models/tolerances.py`. The packed sequences compile a longer graph (one
cell per time step and layer and direction), so they run with `-m slow`.
"""

from __future__ import annotations

import pytest

from tests.models import zoo
from tests.models.conftest import assert_parity

DEFAULT = ("lstm",)


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=() if name in DEFAULT else pytest.mark.slow) for name in zoo.RNNS
])
def test_trains_like_eager_cpu(name, parity):
    assert_parity(parity(name))
