"""`xladev.debug.allow_execution(False)` makes any graph execution raise with its cause and line; ops
are counted (`xla::<op>`, `LazyTracing`) as they are recorded, so a mid-step report shows them."""

from __future__ import annotations

import pytest
import torch

import xladev
import xladev.debug.metrics as met
from tests.source_lines import line_of
from xladev.runtime.execute.admission import ExecutionNotAllowedError


def test_any_execution_raises_with_its_cause_and_line_and_the_setting_is_restored():
    x = torch.ones(3, device=xladev.device())
    with xladev.debug.allow_execution(False):
        y = x * 2  # recording is fine
        with pytest.raises(ExecutionNotAllowedError) as caught:
            y.sum().item()  # item-line
        with pytest.raises(ExecutionNotAllowedError, match="user torch_xla.sync"):
            xladev.mark_step()
    message = str(caught.value)
    assert f"test_allow_execution.py:{line_of(__file__, 'item-line')}" in message and ".item()" in message
    assert xladev.config.allow_execution
    assert y.sum().item() == 6.0  # nothing was lost: the recorded graph runs once allowed


def test_a_plain_call_sets_it_until_changed():
    x = torch.ones(2, device=xladev.device())
    xladev.debug.allow_execution(False)
    try:
        with pytest.raises(ExecutionNotAllowedError):
            (x + 1).cpu()
    finally:
        xladev.debug.allow_execution(True)
    assert (x + 1).cpu().tolist() == [2.0, 2.0]


def test_op_counters_and_lazy_tracing_appear_as_ops_are_recorded():
    xladev.mark_step()
    met.clear_all()
    x = torch.ones(3, device=xladev.device())
    y = (x + 1) * 3
    assert met.counter_value("xla::add") == 1 and met.counter_value("xla::mul") == 1
    assert met.metric_data("LazyTracing")[0] >= 2
    z = y + 2
    xladev.mark_step()
    assert met.counter_value("xla::add") == 2  # counted once each, mid-step and at the barrier
    assert z.cpu().tolist() == [8.0, 8.0, 8.0]


def test_runtime_start_up_is_not_in_the_first_ops_tracing_sample():
    """torch loads its meta-kernel machinery (torch._dynamo, about a second) on the first meta op; the
    runtime does that when the device is first asked for, so no recorded op's sample carries it."""
    import subprocess
    import sys

    code = ("import sys, torch, xladev\n"
            "before = 'torch._dynamo' in sys.modules\n"
            "xladev.device()\n"
            "print(before, 'torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["False", "True"], out.stdout
