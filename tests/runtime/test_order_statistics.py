"""median, nanmedian, kthvalue and mode on `xla` against eager CPU, forward and backward, with no fallback.

These select elements, so values, indices and gradients (a one at the selected index) are exact.
Inputs are float samples without ties unless a test is about ties; NaNs are placed on purpose.
Real compiles and runs, no mocks.
"""

from __future__ import annotations

import pytest
import torch

import xladev
from xladev.events import Fallback

NAN = float("nan")


def distinct(shape, seed=0) -> torch.Tensor:
    """Float values without ties (a random permutation), so the selected index is unique."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for d in shape:
        n *= d
    return (torch.randperm(n, generator=g).float() - n / 2).reshape(shape)


def with_nans(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    flat = x.view(-1)
    flat[1::5] = NAN  # some rows get one NaN, others two
    flat[3::7] = NAN
    return x


def run_both(fn, x: torch.Tensor, events):
    """fn on the device and on the CPU, with input gradients of the sum of its values output."""
    dev = xladev.device()
    results = []
    for device in (dev, "cpu"):
        leaf = x.clone().to(device).requires_grad_()
        out = fn(leaf)
        values = out[0] if isinstance(out, tuple) else out
        torch.where(torch.isnan(values), 0, values).sum().backward()
        xladev.mark_step()
        results.append(([t.detach().cpu() for t in (out if isinstance(out, tuple) else (out,))], leaf.grad.cpu()))
    assert not events.of(Fallback), [e.name for e in events.of(Fallback)]
    return results


def assert_same(got, want):
    (outs_d, grad_d), (outs_c, grad_c) = got, want
    for a, b in zip(outs_d, outs_c):
        assert a.dtype == b.dtype and a.shape == b.shape
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(grad_d, grad_c, rtol=0, atol=0)


CASES = {
    "median": lambda x: torch.median(x),
    "nanmedian": lambda x: torch.nanmedian(x),
    "median_dim": lambda x: torch.median(x, 1),
    "median_dim_keepdim": lambda x: torch.median(x, 0, keepdim=True),
    "nanmedian_dim": lambda x: torch.nanmedian(x, -1),
    "kthvalue": lambda x: torch.kthvalue(x, 3, 1),
    "kthvalue_keepdim": lambda x: torch.kthvalue(x, 1, 0, keepdim=True),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("nans", [False, True], ids=["finite", "nans"])
def test_selection_matches_cpu(name, nans, events):
    x = distinct((4, 6))
    if nans:
        x = with_nans(x)
    got, want = run_both(CASES[name], x, events)
    assert_same(got, want)


def test_all_nan_row_and_even_count(events):
    # An even row length gives the lower middle value. An all-NaN row gives NaN; which of its NaNs
    # the index names is an artefact of the CPU's quickselect (undocumented), so only that it names a
    # NaN is checked, and the values and gradients of the other rows exactly.
    x = torch.tensor([[NAN, NAN, NAN, NAN], [4.0, 1.0, 3.0, 2.0]])
    got, want = run_both(lambda t: torch.median(t, 1), x, events)
    assert_same(got, want)
    (values, indices), grad = got
    (want_values, want_indices), want_grad = want
    torch.testing.assert_close(values, want_values, equal_nan=True)
    assert indices[1] == want_indices[1] and 0 <= indices[0] < 4
    got, want = run_both(lambda t: torch.nanmedian(t, 1), x, events)
    (values, indices), grad = got
    torch.testing.assert_close(values, want[0][0], equal_nan=True)
    assert indices[1] == want[0][1][1] and 0 <= indices[0] < 4
    torch.testing.assert_close(grad[1], want[1][1], rtol=0, atol=0)
    assert torch.median(x[1:].to(xladev.device())).cpu().item() == 2.0


def test_mode_ties_pick_smallest_value_last_index(events):
    # PyTorch documents the smallest of the most frequent values; its index is the last occurrence.
    x = torch.tensor([[3.0, 1.0, 2.0, 1.0, 3.0, 2.0, 5.0],
                      [2.0, 2.0, 7.0, 7.0, 7.0, 2.0, 0.0],
                      [9.0, 8.0, 7.0, 6.0, 5.0, 4.0, 3.0]])
    got, want = run_both(lambda t: torch.mode(t, 1), x, events)
    assert_same(got, want)
    assert got[0][0].tolist() == [1.0, 2.0, 3.0] and got[0][1].tolist() == [3, 5, 6]


def test_scalar_and_integer_inputs(events):
    dev = xladev.device()
    s = torch.tensor(2.5)
    assert torch.median(s.to(dev), 0)[0].cpu().item() == 2.5
    ints = torch.tensor([[5, 3, 9, 1], [2, 8, 6, 4]])
    for fn in (lambda t: torch.median(t, 1), lambda t: torch.kthvalue(t, 2, 1), lambda t: torch.mode(t, 0)):
        got = [v.cpu() for v in fn(ints.to(dev))]
        want = list(fn(ints))
        xladev.mark_step()
        assert [g.tolist() for g in got] == [w.tolist() for w in want]
    assert not events.of(Fallback)
