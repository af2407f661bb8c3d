"""The garbage collector's youngest threshold is raised to fit a lazy step, unless the script chose its own.

A lazy step's recorded objects all stay reachable until its barrier; a youngest threshold below their number
makes the collector examine them over and over and move them up to the full collection (collector_threshold.py).
The end-to-end checks count the collector's passes (gc.callbacks) in a fresh process: object counts, not times.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import textwrap

import pytest

from xladev._flags import config
from xladev.runtime.execute import collector_threshold
from xladev.runtime.execute.collector_threshold import ThresholdFit

DEFAULT = collector_threshold._INTERPRETER_DEFAULTS[0]


@pytest.fixture
def collector():
    """The interpreter's default thresholds for the test, and the process's own put back after it."""
    saved, enabled = gc.get_threshold(), gc.isenabled()
    gc.set_threshold(DEFAULT, *saved[1:])
    gc.enable()
    yield
    gc.set_threshold(*saved)
    (gc.enable if enabled else gc.disable)()


def test_the_youngest_threshold_fits_the_largest_step_and_never_falls(collector):
    fit = ThresholdFit()
    middle_oldest = gc.get_threshold()[1:]
    fit.fit(40)  # 400 objects fit below the default already
    assert gc.get_threshold() == (DEFAULT, *middle_oldest)
    fit.fit(900)
    assert gc.get_threshold() == (9000, *middle_oldest)
    fit.fit(300)
    assert gc.get_threshold()[0] == 9000
    fit.fit(10**6)  # bounded: a huge step is examined a few times, as before
    assert gc.get_threshold()[0] == collector_threshold._MOST


def test_a_script_that_chose_its_thresholds_keeps_them(collector):
    gc.set_threshold(1234, 11, 12)
    fit = ThresholdFit()
    fit.fit(5000)
    assert gc.get_threshold() == (1234, 11, 12) and fit.given_up

    gc.set_threshold(DEFAULT, 10, 10)
    fit = ThresholdFit()
    fit.fit(500)
    gc.set_threshold(3000, 10, 10)  # the script's own, after the fit
    fit.fit(5000)
    assert gc.get_threshold()[0] == 3000 and fit.given_up


def test_a_disabled_collector_or_the_flag_off_is_left_alone(collector):
    gc.disable()
    fit = ThresholdFit()
    fit.fit(5000)
    assert gc.get_threshold()[0] == DEFAULT and not gc.isenabled()
    gc.enable()
    with config.override(gc_threshold_fit=False):
        ThresholdFit().fit(5000)
    assert gc.get_threshold()[0] == DEFAULT


_STEPS = textwrap.dedent("""
    import gc, json, torch, xladev
    dev = xladev.device()
    w = torch.randn(32, 32, device=dev, requires_grad=True)
    x = torch.randn(8, 32, device=dev)

    def step():
        h = x
        for _ in range(60):  # a few hundred ops forward and backward, as a small model's step
            h = torch.tanh(h @ w) * 0.5 + h
        h.sum().backward()
        with torch.no_grad():
            w.sub_(0.001 * w.grad)
        w.grad = None
        xladev.mark_step()

    for _ in range(3):
        step()
    xladev.sync(wait=True)
    passes = []
    gc.callbacks.append(lambda phase, info: phase == "start" and passes.append(info["generation"]))
    for _ in range(20):
        step()
    print(json.dumps({"passes": len(passes), "youngest": gc.get_threshold()[0]}))
""")


def _run_steps(**env) -> dict:
    out = subprocess.run([sys.executable, "-c", _STEPS], capture_output=True, text=True, timeout=300,
                         env={**os.environ, **env})
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_lazy_steps_recording_is_no_longer_examined_by_the_collector():
    fitted = _run_steps()
    assert fitted["youngest"] > max(collector_threshold._INTERPRETER_DEFAULTS)
    assert fitted["passes"] == 0
    left = _run_steps(XLADEV_GC_THRESHOLD_FIT="0")
    assert left["youngest"] in collector_threshold._INTERPRETER_DEFAULTS
    assert left["passes"] >= 20  # several passes a step over what it keeps alive
