"""Python numbers fed to ops: the dtype PyTorch/XLA gives them, and 0, 1 and -1 as `prim::Constant`s.

PyTorch/XLA (torch_xla/csrc/aten_xla_type.cpp DoBinaryOp, tensor_methods.cpp, xla_graph_executor.cpp
GetIrValueForScalar) types a number by the op's promoted dtype (a float32 tensor times 2.5 gives an f32
input, an int32 tensor plus 3 an s32 one), comparisons and its codegen'd ops keep the number's own
type, and 0/1/-1 become `prim::Constant` nodes instead of inputs (torch::lazy::IsSpecialScalar).
"""

from __future__ import annotations

import itertools
import re
import warnings

import pytest
import torch
import torch.nn as nn

import xladev
import xladev.debug.metrics as met
from xladev import debug
from xladev.events import CacheMiss, Execute, TransferToDevice
from xladev.runtime.graph import scalars
from xladev.runtime.api.introspect import graph_of


def _device_tensor(dtype, dev, n=4):
    t = torch.arange(1, n + 1).to(dtype).to(dev)
    xladev.mark_step()
    return t


def _scalar_inputs(tensor) -> list[str]:
    """The IR shapes of the Python numbers fed to the graph of `tensor`."""
    text = debug.get_tensors_text([tensor])
    return re.findall(r"= (\w+)\[\] xla::device_data\(\)", text)


@pytest.mark.parametrize("dtype, op, expected", [
    (torch.float32, lambda t: t * 2.5, "f32"),
    (torch.float32, lambda t: t + 3, "f32"),          # an int does not promote a float tensor
    (torch.float64, lambda t: t * 2.5, "f64"),
    (torch.bfloat16, lambda t: t * 2.5, "bf16"),
    (torch.float16, lambda t: t - 0.5, "f16"),
    (torch.int32, lambda t: t * 2.5, "f32"),          # int tensor times a float: the default dtype
    (torch.int64, lambda t: t / 2.5, "f32"),
    (torch.int32, lambda t: t + 3, "s32"),            # int tensor and int: the tensor's type
    (torch.int64, lambda t: t * 3, "s64"),
    (torch.uint8, lambda t: t + 3, "u8"),
    (torch.bool, lambda t: t + 2, "s64"),
    (torch.float32, lambda t: 2.5 - t, "f32"),        # rsub
    (torch.bfloat16, lambda t: t.div(0.25), "bf16"),  # div.Tensor, a wrapped number: the promoted type
    (torch.float32, lambda t: torch.clamp(t, min=0.25), "f32"),
    (torch.float32, lambda t: t > 0.5, "f64"),        # comparisons keep the number's own type
    (torch.int32, lambda t: t.eq(3), "s64"),
    (torch.float32, lambda t: torch.addcmul(t, t, t, value=0.5), "f64"),  # codegen'd in PyTorch/XLA
])
def test_a_number_takes_the_dtype_pytorch_xla_gives_it(dev, dtype, op, expected):
    assert _scalar_inputs(op(_device_tensor(dtype, dev))) == [expected]


@pytest.mark.parametrize("dtype, alpha, expected", [
    (torch.float32, 0.5, "f32"), (torch.bfloat16, 0.5, "bf16"), (torch.int32, 2, "s32"), (torch.int64, 2, "s64")])
def test_alpha_takes_the_result_dtype(dev, dtype, alpha, expected):
    x = _device_tensor(dtype, dev)
    assert _scalar_inputs(x.add(x, alpha=alpha)) == [expected]
    assert _scalar_inputs(x.sub(x, alpha=alpha)) == [expected]


def test_a_factory_gives_its_number_the_dtype_asked_for(dev):
    assert _scalar_inputs(torch.full((2,), 0.1, dtype=torch.float64, device=dev)) == ["f64"]
    assert _scalar_inputs(torch.full((2,), 7, dtype=torch.int16, device=dev)) == ["s16"]
    x = _device_tensor(torch.float32, dev)
    assert _scalar_inputs(torch.full_like(x, 0.1, dtype=torch.float64)) == ["f64"]  # never narrower than the result
    assert torch.full_like(x, 0.1, dtype=torch.float64).cpu().tolist() == [0.1] * 4


def test_the_upload_has_the_scalar_dtype_and_size(dev, events):
    x = _device_tensor(torch.float32, dev)
    xb = _device_tensor(torch.bfloat16, dev)
    events.clear()
    (x * 0.6180339887).cpu()      # values no other test uploads: each misses the scalar cache once
    (xb * 0.3819660113).cpu()
    misses = {e.value: e.dtype for e in events.of(CacheMiss)}
    assert misses[0.6180339887] == "torch.float32"
    assert misses[0.3819660113] == "torch.bfloat16"
    assert sorted(e.nbytes for e in events.of(TransferToDevice)) == [2, 4]
    inputs = [i for e in events.of(Execute) for i in e.graph.summary().inputs if i.kind == "scalar"]
    assert sorted(i.dtype for i in inputs) == ["bf16", "f32"]


def test_equal_values_of_one_dtype_are_one_input(dev):
    x = _device_tensor(torch.float32, dev)
    y = (x + 2) * 2.0  # int 2 and float 2.0 are both float32 2.0 here: one input, as PyTorch/XLA's data cache
    assert len(graph_of([y]).inputs) == 2
    assert y.cpu().tolist() == [6.0, 8.0, 10.0, 12.0]


@pytest.mark.parametrize("value, text", [(1, "1"), (1.0, "1"), (0, "0"), (0.0, "0"), (-1, "-1"), (-1.0, "-1"),
                                         (-0.0, "-0")])
def test_special_scalars_are_prim_constants_not_inputs(dev, value, text):
    x = _device_tensor(torch.float32, dev)
    y = x.add(x, alpha=3) * value
    ir = debug.get_tensors_text([y])
    assert re.search(rf"%(\d+) = f32\[\] prim::Constant\(\), xla_shape=f32\[\], value={re.escape(text)}\n"
                     rf"  %\d+ = f32\[4\]\{{0\}} aten::mul\(%\d+, %\1\), xla_shape=f32\[4\]\{{0\}}, ROOT=0\n", ir), ir
    assert [n.op.name for n in graph_of([y]).inputs] == ["xla::device_data", "xla::device_data"]  # x and 3
    torch.testing.assert_close(y.cpu(), (torch.arange(1.0, 5.0) * 4) * value, rtol=0, atol=0)


def test_special_scalars_take_the_op_dtype_and_keep_attributes_apart(dev):
    xi = _device_tensor(torch.int32, dev)
    ir = debug.get_tensors_text([xi.add(xi, alpha=-1) > 0])
    assert "s32[] prim::Constant(), xla_shape=s32[], value=-1" in ir  # alpha: the result dtype
    assert "s64[] prim::Constant(), xla_shape=s64[], value=0" in ir   # a comparison: the number's own type
    assert "alpha=" not in ir and "other=" not in ir
    x = _device_tensor(torch.float32, dev)
    ir = debug.get_tensors_text([torch.sum(x + 1, dim=0)])
    assert "dim=(0,)" in ir  # other baked-in arguments stay attributes
    dot = debug.get_tensors_dot([x + 1])
    assert re.search(r'(node\d+) \[label="prim::Constant\\nf32\[\]\\nvalue=1"\]', dot)


def test_no_special_scalars_feeds_them_as_inputs(dev):
    x = _device_tensor(torch.float32, dev)
    with xladev.config.override(no_special_scalars=True):
        y = x * 1 + 0.0
    assert "prim::Constant" not in debug.get_tensors_text([y])
    assert _scalar_inputs(y) == ["f32", "f32"]
    assert y.cpu().tolist() == [1.0, 2.0, 3.0, 4.0]
    assert "prim::Constant" in debug.get_tensors_text([x * 1])  # the default again after the block


# Ops whose values match eager CPU bit for bit (div and pow differ in the last bit, the number's dtype
# aside: eager divides by a number as a multiplication by its reciprocal, and has its own pow).
_OPS = {
    "mul": lambda t, s: t * s, "add": lambda t, s: t + s, "rsub": lambda t, s: s - t,
    "alpha": lambda t, s: t.add(t, alpha=s), "fmod": torch.fmod, "remainder": torch.remainder,
    "clamp": lambda t, s: torch.clamp(t, max=s), "gt": lambda t, s: t > s,
    "where": lambda t, s: torch.where(t > 0, t, s), "fill": lambda t, s: t.clone().fill_(s),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64, torch.uint8,
                                   torch.bfloat16, torch.float16])
def test_values_equal_eager_cpu(dev, dtype):
    base = torch.randn(33, generator=torch.Generator().manual_seed(3)) * 20
    cpu = (base.abs() if dtype is torch.uint8 else base).to(dtype)
    x = cpu.to(dev)
    half = dtype in (torch.bfloat16, torch.float16)
    # bfloat16 and float16 take numbers they hold exactly, and no alpha: there the graph, like PyTorch/XLA,
    # rounds the number (and alpha * other) to the tensor's dtype where eager computes in float32
    # (2**40 is beyond int32 and uint8: it stays an int64 input, which the graph wraps as eager does)
    numbers = [2.5, -0.75, 3, 2, 7] if half else [0.1, 1 / 3, 2.5, -7.25, 3, 7, 1e-3, 2**40]
    for (name, op), s in itertools.product(_OPS.items(), numbers):
        if (name == "alpha" and (half or isinstance(s, float) and not dtype.is_floating_point)) or \
                (dtype is torch.uint8 and s < 0) or (s == 2**40 and name not in ("mul", "add", "rsub", "gt")):
            continue
        expected, got = op(cpu, s), op(x, s).cpu()
        assert got.dtype == expected.dtype and torch.equal(got, expected), (name, s)


def test_float16_numbers_beyond_its_range_are_infinity_without_warnings(dev):
    x = _device_tensor(torch.float16, dev)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = (x * 1e6).cpu()
    assert torch.isinf(y).all()


def test_a_new_learning_rate_does_not_recompile(dev):
    torch.manual_seed(0)
    model = nn.Linear(5, 7).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    counts = []
    for lr in (0.1, 0.1, 0.05, 0.025, 0.3, 2):  # 2, an int, is a float32 input as 0.3 is: the same graph
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad()
        model(torch.ones(3, 5).to(dev)).pow(2).mean().backward()
        opt.step()
        xladev.mark_step()
        counts.append(met.counter_value("UncachedCompile") or 0)
    assert counts[1:] == [counts[1]] * 5
    for group in opt.param_groups:  # lr 1 makes alpha -1, a constant: a different graph, as in PyTorch/XLA
        group["lr"] = 1
    opt.zero_grad()
    model(torch.ones(3, 5).to(dev)).pow(2).mean().backward()
    opt.step()
    xladev.mark_step()
    assert (met.counter_value("UncachedCompile") or 0) == counts[-1] + 1


@pytest.mark.parametrize("a, b", itertools.product(
    [torch.float32, torch.bfloat16, torch.int32, torch.uint8, torch.bool, torch.float64, torch.complex64], repeat=2))
def test_result_type_is_pytorchs(a, b):
    from xladev.runtime.graph.ir import Meta

    dim, zero = torch.ones(2, dtype=a), torch.ones((), dtype=b)
    assert scalars.result_type([Meta((2,), a), Meta((), b)], []) == torch.result_type(dim, zero)
    for number in (2, 2.5, True):
        assert scalars.result_type([Meta((2,), a)], [type(number)]) == torch.result_type(dim, number)
        assert scalars.result_type([Meta((), b)], [type(number)]) == torch.result_type(zero, number)
