"""Training under `torch.autocast("xla")`: a small CNN and a small transformer, against eager CPU.

Each model makes its calls through an `ops` namespace. Under autocast on `xla` the calls are plain torch
(`POLICY`); `EXPLICIT` writes PyTorch/XLA's policy out by hand (conv, linear, matmul, relu and max_pool2d
in bfloat16; batch_norm, softmax and cross_entropy in float32; layer_norm and gelu, which XLA's lists
leave out, in their input's dtype), with no autocast. Three runs from the same weights and batches:

1. `xla` under autocast;
2. `xla` with the explicit casts: the same graph, so the same losses and weights, bit for bit;
3. eager CPU with the explicit casts: the same arithmetic in ATen's kernels, within a bound from bfloat16
   rounding. Each bfloat16 result is the rounding of a float32 accumulation; two backends accumulate in
   different orders, so a result may land on the other bfloat16 neighbour: 2⁻⁷ relative (twice the unit
   roundoff u_b = 2⁻⁸). To first order the loss carries each such rounding of the R bfloat16 layers on its
   path, magnified by the condition κ = 4 of tests/models/tolerances.py, and the float32 rounding of the rest:
       |L_xla − L_cpu| ≤ κ·(2·u_b·R + u·N)·|L|,  N = the float32 terms summed along the step.
   Later steps start from weights that moved apart by lr times a gradient difference of the same order:
   second order, compared with the same bound (as tests/models/tolerances.py does). XLA may also skip a
   rounding where a cast to bfloat16 meets a cast back (its default allows excess precision, on PyTorch/XLA
   too): a difference of at most one rounding, within the same 2·u_b.

And the step's HLO shows where the casts went: every convolution and dot (forward and backward) in bf16,
every exponential (softmax, cross-entropy) in f32.
"""

from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import xladev
from tests.models.tolerances import KAPPA, U

BF16, F32 = torch.bfloat16, torch.float32
U_BF16 = 2.0 ** -8
STEPS = 4


def _low(*tensors):
    return [t.to(BF16) if t is not None and t.dtype == F32 else t for t in tensors]


class POLICY:
    """The calls as a model makes them; autocast decides their dtypes."""

    conv2d, batch_norm, relu, max_pool2d = F.conv2d, F.batch_norm, F.relu, F.max_pool2d
    linear, matmul, softmax, cross_entropy = F.linear, torch.matmul, F.softmax, F.cross_entropy
    layer_norm, gelu = F.layer_norm, F.gelu


class EXPLICIT:
    """PyTorch/XLA's autocast policy for the same calls, written out."""

    @staticmethod
    def conv2d(x, w, b, **kwargs):
        return F.conv2d(*_low(x, w, b), **kwargs)

    @staticmethod
    def batch_norm(x, mean, var, w, b, training, momentum, eps):
        return F.batch_norm(x.float(), mean, var, w, b, training, momentum, eps)

    relu = staticmethod(lambda x: F.relu(*_low(x)))
    max_pool2d = staticmethod(lambda x, k: F.max_pool2d(*_low(x), k))
    linear = staticmethod(lambda x, w, b: F.linear(*_low(x, w, b)))
    matmul = staticmethod(lambda a, b: torch.matmul(*_low(a, b)))
    softmax = staticmethod(lambda x, dim: F.softmax(x.float(), dim))
    cross_entropy = staticmethod(lambda x, y: F.cross_entropy(x.float(), y))
    layer_norm, gelu = F.layer_norm, F.gelu


class SmallCNN(nn.Module):
    # bfloat16 roundings on the loss's path: the two convolutions, the two relus (a cast of batch_norm's
    # float32 output) and the classifier; max pooling picks values without rounding.
    ROUNDINGS = 5

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16)
        self.fc = nn.Linear(16 * 2 * 2, 10)

    def _block(self, x, conv, bn, ops):
        x = ops.conv2d(x, conv.weight, conv.bias, padding=1)
        x = ops.batch_norm(x, bn.running_mean, bn.running_var, bn.weight, bn.bias, True, bn.momentum, bn.eps)
        return ops.max_pool2d(ops.relu(x), 2)

    def forward(self, x, y, ops):
        x = self._block(self._block(x, self.conv1, self.bn1, ops), self.conv2, self.bn2, ops)
        return ops.cross_entropy(ops.linear(x.flatten(1), self.fc.weight, self.fc.bias), y)

    @staticmethod
    def batch(step: int):
        g = torch.Generator().manual_seed(step)
        return torch.randn(8, 3, 8, 8, generator=g), torch.randint(0, 10, (8,), generator=g)

    terms = 3 * 9 + 8 * 9 + 64 + 16 * 8 * 8  # the convolutions', the classifier's and batch norm's sums


class SmallTransformer(nn.Module):
    # bfloat16 roundings on the loss's path: qkv, the scores and their scaling, softmax's output cast for the
    # second matmul, that matmul, the projection, the MLP's two linears and its gelu, the head.
    ROUNDINGS = 10
    VOCAB, D, HEADS, T = 32, 32, 2, 8

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        d = self.D
        self.emb, self.pos = nn.Embedding(self.VOCAB, d), nn.Parameter(0.1 * torch.randn(self.T, d))
        self.ln1, self.qkv, self.proj = nn.LayerNorm(d), nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.ln2, self.fc1, self.fc2 = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.lnf, self.head = nn.LayerNorm(d), nn.Linear(d, self.VOCAB)

    def forward(self, tokens, targets, ops):
        b, t, d, h = *tokens.shape, self.D, self.HEADS
        x = self.emb(tokens) + self.pos[:t]
        a = ops.layer_norm(x, (d,), self.ln1.weight, self.ln1.bias)
        q, k, v = (z.reshape(b, t, h, d // h).transpose(1, 2)
                   for z in ops.linear(a, self.qkv.weight, self.qkv.bias).split(d, -1))
        scores = ops.matmul(q, k.transpose(-2, -1)) * (d // h) ** -0.5
        causal = torch.ones(t, t, dtype=torch.bool, device=tokens.device).triu(1)
        attn = ops.softmax(scores.masked_fill(causal, float("-inf")), -1)
        out = ops.matmul(attn, v).transpose(1, 2).reshape(b, t, d)
        x = x + ops.linear(out, self.proj.weight, self.proj.bias)
        m = ops.layer_norm(x, (d,), self.ln2.weight, self.ln2.bias)
        x = x + ops.linear(ops.gelu(ops.linear(m, self.fc1.weight, self.fc1.bias)), self.fc2.weight, self.fc2.bias)
        logits = ops.linear(ops.layer_norm(x, (d,), self.lnf.weight, self.lnf.bias), self.head.weight, self.head.bias)
        return ops.cross_entropy(logits.flatten(0, 1), targets.flatten())

    @staticmethod
    def batch(step: int):
        g = torch.Generator().manual_seed(step)
        tokens = torch.randint(0, SmallTransformer.VOCAB, (4, SmallTransformer.T + 1), generator=g)
        return tokens[:, :-1], tokens[:, 1:]

    terms = 3 * 32 + 2 * 16 + 128 + 32 + 8 + 32 * 8  # linears' fan-ins, attention's sums, norms, the loss


MODELS = {"cnn": SmallCNN, "transformer": SmallTransformer}


def _train(model_class, device: str, ops, autocast: bool, hlo: list | None = None):
    model = model_class().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(STEPS):
        x, y = (t.to(device) for t in model_class.batch(step))
        optimizer.zero_grad()
        with torch.autocast("xla", dtype=BF16, enabled=autocast):
            loss = model(x, y, ops)
        loss.backward()
        if hlo is not None and step == 0:
            hlo.append(xladev.debug.get_tensors_hlo([loss] + [p.grad for p in model.parameters()]))
        optimizer.step()
        if device != "cpu":
            xladev.mark_step()
        losses.append(loss.item())
    return losses, {n: t.detach().cpu() for n, t in model.state_dict().items()}


@pytest.fixture(scope="module", params=sorted(MODELS))
def runs(request):
    model_class = MODELS[request.param]
    device = str(xladev.device())
    hlo: list = []
    return {
        "model": model_class,
        "autocast": _train(model_class, device, POLICY, autocast=True, hlo=hlo),
        "explicit": _train(model_class, device, EXPLICIT, autocast=False),
        "cpu": _train(model_class, "cpu", EXPLICIT, autocast=False),
        "float32": _train(model_class, device, POLICY, autocast=False),
        "hlo": hlo[0],
    }


def test_autocast_is_the_explicit_casts_bit_for_bit(runs):
    (losses, weights), (want_losses, want_weights) = runs["autocast"], runs["explicit"]
    assert losses == want_losses
    for name, want in want_weights.items():
        assert torch.equal(weights[name], want), name


def test_losses_match_eager_cpu_within_bfloat16_rounding(runs):
    model = runs["model"]
    eps = KAPPA * (2 * U_BF16 * model.ROUNDINGS + U * model.terms)
    losses, cpu_losses = runs["autocast"][0], runs["cpu"][0]
    for step, (have, want) in enumerate(zip(losses, cpu_losses)):
        assert have == pytest.approx(want, rel=eps), f"step {step}: {losses} vs eager CPU {cpu_losses}"
    assert losses != runs["float32"][0]  # and autocast changed the arithmetic: it is not float32 training


def _ops(hlo: str, op: str) -> list[tuple[str, str]]:
    """(element type, dimensions) of every `op` instruction in an HLO module's text."""
    return re.findall(rf"= (\w+)\[([^\]]*)\](?:\{{[^}}]*\}})? {op}\(", hlo)


def test_the_hlo_runs_convolutions_and_dots_in_bf16_and_softmax_in_f32(runs):
    hlo = runs["hlo"]
    convolutions, dots = _ops(hlo, "convolution"), _ops(hlo, "dot")
    if runs["model"] is SmallCNN:
        # forward, and backward's input and weight gradients
        assert len(convolutions) >= 4 and {t for t, _ in convolutions} == {"bf16"}, convolutions
        softmaxes = {"8,10"}  # cross-entropy's log-softmax over the logits
    else:
        softmaxes = {"4,2,8,8", "32,32"}  # attention's softmax; cross-entropy's over the logits
    assert len(dots) >= 2 and {t for t, _ in dots} == {"bf16"}, dots
    exponentials = _ops(hlo, "exponential")
    assert {shape for _, shape in exponentials} >= softmaxes
    # In float32; any other exponential (gelu's gradient) is of an op autocast leaves in bfloat16.
    assert {t for t, shape in exponentials if shape in softmaxes} == {"f32"}, exponentials
