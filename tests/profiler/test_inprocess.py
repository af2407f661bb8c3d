"""In-process captures around real training steps on xla, read back with xprof's own converter."""

from __future__ import annotations

import collections
import glob
import os

import pytest
import torch

import xladev
import xladev.debug.profiler as xp
from xladev.debug._profiler_common import load_trace, trace_events
from xladev.runtime.api.runtime_state import executor
from tests.profiler.conftest import child_env, run_python


def profiles(logdir) -> list[str]:
    return sorted(glob.glob(os.path.join(str(logdir), "plugins", "profile", "*", "*.xplane.pb")))


class Trainer:
    """A small real model trained on the xla device, one StepTrace per step."""

    def __init__(self, width: int = 16) -> None:
        device = xladev.device()
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(width, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)
        self.x = torch.randn(8, width).to(device)
        self.y = torch.randn(8, 1).to(device)

    def step(self, name: str = "train") -> int:
        number = executor.step
        with xp.StepTrace(name, step_num=number):
            with xp.Trace("forward", phase="fwd"):
                loss = ((self.model(self.x) - self.y) ** 2).mean()
            loss.backward()
            self.optimizer.step()
            self.optimizer.zero_grad()
        return number


def events_of(path: str) -> list[dict]:
    return trace_events(load_trace(path))


def test_start_stop_trace_around_training_steps(tmp_path):
    trainer = Trainer(width=24)  # a fresh shape: its graphs compile inside the trace
    hashes_before = set(executor.by_hash)
    xp.start_trace(str(tmp_path))
    steps = [trainer.step() for _ in range(3)]
    path = xp.stop_trace()

    assert profiles(tmp_path) == [path]
    assert os.path.basename(path).endswith(".xplane.pb") and os.path.getsize(path) > 0
    summary = xp.check_profile(path)
    assert summary.num_events > 0
    events = events_of(path)
    names = {e["name"] for e in events}
    for number in steps:
        assert f"train {number}" in names  # StepTrace shows as `name N`
    assert "forward" in names  # Trace
    forward = [e for e in events if e["name"] == "forward"]
    assert forward[0]["args"]["phase"] == "fwd"  # Trace metadata becomes the span's arguments

    new_hashes = set(executor.by_hash) - hashes_before
    assert new_hashes, "the fresh model should have compiled inside the trace"
    compiles = [e for e in events if e["name"] == "xladev.compile"]
    executes = [e for e in events if e["name"] == "xladev.execute"]
    assert {e["args"]["graph"] for e in compiles} == new_hashes
    assert {e["args"]["graph"] for e in executes} <= set(executor.by_hash)
    assert {int(e["args"]["step"]) for e in executes} == set(steps)
    for e in executes:  # each run once, linked to its HLO module for the graph viewer
        assert e["args"]["hlo_module"].startswith(f"jit_xladev_{e['args']['graph'][:16]}(")
    assert not any(n.startswith("PjitFunction(jit(xladev_") for n in names)  # jaxlib's two annotations of it
    barriers = [e for e in events if e["name"] == "xladev.mark_step"]
    assert {int(e["args"]["step"]) for e in barriers} == set(steps)
    assert all(e["args"]["cause"] == "mark_step when exiting a profiler StepTrace region" for e in barriers)
    tracing_steps = {int(e["args"]["step"]) for e in events if e["name"] == "xladev.tracing"}
    assert set(steps[1:]) <= tracing_steps  # the lazy tracing of each step is on the timeline


def test_profile_steps_captures_exactly_the_window(tmp_path):
    trainer = Trainer()
    trainer.step()  # compile outside the window
    start = executor.step + 2
    window = xp.profile_steps(str(tmp_path), start=start, count=3, announce=False)
    assert not window.started and not window.done
    ran = [trainer.step() for _ in range(7)]
    assert window.done and window.error is None, window.error
    assert window.join(0) == window.path
    assert profiles(tmp_path) == [window.path]
    events = events_of(window.path)
    step_names = {e["name"] for e in events if e["name"].startswith("train ")}
    assert step_names == {f"train {n}" for n in range(start, start + 3)}, (ran, step_names)
    barrier_steps = {int(e["args"]["step"]) for e in events if e["name"] == "xladev.mark_step"}
    assert barrier_steps == {start, start + 1, start + 2}
    executes = {int(e["args"]["step"]) for e in events if e["name"] == "xladev.execute"}
    assert executes == {start, start + 1, start + 2}
    assert not any(e["name"].startswith("PjitFunction(") for e in events)


def test_profile_steps_with_plain_mark_step(tmp_path):
    device = xladev.device()
    x = torch.ones(4, 4).to(device)
    xladev.mark_step()
    start = executor.step + 1
    window = xp.profile_steps(str(tmp_path), start=start, count=2, announce=False)
    for _ in range(4):
        x = x * 2 + 1
        xladev.mark_step()
    assert window.path and window.error is None
    events = events_of(window.path)
    assert {int(e["args"]["step"]) for e in events if e["name"] == "xladev.mark_step"} == {start, start + 1}
    assert {int(e["args"]["step"]) for e in events if e["name"] == "xladev.tracing"} >= {start, start + 1}


def test_trace_session_and_trace_me(tmp_path):
    device = xladev.device()

    @xp.trace_me("scaled_add")
    def scaled_add(a, b):
        return a * 3 + b

    a = torch.ones(5).to(device)
    with xp.trace_session(str(tmp_path)) as session:
        out = scaled_add(a, a)
        xladev.mark_step()
    assert session.path and profiles(tmp_path) == [session.path]
    assert "scaled_add" in {e["name"] for e in events_of(session.path)}
    assert out.cpu().tolist() == [4.0] * 5


def test_trace_names_the_ir_scope():
    device = xladev.device()
    a = torch.ones(3).to(device)
    with xp.Trace("outer"):
        with xp.Trace("inner"):
            b = a + 1
    text = xladev.debug.get_tensors_text([b])
    assert "scope=outer/inner" in text
    xladev.mark_step()


def test_step_trace_on_error_does_not_mark_the_step():
    before = executor.step
    with pytest.raises(ZeroDivisionError):
        with xp.StepTrace("failing", step_num=0):
            1 / 0
    assert executor.step == before
    from xladev.runtime.graph.op_ledger import recorder

    assert not getattr(recorder.scope_stack, "names", [])  # the scope was popped


def test_env_profile_steps_arms_at_import(tmp_path):
    logdir = tmp_path / "envlogs"
    code = (
        "import torch, xladev\n"
        "d = xladev.device(); x = torch.ones(3).to(d)\n"
        "for i in range(6):\n"
        "    x = x + 1; xladev.mark_step()\n"
        "print(x.cpu().tolist())\n"
    )
    result = run_python(code, child_env(XLADEV_PROFILE_STEPS="2:4", XLADEV_PROFILE_DIR=str(logdir)))
    assert result.returncode == 0, result.stderr[-3000:]
    files = profiles(logdir)
    assert len(files) == 1
    assert "steps 2-3 profiled" in result.stderr and f"tensorboard --logdir {logdir}" in result.stderr
    events = events_of(files[0])
    assert {int(e["args"]["step"]) for e in events if e["name"] == "xladev.mark_step"} == {2, 3}


def test_a_device_loader_skips_its_barrier_after_a_step_trace_marked_the_step():
    """As PyTorch/XLA's parallel loader: StepTrace's exit ends the step, so each step is one MarkStep."""
    import xladev.debug.metrics as met

    device = xladev.device()
    data = [torch.full((2,), float(i)) for i in range(5)]
    xladev.mark_step()
    before = met.counter_value("MarkStep") or 0
    outs = []
    for i, x in enumerate(xladev.DeviceLoader(data, device)):
        with xp.StepTrace("train", step_num=i):
            outs.append(x * 2)
    assert (met.counter_value("MarkStep") or 0) - before == 5
    before = met.counter_value("MarkStep")
    for x in xladev.DeviceLoader(data, device):  # without StepTrace the loader marks each step itself
        outs.append(x * 2)
    assert met.counter_value("MarkStep") - before == 5
    assert [o.cpu()[0].item() for o in outs] == [0.0, 2.0, 4.0, 6.0, 8.0] * 2


def test_training_while_a_capture_records_computes_the_same_values(tmp_path):
    """While a capture records, graphs run through jax's annotation-free call path (each run shows once):
    the same executables on the same inputs, donated buffers included, so the same bits."""
    plain, captured = Trainer(width=20), Trainer(width=20)
    plain.step()  # compile outside the capture; then the same steps with and without one
    captured.step()
    for _ in range(3):
        plain.step()
    with xp.trace_session(str(tmp_path)) as session:
        for _ in range(3):
            captured.step()
    assert {e["name"] for e in events_of(session.path)} >= {"xladev.execute", "train " + str(executor.step - 1)}
    for a, b in zip(plain.model.parameters(), captured.model.parameters()):
        assert torch.equal(a.cpu(), b.cpu())


def test_a_jitted_function_of_the_user_shows_once_per_call(tmp_path):
    """jaxlib annotates each call twice; the profile xladev writes keeps one event per call."""
    import jax
    import jax.numpy as jnp

    @jax.jit
    def user_fn(a):
        return jnp.sin(a) * 2

    a = jnp.ones((4, 4))
    user_fn(a).block_until_ready()  # compiled outside the capture
    with xp.trace_session(str(tmp_path)) as session:
        for _ in range(3):
            user_fn(a).block_until_ready()
    names = collections.Counter(e["name"] for e in events_of(session.path))
    assert names["PjitFunction(user_fn)"] == 3, names
