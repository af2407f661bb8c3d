"""Gradient checkpointing on xla tensors: `torch.utils.checkpoint.checkpoint` (both `use_reentrant`) and
`torch_xla.utils.checkpoint`'s implementation recompute each region in the backward, from one optimization
barrier, with the forward's random numbers; gradients are eager CPU's; the compiled step needs less memory."""

from __future__ import annotations

import pytest
import torch
import torch.utils.checkpoint as torch_checkpoint

import xladev
from examples import transformer
from tests.parity_bounds import assert_gradients_close
from xladev.debug import get_tensors_text
from xladev.events import Compile, Execute, TransferFromDevice
from xladev.runtime.record import checkpoint as xla_checkpoint
from xladev.runtime.compile.compilation import compile_cache
from xladev.sinks.pt_xla_debug.sink import AnalysisSink, DebugOutput

VARIANTS = {
    "reentrant": lambda fn, *args: torch_checkpoint.checkpoint(fn, *args, use_reentrant=True),
    "non-reentrant": lambda fn, *args: torch_checkpoint.checkpoint(fn, *args, use_reentrant=False),
    "torch_xla": lambda fn, *args: xla_checkpoint.checkpoint(fn, *args, use_reentrant=True),
}


class Block(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.a = torch.nn.Linear(width, 2 * width)
        self.b = torch.nn.Linear(2 * width, width)

    def forward(self, x):
        return x + self.b(torch.tanh(self.a(x)))


def _blocks(seed: int, count: int = 3, width: int = 8) -> torch.nn.ModuleList:
    torch.manual_seed(seed)
    return torch.nn.ModuleList(Block(width) for _ in range(count))


def _grads(model, x) -> dict:
    xladev.mark_step()  # one graph computes every gradient; the reads then copy data
    out = {name: p.grad.cpu() for name, p in model.named_parameters()}
    out["input"] = x.grad.cpu()
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_backward_recomputes_each_region_behind_a_barrier_with_eager_gradients(dev, variant):
    cpu = _blocks(1)
    xla = _blocks(1).to(dev)
    x_cpu = torch.randn(5, 8, requires_grad=True)
    x = x_cpu.detach().to(dev).requires_grad_()
    h_cpu, h = x_cpu, x
    for block_cpu, block in zip(cpu, xla):
        h_cpu = block_cpu(h_cpu)
        h = VARIANTS[variant](block, h)
    h_cpu.square().mean().backward()
    h.square().mean().backward()
    ir = get_tensors_text([p.grad for p in xla.parameters()] + [x.grad])
    # Three regions: each tanh once in the forward and once more in the backward, from a barrier of its own.
    assert ir.count("aten::tanh(") == 6, ir
    assert ir.count("xla::optimization_barrier(") == 3
    assert "scope=checkpoint_recompute" in ir
    assert_gradients_close(_grads(xla, x), _grads(cpu, x_cpu))


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_recomputation_draws_the_forwards_random_numbers(dev, variant):
    block = torch.nn.Sequential(torch.nn.Linear(6, 6), torch.nn.Dropout(0.5), torch.nn.Tanh()).to(dev)
    x = torch.randn(4, 6).to(dev).requires_grad_()
    results = []
    for checkpointed in (True, False):
        xladev.manual_seed(7)
        block.zero_grad()
        x.grad = None
        y = VARIANTS[variant](block, x) if checkpointed else block(x)
        y.sum().backward()
        results.append((y.cpu(), x.grad.cpu(), block[0].weight.grad.cpu()))
    # The same draws in the forward and in its recomputation: exactly the plain run's values and gradients.
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert (results[0][0] == 0).any()  # the dropout did drop something


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_nothing_is_read_from_the_device(dev, events, variant):
    # The RNG state is kept as the key's IR node: checkpointing a region with dropout transfers nothing to the host.
    block = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.3)).to(dev)
    x = torch.randn(3, 4).to(dev).requires_grad_()
    torch.rand(1, device=dev)  # the key is pending, as after any random op of the step
    events.clear()
    VARIANTS[variant](block, x).sum().backward()
    xladev.mark_step()
    assert not events.of(TransferFromDevice) and len(events.of(Execute)) == 1


def _decoder_backward(dev, checkpointed: bool) -> tuple:
    """Records one backward through an 8-layer decoder; returns its blocks and input (whose gradients are pending)."""
    cfg = transformer.Config(layers=8, dropout=0.0, d_model=64, heads=4, seq=48, batch=4)
    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(transformer.Block(cfg) for _ in range(cfg.layers)).to(dev)
    x = torch.randn(cfg.batch, cfg.seq, cfg.d_model).to(dev).requires_grad_()
    xladev.mark_step()
    h = x
    for block in blocks:
        h = torch_checkpoint.checkpoint(block, h, use_reentrant=False) if checkpointed else block(h)
    h.square().mean().backward()
    return blocks, x


def test_checkpointing_lowers_the_compiled_steps_peak_memory(dev, events):
    temps = []
    for checkpointed in (False, True):
        model = _decoder_backward(dev, checkpointed)
        events.clear()
        xladev.mark_step()
        del model
        [ran] = events.of(Execute)
        temps.append(compile_cache.by_hash[ran.graph_hash].memory["temp"])
    # XLA's memory analysis of each compiled graph: the activations of the recomputed layers are not all live at once.
    plain, checkpointed = temps
    assert checkpointed < plain / 2, temps


def test_debug_analysis_counts_the_recomputed_ops(dev, events, tmp_path):
    xladev.mark_step()
    sink = AnalysisSink(1, DebugOutput(str(tmp_path / "debug.txt")))
    sink.start()
    try:
        blocks = _blocks(3, count=2, width=5).to(dev)
        h = torch.randn(2, 5).to(dev).requires_grad_()
        for block in blocks:
            h = torch_checkpoint.checkpoint(block, h, use_reentrant=True)
        h.sum().backward()
        xladev.mark_step()
    finally:
        sink.stop()
    [compiled] = events.of(Compile)
    count = compiled.graph.recomputed_ops()
    # Each region's recomputation records its four ops again; the backward reads two of them (the first addmm and
    # the tanh), and only those are in the graph.
    assert count == 4
    text = (tmp_path / "debug.txt").read_text()
    assert (f"Compilation Analysis: Gradient Checkpointing: \nCompilation Analysis:   {count} ops recompute "
            "checkpointed forward regions in the backward") in text


def test_training_compiles_one_step_graph(dev, events):
    model = _blocks(4, count=2, width=7).to(dev)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(3, 7).to(dev)
    xladev.mark_step()
    events.clear()
    for _ in range(4):
        h = x
        for block in model:
            h = torch_checkpoint.checkpoint(block, h, use_reentrant=False)
        h.square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
        xladev.mark_step()
    # The first step differs (no gradients existed before it); every later step runs one cached graph.
    assert len(events.of(Compile)) <= 2 and len(events.of(Execute)) == 4


def test_non_reentrant_works_with_autograd_grad_and_sequential(dev):
    cpu = _blocks(5, count=4, width=6)
    xla = _blocks(5, count=4, width=6).to(dev)
    x_cpu = torch.randn(3, 6, requires_grad=True)
    x = x_cpu.detach().to(dev).requires_grad_()
    [want] = torch.autograd.grad(torch.nn.Sequential(*cpu)(x_cpu).sum(), x_cpu)
    out = torch_checkpoint.checkpoint_sequential(torch.nn.Sequential(*xla), 2, x, use_reentrant=False)
    [got] = torch.autograd.grad(out.sum(), x)
    assert "xla::optimization_barrier" in get_tensors_text([got])
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)


def test_torchs_errors_are_kept(dev):
    block = _blocks(6, count=1)[0].to(dev)
    x = torch.randn(2, 8).to(dev).requires_grad_()
    with pytest.raises(ValueError, match="Unexpected keyword arguments: scale"):
        torch_checkpoint.checkpoint(block, x, use_reentrant=True, scale=2)
    # A region without xla tensors is torch's own business.
    out = torch_checkpoint.checkpoint(torch.sin, torch.ones(2, requires_grad=True), use_reentrant=False)
    assert out.device.type == "cpu"


@pytest.mark.parametrize("reentrant", [True, False])
def test_torchs_own_checkpoint_replays_the_device_rng_too(dev, reentrant):
    # Code holding torch's function from before xladev routed it: torch saves and restores the device's RNG state
    # itself (reading the key), so the recomputation still draws the forward's dropout masks.
    block = torch.nn.Sequential(torch.nn.Linear(5, 5), torch.nn.Dropout(0.5), torch.nn.Tanh()).to(dev)
    x = torch.randn(3, 5).to(dev).requires_grad_()
    results = []
    for run in (xla_checkpoint._torch_checkpoint, lambda fn, x, use_reentrant: fn(x)):
        xladev.manual_seed(11)
        x.grad = None
        run(block, x, use_reentrant=reentrant).sum().backward()
        results.append(x.grad.cpu())
    torch.testing.assert_close(results[0], results[1], rtol=0, atol=0)
