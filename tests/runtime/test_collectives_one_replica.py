"""Collectives in one process (one replica): lists of tensors, subgroup rendezvous checks, and TorchDynamo.

With one replica PyTorch/XLA reduces nothing (`all_reduce` copies, `reduce_scatter` scales), so these check the
calls' shapes of results, their errors, and that `torch.compile(..., fullgraph=True)` captures the collective as
an op of its graph. What the collectives compute across replicas is checked in real processes
(tests/distributed/test_collectives_job.py).
"""

from __future__ import annotations

import warnings

import pytest
import torch

import xladev


def test_reduce_scatter_of_a_list_returns_a_list_and_writes_outputs(dev):
    inputs = [torch.arange(6.0, device=dev).reshape(2, 3), torch.ones(4, device=dev)]
    results = xladev.reduce_scatter(xladev.REDUCE_SUM, inputs, 0.5, 0, 1, pin_layout=True)
    assert [r.cpu().tolist() for r in results] == [[[0.0, 0.5, 1.0], [1.5, 2.0, 2.5]], [0.5] * 4]
    outputs = [torch.zeros(2, 3, device=dev), torch.zeros(4, device=dev)]
    assert xladev.reduce_scatter(xladev.REDUCE_SUM, inputs, 1.0, 0, 1, output=outputs) is outputs
    assert torch.equal(outputs[0].cpu(), inputs[0].cpu()) and torch.equal(outputs[1].cpu(), inputs[1].cpu())


def test_an_output_of_another_shape_takes_the_results_as_torch_resizes_out(dev):
    # PyTorch/XLA's test_mp_reduce_scatter passes outputs of the input's shape; torch resizes an `out=` tensor.
    x = torch.arange(4.0, device=dev)
    output = torch.zeros(2, 3, device=dev)
    with pytest.warns(UserWarning, match=r"reduce_scatter: an output with one or more elements was resized since it "
                                         r"had shape \[2, 3\], which does not match the required output shape \[4\]"):
        assert xladev.reduce_scatter(xladev.REDUCE_SUM, [x], 1.0, 0, 1, output=[output])[0] is output
    assert output.shape == (4,) and output.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
    empty = torch.empty(0, dtype=torch.int64, device=dev)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an empty output is resized without a word, as in torch
        assert xladev.all_gather(x, output=empty) is empty
    assert empty.dtype == torch.int64 and empty.cpu().tolist() == [0, 1, 2, 3]
    view = torch.zeros(8, device=dev)[:3]
    with pytest.raises(ValueError, match=r"all_gather: output has shape \[3\], the result \[4\]; an output of another "
                                         r"shape is resized, and this one cannot be \(it is a view"):
        xladev.all_gather(x, output=view)


def test_all_gather_of_a_list_returns_a_list(dev):
    inputs = [torch.arange(3.0, device=dev), torch.ones(2, 2, device=dev)]
    results = xladev.all_gather(inputs, dim=0)
    assert [r.cpu().tolist() for r in results] == [[0.0, 1.0, 2.0], [[1.0, 1.0], [1.0, 1.0]]]


def test_list_collectives_name_bad_arguments(dev):
    t = torch.ones(2, device=dev)
    with pytest.raises(TypeError, match=r"reduce_scatter: `input` needs to be a Tensor or a list of Tensors, but given "
                                        r"a list holding int"):
        xladev.reduce_scatter(xladev.REDUCE_SUM, [t, 3], 1.0, 0, 1)
    with pytest.raises(ValueError, match=r"reduce_scatter: `output` length doesn't match `input` length: 1 vs 2"):
        xladev.reduce_scatter(xladev.REDUCE_SUM, [t, t], 1.0, 0, 1, output=[t])
    with pytest.raises(IndexError, match=r"reduce_scatter \(input 1\): scatter_dim=1 is out of range for a tensor of "
                                         r"1 dimension"):
        xladev.reduce_scatter(xladev.REDUCE_SUM, [torch.ones(2, 2, device=dev), t], 1.0, 1, 1)
    with pytest.raises(TypeError, match=r"all_gather takes xla tensors, got a tensor on cpu"):
        xladev.all_gather([t, torch.ones(2)])
    with pytest.raises(ValueError, match=r"reduce_scatter: shard_count=2, but each group has 1 replica"):
        xladev.reduce_scatter(xladev.REDUCE_SUM, [t], 1.0, 0, 2)


def test_rendezvous_of_a_subgroup_checks_its_replicas():
    assert xladev.rendezvous("alone", b"me", replicas=[0]) == [b"me"]
    with pytest.raises(ValueError, match=r"rendezvous: replicas=\[0, 1\] names \[1\], not replicas of this job \(0..0\)"):
        xladev.rendezvous("two", b"", replicas=[0, 1])
    with pytest.raises(ValueError, match=r"replicas=\[0, 0\] names a replica twice"):
        xladev.rendezvous("twice", b"", replicas=[0, 0])
    with pytest.raises(TypeError, match=r"rendezvous: replicas must be a list of replica numbers, not \['a'\]"):
        xladev.rendezvous("bad", b"", replicas=["a"])


def _capturing(graphs: list):
    """A TorchDynamo backend that keeps each captured graph's text, then compiles it with xladev's backend."""
    from xladev.runtime.dynamo.dynamo_backend import xladev_backend

    def backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        return xladev_backend(gm, example_inputs)

    return backend


def test_torch_compile_fullgraph_captures_the_collectives_as_ops(dev):
    graphs: list[str] = []

    def step(x, y):
        total = xladev.all_reduce(xladev.REDUCE_SUM, x * 2)
        gathered = xladev.all_gather(total, dim=0)
        return xladev.reduce_scatter(xladev.REDUCE_SUM, [gathered, y], 0.5, 0, 1)

    x, y = torch.arange(4.0, device=dev), torch.ones(2, device=dev)
    first, second = torch.compile(step, backend=_capturing(graphs), fullgraph=True)(x, y)
    [graph] = graphs  # one graph: no break
    for op in ("torch.ops.xladev.all_reduce", "torch.ops.xladev.all_gather", "torch.ops.xladev.reduce_scatter"):
        assert op in graph, graph
    # One replica: all_reduce and all_gather copy, reduce_scatter applies the scale.
    assert first.cpu().tolist() == [0.0, 1.0, 2.0, 3.0] and second.cpu().tolist() == [0.5, 0.5]


def test_torch_compile_of_the_collective_itself(dev):
    graphs: list[str] = []
    compiled = torch.compile(xladev.all_reduce, backend=_capturing(graphs), fullgraph=True)
    t = torch.arange(3.0, device=dev)
    assert compiled(xladev.REDUCE_SUM, t).cpu().tolist() == [0.0, 1.0, 2.0]
    assert len(graphs) == 1 and "torch.ops.xladev.all_reduce" in graphs[0]


def test_the_collectives_stay_traceable_after_torch_clears_its_rules(dev):
    # dist.init_process_group clears TorchDynamo's table of tracing rules (before any distributed code compiles).
    from torch._dynamo import trace_rules

    torch.compile(lambda t: t + 1, backend="xladev")  # xladev's TorchDynamo support is installed
    trace_rules.clear_lru_cache()
    graphs: list[str] = []
    compiled = torch.compile(xladev.all_gather, backend=_capturing(graphs), fullgraph=True)
    assert compiled(torch.arange(2.0, device=dev)).cpu().tolist() == [0.0, 1.0]
    assert len(graphs) == 1 and "torch.ops.xladev.all_gather" in graphs[0]
