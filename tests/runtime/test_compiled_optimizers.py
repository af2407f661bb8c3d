"""torch.optim's optimizers, their step through `torch.compile(opt.step, backend="xladev")`, against eager CPU.

Each optimizer keeps other state (AMSGrad's running maximum, centered RMSprop's gradient average, Rprop's
per-element step sizes, ASGD's averaging coefficients): the compiled step reads it all as device data and writes
it back in one program, donating the old buffers. The zoo (tests/models) trains with AdamW and SGD.

The gradients are given (seeded, the same on every side), so what is compared is the optimizer's arithmetic and
the state the program carries from step to step, not a model's rounding fed back through its gradients.

Bound (tests/models/tolerances.py, rules 3 and 6): after T steps each weight tensor of the `xla` run is within
ORACLE = 4 times eager float32's largest distance from a float64 run of the same steps (per tensor: float32's
error at one element is as small as chance makes it), plus the rounding of T updates relative to the largest
step the float64 run took and to the weight, u·T·(16·step + 4·|θ|). A wrong update (a stale or unwritten state)
is off by about a whole step, thousands of times more.
"""

from __future__ import annotations

import pytest
import torch

import xladev
from tests.models.tolerances import ORACLE, U
from xladev.events import GraphBreak

O = torch.optim
LR = 0.01
STEPS = 5
SHAPES = ((16, 8), (16,), (4, 16))
# name -> (optimizer, keyword settings); the step counts live on the device (capturable), so the step compiles
# into one program instead of running lazily.
OPTIMIZERS = {
    "adam_amsgrad": (O.Adam, dict(amsgrad=True, weight_decay=0.01, capturable=True)),
    "rmsprop_centered": (O.RMSprop, dict(momentum=0.5, centered=True, capturable=True)),
    "sgd_nesterov": (O.SGD, dict(momentum=0.9, nesterov=True, weight_decay=0.01)),
    "adamax": (O.Adamax, dict(capturable=True)),
    "nadam": (O.NAdam, dict(decoupled_weight_decay=True, weight_decay=0.01, capturable=True)),
    "radam": (O.RAdam, dict(capturable=True)),
    "adadelta": (O.Adadelta, dict(capturable=True)),
    "asgd": (O.ASGD, dict(capturable=True)),
    "rprop": (O.Rprop, dict(capturable=True)),
}
# By default: a running maximum, and the momentum of a centered second moment; the rest with -m slow.
DEFAULT = frozenset({"adam_amsgrad", "rmsprop_centered"})


def _values(seed: int, scale: float = 1.0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [scale * torch.randn(*shape, generator=g, dtype=torch.float64) for shape in SHAPES]


def _train(name: str, dtype: torch.dtype, device: torch.device | None = None) -> tuple[list, float]:
    """The weights after STEPS steps (float64 CPU copies), and the largest change of a weight in one step; on
    `device` the optimizer step is compiled."""
    kind, settings = OPTIMIZERS[name]
    params = [v.to(dtype).requires_grad_() for v in _values(0)]
    if device is not None:
        params = [p.detach().to(device).requires_grad_() for p in params]
    else:
        settings = {k: v for k, v in settings.items() if k != "capturable"}  # CPU steps: the CPU default
    opt = kind(params, lr=LR, **settings)
    step = torch.compile(opt.step, backend="xladev") if device is not None else opt.step
    largest = 0.0
    for i in range(STEPS):
        before = [p.detach().double().cpu() for p in params]
        for p, g in zip(params, _values(i + 1, 0.1)):
            p.grad = g.to(dtype).to(p.device)
        step()
        if device is not None:
            xladev.mark_step()
        largest = max([largest] + [float((p.detach().double().cpu() - b).abs().max()) for p, b in zip(params, before)])
    return [p.detach().cpu().double() for p in params], largest


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in DEFAULT else pytest.mark.slow)
                                  for n in OPTIMIZERS])
def test_a_compiled_optimizer_step_trains_as_eager_cpu(name, events):
    got, _ = _train(name, torch.float32, xladev.device())
    # A compiled step meets two breaks that cost nothing (torch.optim's own, xladev's step hook): not said.
    assert not events.of(GraphBreak), [e.reason for e in events.of(GraphBreak)]
    (want, step), (f32, _) = _train(name, torch.float64), _train(name, torch.float32)
    for i, (have, exact, single) in enumerate(zip(got, want, f32)):
        bound = ORACLE * float((single - exact).abs().max()) + U * STEPS * (16 * step + 4 * exact.abs())
        excess = (have - exact).abs() - bound
        worst = int(excess.argmax())
        assert float(excess.max()) <= 0, (
            f"{name}: parameter {i} element {worst} is {float((have - exact).abs().flatten()[worst]):.3g} from "
            f"float64 eager, beyond {float(bound.flatten()[worst]):.3g}")
