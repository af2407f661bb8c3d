"""The alias's gradient checkpointing, scan and optimization barrier: PyTorch/XLA's names, signatures and errors
over xladev's runtime (the behaviour itself is tested in tests/runtime)."""

from __future__ import annotations

import inspect

import pytest
import torch

from tests.parity_bounds import assert_gradients_close
from xladev.debug import get_tensors_text
from xladev.runtime.record import scan as runtime_scan


def test_checkpoint_is_pytorch_xlas(tx):
    from torch_xla.utils import checkpoint as cp

    assert list(inspect.signature(cp.checkpoint).parameters) == ["function", "args", "use_reentrant", "kwargs"]
    layer = torch.nn.Linear(3, 3).to("xla")
    x = torch.randn(2, 3, device="xla", requires_grad=True)
    cp.checkpoint(layer, x, preserve_rng_state=False).sum().backward()
    assert "xla::optimization_barrier" in get_tensors_text([x.grad])
    with pytest.raises(ValueError, match="^XLA currently does not support use_reentrant==False$"):
        cp.checkpoint(layer, x, use_reentrant=False)
    with pytest.raises(ValueError, match="^Unexpected keyword arguments: scale,shift$"):
        cp.checkpoint(layer, x, scale=1, shift=2)


def test_checkpoint_function_applied_directly_recomputes_behind_a_barrier(tx):
    from torch_xla.utils.checkpoint import CheckpointFunction

    assert issubclass(CheckpointFunction, torch.autograd.Function)
    torch.manual_seed(0)
    layer = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 4))
    x_cpu = torch.randn(3, 4)
    layer(x_cpu).square().sum().backward()
    expected = {name: p.grad.clone() for name, p in layer.named_parameters()}
    layer.zero_grad()
    layer.to("xla")
    x = x_cpu.to("xla").requires_grad_()
    CheckpointFunction.apply(layer, True, x).square().sum().backward()
    ir = get_tensors_text([x.grad])
    assert ir.count("aten::tanh(") == 2  # the forward's, and the backward's recomputation
    assert "xla::optimization_barrier" in ir
    assert_gradients_close({name: p.grad.cpu() for name, p in layer.named_parameters()}, expected)


def test_scan_and_scan_layers_are_xladevs(tx):
    import torch_xla.experimental as xe
    from functorch.compile import default_partition
    from torch_xla.experimental.scan import _SCAN_COMPUTATION_CACHE, scan, tree_flatten_none, value_and_grad_partitioned
    from torch_xla.experimental.scan_layers import _ONE_LAYER_CACHE, scan_layers

    assert xe.scan.scan is scan and _SCAN_COMPUTATION_CACHE is runtime_scan.SCAN_COMPUTATION_CACHE
    assert _ONE_LAYER_CACHE is runtime_scan.ONE_LAYER_CACHE
    assert list(inspect.signature(scan).parameters) == ["fn", "init", "xs", "partition_fn", "is_fn_pure"]
    assert list(inspect.signature(scan_layers).parameters) == ["layers", "input_data", "partition_fn",
                                                               "is_layer_pure"]
    carry, ys = scan(lambda c, x: (c + x, c), torch.zeros(2, device="xla"), torch.ones(3, 2, device="xla"),
                     partition_fn=default_partition)
    assert carry.tolist() == [3.0, 3.0] and ys.tolist() == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    layers = [torch.nn.Linear(2, 2).to("xla") for _ in range(2)]
    assert scan_layers(layers, carry).shape == (2,)
    flat, unflatten = tree_flatten_none(((1, None), None, 2))
    assert flat == [1, 2] and unflatten([3, 4]) == ((3, None), None, 4)
    with pytest.raises(NotImplementedError, match="value_and_grad_partitioned is not supported by xladev"):
        value_and_grad_partitioned(lambda c, x: (c, x), carry, ys)


def test_other_experimental_names_are_still_refused(tx):
    with pytest.raises(ModuleNotFoundError, match="torch_xla.experimental.stablehlo_custom_call is not supported by "
                                                  "xladev: the other experimental APIs"):
        import torch_xla.experimental.stablehlo_custom_call  # noqa: F401
