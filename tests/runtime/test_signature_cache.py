"""The recording path's signature cache (runtime/record/recording.py) records exactly the graphs of the general path.

A varied program (tensor and Python-number operands, constants that compare equal but differ -- 1, 1.0,
True, 0.0, -0.0 --, keyword arguments, lists, views, in-place ops through views, broadcasting and
converting in-place results, several dtypes and shapes of one op, multi-output ops, autograd's backward
ops) is recorded with the cache off (the general path, the reference), then with it cold and warm: the
graph hash and IR text must be the reference's, and the values eager CPU's.
"""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn.functional as F

import xladev
from xladev.debug import get_graph_hash, get_tensors_text
from xladev.runtime.record import recording
from tests.models.tolerances import U as U32


def _program(device: torch.device) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 8, generator=g).to(device)
    y = torch.randn(4, 8, generator=g).to(device)
    w = torch.randn(8, 8, generator=g).to(device)
    row = torch.randn(8, generator=g).to(device)
    d = torch.randn(4, 8, generator=g, dtype=torch.float64).to(device)
    n = torch.arange(32, dtype=torch.int32).reshape(4, 8).to(device)
    p = torch.randn(4, 8, generator=g).to(device)
    out = [
        x + y, x * 2, x * 2.5, x - 1, x + 1.0, x + True, x * 0.0, x * -0.0,  # numbers: operands and constants
        n + 3, n * 2.5, n + 1, x > 0.5, torch.clamp(x, 1), torch.clamp(x, 1.0),
        torch.relu(x), x @ w, torch.addmm(row, x, w), d + d, d * 2.5,  # one op, two dtypes
        x.t() @ y, x.t().contiguous(), x.view(8, 4) * 3, x.reshape(-1).sum(), x[1:3, ::2] + 1,  # views
        x.sum([0], True), x.mean(1, keepdim=True), torch.addcmul(x, y, x, value=0.5),  # lists, keywords
        torch.addcmul(x, y, x, value=1), torch.where(x > 0, x, y), F.gelu(x), torch.softmax(x, -1),
        torch.cat([x, y]), torch.stack([x, y]).amax([0, 2]),
    ]
    out += list(torch.split(x, 3, dim=1))  # several views at once
    out += list(torch.max(x, 1))  # several outputs of one node
    out += list(F.layer_norm(x, (8,), row, row)[None])
    x2 = torch.randn(3, 5, generator=g).to(device)  # the ops above at another shape
    out += [x2 + x2, x2 * 2.5, x2.t() @ x2, x2.sum([0], True)]
    # In place: plain, through a view, broadcast into the target, converted to the target's dtype.
    q = p.clone()
    q.lerp_(y, 0.1)
    q.mul_(0.9).add_(x, alpha=0.1)
    q.addcdiv_(x, y.abs() + 1, value=-0.01)
    q[0].mul_(2)
    q.t()[1].add_(1.5)
    q.add_(row)
    q.add_(d[:, :].to(torch.float32))
    r = p.clone()
    r.add_(d)  # float64 written into float32
    m = n.clone()
    m.mul_(3)
    m.add_(n, alpha=2)
    out += [q, r, m]
    # Foreach ops (torch's optimizers): one node over the list, each element through the per-tensor op's path.
    fs = [p.clone(), x.clone()]
    torch._foreach_mul_(fs, 0.9)
    torch._foreach_add_(fs, [x, y], alpha=0.1)
    torch._foreach_addcdiv_(fs, [x, y], [y.abs() + 1, x.abs() + 1], [-0.01, 0.02])
    out += fs + list(torch._foreach_sqrt([y.abs(), x.abs()]))
    # Autograd: a Linear layer's forward and backward (its ops arrive on autograd's thread).
    lin = torch.nn.Linear(8, 8)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(8, 8, generator=g))
        lin.bias.copy_(torch.randn(8, generator=g))
    lin = lin.to(device)
    F.mse_loss(lin(x), y).backward()
    out += [lin.weight.grad, lin.bias.grad]
    return out


def _record(device) -> tuple[list, str, str]:
    xladev.mark_step()
    out = _program(device)
    return out, get_graph_hash(out), get_tensors_text(out)


@pytest.fixture
def cache_state():
    previous = recording.use_signature_cache(True)
    yield
    recording.use_signature_cache(previous)


def _assert_eager_values(xla_out: list, cpu_out: list) -> None:
    assert len(xla_out) == len(cpu_out)
    xladev.mark_step()  # one graph computes them all
    for i, (a, b) in enumerate(zip(xla_out, cpu_out)):
        got = a.cpu()
        assert got.dtype == b.dtype and got.shape == b.shape, i
        if b.is_floating_point():
            # Each value is a few ops deep, with sums of at most 16 terms and one transcendental function
            # (XLA's and ATen's differ by a few units in the last place): 64 roundings of the result's scale.
            scale = b.abs().max().item()
            torch.testing.assert_close(got, b, rtol=64 * U32, atol=64 * U32 * scale, msg=f"output {i}")
            assert torch.equal(got.signbit(), b.signbit()) or not torch.equal(b, b.abs()), f"output {i}: signs"
        else:
            assert torch.equal(got, b), f"output {i}"


def test_cached_recording_makes_the_general_paths_graphs_cold_and_warm(cache_state):
    recording.use_signature_cache(False)
    _, ref_hash, ref_text = _record(xladev.device())
    recording.use_signature_cache(True)
    recording.clear_signatures()
    cold, cold_hash, cold_text = _record(xladev.device())
    warm, warm_hash, warm_text = _record(xladev.device())
    assert cold_text == ref_text
    assert warm_text == ref_text
    assert cold_hash == ref_hash and warm_hash == ref_hash
    cpu = _program(torch.device("cpu"))
    _assert_eager_values(warm, cpu)
    # -0.0 and 0.0 are equal keys to a dict, not to the graph: the signs come out as eager's.
    assert torch.equal(warm[7].cpu().signbit(), cpu[7].signbit()) and cpu[7].signbit().any()
    # Every tensor's value has the tensor's own shape and dtype (the cache keys tensors by their values' Meta).
    for t in warm:
        assert tuple(t._node().meta.shape) == tuple(t.shape) and t._node().meta.dtype == t.dtype


def test_threads_filling_the_cache_at_once_record_the_same_graph(cache_state):
    recording.use_signature_cache(False)
    _, ref_hash, _ = _record(xladev.device())
    recording.use_signature_cache(True)
    recording.clear_signatures()
    xladev.mark_step()
    results: dict = {}
    start = threading.Barrier(2)

    def run(name):
        start.wait()
        out = _program(xladev.device())
        results[name] = (out, get_graph_hash(out))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [results[i][1] for i in range(2)] == [ref_hash, ref_hash]  # the values: the test above


def test_a_changed_signature_never_reuses_an_entry(cache_state, dev):
    """Same op, same call site: a new dtype, shape, number type or constant is a new entry."""
    recording.clear_signatures()
    cases = [
        (torch.ones(2, 3), 2), (torch.ones(2, 3), 2.5), (torch.ones(2, 3, dtype=torch.float64), 2.5),
        (torch.ones(3, 2), 2.5), (torch.ones(2, 3, dtype=torch.int32), 2), (torch.ones(2, 3, dtype=torch.int32), 2.5),
        (torch.ones(2, 3, dtype=torch.int32), True), (torch.ones(2, 3, dtype=torch.bool), True),
    ]
    for cpu, number in cases:
        got = cpu.to(dev) * number
        want = cpu * number
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(got.cpu(), want)
