"""Recurrent networks on `xla`: LSTM, GRU and RNN (tanh, relu) match eager CPU, with no CPU fallback.

Each case builds the module on the CPU, copies it to the device, and runs the same inputs on both:
outputs, final states, the first step's gradients of every parameter, the input and the initial state,
then a few optimizer steps. No op of the training step may fall back to the CPU, packing included
(`_pack_padded_sequence` runs as device ops and keeps `batch_sizes` on the host, see lowering/rnn.py).
Real compiles and runs, no mocks.

Tolerances come from float32 rounding, not from this machine. XLA and ATen round differently (other
summation orders in the matmuls, other tanh/sigmoid/exp approximations), each by a few units in the
last place of the values involved, and an error made at one time step is carried through the rest of
the sequence and the layers above. So a value may differ by at most ULPS · ε · depth · scale: ε is
float32's machine epsilon, depth the number of cell steps on the longest path (time steps × layers),
scale the magnitude of the values compared (at least 1: the gates and states are O(1) whatever the
output), and ULPS a budget for one step's rounding: its dot products have at most 2·hidden + input = 11
terms (at most one rounding each), its five activations and products some 4 ulp each, about 32 ulp
in all, doubled for accelerators' transcendental approximations. Gradients go the path once more backwards (twice the depth) and are
judged against the largest gradient of the whole model: a true gradient entry may be ~0, and its error
is rounding of the large terms that cancelled in it. Optimizer steps carry each step's gradient
bound into the weights as the optimizer's update rule does (see `update_bounds`).
"""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

import xladev
from xladev.events import Fallback

EPS = torch.finfo(torch.float32).eps
ULPS = 64
INPUT, HIDDEN, PROJ, BATCH, STEPS = 3, 4, 3, 3, 4
# Packed batches: lengths in decreasing order (enforce_sorted=True) and shuffled (enforce_sorted=False).
LENGTHS = {"sorted": [4, 3, 1], "unsorted": [2, 4, 1]}


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
    limit = bound(case, float(want.detach().abs().max()))
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
    fallbacks = [e.name for e in events.of(Fallback)]
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
    Case("GRU", bidirectional=True, initial=True),
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


@pytest.mark.parametrize("used", ["output", "c_n"])
def test_lstm_loss_of_part_of_the_results(used, events):
    """A loss of the output alone (no gradient reaches the last cell state) or of c_n alone (none reaches
    the last hidden state): the cell's backward gets an undefined gradient for one of its outputs."""
    case = Case("LSTM")
    inputs = make_inputs(case)
    weights = {"output": [inputs["out_weight"], None], "c_n": [None, inputs["state_weights"][1]]}[used]
    cpu = build(case)
    on_dev = copy.deepcopy(cpu).to(xladev.device())
    grads = []
    events.clear()
    for module, device in ((on_dev, xladev.device()), (cpu, "cpu")):
        out, (_, c_n), _, leaves = forward(case, module, inputs, device)
        loss = (out * weights[0].to(device)).sum() if used == "output" else (c_n * weights[1].to(device)).sum()
        loss.backward()
        grads.append(gradients(module, leaves))
    xladev.mark_step()
    assert [e.name for e in events.of(Fallback)] == []
    assert_gradients_close(case, *grads)


# ---- training ---------------------------------------------------------------------------------------
TRAIN_STEPS = 3
OPTIMIZERS = {
    "sgd": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    "adamw": lambda params: torch.optim.AdamW(params, lr=0.01, weight_decay=0.01),
}


def update_bounds(optimizer: torch.optim.Optimizer, gradient_error: float, bounds: dict) -> None:
    """Adds one step's bound on each weight's difference, given a bound on each gradient's error.

    SGD with momentum μ moves a weight by lr · b, b = μ·b + g: a gradient error δ adds up in b (kept per
    weight as `buffer_error`). AdamW moves it by lr · m̂/(√v̂ + eps): to first order an error δ in the
    gradients moves that by at most about 3·δ/(√v̂ + eps), and never by more than 2 (the update's own
    range); weight decay only shrinks a difference. `bounds` maps each parameter to its bound so far.
    """
    group = optimizer.param_groups[0]
    for p in group["params"]:
        state = optimizer.state[p]
        if "momentum_buffer" in state:
            state_error = bounds.setdefault(("buffer", p), 0.0) * group["momentum"] + gradient_error
            bounds[("buffer", p)] = state_error
            bounds[p] = bounds.get(p, 0.0) + group["lr"] * state_error
        else:
            beta2 = group["betas"][1]
            v_hat = state["exp_avg_sq"] / (1 - beta2 ** float(state["step"]))
            step = torch.clamp(3 * gradient_error / (v_hat.sqrt() + group["eps"]), max=2.0)
            bounds[p] = bounds.get(p, 0.0) + group["lr"] * step


def train_on_both(case: Case, optimizer_name: str, events) -> None:
    """TRAIN_STEPS optimizer steps on each device from identical weights, a new batch each step."""
    cpu = build(case)
    dev = xladev.device()
    on_dev = copy.deepcopy(cpu).to(dev)
    opt_cpu, opt_dev = OPTIMIZERS[optimizer_name](cpu.parameters()), OPTIMIZERS[optimizer_name](on_dev.parameters())
    bounds: dict = {}
    events.clear()
    for step in range(TRAIN_STEPS):
        inputs = make_inputs(case, seed=10 + step)
        for module, optimizer, device in ((on_dev, opt_dev, dev), (cpu, opt_cpu, "cpu")):
            optimizer.zero_grad()
            forward(case, module, inputs, device)[2].backward()
            optimizer.step()
        xladev.mark_step()
        scale = max(float(p.grad.abs().max()) for p in cpu.parameters())
        # This step's rounding, plus what the weights' differences so far change in the gradients
        # (bounded by the same model-wide budget: a weight difference is itself rounding).
        update_bounds(opt_cpu, bound(case, scale, passes=2 * (step + 1)), bounds)
        for (name, p_cpu), p_dev in zip(cpu.named_parameters(), on_dev.parameters()):
            limit = bounds[p_cpu] + ULPS * EPS * float(p_cpu.detach().abs().max())
            error = (p_dev.detach().cpu().double() - p_cpu.detach().double()).abs()
            assert bool((error <= limit).all()), \
                f"{case} {optimizer_name} step {step} {name}: max error {float(error.max()):.3g} over its bound"
    fallbacks = [e.name for e in events.of(Fallback)]
    assert fallbacks == [], f"{case}: CPU fallback while training: {fallbacks}"


@pytest.mark.parametrize("case, optimizer_name", [
    (Case("LSTM", initial=True, batch_first=True), "sgd"),
    (Case("GRU", packed="unsorted"), "adamw"),
], ids=str)
def test_training_matches_cpu(case, optimizer_name, events):
    train_on_both(case, optimizer_name, events)


@pytest.mark.slow
@pytest.mark.parametrize("optimizer_name", list(OPTIMIZERS))
@pytest.mark.parametrize("case", [Case(k, layers=2, bidirectional=True, initial=True)
                                  for k in ("LSTM", "GRU", "RNN_TANH", "RNN_RELU")] + [
                                 Case("LSTM", layers=2, proj=PROJ, packed="sorted")], ids=str)
def test_training_matches_cpu_sweep(case, optimizer_name, events):
    train_on_both(case, optimizer_name, events)


@pytest.mark.parametrize("kind", ["LSTM", pytest.param("GRU", marks=pytest.mark.slow)])
def test_dropout_between_layers_in_train_mode(kind, events):
    """Dropout > 0 draws on the device (no CPU comparison possible): it runs, without fallback, and acts."""
    case = Case(kind, layers=2, dropout=0.5)
    dev = xladev.device()
    module = build(case).to(dev)
    inputs = make_inputs(case)
    events.clear()
    out, _, loss, leaves = forward(case, module, inputs, dev)
    loss.backward()
    xladev.mark_step()
    assert [e.name for e in events.of(Fallback)] == []
    grads = gradients(module, leaves)
    assert all(bool(g.cpu().isfinite().all()) for g in grads.values())
    module.eval()
    with torch.no_grad():
        evaluated = forward(case, module, inputs, dev)[0]
    # The first layer's 3·4·4 outputs are each dropped with p = 0.5: the second layer sees another input.
    assert max_error(evaluated, out.detach().cpu()) > 1e-3


def test_packing_checks_lengths_as_pytorch_does(dev):
    x = torch.randn(STEPS, BATCH, INPUT)
    for lengths in ([2, 4, 1], [4, 3, 0]):
        with pytest.raises(RuntimeError) as on_cpu:
            pack_padded_sequence(x, torch.tensor(lengths))
        with pytest.raises(RuntimeError) as on_dev:
            pack_padded_sequence(x.to(dev), torch.tensor(lengths))
        assert str(on_dev.value) == str(on_cpu.value)


# ---- ops without a CPU kernel -----------------------------------------------------------------------
def test_op_without_cpu_kernel_runs_its_decomposition_on_the_device(dev, events):
    """`cudnn_batch_norm` has no CPU kernel and no lowering; PyTorch decomposes it (running stats too)."""
    g = torch.Generator().manual_seed(0)
    x, weight, bias, mean = (torch.randn(shape, generator=g) for shape in ((4, 3, 5), 3, 3, 3))
    var = torch.rand(3, generator=g) + 0.5
    mean_dev, var_dev = mean.to(dev), var.to(dev)
    events.clear()
    out = torch.ops.aten.cudnn_batch_norm(x.to(dev), weight.to(dev), bias.to(dev), mean_dev, var_dev, True, 0.1, 1e-5)
    xladev.mark_step()
    assert [e.name for e in events.of(Fallback)] == []
    want = torch.nn.functional.batch_norm(x, mean, var, weight, bias, True, 0.1, 1e-5)
    # One normalisation over 20 values: a few ulp of the output's scale.
    for got, expected in ((out[0], want), (mean_dev, mean), (var_dev, var)):
        assert max_error(got, expected) <= ULPS * EPS * max(float(expected.abs().max()), 1.0)


def test_op_without_cpu_kernel_lowering_or_decomposition_is_named(dev):
    grid = torch.zeros(1, 2, 2, 2).to(dev)
    with pytest.raises(NotImplementedError) as raised:
        torch.ops.aten.cudnn_grid_sampler(torch.ones(1, 1, 4, 4).to(dev), grid)
    message = str(raised.value)
    assert "aten::cudnn_grid_sampler" in message
    assert "neither an xladev lowering nor a CPU kernel" in message
    assert "Could not run" not in message
    # Raised on its own, not while handling the dispatcher's error from deep inside.
    assert raised.value.__context__ is None and raised.value.__cause__ is None


def test_decomposition_that_needs_an_unsupported_op_names_that_op(dev):
    """`addmm.dtype` decomposes into `mm.dtype`, which nothing supports: the error names `mm.dtype`."""
    a, b, c = (torch.ones(2, 2).to(dev) for _ in range(3))
    with pytest.raises(NotImplementedError, match=r"aten::mm\.dtype has neither an xladev lowering"):
        torch.ops.aten.addmm.dtype(a, b, c, torch.float32)


_test_lib = torch.library.Library("xladev_rnn_test", "DEF")
_test_lib.define("outer(Tensor x, Tensor grid) -> Tensor")
_test_lib.impl("outer", lambda x, grid: torch.ops.aten.cudnn_grid_sampler(x, grid), "CPU")


def test_cpu_kernel_that_needs_an_op_without_one_names_both(dev):
    """An op whose CPU kernel calls one without a CPU kernel (a real custom op): the error names both."""
    with pytest.raises(NotImplementedError) as raised:
        torch.ops.xladev_rnn_test.outer(torch.ones(1, 1, 4, 4).to(dev), torch.zeros(1, 2, 2, 2).to(dev))
    message = str(raised.value)
    assert "xladev_rnn_test::outer has no xladev lowering" in message
    assert "calls aten::cudnn_grid_sampler, which has no CPU kernel" in message
    assert raised.value.__context__ is None
