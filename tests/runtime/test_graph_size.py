"""Python scalars do not each become a graph input; equal values share one, as PyTorch/XLA's data cache."""

from __future__ import annotations

import torch

import xladev
from xladev.runtime.api.introspect import graph_of


def _scalar_inputs(tensor) -> list:
    return [n.value for n in graph_of([tensor]).inputs if n.op.name == "xla::device_data" and hasattr(n, "value")]


def test_a_chain_of_one_repeated_scalar_has_one_scalar_input():
    x = torch.ones(8, device=xladev.device())
    xladev.mark_step()
    y = x
    for _ in range(1000):
        y = y + 1.5
    assert _scalar_inputs(y) == [1.5]
    assert len(graph_of([y]).inputs) == 2  # x and 1.5
    torch.testing.assert_close(y.cpu(), torch.full((8,), 1501.0))


def test_one_input_per_value_and_dtype():
    x = torch.ones(4, device=xladev.device())
    y = (x + 2) * 2.0 - 2.5 + 2.5 * x  # int 2 and float 2.0 are both float32 2.0 here: one input, as in PyTorch/XLA
    values = _scalar_inputs(y)
    assert sorted(map(repr, values)) == sorted(["2.0", "2.5"])
    torch.testing.assert_close(y.cpu(), (torch.ones(4) + 2) * 2.0 - 2.5 + 2.5 * torch.ones(4))
    n = torch.ones(4, dtype=torch.int64, device=xladev.device())
    z = (n + 2) * x * 2.0  # on an int64 tensor, 2 is an int64 input of its own
    dtypes = sorted((repr(node.value), str(node.meta.dtype)) for node in graph_of([z]).inputs if hasattr(node, "value"))
    assert dtypes == [("2", "torch.int64"), ("2.0", "torch.float32")]
    assert z.cpu().tolist() == [6.0] * 4


def test_a_changing_scalar_reuses_the_compiled_graph():
    import xladev.debug.metrics as met

    x = torch.ones(4, device=xladev.device())
    xladev.mark_step()
    for lr in (0.1, 0.2):  # warm-up: two distinct values compile one graph
        (x * lr + 3.25).cpu()
    before = met.metric_data("CompileTime")[0] if met.metric_data("CompileTime") else 0
    for lr in (0.3, 0.4, 0.5):
        torch.testing.assert_close((x * lr + 3.25).cpu(), torch.full((4,), lr + 3.25))
    after = met.metric_data("CompileTime")[0] if met.metric_data("CompileTime") else 0
    assert after == before
