"""A jax function given to call_jax, in a real in-process profile: named by the span that traced it."""

from __future__ import annotations

import collections

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


def _steady_profile(tmp_path, step):
    """The events of a profile of two steady runs of `step` (its graphs compiled before the capture).

    Graphs run asynchronously: without the waits, the first run's device work can fall inside the capture, or the
    last one's after it (seen once in a loaded suite: each instruction once instead of twice).
    """
    step()
    xladev.wait_device_ops()
    xp.start_trace(str(tmp_path))
    for _ in range(2):
        step()
    xladev.wait_device_ops()
    return trace_events(load_trace(xp.stop_trace()))


def test_a_steady_step_names_its_jax_calls_on_the_run_and_on_the_backend_ops(tmp_path):
    # Once traced, a jax function runs inside the step's compiled graph: the profile must still say which of
    # the step's time is that function's, on the run's span and on the backend's per-instruction events.
    x = torch.randn(32, 32, device=xladev.device())
    w = torch.randn(32, 32, device=xladev.device(), requires_grad=True)

    def steady_block(a, b):
        return jnp.tanh(a @ b) + 1

    def step():
        w.grad = None
        loss = (call_jax(steady_block, (x, w)) * 2).sum()
        loss.backward()
        xladev.sync()  # one graph: the forward, and the backward's gradient

    events = _steady_profile(tmp_path, step)
    assert not [e for e in events if e["name"].startswith("xladev.call_jax")]  # nothing traced in the capture
    runs = [e for e in events if e["name"] == "xladev.execute" and "jax_calls" in e.get("args", {})]
    assert len(runs) == 2
    assert set(runs[0]["args"]["jax_calls"].split("; ")) == {"steady_block", "steady_block_backward"}
    named = [e for e in events if "jax_call" in e.get("args", {})]
    functions = {name for e in named for name in e["args"]["jax_call"].split("; ")}
    assert functions == {"steady_block", "steady_block_backward"}
    # Each named event is one of the graph's instructions (the backend's own, never the runtime's span), run
    # once per step (the graph has no loop), after the first run began (the backend runs them asynchronously).
    module = runs[0]["args"]["hlo_module"].split("(")[0]
    assert all(e["args"]["hlo_module"] == module and not e["name"].startswith("xladev.") for e in named)
    assert set(collections.Counter(e["name"] for e in named).values()) == {2}
    assert all(e["ts"] >= min(r["ts"] for r in runs) for e in named)


def test_a_pallas_kernel_is_named_in_a_steady_step(tmp_path):
    pl = pytest.importorskip("jax.experimental.pallas")
    from xladev.runtime.record.pallas_kernels import make_kernel_from_pallas

    def scale_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...] * 3.0

    def scale(x):
        return pl.pallas_call(scale_kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype))(x)

    jax = pytest.importorskip("jax")
    kernel = make_kernel_from_pallas(scale, lambda x: [(x.shape, x.dtype)])
    x = torch.randn(16, 16, device=xladev.device())
    events = _steady_profile(tmp_path, lambda: kernel(x).sum().item())
    runs = [e for e in events if e["name"] == "xladev.execute" and "jax_calls" in e.get("args", {})]
    assert [r["args"]["jax_calls"] for r in runs] == ["scale"] * 2
    assert {e["args"]["jax_call"] for e in events if "jax_call" in e.get("args", {})} == {"scale"}
