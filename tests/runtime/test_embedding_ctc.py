"""embedding_bag, segment_reduce, the CTC loss and the margin losses on `xla`: forward and backward match
eager CPU with no CPU fallback. Real compiles, no mocks.

Each test records all its cases first and runs them as one graph (`xladev.mark_step`), to keep the
compile count, and so the run time, small.

Tolerances come from float32 rounding: a value that is a sum of `terms` rounded terms of magnitude at
most `scale` may differ by terms · ε · scale between two summation orders (XLA's scatter-adds and
ATen's loops order them differently), doubled for the rounding of the terms themselves. The CTC
recursion rounds once per time step (log-sum-exp of three terms plus an emission, a few ulp), so its
bound grows with T; its gradient rounds exp(·) of values of that accuracy once more.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import xladev
from xladev.events import Fallback

EPS = torch.finfo(torch.float32).eps


def assert_close(got, want, terms, what=""):
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if want.numel() == 0:
        return
    want = want.detach().double()
    got = got.detach().cpu().double()
    assert torch.equal(got.isnan(), want.isnan()), f"{what}: NaN at other positions"
    got, want = got.nan_to_num(), want.nan_to_num()  # the empty mean segment is NaN on both
    scale = max(float(want.abs().max()), 1.0)
    error = float((got - want).abs().max())
    assert error <= 2 * terms * EPS * scale, f"{what}: max error {error:.3g} > {2 * terms * EPS * scale:.3g}"


def run_on_both(fn, leaves, events):
    """fn(*leaves) → list of outputs; returns [(xla outputs + grads), (cpu outputs + grads)] of a
    weighted sum of the outputs; checks the xla run fell back nowhere."""
    results = []
    for device in (xladev.device(), "cpu"):
        inputs = [t.clone().to(device).requires_grad_(t.is_floating_point()) for t in leaves]
        outs = fn(*inputs)
        weights = [torch.linspace(-1, 2, o.numel()).reshape(o.shape).to(device) for o in outs]
        loss = sum((o.nan_to_num() * w).sum() for o, w in zip(outs, weights))
        floats = [t for t in inputs if t.requires_grad]
        grads = torch.autograd.grad(loss, floats)
        results.append([o.detach() for o in outs] + list(grads))
    return results


def compare(cases, events, terms):
    """Runs each (name, fn, leaves) on both devices in one xla graph and compares everything."""
    events.clear()
    pending = [(name, run_on_both(fn, leaves, events)) for name, fn, leaves in cases]
    xladev.mark_step()
    assert [e.name for e in events.of(Fallback)] == []
    for name, (on_xla, on_cpu) in pending:
        for i, (got, want) in enumerate(zip(on_xla, on_cpu)):
            assert_close(got, want, terms, f"{name} result {i}")


# ---- embedding_bag ---------------------------------------------------------------------------------
WEIGHT = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
INDICES = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 0])
OFFSETS = torch.tensor([0, 4, 4, 7])  # an empty bag in the middle


def test_embedding_bag_modes_match_cpu(events):
    cases = []
    # Every option at least once, each mode with and without padding_idx.
    for mode, per_sample, last, padding in [("sum", True, False, 2), ("sum", False, True, None),
                                            ("mean", False, False, 2), ("mean", False, True, None),
                                            ("max", False, True, 2), ("max", False, False, None)]:
        offsets = torch.cat([OFFSETS, torch.tensor([len(INDICES)])]) if last else OFFSETS
        psw = torch.rand(len(INDICES), generator=torch.Generator().manual_seed(1))

        def fn(w, i, o, p=None, mode=mode, last=last, padding=padding):
            return [F.embedding_bag(i, w, o, mode=mode, per_sample_weights=p, include_last_offset=last,
                                    padding_idx=padding)]

        leaves = [WEIGHT, INDICES, offsets] + ([psw] if per_sample else [])
        cases.append((f"{mode}-psw{per_sample}-last{last}-pad{padding}", fn, leaves))
    # 2-D input (fixed-size bags), the path through `_embedding_bag_forward_only` under no_grad included.
    cases.append(("2d-mean", lambda w, i: [F.embedding_bag(i, w, mode="mean")], [WEIGHT, INDICES.reshape(2, 5)]))
    compare(cases, events, terms=len(INDICES))
    with torch.no_grad():
        got = F.embedding_bag(INDICES.to(xladev.device()), WEIGHT.to(xladev.device()), OFFSETS.to(xladev.device()),
                              mode="max")
        assert_close(got, F.embedding_bag(INDICES, WEIGHT, OFFSETS, mode="max"), 1, "forward_only max")


def test_embedding_bag_scale_grad_by_freq_divides_by_batch_frequency(dev):
    """The documented (and CUDA's) semantics: each row's gradient divided by its count in the batch.
    The reference is `embedding` + sum, whose CPU backward is right; CPU embedding_bag's is not
    (pytorch/pytorch#190063)."""
    rows = INDICES.reshape(2, 5)
    w = WEIGHT.clone().to(dev).requires_grad_()
    F.embedding_bag(rows.to(dev), w, mode="sum", scale_grad_by_freq=True).sum().backward()
    ref = WEIGHT.clone().requires_grad_()
    F.embedding(rows, ref, scale_grad_by_freq=True).sum(1).sum().backward()
    assert_close(w.grad, ref.grad, len(INDICES), "scaled gradient")


def test_embedding_bag_module_trains_like_cpu(events):
    """nn.EmbeddingBag + Linear, two SGD steps on each device from the same weights."""
    torch.manual_seed(0)
    cpu = nn.Sequential(nn.EmbeddingBag(20, 4, mode="mean"), nn.Linear(4, 2))
    on_xla = copy.deepcopy(cpu).to(xladev.device())
    batches = [(torch.randint(0, 20, (3, 5)), torch.randn(3, 2)) for _ in range(2)]
    events.clear()
    for model in (on_xla, cpu):
        device = next(model.parameters()).device
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        for x, y in batches:
            opt.zero_grad()
            F.mse_loss(model(x.to(device)), y.to(device)).backward()
            opt.step()
        xladev.mark_step()
    assert [e.name for e in events.of(Fallback)] == []
    for (name, a), (_, b) in zip(on_xla.state_dict().items(), cpu.state_dict().items()):
        assert_close(a, b, 32, name)  # two steps of 15-term bags and 4-term products, twice


# ---- segment_reduce --------------------------------------------------------------------------------
def test_segment_reduce_matches_cpu(events):
    data = torch.randn(7, 3, generator=torch.Generator().manual_seed(2))
    data[3, 1] = data[2, 1]  # a tie for max/min
    data[5, 0] = 0.0         # a zero for prod
    lengths = torch.tensor([2, 0, 3, 2])
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)])
    cases = []
    for reduce, initial, kind in [("sum", 0.5, "offsets"), ("mean", None, "lengths"), ("mean", 0.5, "offsets"),
                                  ("max", None, "offsets"), ("min", 0.5, "lengths"), ("prod", None, "lengths"),
                                  ("prod", 0.5, "offsets")]:
        def fn(x, seg, reduce=reduce, initial=initial, kind=kind):
            return [torch._segment_reduce(x, reduce, initial=initial, **{kind: seg})]

        cases.append((f"{reduce}-{initial}-{kind}", fn, [data, lengths if kind == "lengths" else offsets]))
    cases.append(("axis1-max", lambda x, seg: [torch._segment_reduce(x, "max", lengths=seg, axis=1)],
                  [torch.randn(2, 5, 3), torch.tensor([[2, 3], [1, 4]])]))
    compare(cases, events, terms=4)


# ---- CTC --------------------------------------------------------------------------------------------
T, N, C, S = 8, 3, 5, 4
LOGITS = torch.randn(T, N, C, generator=torch.Generator().manual_seed(3))
TARGETS = torch.tensor([[2, 2, 3, 1], [4, 1, 0, 0], [1, 1, 1, 1]])  # a repeated label needs a blank between
INPUT_LENGTHS = torch.tensor([8, 6, 7])
TARGET_LENGTHS = torch.tensor([4, 2, 0])


def _ctc_case(lengths, reduction, flat=False, zero_infinity=False, input_lengths=INPUT_LENGTHS):
    targets = torch.cat([TARGETS[i, :TARGET_LENGTHS[i]] for i in range(N)]) if flat else TARGETS

    def fn(logits, targets, il, tl):
        if lengths == "list":
            il, tl = il.tolist(), tl.tolist()
        elif lengths == "device":
            il, tl = il.to(logits.device), tl.to(logits.device)
        # `il`/`tl` arrive as CPU tensors: the case PyTorch's composite used to send to the CPU.
        return [F.ctc_loss(logits.log_softmax(2), targets, il, tl, reduction=reduction, zero_infinity=zero_infinity)]

    return (f"ctc-{lengths}-{reduction}-flat{flat}-zi{zero_infinity}", fn,
            [LOGITS, targets, input_lengths, TARGET_LENGTHS])


def _keep_lengths_on_cpu(case):
    """run_on_both moves every leaf to the device; CPU lengths must stay CPU tensors."""
    name, fn, (logits, targets, il, tl) = case
    return name, lambda lg, tg: fn(lg, tg, il, tl), [logits, targets]


def test_ctc_loss_with_cpu_length_tensors(events):
    """Regression: device log_probs with CPU length tensors ran the composite into a device mismatch."""
    compare([_keep_lengths_on_cpu(_ctc_case("cpu", r)) for r in ("mean", "none")], events, terms=8 * T)


def test_ctc_loss_matches_cpu(events):
    cases = [_keep_lengths_on_cpu(_ctc_case("list", "sum", flat=True)),
             _keep_lengths_on_cpu(_ctc_case("device", "mean", flat=True)),
             # too few frames for the first target: an infinite loss, zeroed with its gradient
             _keep_lengths_on_cpu(_ctc_case("device", "none", zero_infinity=True,
                                            input_lengths=torch.tensor([4, 6, 7])))]
    compare(cases, events, terms=8 * T)


def test_ctc_gradient_wrt_log_probs_is_pytorchs(events):
    """PyTorch's CTC gradient with respect to log_probs includes exp(log_probs) (the log_softmax part)."""
    lp = LOGITS.log_softmax(2)
    case = ("ctc-leaf", lambda x, tg: [F.ctc_loss(x, tg, [8, 6, 7], [4, 2, 0], reduction="sum")], [lp, TARGETS])
    compare([case], events, terms=8 * T)


# ---- margin losses ----------------------------------------------------------------------------------
def test_margin_losses_match_cpu(events):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(4, 5, generator=g)
    y = torch.tensor([0, 3, 4, 1])
    weight = torch.rand(5, generator=g)
    labels = torch.tensor([[3, 0, -1, 1, 2], [1, 2, 3, 4, 0], [-1, 0, 0, 0, 0], [4, 4, -1, 0, 0]])
    cases = []
    for reduction, p in [("mean", 1), ("none", 2)]:
        # the class weights take no gradient in PyTorch: not a leaf
        cases.append((f"multi-{reduction}-p{p}", lambda a, t, r=reduction, p=p:
                      [F.multi_margin_loss(a, t, p=p, margin=0.7, weight=weight.to(a.device), reduction=r)], [x, y]))
    for reduction in ("sum", "none"):
        # labels after the first -1 are ignored (torch._decomp's forward counted them)
        cases.append((f"multilabel-{reduction}", lambda a, t, r=reduction:
                      [F.multilabel_margin_loss(a, t, reduction=r)], [x, labels]))
        cases.append((f"multilabel-1d-{reduction}", lambda a, t, r=reduction:
                      [F.multilabel_margin_loss(a, t, reduction=r)], [x[0], labels[0]]))
    compare(cases, events, terms=25)
