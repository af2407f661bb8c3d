"""transformers models train on `xla` as they do in eager PyTorch on the CPU.

GPT-2, BERT, T5, Llama, ViT and Whisper at tiny sizes (1–2 layers, width 32, vocabulary 64), randomly
initialised, each with its own loss (`labels=`), in the attention implementation users get by default
("sdpa") and in "eager"; Mixtral (mixture of experts) and Mamba (state-space) in their defaults. Four
AdamW steps on xla, on float32 CPU and on float64 CPU from the same weights and batches, then the checks
of `tests/models/parity.py` with the bounds derived in `tests/models/tolerances.py`. The cases in
`zoo.DEFAULT` run by default, the rest with `-m slow`.
"""

from __future__ import annotations

import pytest

from tests.models import zoo
from tests.models.conftest import assert_parity



@pytest.mark.parametrize("name", [pytest.param(name, marks=zoo.marks(name)) for name in zoo.TRANSFORMERS])
def test_trains_like_eager_cpu(name, parity):
    assert_parity(parity(name))
