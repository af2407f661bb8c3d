"""A jax function given to call_jax, in a real in-process profile: named by the span that traced it."""

from __future__ import annotations

import pytest
import torch

import xladev
import xladev.debug.profiler as xp
from xladev.debug._profiler_common import load_trace, trace_events
from xladev.runtime.record.jax_call import call_jax

jnp = pytest.importorskip("jax.numpy")


def test_tracing_a_jax_function_shows_by_name_without_its_tracer_calls(tmp_path):
    x = torch.randn(16, 16, device=xladev.device())

    def profiled_block(a, b):  # a function of its own: traced inside the capture
        return jnp.tanh(a @ b) + 1

    xp.start_trace(str(tmp_path))
    for _ in range(2):
        (call_jax(profiled_block, (x, x)) * 2).sum().item()
    events = trace_events(load_trace(xp.stop_trace()))

    spans = [e for e in events if e["name"] == "xladev.call_jax profiled_block"]
    assert len(spans) == 1  # traced once, at the first call; the second reuses it
    assert spans[0]["args"]["function"] == "profiled_block"
    assert spans[0]["args"]["site"].startswith("test_call_jax_profile.py:")
    # jnp's functions called on tracers while tracing ran nothing: tidying drops their PjitFunction events.
    start, end = spans[0]["ts"], spans[0]["ts"] + spans[0]["dur"]
    inside = [e for e in events if e.get("tid") == spans[0]["tid"] and start < e["ts"] < end]
    assert not [e for e in inside if e["name"].startswith("PjitFunction(")]
    assert [e for e in events if e["name"] == "xladev.execute"]
