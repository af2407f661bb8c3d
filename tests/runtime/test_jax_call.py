"""call_jax: a jax function as one node of the lazy graph, checked against PyTorch eager on the CPU.

Real compiles and runs throughout: the graphs holding `xla::call_jax` are lowered, compiled by XLA and run on
the CPU device; the counters read are the runtime's own.
"""

from __future__ import annotations

import pytest
import torch

import xladev
import xladev.debug as xd
import xladev.debug.metrics as met
from xladev.runtime.record import jax_call
from xladev.runtime.record.jax_call import CallJaxError, call_jax

jnp = pytest.importorskip("jax.numpy")

# float32 results of a few ops on values of magnitude ~1: a few units in the last place.
F32 = dict(rtol=1e-6, atol=1e-6)


def compiles() -> int:
    return met.counter_value("UncachedCompile") or 0


def test_forward_matches_eager_and_keeps_output_structure(dev):
    torch.manual_seed(0)
    a, b = torch.randn(3, 4), torch.randn(3, 4)

    def f(inputs, scale, *, offset):
        x, y = inputs["a"], inputs["b"]
        return {"sum": x * scale + jnp.sin(y) + offset, "pair": (x @ y.T, (x > 0).astype(jnp.int32))}

    out = call_jax(f, ({"a": a.to(dev), "b": b.to(dev)}, 2.5), {"offset": 1.0})
    assert set(out) == {"sum", "pair"} and isinstance(out["pair"], tuple)
    torch.testing.assert_close(out["sum"].cpu(), a * 2.5 + torch.sin(b) + 1.0, **F32)
    torch.testing.assert_close(out["pair"][0].cpu(), a @ b.T, rtol=1e-5, atol=1e-5)
    assert out["pair"][1].dtype == torch.int32 and out["pair"][1].device.type == "xla"
    assert torch.equal(out["pair"][1].cpu(), (a > 0).to(torch.int32))


def test_static_arguments_are_passed_as_given(dev):
    def f(x, dtype, label, nothing):
        assert label == "ten" and nothing is None  # static leaves arrive as they were given
        return x.astype(dtype) + 10

    out = call_jax(f, (torch.ones(2, device=dev), torch.bfloat16, "ten"), {"nothing": None})
    assert out.dtype == torch.bfloat16  # a torch dtype reaches jax as jax's dtype
    assert torch.equal(out.cpu(), torch.full((2,), 11, dtype=torch.bfloat16))


def test_one_node_named_in_ir_hlo_and_counters(dev):
    met.clear_counters()
    x = torch.randn(4, 4, device=dev)

    def scaled_tanh(v):
        return jnp.tanh(v) * 3

    y = call_jax(scaled_tanh, (x,)) + 1
    ir = xd.get_tensors_text([y])
    assert ir.count("xla::call_jax(") == 1 and "name='scaled_tanh'" in ir
    hlo = xd.get_tensors_hlo([y])
    assert "call_jax.scaled_tanh" in hlo  # the jax function is a named computation of the graph
    assert "to_apply=%call_jax.scaled_tanh" in hlo or "to_apply=call_jax.scaled_tanh" in hlo
    named = call_jax(scaled_tanh, (x,), name="my_kernel")
    assert "name='my_kernel'" in xd.get_tensors_text([named])
    assert met.counter_value("xla::call_jax") == 2


def test_same_function_reuses_the_compiled_graph_across_steps(dev):
    x = torch.randn(5, 3, device=dev)
    xladev.mark_step()

    def body(v):
        return jnp.exp(v) - 1

    def step(fn):
        out = call_jax(fn, (x,)) * 2
        xladev.mark_step()
        return out

    step(body)
    before = compiles()
    for _ in range(3):
        step(body)
    assert compiles() == before
    step(lambda v: jnp.exp(v) - 1)  # another name in the IR: another graph
    before = compiles()
    traced = len(jax_call.SPECIALIZATIONS)
    for _ in range(3):  # a lambda made afresh each step: the same computation, the same graph
        step(lambda v: jnp.exp(v) - 1)
    assert compiles() == before
    # This lambda (code of its own) is traced once, not once per step: its code and captured values are its key.
    assert len(jax_call.SPECIALIZATIONS) == traced + 1


def test_a_closure_over_another_value_computes_with_that_value(dev):
    # The specialization key holds the closure's values: a stale trace would return the first step's scale.
    def make(factor):
        def scaled(v):
            return v * factor

        return scaled

    x = torch.randn(3, device=dev)
    for scale in (1.0, 2.0, 3.0):
        torch.testing.assert_close(call_jax(make(scale), (x,)).cpu(), x.cpu() * scale, **F32)


def test_kernels_that_print_alike_are_different_graphs(dev):
    # Two Pallas kernels differing only in a block's index map have the same jaxpr text: keyed by it, the
    # second would run the first's compiled graph. Keyed by the lowered computation, each computes its own.
    from jax.experimental import pallas as pl
    import jax

    def double(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 2

    def kernel(index_map):
        def run(x):
            return pl.pallas_call(double, grid=(2,), in_specs=[pl.BlockSpec((4,), index_map)],
                                  out_specs=pl.BlockSpec((4,), lambda i: (i,)),
                                  out_shape=jax.ShapeDtypeStruct((8,), jnp.float32))(x)
        return run

    x = torch.arange(8, dtype=torch.float32)
    straight = call_jax(kernel(lambda i: (i,)), (x.to(dev),))
    swapped = call_jax(kernel(lambda i: (1 - i,)), (x.to(dev),))
    assert torch.equal(straight.cpu(), x * 2)
    assert torch.equal(swapped.cpu(), torch.cat([x[4:], x[:4]]) * 2)


def test_backward_matches_eager(dev):
    torch.manual_seed(1)
    a, b = torch.randn(3, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)
    xa, xb = (t.detach().to(dev).requires_grad_() for t in (a, b))

    def f(p, q):
        return jnp.sum(p * jnp.sin(q)), jnp.argmax(p)  # a float output and an integer one

    loss, index = call_jax(f, (xa, xb))
    assert loss.requires_grad and not index.requires_grad
    loss.backward()
    (a * torch.sin(b)).sum().backward()
    torch.testing.assert_close(xa.grad.cpu(), a.grad, **F32)
    torch.testing.assert_close(xb.grad.cpu(), b.grad, **F32)


def test_backward_is_one_call_jax_node(dev):
    x = torch.randn(4, device=dev, requires_grad=True)
    w = torch.randn(4, device=dev)  # needs no gradient: none is computed for it
    out = call_jax(lambda p, q: p * q, (x, w)).sum()
    out.backward()
    ir = xd.get_tensors_text([x.grad])
    assert ir.count("xla::call_jax(") == 1 and "name='<lambda>_backward'" in ir
    assert w.grad is None


def test_second_order_gradient(dev):
    x = torch.randn(5, dtype=torch.float64)
    xd_ = x.to(dev).requires_grad_()
    (g,) = torch.autograd.grad(call_jax(lambda v: jnp.sum(jnp.sin(v)), (xd_,)), xd_, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), xd_)
    torch.testing.assert_close(g.detach().cpu(), torch.cos(x))
    torch.testing.assert_close(gg.cpu(), -torch.sin(x))


def test_eager_mode_runs_the_call_and_its_backward_at_once(dev):
    x = torch.randn(3, device=dev)
    w = torch.randn(3, device=dev, requires_grad=True)
    xladev.mark_step()
    with xladev.config.override(eager_debug_mode=True):
        y = call_jax(lambda a, b: jnp.cos(a) * b, (x, w))
        assert "xla::call_jax" not in xd.get_tensors_text([y])  # already device data
        (grad,) = torch.autograd.grad(y, w, torch.ones_like(y))
        assert "xla::call_jax" not in xd.get_tensors_text([grad])
    torch.testing.assert_close(y.detach().cpu(), torch.cos(x.cpu()) * w.detach().cpu(), **F32)
    torch.testing.assert_close(grad.cpu(), torch.cos(x.cpu()), **F32)


def test_a_cpu_tensor_is_refused_by_name(dev):
    with pytest.raises(TypeError, match=r"call_jax: args\[1\]\['w'\] is a tensor on cpu; .*xla device"):
        call_jax(lambda x, d: x + d["w"], (torch.ones(2, device=dev), {"w": torch.ones(2)}))


def test_an_untraceable_function_is_refused_by_name(dev):
    def branchy(v):
        if v.sum() > 0:  # Python control flow on a traced value
            return v
        return -v

    with pytest.raises(CallJaxError, match=r"call_jax: jax could not trace branchy at inputs \(f32\[3\]\{0\}\): "
                                           r"TracerBoolConversionError"):
        call_jax(branchy, (torch.ones(3, device=dev),))


def test_bad_arguments_are_refused(dev):
    x = torch.ones(2, device=dev)
    with pytest.raises(TypeError, match="call_jax: jax_func must be callable, got int"):
        call_jax(3, (x,))
    with pytest.raises(TypeError, match=r"call_jax: args must be a tuple of arguments, got XlaTensor \(wrap"):
        call_jax(jnp.sin, x)


def test_traced_with_jax_default_32_bit_types_unless_an_input_is_64_bit(dev):
    # PyTorch/XLA's jax runs with 64-bit types off: jnp.arange gives int32 there, and kernels written for
    # that (jax's own Pallas kernels) mix int32 with Python ints. A 64-bit input needs them on.
    def count(v):
        return jnp.arange(v.shape[0]) + v.shape[0], v * 2

    index, doubled = call_jax(count, (torch.ones(3, device=dev),))
    assert index.dtype == torch.int32 and doubled.dtype == torch.float32
    index, doubled = call_jax(count, (torch.ones(3, device=dev, dtype=torch.float64),))
    assert index.dtype == torch.int64 and doubled.dtype == torch.float64
    assert torch.equal(index.cpu(), torch.tensor([3, 4, 5]))


def test_a_traced_wrapper_of_a_device_tensor_is_refused_by_name(dev):
    # Under AOTAutograd (torch.compile, functorch's aot_function) the arguments are wrappers on the xla device.
    from functorch.compile import aot_function, make_boxed_func

    def calls_jax(x):
        return call_jax(jnp.sin, (x,))

    traced = aot_function(calls_jax, fw_compiler=lambda gm, _: make_boxed_func(gm))
    with pytest.raises(TypeError, match=r"call_jax: args\[0\] is a \w+ on xla:0, not a device tensor itself: call_jax "
                                        r"runs on the lazy device's tensors, not inside torch.compile/AOTAutograd"):
        traced(torch.ones(3, device=dev))


def test_the_event_log_names_the_call(dev, tmp_path):
    import json

    from xladev.debug import event_log

    x = torch.randn(2, 2, device=dev)
    xladev.mark_step()

    def logged_fn(v):
        return jnp.sqrt(jnp.abs(v))

    path = event_log.start(str(tmp_path / "run.events.jsonl"))
    try:
        call_jax(logged_fn, (x,)).cpu()
        xladev.mark_step()
    finally:
        event_log.stop()
    records = [json.loads(line) for line in open(path)]
    assert any(r["type"] == "ops" and r["counts"].get("xla::call_jax") == 1 for r in records)
    graphs = [r for r in records if r["type"] == "graph" and "xla::call_jax(" in r["ir"]]
    assert len(graphs) == 1 and "name='logged_fn'" in graphs[0]["ir"]
