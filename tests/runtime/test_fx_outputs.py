"""An FX graph's outputs come back in the structure the graph returns them, compared with eager CPU.

`extract_compiled_graph` (PyTorch/XLA's dynamo bridge, `torch_xla._dynamo.dynamo_bridge` in the alias) runs
any FX graph as one program; PyTorch/XLA hands back what the graph returns, so a module returning one [3, 4]
tensor gives one [3, 4] tensor, not its three rows. Each graph is checked on its first call (traced), on a
second call with other values (the compiled plan), and through the lazy path (a graph that needs the host).
torch.compile(backend="xladev") goes through AOTAutograd, whose graphs return flat tuples; the structure
above them is TorchDynamo's, checked here too.

Tolerances: the outputs are elementwise ops (one rounding each, compared within 2ε relative) and a matmul
of K=5 terms, within 2·K·ε·(|a|@|b|) elementwise (summation order may differ).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import xladev
from xladev.runtime.dynamo.dynamo_backend import extract_compiled_graph

EPS = torch.finfo(torch.float32).eps


class MatmulOnly(nn.Module):
    def forward(self, a, b):
        return a @ b  # one [3, 4] tensor


class Scalar(nn.Module):
    def forward(self, a, b):
        return (a * 2).sum()  # a 0-dim tensor


class Pair(nn.Module):
    def forward(self, a, b):
        return a @ b, torch.sin(a)


class AsList(nn.Module):
    def forward(self, a, b):
        return [torch.cos(b), a @ b]


class Nested(nn.Module):
    def forward(self, a, b):
        return (a @ b, None), [torch.exp(a), {"twice": b * 2, "none": None}]


class OneTuple(nn.Module):
    def forward(self, a, b):
        return (a @ b,)


class NeedsTheHost(nn.Module):
    def forward(self, a, b):
        return torch.nonzero(a > 0)  # a data-dependent shape: the graph runs op by op


MODULES = [MatmulOnly, Scalar, Pair, AsList, Nested, OneTuple, NeedsTheHost]


def _inputs(seed: int):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 5, generator=g), torch.randn(5, 4, generator=g)


def _assert_same_structure(got, want, a, b, where: str) -> None:
    """got (device) against want (eager CPU): the same containers, the same Nones, values within the bound."""
    assert type(got) is type(want) or (isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor)), \
        f"{where}: {type(got).__name__} returned, eager returns {type(want).__name__}"
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want), f"{where}: {len(got)} items, eager {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            _assert_same_structure(g, w, a, b, f"{where}[{i}]")
    elif isinstance(want, dict):
        assert list(got) == list(want), f"{where}: keys {list(got)}, eager {list(want)}"
        for k in want:
            _assert_same_structure(got[k], want[k], a, b, f"{where}[{k!r}]")
    elif want is None:
        assert got is None, f"{where}: {got!r} where eager returns None"
    else:
        assert got.device.type == "xla", where
        got = got.cpu()
        assert got.shape == want.shape and got.dtype == want.dtype, f"{where}: {got.shape} vs {want.shape}"
        if want.dtype.is_floating_point:
            bound = 2 * EPS * want.abs()
            if want.shape == (3, 4):  # the matmul
                bound = 2 * 5 * EPS * (a.abs() @ b.abs())
            if want.dim() == 0:  # a sum of 15 terms
                bound = 2 * 15 * EPS * (a * 2).abs().sum()
            assert bool(((got - want).abs() <= bound).all()), f"{where}: max error {(got - want).abs().max():.3g}"
        else:
            assert torch.equal(got, want), where


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_extract_compiled_graph_returns_what_the_graph_returns(module):
    dev = xladev.device()
    gm = torch.fx.symbolic_trace(module())
    run = extract_compiled_graph(gm, None)
    for seed in (0, 1):  # the first call traces, the second runs the plan
        a, b = _inputs(seed)
        _assert_same_structure(run(a.to(dev), b.to(dev)), module()(a, b), a, b, f"{module.__name__} call {seed}")


@pytest.mark.parametrize("module", [MatmulOnly, Scalar, Nested], ids=lambda m: m.__name__)
def test_torch_compile_returns_what_the_function_returns(module):
    dev = xladev.device()
    compiled = torch.compile(module(), backend="xladev")
    for seed in (0, 1):
        a, b = _inputs(seed)
        _assert_same_structure(compiled(a.to(dev), b.to(dev)), module()(a, b), a, b, f"{module.__name__} call {seed}")
