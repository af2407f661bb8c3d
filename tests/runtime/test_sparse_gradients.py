"""`embedding` / `embedding_bag` with `sparse=True` on `xla`: the weight gets eager CPU's gradient, dense.

The device has no sparse tensors, so, as PyTorch/XLA does for embedding_bag, the gradient is the dense
one (runtime/record/sparse_gradients.py), with PyTorch/XLA's warning at the forward call. Before, the backward
raised `SystemError: ... returned NULL without setting an exception` or aborted the process (torch's
Python device guard meets an exception raised on autograd's device thread). The device side runs in a
child process so that such a failure fails the test instead of killing pytest. The failure was certain,
only its form varied: the sparse gradient could never be uploaded, so every run of the child failed.

Tolerances come from float32 rounding, as in test_embedding_ctc.py: a gradient row is a sum of at most
`len(INDICES)` rounded terms of magnitude at most `scale`, summed in another order by XLA's scatter-add
than by ATen's loops, so the two may differ by terms · ε · scale, doubled for the terms' own rounding.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.runtime import sparse_gradient_cases as cases

EPS = torch.finfo(torch.float32).eps
CASES_SCRIPT = Path(cases.__file__)
BAG_WARNING = "XLA does not support EmbeddingBag sparse backward function. Falling back to the dense function."
EMBEDDING_WARNING = "XLA does not support Embedding sparse backward function. Falling back to the dense function."


def _run_child(out: Path, *python_flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *python_flags, str(CASES_SCRIPT), str(out)], capture_output=True,
                          text=True, timeout=300)


@pytest.fixture(scope="module")
def on_device(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("sparse") / "results.pt"
    child = _run_child(out)
    assert child.returncode == 0, f"the device run failed (rc {child.returncode}):\n{child.stderr[-3000:]}"
    return torch.load(out)


def test_sparse_gradients_equal_eager_densified(on_device):
    want = cases.run("cpu")
    got = on_device["results"]
    assert sorted(got) == sorted(want)
    terms = len(cases.INDICES)
    for name, expected in want.items():
        assert len(got[name]) == len(expected), name
        for i, (g, w) in enumerate(zip(got[name], expected)):
            assert g.shape == w.shape and g.dtype == w.dtype, f"{name} gradient {i}"
            scale = max(float(w.abs().max()), 1.0)
            error = float((g.double() - w.double()).abs().max())
            assert error <= 2 * terms * EPS * scale, f"{name} gradient {i}: max error {error:.3g}"


def test_the_device_gradient_is_dense_and_computed_on_the_device(on_device):
    assert on_device["layouts"] == ["torch.strided"]
    assert on_device["fallbacks"] == []  # the lowerings' dense backward, no CPU round trip


def test_the_forward_call_warns_with_pytorch_xla_words(on_device):
    messages = [message for message, _ in on_device["warnings"]]
    # One warning per forward call: five embedding_bag calls and nn.EmbeddingBag, three embedding calls and
    # nn.Embedding.
    assert messages.count(BAG_WARNING) == 6 and messages.count(EMBEDDING_WARNING) == 4
    assert {filename for _, filename in on_device["warnings"]} == {str(CASES_SCRIPT)}


def test_the_warning_as_an_error_is_an_ordinary_exception_at_the_forward_call(tmp_path):
    """`-W error` turns the warning into an exception where the user called the op, never inside the
    backward, where any exception kills the process."""
    child = _run_child(tmp_path / "unused.pt", "-W", "error:XLA does not support:UserWarning")
    assert child.returncode == 1, child.stderr[-3000:]
    assert f"UserWarning: {BAG_WARNING}" in child.stderr
    assert "F.embedding_bag(" in child.stderr  # the traceback ends at the user's forward call
    assert "Fatal Python error" not in child.stderr and "SystemError" not in child.stderr
