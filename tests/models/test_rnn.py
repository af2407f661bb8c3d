"""Recurrent networks train on `xla` as in eager PyTorch on the CPU.

Two-layer bidirectional batch_first nn.LSTM, nn.GRU and nn.RNN (tanh), on a padded batch and on the
same batch packed with `pack_padded_sequence` (lengths 6, 4, 2). Checks and bounds:
`tests/models/parity.py`, `tests/models/tolerances.py`. All run with `-m slow` (none is in `zoo.DEFAULT`):
by default tests/runtime/test_rnn.py checks the same modules' steps and training against eager CPU.
"""

from __future__ import annotations

import pytest

from tests.models import zoo
from tests.models.conftest import assert_parity



@pytest.mark.parametrize("name", [pytest.param(name, marks=zoo.marks(name)) for name in zoo.RNNS])
def test_trains_like_eager_cpu(name, parity):
    assert_parity(parity(name))
