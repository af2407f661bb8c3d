"""Views, in-place ops, dtype promotion, RNG, autograd and optimizers on `xla`, against eager CPU."""

from __future__ import annotations

import threading

import pytest
import torch
import torch.nn as nn

import xladev


def test_device_api(dev):
    assert str(dev) == "xla:0"
    assert xladev.device_count() >= 1
    assert xladev.devices()[0] == dev
    t = torch.randn(2, 3, device="xla")
    assert str(t.device) == "xla:0"
    assert torch.tensor([1.0, 2.0], device="xla").device == dev
    assert torch.ones(3).to(dev).device == dev
    with pytest.raises(ValueError, match="xla:99 does not exist"):
        xladev.device(99)


def test_print_and_indexing(dev):
    t = torch.arange(6.0).view(2, 3).to(dev)
    assert repr(t) == "tensor([[0., 1., 2.],\n        [3., 4., 5.]], device='xla:0')"
    assert t[1, 2].item() == 5.0
    assert t[:, 1].tolist() == [1.0, 4.0]
    assert repr(torch.tensor([1, 2], device=dev, dtype=torch.int32)) == "tensor([1, 2], device='xla:0', dtype=torch.int32)"
    w = torch.ones(2, requires_grad=True, device=dev)
    assert repr(w * 2).endswith("grad_fn=<MulBackward0>)")


def test_inplace_through_views_matches_eager(dev):
    def program(base):
        base.add_(1)
        row = base[1]
        row.mul_(10)                    # write through a select view
        base[:, 0] = -1                 # slicing assignment
        col = base.t()[2]               # view of a view
        col.zero_()
        flat = base.view(-1)
        flat[3:5] += 100
        d = base.diagonal()
        d.fill_(7)
        return base, row, col, flat

    cpu = program(torch.arange(12.0).reshape(3, 4))
    xla = program(torch.arange(12.0).reshape(3, 4).to(dev))
    for a, b in zip(cpu, xla):
        torch.testing.assert_close(b.cpu(), a)


def test_alias_sees_later_writes_and_detach_shares_storage(dev):
    x = torch.zeros(4, device=dev)
    v = x[1:3]
    x.add_(5)
    assert v.tolist() == [5.0, 5.0]
    d = x.detach()
    d.mul_(2)
    assert x.tolist() == [10.0] * 4
    c = x.clone()
    c.add_(1)
    assert x.tolist() == [10.0] * 4


def test_view_of_a_transposed_elementwise_result_works_as_in_eager(dev):
    # Eager's elementwise output keeps its inputs' transposed layout, so transposing it back gives a contiguous
    # tensor that `.view` accepts; xla's output is contiguous, and the same `.view` failed ("view size is not
    # compatible with input tensor's size and stride"). Mamba's mixer does this (found through torch.compile).
    a, b = torch.randn(2, 4, 6), torch.randn(2, 4, 6)

    def f(x, y):
        return (x.transpose(1, 2) * y.transpose(1, 2)).transpose(1, 2).view(8, 6)

    got = f(a.to(dev), b.to(dev))
    assert torch.equal(got.cpu(), f(a, b))
    got.add_(1)  # a write through that view lands in what it views, as in eager
    want = f(a, b)
    want.add_(1)
    assert torch.equal(got.cpu(), want)


def test_as_strided_and_unfold_views(dev):
    base = torch.arange(16.0)
    for make in (lambda t: t.as_strided((3, 3), (4, 1), 1), lambda t: t.unfold(0, 4, 3)):
        cpu, xla = make(base.clone()), make(base.to(dev))
        torch.testing.assert_close(xla.cpu(), cpu)
    view = base.to(dev).as_strided((2, 2), (8, 1), 2)
    assert view.tolist() == [[2.0, 3.0], [10.0, 11.0]]


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: a + b,
        lambda a, b: a * 2.5,
        lambda a, b: a // 3,
        lambda a, b: a / 2,
        lambda a, b: a.float() + b.double(),
        lambda a, b: (a > 2) & (b < 5),
        lambda a, b: torch.where(a > 1, a, 0.5),
    ],
    ids=["int+int", "int*float", "floordiv", "int/int", "float+double", "bool-logic", "where-scalar"],
)
def test_dtype_promotion(dev, fn):
    a, b = torch.arange(6).reshape(2, 3), torch.arange(3)
    expected = fn(a, b)
    got = fn(a.to(dev), b.to(dev))
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got.cpu(), expected)


def test_manual_seed_reproducible_on_device(dev):
    xladev.manual_seed(1234)
    a = torch.randn(5, device=dev).cpu()
    b = torch.rand(3, device=dev).cpu()
    xladev.manual_seed(1234)
    assert torch.equal(torch.randn(5, device=dev).cpu(), a)
    assert torch.equal(torch.rand(3, device=dev).cpu(), b)
    xladev.manual_seed(99)
    assert not torch.equal(torch.randn(5, device=dev).cpu(), a)
    torch.manual_seed(7)                 # torch.manual_seed seeds the device too
    c = torch.randn(4, device=dev).cpu()
    torch.manual_seed(7)
    assert torch.equal(torch.randn(4, device=dev).cpu(), c)


def test_random_op_does_not_recompile_each_step(dev, events):
    from xladev.events import Compile

    x = torch.ones(8, device=dev)
    for _ in range(4):
        y = torch.nn.functional.dropout(x, 0.5)
        xladev.mark_step()
    assert len(events.of(Compile)) <= 2
    values = y.cpu()
    assert set(values.tolist()) <= {0.0, 2.0}


def test_autograd_backward_runs_on_device_thread(dev):
    from xladev.runtime.graph import op_ledger as rec

    threads = set()
    original = rec.recorder.count

    def spy(name):
        threads.add(threading.current_thread().name)
        original(name)

    rec.recorder.count = spy
    try:
        w = torch.randn(3, 3, device=dev, requires_grad=True)
        (w @ w).sum().backward()
    finally:
        rec.recorder.count = original
    assert len(threads) >= 2, threads  # the main thread recorded forward, autograd's thread backward
    w_cpu = w.detach().cpu().requires_grad_()
    (w_cpu @ w_cpu).sum().backward()
    torch.testing.assert_close(w.grad.cpu(), w_cpu.grad)


def test_no_grad_and_requires_grad(dev):
    w = torch.ones(2, device=dev, requires_grad=True)
    with torch.no_grad():
        y = w * 2
    assert not y.requires_grad
    assert (w * 2).requires_grad


@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    lambda p: torch.optim.Adam(p, lr=0.01),
    lambda p: torch.optim.AdamW(p, lr=0.01, weight_decay=0.1),
], ids=["sgd-momentum", "adam", "adamw"])
def test_optimizers_keep_state_on_device_and_match_cpu(dev, make_opt):
    def train(device):
        torch.manual_seed(0)
        model = nn.Linear(4, 3).to(device)
        opt = make_opt(model.parameters())
        for step in range(4):
            x = torch.arange(8.0).reshape(2, 4).to(device) / (step + 1)
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
            if device != "cpu":
                xladev.mark_step()
        return model, opt

    cpu_model, _ = train("cpu")
    xla_model, opt = train(dev)
    for state in opt.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor) and value.dim() > 0:
                assert value.device == dev
    for a, b in zip(cpu_model.parameters(), xla_model.parameters()):
        torch.testing.assert_close(b.detach().cpu(), a.detach(), rtol=1e-5, atol=1e-6)


def test_state_dict_roundtrip_via_cpu(dev, tmp_path):
    model = nn.Linear(3, 2).to(dev)
    path = tmp_path / "m.pt"
    torch.save({k: v.cpu() for k, v in model.state_dict().items()}, path)
    other = nn.Linear(3, 2)
    other.load_state_dict(torch.load(path))
    other = other.to(dev)
    for a, b in zip(model.parameters(), other.parameters()):
        assert torch.equal(a.cpu(), b.cpu())
    # Loading a CPU state dict into a device model copies into the device parameters.
    fresh = nn.Linear(3, 2).to(dev)
    fresh.load_state_dict(torch.load(path))
    assert fresh.weight.device == dev
    assert torch.equal(fresh.weight.cpu(), model.weight.cpu())
    # torch.save of device tensors goes through the CPU and loads back onto the device.
    torch.save(model.weight.detach(), tmp_path / "w.pt")
    loaded = torch.load(tmp_path / "w.pt", weights_only=False)
    assert loaded.device == dev and torch.equal(loaded.cpu(), model.weight.cpu())


@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=True),
    lambda p: torch.optim.AdamW(p, lr=0.01, foreach=True),
], ids=["sgd-foreach", "adamw-foreach"])
def test_foreach_optimizers_train_on_device(dev, make_opt):
    # Regression: the in-place _foreach_ ops fell back to the CPU and wrote back only single tensors,
    # so foreach optimizers left the weights unchanged.
    import xladev.debug.metrics as met

    def train(device):
        torch.manual_seed(0)
        model = nn.Linear(4, 3).to(device)
        opt = make_opt(model.parameters())
        for step in range(3):
            opt.zero_grad()
            model(torch.arange(8.0).reshape(2, 4).to(device)).pow(2).mean().backward()
            opt.step()
            if device != "cpu":
                xladev.mark_step()
        return [p.detach().cpu() for p in model.parameters()]

    before = set(met.executed_fallback_ops())
    cpu, xla = train("cpu"), train(dev)
    for a, b in zip(cpu, xla):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert not {n for n in met.executed_fallback_ops() if "_foreach" in n} - before


def test_ops_are_counted_even_when_the_step_runs_no_graph(dev, events):
    # Regression: a storage assigned uploaded data stayed "pending", and a step with nothing to run
    # dropped the Ops event, so op counts and tracing time went unreported.
    from xladev.events import Ops

    t = torch.zeros(3, device=dev)
    xladev.mark_step()
    events.clear()
    t.copy_(torch.ones(3))            # the value becomes uploaded data: nothing to compute
    view = t[1:]                      # a recorded view op
    xladev.mark_step()
    recorded = events.of(Ops)
    assert recorded and sum(e.counts.get("aten::slice", 0) for e in recorded) == 1
    assert t._st.sid not in __import__("xladev.runtime.graph.storage", fromlist=["pending"]).pending


def test_inplace_ops_pick_the_functional_overload_by_argument_types(dev):
    # Regression: pow_.Scalar was mapped to pow.Scalar (a Scalar base) instead of pow.Tensor_Scalar.
    cpu = torch.arange(1.0, 4.0)
    xla = cpu.to(dev)
    for t in (cpu, xla):
        t.pow_(2.0)
        t.pow_(torch.full((3,), 0.5, device=t.device))
        t.sub_(1, alpha=2)
    torch.testing.assert_close(xla.cpu(), cpu)


def test_meta_cache_keeps_argument_structure(dev):
    # Regression: the memoised meta key dropped keyword names, list nesting and True-vs-1, so a
    # later call reused an earlier call's output shape or dtype.
    x = torch.ones(4, 5, device=dev)
    assert torch.sum(x, [1]).shape == (4,)
    assert torch.sum(x, [], True).shape == (1, 1)
    b = torch.tensor([0.5, 2.5], device=dev)
    edges = torch.tensor([1.0, 2.0, 3.0], device=dev)
    assert torch.bucketize(b, edges, out_int32=False, right=True).dtype == torch.int64
    assert torch.bucketize(b, edges, out_int32=True, right=False).dtype == torch.int32


def test_inplace_view_ops_change_the_shape(dev):
    # Regression: squeeze_/t_/unsqueeze_ were treated as value writes and kept the old shape.
    cpu = torch.arange(6.0).reshape(1, 2, 3)
    xla = cpu.to(dev)
    for t in (cpu, xla):
        t.squeeze_(0)
        t.t_()
        t.unsqueeze_(1)
    assert xla.shape == cpu.shape == (3, 1, 2)
    torch.testing.assert_close(xla.cpu(), cpu)
    v = torch.ones(3, device=dev)
    assert (torch.ones(2, 4, 3, device=dev) @ v).shape == (2, 4)


def test_foreach_pow_of_a_number_to_each_tensor_is_recorded_as_eager_computes_it():
    # Adam(capturable=True)'s bias corrections: beta ** step for every parameter's step count.
    dev = xladev.device()
    steps = [torch.tensor(1.0), torch.tensor(3.0)]
    got = torch._foreach_pow(0.9, [s.to(dev) for s in steps])
    want = torch._foreach_pow(0.9, steps)
    assert all(isinstance(g, torch.Tensor) and g.device.type == "xla" for g in got)
    eps = torch.finfo(torch.float32).eps  # pow may round its last bit differently (exp/log inside)
    assert all(torch.allclose(g.cpu(), w, rtol=4 * eps, atol=0) for g, w in zip(got, want))


@pytest.mark.parametrize("call", [
    lambda ts: torch._foreach_maximum(ts, 1.0),
    lambda ts: torch._foreach_minimum(ts, 1.0),
    lambda ts: torch._foreach_maximum(ts, [1.0, 2.5]),
    lambda ts: (torch._foreach_maximum_(ts, 1.0), ts)[1],  # ASGD's capturable step: its mu's floor
    lambda ts: (torch._foreach_minimum_(ts, [0.0, 2.5]), ts)[1],
], ids=["maximum scalar", "minimum scalar", "maximum scalar list", "maximum_ scalar", "minimum_ scalar list"])
def test_foreach_maximum_and_minimum_with_numbers_are_eager_s_values(call):
    # torch.maximum takes tensors only: with a number, each tensor's op is clamp_min (or clamp_max); NaN stays NaN.
    dev = xladev.device()
    values = [torch.tensor([0.5, 2.0, float("nan")]), torch.tensor([-1.0, 3.0, 0.0])]
    got = call([v.to(dev) for v in values])
    want = call([v.clone() for v in values])
    for g, w in zip(got, want):
        assert g.device.type == "xla"
        torch.testing.assert_close(g.cpu(), w, rtol=0, atol=0, equal_nan=True)


def test_functional_foreach_copy_gives_each_self_s_shape_and_dtype_with_src_s_values():
    # AOTAutograd's functional form of `_foreach_copy_` (ASGD's capturable step copies its eta and mu with it).
    dev = xladev.device()
    copy = torch.ops.aten._foreach_copy.default
    selves = [torch.zeros(3), torch.zeros(2, 2, dtype=torch.float64)]
    srcs = [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([5.5])]
    on_device = [s.to(dev) for s in selves]
    got = copy(on_device, [s.to(dev) for s in srcs])
    for g, w in zip(got, copy(selves, srcs)):
        assert g.device.type == "xla" and g.dtype == w.dtype
        torch.testing.assert_close(g.cpu(), w, rtol=0, atol=0)
    assert all(float(s.abs().sum()) == 0 for s in on_device)  # functional: the inputs are left as they were


@pytest.mark.parametrize("bounds", [(-5, float("nan")), (float("nan"), 5.5), (float("-inf"),), (0, float("inf"), 2)])
def test_arange_of_a_non_finite_bound_raises_eagers_error(dev, bounds):
    with pytest.raises(RuntimeError) as eager:
        torch.arange(*bounds)
    with pytest.raises(RuntimeError) as lazy:
        torch.arange(*bounds, device=dev)
    assert str(lazy.value) == str(eager.value) and str(eager.value).startswith("unsupported range: ")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int32,
                                   torch.int8])
@pytest.mark.parametrize("fn", [torch.sign, torch.sgn], ids=["sign", "sgn"])
def test_sign_of_nan_and_signed_zero_is_eagers_zero(dev, fn, dtype):
    """Eager computes (0 < x) - (x < 0): NaN and -0.0 give 0 (PyTorch/XLA too); jnp.sign gives NaN and -0.0."""
    values = ([float("nan"), -1.5, -0.0, 0.0, 2.0, float("inf"), -float("inf")] if dtype.is_floating_point
              else [-3, 0, 5])
    x = torch.tensor(values).to(dtype)
    want, got = fn(x), fn(x.to(dev)).cpu()
    assert got.dtype == want.dtype and torch.equal(got, want), (got, want)
    assert torch.equal(torch.signbit(got), torch.signbit(want))


@pytest.mark.parametrize("call", [
    lambda a, out: torch.mm(a, a, out=out), lambda a, out: torch.addmm(a, a, a, out=out),
    lambda a, out: torch.bmm(a[None], a[None], out=out[None]),
], ids=["mm", "addmm", "bmm"])
def test_an_out_tensor_of_another_dtype_is_refused_where_eager_wants_it_exact(dev, call):
    a = torch.randn(3, 3)
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype"):
        call(a, torch.empty(3, 3, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="Expected out tensor to have dtype torch.float32 but got torch.bfloat16"):
        call(a.to(dev), torch.empty(3, 3, dtype=torch.bfloat16, device=dev))


def test_an_out_tensor_the_result_casts_into_still_takes_it(dev):
    a = torch.randn(3, 3)
    want = torch.add(a, a, out=torch.empty(3, 3, dtype=torch.float64))
    got = torch.add(a.to(dev), a.to(dev), out=torch.empty(3, 3, dtype=torch.float64, device=dev))
    assert got.dtype == torch.float64 and torch.equal(got.cpu(), want)
