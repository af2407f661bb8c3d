"""The step sampler's pace: it samples one step in N, N chosen from what a sample costs this process."""

from __future__ import annotations

import time

from xladev.runtime.execute import device_memory
from xladev.runtime.execute.step_memory import StepMemory


def _paced(monkeypatch, read) -> int:
    """Ends steps 2 ms apart with `read` as the device's memory read; returns the N chosen after the second."""
    monkeypatch.setattr(device_memory, "busiest_bytes_in_use", read)
    sampler = StepMemory()
    sampler.step_ended(0)
    time.sleep(0.002)
    sampler.step_ended(1)
    return sampler.every


def test_a_sample_descheduled_by_another_process_does_not_slow_the_pace(monkeypatch):
    # Regression: the cost was wall time, so on a loaded machine one sample that waited 10 ms for a core set N to
    # 217 and the growth checks heard no further sample in a 160-step run. Sleeping stands in for the wait: the
    # read takes wall time but none of this process's CPU.
    def waited(devices):
        time.sleep(0.05)
        return 1024

    assert _paced(monkeypatch, waited) == 1


def test_a_sample_that_costs_cpu_time_slows_the_pace(monkeypatch):
    # The cost still counts when it is real: 50 ms of CPU in a ~52 ms step is far over 1 %, so not every step.
    def busy(devices):
        end = time.thread_time() + 0.05
        while time.thread_time() < end:
            pass
        return 1024

    assert _paced(monkeypatch, busy) > 1
