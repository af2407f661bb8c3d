"""`scan(fn, init, xs)` and `scan_layers`: one `xla::scan` node holding `fn` once, lowered to `jax.lax.scan`; values
and gradients are those of the same Python loop in eager CPU."""

from __future__ import annotations

import pytest
import torch
from functorch.compile import min_cut_rematerialization_partition
from torch.utils._pytree import tree_flatten, tree_map

import xladev
from examples import transformer
from tests.parity_bounds import assert_gradients_close
from xladev.debug import get_tensors_text
from xladev.events import Compile, Execute
from xladev.runtime.execute.admission import ExecutionNotAllowedError
from xladev.runtime.record.scan import ONE_LAYER_CACHE, SCAN_COMPUTATION_CACHE, scan, scan_layers


def _loop(fn, init, xs):
    """The reference: the same function in a Python loop, ys stacked (None stays None)."""
    carry, ys = init, []
    for i in range(tree_flatten(xs)[0][0].shape[0]):
        carry, y = fn(carry, tree_map(lambda v: v[i], xs))
        ys.append(y)
    return carry, tree_map(lambda *v: None if v[0] is None else torch.stack(v), *ys, is_leaf=lambda v: v is None)


def _leaves(tree):
    return [t for t in tree_flatten(tree)[0] if t is not None]


def _run_both(fn, init, xs, **kwargs):
    """Scans `fn` on xla and loops it on the CPU from the same values, backward through every output leaf;
    returns (xla outputs, cpu outputs, xla input grads, cpu input grads)."""
    def copy(tree, device):
        return tree_map(lambda t: t.detach().to(device).requires_grad_(t.requires_grad), tree)

    xla_in = (copy(init, xladev.device()), copy(xs, xladev.device()))
    cpu_in = (copy(init, "cpu"), copy(xs, "cpu"))
    xla_out = scan(fn, *xla_in, **kwargs)
    cpu_out = _loop(fn, *cpu_in)
    for out in (xla_out, cpu_out):
        sum(t.sin().sum() for t in _leaves(out) if t.dtype.is_floating_point).backward()
    grads = [{str(i): t.grad for i, t in enumerate(_leaves(tree)) if t.requires_grad} for tree in (xla_in, cpu_in)]
    return xla_out, cpu_out, {k: v.cpu() for k, v in grads[0].items()}, grads[1]


def _close(xla_tree, cpu_tree):
    assert tree_flatten(xla_tree)[1] == tree_flatten(cpu_tree)[1]
    for a, b in zip(_leaves(xla_tree), _leaves(cpu_tree)):
        torch.testing.assert_close(a.cpu(), b, rtol=1e-5, atol=1e-5)


def test_cumulative_sum_is_one_scan_node_and_matches_the_loop(dev):
    def step(carry, x):
        carry = carry + x
        return carry, carry

    init = torch.tensor([0.0, 1.0], requires_grad=True)
    xs = torch.arange(12.0).reshape(6, 2).requires_grad_()
    xla_out, cpu_out, xla_grads, cpu_grads = _run_both(step, init, xs)
    ir = get_tensors_text(list(xla_out))
    assert ir.count("xla::scan(") == 1 and "length=6" in ir
    # The body holds fn's add once, for six iterations; the graph itself holds none.
    main, body = ir.split("\nbody_")
    assert "aten::add" not in main and body.count("aten::add(") == 1
    _close(xla_out, cpu_out)
    assert_gradients_close(xla_grads, cpu_grads)


def test_pytrees_closures_and_none_outputs(dev):
    torch.manual_seed(0)
    weight = torch.randn(3, 3, requires_grad=True)
    xla_weight = weight.detach().to(dev).requires_grad_()

    def make(w):
        def step(carry, x):
            h = torch.tanh(carry["h"] @ w + x["in"] * 2.5)
            return {"h": h, "n": carry["n"] + 1}, (h.sum(-1), None)
        return step

    init = {"h": torch.randn(2, 3, requires_grad=True), "n": torch.zeros((), dtype=torch.int64)}
    xs = {"in": torch.randn(5, 2, 3, requires_grad=True)}
    xla_in = tree_map(lambda t: t.detach().to(dev).requires_grad_(t.requires_grad), (init, xs))
    xla_carry, (xla_y, none) = scan(make(xla_weight), *xla_in)
    cpu_carry, (cpu_y, _) = _loop(make(weight), init, xs)
    assert none is None and xla_carry["n"].dtype == torch.int64 and int(xla_carry["n"]) == 5
    (xla_carry["h"].sum() + xla_y.square().sum()).backward()
    (cpu_carry["h"].sum() + cpu_y.square().sum()).backward()
    _close((xla_carry, xla_y), (cpu_carry, cpu_y))
    # The closed-over weight gets its gradient summed over the iterations, as in the loop.
    got = {"w": xla_weight.grad.cpu(), "h": xla_in[0]["h"].grad.cpu(), "in": xla_in[1]["in"].grad.cpu()}
    assert_gradients_close(got, {"w": weight.grad, "h": init["h"].grad, "in": xs["in"].grad})


def test_rematerialization_recomputes_the_forward_in_the_backward_body(dev):
    def fn(carry, x):
        for _ in range(3):
            carry = torch.sin(carry)
        return carry, torch.sin(x)

    init = torch.randn(4, 4, requires_grad=True)
    xs = torch.randn(5, 4, 4, requires_grad=True)
    texts = []
    for partition in (None, min_cut_rematerialization_partition):
        xla_out, cpu_out, xla_grads, cpu_grads = _run_both(fn, init, xs, partition_fn=partition)
        _close(xla_out, cpu_out)
        assert_gradients_close(xla_grads, cpu_grads)
    for partition in (None, min_cut_rematerialization_partition):
        carry = init.detach().to(dev).requires_grad_()
        c, ys = scan(fn, carry, xs.detach().to(dev), partition_fn=partition)
        (c.sum() + ys.sum()).backward()
        texts.append(get_tensors_text([carry.grad]))
    # Each backward scan's body (the last body printed) computes sin again only when recomputing: the carry's
    # first two sines, whose values the backward of the next one reads (the third's value and y's are not read).
    saved, recomputed = (t.split("\nbody_")[-1] for t in texts)
    assert saved.count("aten::sin(") == 0 and recomputed.count("aten::sin(") == 2


def test_each_iteration_draws_its_own_random_numbers(dev):
    init = torch.zeros(4, device=dev)
    xs = torch.zeros(3, 4, device=dev)
    xladev.manual_seed(3)
    carry, ys = scan(lambda c, x: (c + torch.rand(4, device=dev), torch.rand(4, device=dev)), init, xs)
    after = torch.rand(4, device=dev)
    rows = ys.cpu()
    assert len({tuple(r.tolist()) for r in rows}) == 3 and all(0 <= v < 1 for v in rows.flatten().tolist())
    assert tuple(after.cpu().tolist()) not in {tuple(r.tolist()) for r in rows}
    xladev.manual_seed(3)
    _, again = scan(lambda c, x: (c + torch.rand(4, device=dev), torch.rand(4, device=dev)), init, xs)
    torch.testing.assert_close(again.cpu(), rows, rtol=0, atol=0)  # the seed decides every draw


def test_dropout_backward_uses_the_forwards_masks(dev):
    x = torch.randn(4, 6, device=dev, requires_grad=True)
    xs = torch.ones(5, 4, 6, device=dev)
    carry, ys = scan(lambda c, s: (c, torch.nn.functional.dropout(c * s, 0.5)), x, xs)
    ys.sum().backward()
    kept = (ys.cpu() != 0).float()  # each iteration's own mask, scaled by 1 / (1 - p)
    assert 0 < kept.mean() < 1
    torch.testing.assert_close(x.grad.cpu(), 2.0 * kept.sum(0), rtol=0, atol=0)


def test_scan_layers_matches_the_sequential_model(dev):
    cfg = transformer.Config(layers=3, dropout=0.0, d_model=32, heads=4, seq=8, batch=2)
    torch.manual_seed(1)
    cpu = torch.nn.ModuleList(transformer.Block(cfg) for _ in range(cfg.layers))
    xla = torch.nn.ModuleList(transformer.Block(cfg) for _ in range(cfg.layers))
    xla.load_state_dict(cpu.state_dict())
    xla.to(dev)
    x = torch.randn(cfg.batch, cfg.seq, cfg.d_model)
    want = torch.nn.Sequential(*cpu)(x)
    got = scan_layers(xla, x.to(dev))
    # One layer's attention, in the body (one node: record/attention.py).
    assert get_tensors_text([got]).count("name='scaled_dot_product_attention'") == 1
    want.square().mean().backward()
    got.square().mean().backward()
    xladev.mark_step()  # one graph for the output and every gradient, then plain reads
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)
    assert_gradients_close({n: p.grad.cpu() for n, p in xla.named_parameters()},
                           {n: p.grad for n, p in cpu.named_parameters()})


def test_scan_layers_with_tuple_carry_and_no_layers(dev):
    class Pair(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, a, b):
            return self.linear(a).sin(), self.linear(b).cos()

    torch.manual_seed(2)
    layers = [Pair() for _ in range(3)]
    a, b = torch.randn(4), torch.randn(4)
    want = (a, b)
    for layer in layers:
        want = layer(*want)
    got = scan_layers([layer.to(dev) for layer in layers], (a.to(dev), b.to(dev)))
    _close(got, want)
    x = torch.ones(3, device=dev)
    assert scan_layers([], x) is x


def test_training_steps_compile_once_and_pure_functions_are_traced_once(dev, events):
    torch.manual_seed(3)
    layers = torch.nn.ModuleList(torch.nn.Linear(5, 5) for _ in range(4)).to(dev)
    opt = torch.optim.SGD(layers.parameters(), lr=0.1)
    x = torch.randn(2, 5).to(dev)
    xladev.mark_step()
    events.clear()
    for _ in range(4):
        scan_layers(layers, x, is_layer_pure=True).square().sum().backward()
        opt.step()
        opt.zero_grad()
        xladev.mark_step()
    # A trace is kept per pure function; every step after the first two runs a cached graph.
    assert len(events.of(Compile)) <= 2 and len(events.of(Execute)) == 4
    one_layer = ONE_LAYER_CACHE[(id(None), id(layers[0]))]  # the function scanned for these layers
    assert len(SCAN_COMPUTATION_CACHE[one_layer]) == 1


def test_a_function_reading_a_tensor_from_outside_is_traced_every_call(dev):
    bias = torch.ones(2, device=dev)
    fn = lambda c, x: (c + x + bias, None)  # noqa: E731
    init, xs = torch.zeros(2, device=dev), torch.ones(3, 2, device=dev)
    first, _ = scan(fn, init, xs, is_fn_pure=True)
    bias.fill_(10.0)  # a cached trace would still add the old bias
    second, _ = scan(fn, init, xs, is_fn_pure=True)
    assert fn not in SCAN_COMPUTATION_CACHE
    assert first.tolist() == [6.0, 6.0] and second.tolist() == [33.0, 33.0]


@pytest.mark.parametrize("fn, init, xs, error, words", [
    (1000, lambda d: torch.zeros(2, device=d), lambda d: torch.ones(3, 2, device=d), ValueError, "must be callable"),
    (lambda c, x: (c, x), lambda d: torch.zeros(2, device=d),
     lambda d: (torch.ones(3, 2, device=d), torch.ones(2, 2, device=d)), ValueError, "same leading dimension size"),
    (lambda c, x: (c, x), lambda d: torch.zeros(2, device=d), lambda d: (), ValueError, "empty PyTree"),
    (lambda c, x: (c, x), lambda d: torch.zeros(2), lambda d: torch.ones(3, 2, device=d), ValueError,
     "leaf 0 is a tensor on cpu"),
    (lambda c, x: (c.sum(), x), lambda d: torch.zeros(2, device=d), lambda d: torch.ones(3, 2, device=d), ValueError,
     r"keep the carry's shape and dtype: carry leaf 0 is torch.float32 \[2\] in init but torch.float32 \[\]"),
    (lambda c, x: c + x, lambda d: torch.zeros(2, device=d), lambda d: torch.ones(3, 2, device=d), ValueError,
     "must return a pair"),
    (lambda c, x: (c.add_(x), x), lambda d: torch.zeros(2, device=d),
     lambda d: torch.ones(3, 2, device=d).requires_grad_(), RuntimeError,
     r"changes its carry or its x in place \(an in-place operation such as `acc \+= x`\) while gradients flow"),
    (lambda c, x: (c, x.mul_(2)), lambda d: torch.zeros(2, device=d).requires_grad_(),
     lambda d: torch.ones(3, 2, device=d), RuntimeError, "changes its carry or its x in place"),
    (lambda c, x: (c + x.sum().item(), x), lambda d: torch.zeros(2, device=d), lambda d: torch.ones(3, 2, device=d),
     ExecutionNotAllowedError, "scan traces it once, on placeholder tensors: a graph was about to run"),
])
def test_bad_input_is_refused_with_its_reason(dev, fn, init, xs, error, words):
    with pytest.raises(error, match=words):
        scan(fn, init(dev), xs(dev))


@pytest.mark.parametrize("no_grad", [False, True])
def test_a_function_writing_its_carry_in_place_runs_when_no_gradient_flows(dev, no_grad):
    """PyTorch/XLA's own scan example (`acc += x; return acc, acc`): each write is a new carry value. The caller's
    init is left as it was."""
    def cumsum(acc, x):
        acc += x
        x.mul_(2)  # its x too
        return acc, acc + x

    init, xs = torch.zeros(2), torch.arange(6.0).view(3, 2)
    on_device = init.to(dev)
    with torch.set_grad_enabled(not no_grad):
        final, ys = scan(cumsum, on_device, xs.to(dev))
    want = torch.cumsum(xs, 0)
    assert torch.equal(final.cpu(), want[-1]) and torch.equal(ys.cpu(), want + 2 * xs)
    assert torch.equal(on_device.cpu(), init)


def test_a_function_writing_its_carry_in_place_is_refused_when_a_parameter_needs_its_gradient(dev):
    w = torch.ones(2, device=dev, requires_grad=True)

    def fn(acc, x):
        acc += x * w
        return acc, None

    with pytest.raises(RuntimeError, match="changes its carry or its x in place .* while gradients flow through scan"):
        scan(fn, torch.zeros(2, device=dev), torch.ones(3, 2, device=dev))


def test_a_write_into_an_outside_tensor_is_refused_and_undone(dev):
    outside = torch.zeros(2, device=dev)
    outside.add_(1.0)  # pending, as a tensor mid-step is

    def fn(c, x):
        outside.add_(x)
        return c + outside, None

    with pytest.raises(RuntimeError, match="wrote in place into a float32 tensor of shape \\[2\\] created outside it"):
        scan(fn, torch.zeros(2, device=dev), torch.ones(3, 2, device=dev))
    assert outside.tolist() == [1.0, 1.0]
    xladev.mark_step()  # nothing of the trace is left for a barrier to compute


def test_a_tensor_kept_from_inside_fn_is_refused_when_used(dev):
    kept = []

    def fn(c, x):
        kept.append(c * 2)
        return c + x, None

    scan(fn, torch.zeros(2, device=dev), torch.ones(3, 2, device=dev))
    xladev.mark_step()  # the kept tensor is not part of any step
    with pytest.raises(RuntimeError, match="a graph reads a placeholder of a traced function"):
        kept[0].cpu()


def test_the_debug_tools_see_the_body_in_its_graph(dev, events):
    init, xs = torch.zeros(3, device=dev), torch.ones(4, 3, device=dev)
    xladev.mark_step()
    events.clear()
    carry, ys = scan(lambda c, x: (torch.cos(c) + x, c * 2), init, xs)
    xladev.mark_step()
    [compiled] = events.of(Compile)
    assert compiled.compile_ns > 0 and compiled.memory["temp"] >= 0
    ir = compiled.graph.ir_text()  # what IR dumps, the event log and the TUI show
    graph, body = ir.split("\nbody_")
    assert "xla::scan(" in graph and f"body=body_{body[:16]}" in graph
    assert "aten::cos(" in body and "aten::mul(" in body and body.count("xla::parameter()") >= 2
    hlo = compiled.graph.hlo_text()
    assert "while(" in hlo and hlo.count("cosine(") == 1  # XLA's loop, its body once
