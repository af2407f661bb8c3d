"""Recurrent networks on `xla`: LSTM, GRU and RNN (tanh, relu) match eager CPU, with no CPU fallback.

Each case builds the module on the CPU, copies it to the device, and runs the same inputs on both:
outputs, final states, the first step's gradients of every parameter, the input and the initial state,
then a few optimizer steps. Real compiles and runs, no mocks.

Tolerances come from float32 rounding, not from this machine. XLA and ATen round differently (other
summation orders in the matmuls, other tanh/sigmoid/exp approximations), each by a few units in the
last place of the values involved, and an error made at one time step is carried through the rest of
the sequence and the layers above. So a value may differ by at most ULPS · ε · depth · scale: ε is
float32's machine epsilon, depth the number of cell steps on the longest path (time steps × layers),
scale the magnitude of the values compared, and ULPS a budget for one step's rounding (dot products
of at most 2·hidden + input terms, then the activations). Gradients go the path once more backwards
(twice the depth) and are judged against the largest gradient of the whole model: a true gradient
entry may be ~0, and its error is rounding of the large terms that cancelled in it.
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import xladev
from xladev.events import FallbackOp

EPS = torch.finfo(torch.float32).eps
ULPS = 256
INPUT, HIDDEN, PROJ, BATCH, STEPS = 3, 4, 3, 3, 5
# Packed batches: lengths in decreasing order (enforce_sorted=True) and shuffled (enforce_sorted=False).
LENGTHS = {"sorted": [5, 3, 2], "unsorted": [3, 5, 1]}


@dataclasses.dataclass(frozen=True)
class Case:
    kind: str                      # LSTM, GRU, RNN_TANH, RNN_RELU
    layers: int = 1
    bidirectional: bool = False
    batch_first: bool = False
    bias: bool = True
    initial: bool = False          # h0 (and c0) given
    proj: int = 0                  # LSTM proj_size
    packed: str | None = None      # None, "sorted", "unsorted"
    dropout: float = 0.0

    def __str__(self) -> str:
        flags = [f"L{self.layers}"] + [name for name, on in (
            ("bi", self.bidirectional), ("bf", self.batch_first), ("nobias", not self.bias),
            ("h0", self.initial), (f"proj{self.proj}", self.proj), (f"packed-{self.packed}", self.packed),
            (f"drop{self.dropout}", self.dropout)) if on]
        return "-".join([self.kind] + flags)

    @property
    def depth(self) -> int:
        return STEPS * self.layers


def build(case: Case, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    common = dict(num_layers=case.layers, bias=case.bias, batch_first=case.batch_first, dropout=case.dropout,
                  bidirectional=case.bidirectional)
    if case.kind == "LSTM":
        return nn.LSTM(INPUT, HIDDEN, proj_size=case.proj, **common)
    if case.kind == "GRU":
        return nn.GRU(INPUT, HIDDEN, **common)
    return nn.RNN(INPUT, HIDDEN, nonlinearity=case.kind.split("_")[1].lower(), **common)


def make_inputs(case: Case, seed: int = 1) -> dict:
    """CPU inputs: the sequence, initial states, and fixed random weights that make the loss use everything."""
    g = torch.Generator().manual_seed(seed)
    directions = 2 if case.bidirectional else 1
    out_size = (case.proj or HIDDEN)
    x = torch.randn((BATCH, STEPS, INPUT) if case.batch_first else (STEPS, BATCH, INPUT), generator=g)
    states = [torch.randn(case.layers * directions, BATCH, out_size, generator=g)]
    if case.kind == "LSTM":
        states.append(torch.randn(case.layers * directions, BATCH, HIDDEN, generator=g))
    out_shape = x.shape[:2] + (directions * out_size,)
    return {
        "x": x,
        "initial": states if case.initial else None,
        "out_weight": torch.randn(out_shape, generator=g),
        "state_weights": [torch.randn(s.shape, generator=g) for s in states],
    }


def forward(case: Case, module: nn.Module, inputs: dict, device) -> tuple:
    """(output, final states, loss, leaves) on `device`; leaves are the input and initial states (requires_grad)."""
    x = inputs["x"].to(device).requires_grad_()
    leaves = [x]
    initial = None
    if inputs["initial"] is not None:
        initial = [s.to(device).requires_grad_() for s in inputs["initial"]]
        leaves += initial
        initial = tuple(initial) if case.kind == "LSTM" else initial[0]
    sequence = x
    if case.packed:
        sequence = pack_padded_sequence(x, torch.tensor(LENGTHS[case.packed]), batch_first=case.batch_first,
                                        enforce_sorted=case.packed == "sorted")
    out, final = module(sequence, initial)
    if case.packed:
        out, _ = pad_packed_sequence(out, batch_first=case.batch_first, total_length=STEPS)
    finals = list(final) if case.kind == "LSTM" else [final]
    loss = (out * inputs["out_weight"].to(device)).sum()
    for state, weight in zip(finals, inputs["state_weights"]):
        loss = loss + (state * weight.to(device)).sum()
    return out, finals, loss, leaves


def bound(case: Case, scale: float, passes: int = 1) -> float:
    """The largest difference float32 rounding explains for values of this `scale` (see the module doc)."""
    return ULPS * EPS * passes * case.depth * max(scale, 1.0)


def max_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().cpu().double() - b.detach().double()).abs().max()) if b.numel() else 0.0


def assert_values_close(case: Case, name: str, got: torch.Tensor, want: torch.Tensor) -> float:
    """Checks one forward value against its bound; returns the error in units of the bound."""
    assert tuple(got.shape) == tuple(want.shape), f"{case} {name}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    limit = bound(case, float(want.abs().max()))
    error = max_error(got, want)
    assert error <= limit, f"{case} {name}: max error {error:.3g} > bound {limit:.3g}"
    return error / limit


def gradients(module: nn.Module, leaves: list) -> dict:
    grads = {name: p.grad for name, p in module.named_parameters()}
    grads.update({f"leaf{i}": t.grad for i, t in enumerate(leaves)})
    return grads


def assert_gradients_close(case: Case, got: dict, want: dict) -> float:
    """Every gradient against the model-wide gradient bound; returns the worst error in units of it."""
    assert got.keys() == want.keys()
    scale = max(float(g.abs().max()) for g in want.values())
    limit = bound(case, scale, passes=2)
    worst = 0.0
    for name, g in want.items():
        assert got[name] is not None, f"{case}: no gradient for {name} on xla"
        error = max_error(got[name], g)
        assert error <= limit, f"{case} grad {name}: max error {error:.3g} > bound {limit:.3g}"
        worst = max(worst, error / limit)
    return worst


def step_on_both(case: Case, events) -> tuple:
    """One forward and backward on each device from identical weights; checks there was no fallback."""
    cpu = build(case)
    dev = xladev.device()
    on_dev = copy.deepcopy(cpu).to(dev)
    inputs = make_inputs(case)
    events.clear()
    out_d, finals_d, loss_d, leaves_d = forward(case, on_dev, inputs, dev)
    loss_d.backward()
    xladev.mark_step()
    fallbacks = [e.name for e in events.of(FallbackOp)]
    assert fallbacks == [], f"{case}: CPU fallback in the training step: {fallbacks}"
    out_c, finals_c, loss_c, leaves_c = forward(case, cpu, inputs, "cpu")
    loss_c.backward()
    return (out_d, finals_d, gradients(on_dev, leaves_d)), (out_c, finals_c, gradients(cpu, leaves_c))


def check_step(case: Case, events) -> dict:
    """Outputs, final states and gradients of one step against eager CPU; the errors in units of their bounds."""
    (out_d, finals_d, grads_d), (out_c, finals_c, grads_c) = step_on_both(case, events)
    ratios = {"output": assert_values_close(case, "output", out_d, out_c)}
    for i, (a, b) in enumerate(zip(finals_d, finals_c)):
        ratios[f"state{i}"] = assert_values_close(case, f"final state {i}", a, b)
    ratios["grads"] = assert_gradients_close(case, grads_d, grads_c)
    return ratios


# A default run covers every option at least once; the slow sweep crosses them.
DEFAULT_CASES = [
    Case("LSTM", layers=2, bidirectional=True, batch_first=True, initial=True),
    Case("LSTM", proj=PROJ, bias=False),
    Case("LSTM", layers=2, packed="unsorted", initial=True, proj=PROJ),
    Case("GRU", layers=2, bidirectional=True, initial=True),
    Case("GRU", bias=False, batch_first=True, packed="sorted"),
    Case("RNN_TANH", layers=2, bidirectional=True, batch_first=True, initial=True),
    Case("RNN_RELU", bias=False, packed="unsorted", bidirectional=True),
]


@pytest.mark.parametrize("case", DEFAULT_CASES, ids=str)
def test_step_matches_cpu_without_fallback(case, events):
    check_step(case, events)


def _sweep() -> list:
    cases = []
    for kind in ("LSTM", "GRU", "RNN_TANH", "RNN_RELU"):
        for layers, bidirectional, batch_first, bias, initial, packed in [
            (l, bi, bf, b, h, p) for l in (1, 2) for bi in (False, True) for bf in (False, True)
            for b in (True, False) for h in (False, True) for p in (None, "sorted", "unsorted")]:
            for proj in ((0, PROJ) if kind == "LSTM" else (0,)):
                case = Case(kind, layers, bidirectional, batch_first, bias, initial, proj, packed)
                if case not in DEFAULT_CASES:
                    cases.append(case)
    return cases


@pytest.mark.slow
@pytest.mark.parametrize("case", _sweep(), ids=str)
def test_step_matches_cpu_sweep(case, events):
    check_step(case, events)
