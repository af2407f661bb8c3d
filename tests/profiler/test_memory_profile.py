"""xprof's Memory Profile tool on a capture of real training steps on xla (CPU), read with xprof's own converter:
the timeline is the device's live bytes at each step's end, as `xm.get_memory_info` counts them, and each buffer
names the graph and the user's line that made it."""

from __future__ import annotations

import json

import torch

import xladev
import xladev.debug.profiler as xp
from tests.source_lines import line_of
from xladev.runtime.api.runtime_state import executor
from xladev.runtime.execute import device_memory, profile_memory
from xladev.runtime.graph import backend


def _memory_profile(path: str) -> dict:
    from xprof.convert import raw_to_tool_data

    data, _ = raw_to_tool_data.xspace_to_tool_data([path], "memory_profile", {})
    return json.loads(data)


def _train_with_a_leak(tmp_path, steps: int) -> tuple[dict, list[int]]:
    """Trains a fresh small model, keeping each step's loss in a list (a planted leak), under a capture of `steps`
    steps; returns the tool's profile and the device's bytes in use after each captured step."""
    device = xladev.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 40), torch.nn.Tanh(), torch.nn.Linear(40, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(8, 20).to(device), torch.randn(8, 1).to(device)
    kept = []

    def step() -> None:
        with xp.StepTrace("train", step_num=executor.step):  # the step's barrier
            loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            kept.append(loss.detach())

    step()  # compiled, and the momentum made, before the capture
    xp.start_trace(str(tmp_path))
    used = []
    for _ in range(steps):
        step()
        used.append(device_memory.memory_info(0)["bytes_used"])
    path = xp.stop_trace()
    return _memory_profile(path)["memoryProfilePerAllocator"]["xla:0"], used


def test_the_timeline_is_the_live_bytes_at_each_steps_end(tmp_path):
    profile, used = _train_with_a_leak(tmp_path, steps=4)
    timeline = profile["sampledTimelineSnapshots"]
    at_step_end: dict[int, int] = {}
    for snapshot in timeline:  # in time order: the last of a step is its end
        step = int(snapshot["activityMetadata"]["stepId"])
        at_step_end[step] = int(snapshot["aggregationStats"]["heapAllocatedBytes"])
    assert [at_step_end[s] for s in sorted(at_step_end)] == used
    assert used[1] - used[0] == used[2] - used[1] == used[3] - used[2] == 4  # one kept f32 loss per step
    summary = profile["profileSummary"]
    assert int(summary["peakStats"]["peakBytesInUse"]) == max(used)
    assert int(summary["memoryCapacity"]) == device_memory.limit_bytes(backend.jax_devices()[0]) > max(used)


def test_each_buffer_names_the_graph_and_line_that_made_it(tmp_path):
    profile, _ = _train_with_a_leak(tmp_path, steps=3)
    allocations = [s["activityMetadata"] for s in profile["sampledTimelineSnapshots"]
                   if s["activityMetadata"]["memoryActivity"] == "ALLOCATION"]
    site = f"test_memory_profile.py:{line_of(__file__, '# the step' + chr(39) + 's barrier')} (step)"
    by_graph = [a for a in allocations if a["tfOpName"].startswith("graph ")]
    assert by_graph and all(a["tfOpName"].endswith(f" at {site}") for a in by_graph)
    # The first captured step shows what was live then; each later one adds the kept loss only.
    later = [a for a in allocations if a["stepId"] != allocations[0]["stepId"]]
    assert [(a["allocationBytes"], a["dataType"], a["tensorShape"]) for a in later] == [("4", "float", "[]")] * 2
    shapes = {(a["tensorShape"], a["allocationBytes"]) for a in allocations}
    assert {("[40x20]", "3200"), ("[40]", "160"), ("[1x40]", "160"), ("[8x20]", "640")} <= shapes
    assert {a["tfOpName"] for a in allocations} - {a["tfOpName"] for a in by_graph} <= {
        profile_memory.BEFORE_CAPTURE, profile_memory.OUTSIDE_GRAPHS}
