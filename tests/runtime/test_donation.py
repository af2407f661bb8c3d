"""Buffer donation at the step barrier: the old buffers of tensors updated in place are given to the
step's executable, counted as `InputOutputAliasCount`, and never when anything else can still read them.

Each aliasing case (clones, views, `copy_`, detach, pending values, gradient accumulation across
barriers) checks the values eager PyTorch gives and whether the buffer was donated; the trainings are
compared with the same training on the CPU.
"""

from __future__ import annotations

import pytest
import torch

import xladev
import xladev.debug.metrics as met
from xladev._flags import config
from xladev.events import Compile, Execute
from xladev.graphdiff import GraphSummary, InputSummary, differences
from tests.parity_bounds import assert_adam_params_close, assert_sgd_params_close, gradient_scale


def _donated(events) -> list[int]:
    """Inputs donated in each graph that ran (compiled now or found in the cache)."""
    return [sum(i.donated for i in e.graph.summary().inputs) for e in events.of(Execute)]


def _fresh(dev, *values):
    """Device tensors of these values, synced. A graph keeps the donation it was first compiled with, so a
    test that asserts donation uses shapes no other test here uses."""
    tensors = [torch.tensor(v, dtype=torch.float32).to(dev) for v in values]
    xladev.mark_step()
    return tensors


def test_training_donates_parameters_and_optimizer_state(dev, events):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    cpu_model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    cpu_model.load_state_dict(model.state_dict())
    model.to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    cpu_opt = torch.optim.AdamW(cpu_model.parameters(), lr=1e-2)
    xladev.mark_step()
    met.clear_all()
    events.clear()
    batches = [(torch.randn(5, 6), torch.randn(5, 3)) for _ in range(4)]
    for x, y in batches:
        for m, o, d in ((model, opt, dev), (cpu_model, cpu_opt, "cpu")):
            loss = torch.nn.functional.mse_loss(m(x.to(d)), y.to(d))
            loss.backward()
            o.step()
            o.zero_grad()
        xladev.mark_step()
    params = list(model.parameters())
    # Step 1 donates the 4 parameters (AdamW's moments are new); later steps also donate both moments.
    donated = _donated(events)
    assert donated[0] >= len(params) and donated[-1] >= 3 * len(params), donated
    # PyTorch/XLA samples the metric once per compile (0 included), with that executable's number of aliases.
    compiled = [e.donated for e in events.of(Compile)]
    samples = met.metric_data("InputOutputAliasCount")
    assert samples is not None and (samples[0], samples[1]) == (len(compiled), sum(compiled)), (samples, compiled)
    compiled = events.of(Compile)[-1]
    assert compiled.memory.get("alias", 0) > 0, "XLA's memory analysis shows no aliased bytes"
    # Within what float32 rounding and 4 AdamW steps allow (tests/parity_bounds), as any other training.
    names = {id(q): name for name, q in cpu_model.named_parameters()}
    assert_adam_params_close({n: p.detach().cpu() for n, p in model.named_parameters()},
                             {n: q.detach() for n, q in cpu_model.named_parameters()}, cpu_opt, names, len(batches))


def test_aliasing_can_be_turned_off(dev, events):
    (w,) = _fresh(dev, [1.0, 2.0])
    with config.override(param_aliasing=False):
        w.mul_(3.0)
        xladev.mark_step()
    assert _donated(events) == [0]
    assert w.cpu().tolist() == [3.0, 6.0]


def test_clone_keeps_the_old_value(dev, events):
    (w,) = _fresh(dev, [1.0, 2.0, 3.0])
    old = w.clone()
    w.add_(1.0)
    xladev.mark_step()
    assert old.cpu().tolist() == [1.0, 2.0, 3.0] and w.cpu().tolist() == [2.0, 3.0, 4.0]


def test_copy_of_device_data_is_not_donated_with_it(dev, events):
    (w,) = _fresh(dev, [4.0, 5.0])
    other = torch.empty_like(w)
    other.copy_(w)  # shares w's buffer, which must survive w's update
    xladev.mark_step()
    events.clear()
    w.add_(1.0)
    xladev.mark_step()
    assert _donated(events) == [0]
    assert other.cpu().tolist() == [4.0, 5.0] and w.cpu().tolist() == [5.0, 6.0]


def test_views_across_barriers(dev, events):
    (w,) = _fresh(dev, [[1.0, 2.0], [3.0, 4.0]])
    row = w[0]
    col = w[:, 1]
    seen = (row * 1).cpu()  # the view caches a value reading w's buffer: that buffer is not donated
    events.clear()
    w.mul_(2.0)
    xladev.mark_step()
    assert _donated(events) == [0]
    assert seen.tolist() == [1.0, 2.0]
    assert row.cpu().tolist() == [2.0, 4.0] and col.cpu().tolist() == [4.0, 8.0]
    row.add_(1.0)  # an in-place op through a view updates the base, whose old buffer may be donated
    xladev.mark_step()
    assert w.cpu().tolist() == [[3.0, 5.0], [6.0, 8.0]]


def test_pending_value_read_between_update_and_barrier(dev):
    (w,) = _fresh(dev, [1.0, 2.0])
    before = w * 10.0  # pending, reads w's current buffer
    w.add_(1.0)
    assert before.cpu().tolist() == [10.0, 20.0]  # a value read syncs part of the graph, never donating
    xladev.mark_step()
    assert w.cpu().tolist() == [2.0, 3.0] and before.cpu().tolist() == [10.0, 20.0]


def test_pending_value_synced_with_the_update(dev):
    (w,) = _fresh(dev, [1.0, 2.0])
    before = w * 10.0
    w.add_(1.0)
    xladev.mark_step()  # both in one graph: w's old buffer is read by `before` inside the same executable
    assert before.cpu().tolist() == [10.0, 20.0] and w.cpu().tolist() == [2.0, 3.0]


@pytest.mark.parametrize("micro_batches", [3])
def test_gradient_accumulation_across_barriers(dev, micro_batches):
    torch.manual_seed(1)
    cpu_model = torch.nn.Linear(4, 2)
    model = torch.nn.Linear(4, 2)
    model.load_state_dict(cpu_model.state_dict())
    model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1, momentum=0.9)
    data = [torch.randn(3, 4) for _ in range(2 * micro_batches)]
    scale = 0.0
    for start in (0, micro_batches):
        for x in data[start:start + micro_batches]:
            model(x.to(dev)).square().mean().backward()
            cpu_model(x).square().mean().backward()
            xladev.mark_step()  # the gradient buffers accumulate in place across barriers
        opt.step()
        cpu_opt.step()
        scale = max(scale, gradient_scale({n: q.grad for n, q in cpu_model.named_parameters()}))
        opt.zero_grad()
        cpu_opt.zero_grad()
        xladev.mark_step()
    # Within what float32 rounding allows for 2 SGD-momentum steps (tests/parity_bounds), from the model's
    # gradient scale: the accumulated gradients are sums of 3 micro-batches, as on the CPU.
    assert_sgd_params_close({n: p.detach().cpu() for n, p in model.named_parameters()},
                            {n: q.detach() for n, q in cpu_model.named_parameters()}, cpu_opt, scale, 2)


def test_detach_then_update_donates(dev, events):
    (w,) = _fresh(dev, [1.0, 2.0, 0.0, 0.0, 0.0])  # a shape of its own: a graph keeps its first donation
    alias = w.detach()  # shares w's storage, so it holds no buffer of its own
    events.clear()
    w.add_(1.0)
    xladev.mark_step()
    assert _donated(events) == [1]
    assert alias.cpu().tolist() == [2.0, 3.0, 1.0, 1.0, 1.0]


def test_a_change_of_donation_explains_the_recompile():
    def graph(donated: bool) -> GraphSummary:
        return GraphSummary("h", (), (InputSummary("data", (2, 3), "f32", "train.py:4", donated),), 1)

    lines = differences(graph(True), graph(False))
    assert lines == ["input 0, created at train.py:4 (f32[2,3]) no longer donated: another tensor (a `copy_` "
                     "of it, a view read earlier) still holds its old buffer"]
    assert "now donated" in differences(graph(False), graph(True))[0]


def test_a_buffer_held_for_once_is_copied_not_recompiled(dev, events):
    (w,) = _fresh(dev, [1.0, 2.0, 3.0, 5.0])  # a shape no other test uses: this graph is new
    w.add_(1.0)
    xladev.mark_step()
    other = torch.empty_like(w)
    other.copy_(w)  # holds w's buffer this step: the graph donates a copy of it instead
    events.clear()
    w.add_(1.0)
    xladev.mark_step()
    assert events.of(Compile) == [] and len(events.of(Execute)) == 1
    assert other.cpu().tolist() == [2.0, 3.0, 4.0, 6.0] and w.cpu().tolist() == [3.0, 4.0, 5.0, 7.0]
