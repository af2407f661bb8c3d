"""Errors the PyTorch way: async closure failures surface at the next barrier; bad paths fail at start-up."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

import xladev


def test_an_async_closure_error_is_raised_at_the_next_barrier_once():
    x = torch.ones(2, device=xladev.device())
    seen = []

    def fails(t):
        seen.append(t.tolist())
        raise KeyError("closure went wrong")

    xladev.add_step_closure(fails, args=(x * 2,), run_async=True)
    xladev.mark_step()  # runs the closure on the closure thread; the barrier itself succeeds
    deadline = time.monotonic() + 30
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [[2.0, 2.0]]
    with pytest.raises(KeyError, match="closure went wrong"):
        xladev.mark_step()
    xladev.mark_step()  # raised once: the next barrier is clean
    assert (x + 1).tolist() == [2.0, 2.0]


def test_wait_device_ops_also_surfaces_an_async_closure_error():
    xladev.add_step_closure(lambda: 1 / 0, run_async=True)
    xladev.mark_step()
    with pytest.raises(ZeroDivisionError):
        xladev.wait_device_ops()
    xladev.wait_device_ops()


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                          env=dict(os.environ, **env))


@pytest.mark.parametrize("path, reason", [
    ("{tmp}/missing/dir/graph.hlo", "does not exist"),
    ("{tmp}", "it is a directory"),
])
def test_an_unwritable_save_hlo_file_is_a_start_up_error_naming_the_variable(tmp_path, path, reason):
    result = _python("import xladev; xladev.device()", XLA_SAVE_HLO_FILE=path.format(tmp=tmp_path))
    assert result.returncode == 1
    assert "XLA_SAVE_HLO_FILE=" in result.stderr and reason in result.stderr
    assert "Traceback" not in result.stderr  # a user's setting, not a bug: the message alone


def test_a_compile_failure_is_an_xla_compile_error_even_when_the_hlo_cannot_be_saved(tmp_path, monkeypatch):
    from xladev.runtime.lowering.registry import LOWERINGS

    op = torch.ops.aten.cosh.default

    def broken(ctx, x):
        raise ValueError("deliberately broken lowering")

    gone = tmp_path / "removed-after-start"
    monkeypatch.setattr(LOWERINGS[op], "lower", broken)
    with xladev.config.override(save_hlo_file=str(gone / "graph.hlo")):  # the folder does not exist
        bad = torch.cosh(torch.ones(2, device=xladev.device()))
        for _ in range(2):  # the same failure each time, never a FileNotFoundError
            with pytest.raises(xladev.XlaCompileError, match="could not be written") as info:
                bad.cpu()
            assert "deliberately broken lowering" in str(info.value)
    monkeypatch.undo()
    del bad
    xladev.mark_step()  # the failing tensor does not poison later barriers
    assert (torch.ones(2, device=xladev.device()) + 1).tolist() == [2.0, 2.0]


def test_manual_seed_checks_the_device_index():
    with pytest.raises(ValueError, match="xla:5 does not exist"):
        xladev.manual_seed(0, device="xla:5")
