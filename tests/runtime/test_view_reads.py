"""Reading a view of computed device data (`t[i]`, a slice, a transpose, a conjugate) compiles nothing.

The view's ops are replayed on the CPU over the base's host copy. Before, each distinct view compiled a graph of
its own: `for row in t: row.cpu()` compiled one graph per row (PyTorch/XLA's scan_layers test compared two
models' gradients that way, 1,210 compiles). Every value is checked against eager CPU.
"""

from __future__ import annotations

import pytest
import torch

import xladev
from xladev.debug import metrics as met


@pytest.fixture()
def data():
    cpu = torch.randn(16, 6)
    device = (cpu.to(xladev.device()) * 2)
    xladev.mark_step()
    return cpu * 2, device


def _compiles() -> int:
    return int((met.metric_data("CompileTime") or (0,))[0])


def test_reading_each_row_compiles_nothing(data):
    cpu, device = data
    before = _compiles()
    rows = [row.cpu() for row in device]
    items = [device[i, 3].item() for i in range(len(device))]
    assert _compiles() == before
    assert all(torch.equal(a, b) for a, b in zip(rows, cpu)) and items == cpu[:, 3].tolist()


@pytest.mark.parametrize("view", [
    lambda t: t[3], lambda t: t[2:9:3, 1:], lambda t: t.t()[1:4], lambda t: t.view(4, 24)[1],
    lambda t: t.unfold(0, 4, 2)[1], lambda t: t.diagonal(), lambda t: t.expand(2, 16, 6)[1, 5],
    lambda t: t.split(5)[1], lambda t: t.as_strided((3, 2), (7, 1), 2), lambda t: t.unsqueeze(0).permute(2, 0, 1)[4],
])
def test_views_read_as_eager(data, view):
    cpu, device = data
    got = view(device).cpu()
    assert torch.equal(got, view(cpu)) and got.is_contiguous()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int64, torch.bool, torch.complex64])
def test_dtypes_and_conjugate_views(dtype):
    cpu = (torch.randn(5, 4) * 10).to(dtype) if dtype != torch.complex64 else torch.randn(5, 4, dtype=dtype)
    device = cpu.to(xladev.device()) + (False if dtype == torch.bool else 0)
    xladev.mark_step()
    before = _compiles()
    assert torch.equal(device[2].cpu(), cpu[2]) and device[1:3].cpu().dtype == dtype
    if dtype == torch.complex64:
        assert torch.equal(device.conj()[1].cpu(), cpu.conj()[1].resolve_conj())
        assert torch.equal(torch.view_as_real(device)[2].cpu(), torch.view_as_real(cpu)[2])
    assert _compiles() == before


def test_a_written_base_is_read_through_its_graph(data):
    cpu, device = data
    device[0] = 100.0  # the base is now pending: its view is computed on the device, with the write
    assert device[0, 0].item() == 100.0 and device[1, 0].item() == cpu[1, 0].item()
    row = device[5]
    row.mul_(0)  # writing through a view changes the base: later reads see it
    xladev.mark_step()
    assert device[5].cpu().abs().sum().item() == 0 and torch.equal(device[6].cpu(), cpu[6])
