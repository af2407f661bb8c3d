"""CNNs with torchvision's definitions train on `xla` as in eager PyTorch on the CPU.

A tiny ResNet (BasicBlock and Bottleneck, BatchNorm, max pool), a MobileNetV3 (inverted residuals with
depthwise convolutions, squeeze-excitation, hardswish and hardsigmoid) and an EfficientNet (MBConv,
SiLU, squeeze-excitation, adaptive average pooling, stochastic depth off), batch 4 of 3×32×32.
BatchNorm over a few values is where float32 eager is itself far from the truth, so these are the
cases the float64 oracle of `tests/models/tolerances.py` is for; BatchNorm's running statistics and
num_batches_tracked are checked after the first step and after a step resumed from xla's state, and
the evaluation-mode output of the final state. Each case prints its first step's time (trace, lower,
compile, run) and its compile time; the zoo's table at the end of the run has them too.
"""

from __future__ import annotations

import pytest

from tests.models import zoo
from tests.models.conftest import assert_parity



@pytest.mark.parametrize("name", [pytest.param(name, marks=zoo.marks(name)) for name in zoo.CNNS])
def test_trains_like_eager_cpu(name, parity):
    summary = parity(name)
    xla = summary.xla
    print(f"\n{name}: first step {xla.step_seconds[0]:.2f} s (compile {xla.compile_seconds[0]:.2f} s), "
          f"second {xla.step_seconds[1]:.2f} s (compile {xla.compile_seconds[1]:.2f} s), "
          f"steady {xla.steady_seconds * 1e3:.1f} ms on xla")
    assert_parity(summary)
