"""The debug tools see SPMD shardings (issue 36, point 6): a graph compiled for SPMD keeps, in its compile record,
each input's and output's shape, sharding and bytes on one device; PT_XLA_DEBUG's Compilation Analysis lists them
in a `Sharding:` section, and the TUI's graph view shows them.

One child process (tests/runtime/sharding_layout_script.py) trains two steps on 4 CPU devices, its weight split
by rows over the mesh; the figures are checked against the shapes and against XLA's own memory analysis of the
partitioned program (which is one device's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from xladev.schema.record_wording import layout_lines
from xladev_tui.run_model import model_from_lines
from xladev_tui.widgets.graphs import detail_text

SCRIPT = Path(__file__).with_name("sharding_layout_script.py")
REPO = SCRIPT.parents[2]
SPLIT = "{devices=[4,1]0,1,2,3}"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("sharding_layout")
    env = dict(os.environ, CPU_NUM_DEVICES="4", PYTHONPATH=str(REPO), PT_XLA_DEBUG_LEVEL="2",
               PT_XLA_DEBUG_FILE=str(folder / "debug.txt"), XLADEV_EVENT_LOG=str(folder / "run.events.jsonl"))
    for name in ("XLA_FLAGS", "XLA_USE_SPMD"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    lines = (folder / "run.events.jsonl").read_text().splitlines()
    return {"lines": lines, "compiles": [json.loads(l) for l in lines if json.loads(l)["type"] == "compile"],
            "debug": (folder / "debug.txt").read_text()}


def test_the_compile_record_keeps_each_input_and_outputs_sharding_and_bytes_per_device(run):
    [compile_record] = run["compiles"]  # one step graph, compiled once, run twice
    layout = compile_record["shardings"]
    # The weight [16, 8] split by rows over 4 devices: 4 rows of 8 floats each; the batch and the learning rate
    # whole on each device.
    assert layout["inputs"] == [{"shape": "f32[16,8]", "sharding": SPLIT, "device_bytes": 4 * 8 * 4},
                                {"shape": "f32[4,8]", "sharding": "{replicated}", "device_bytes": 4 * 8 * 4},
                                {"shape": "f32[]", "sharding": "{replicated}", "device_bytes": 4}]
    # The updated weight stays split as it came in; the loss is whole on each device.
    assert layout["outputs"][0] == {"shape": "f32[16,8]", "sharding": SPLIT, "device_bytes": 128}
    assert {"shape": "f32[]", "sharding": "{replicated}", "device_bytes": 4} in layout["outputs"]
    # XLA's memory analysis of the partitioned program is one device's: its arguments are exactly the inputs'
    # bytes per device; its outputs, the outputs' plus at most a pointer per output (the output tuple's table).
    memory = compile_record["memory"]
    assert memory["argument"] == sum(e["device_bytes"] for e in layout["inputs"])
    outputs = sum(e["device_bytes"] for e in layout["outputs"])
    assert outputs <= memory["output"] <= outputs + 8 * len(layout["outputs"])


def test_pt_xla_debug_lists_the_shardings_in_the_compilation_analysis(run):
    debug = run["debug"]
    block = debug[debug.index("Compilation Analysis: Sharding:"):debug.index("Compilation Analysis: Graph Info:")]
    lines = [line.removeprefix("Compilation Analysis:   ") for line in block.splitlines()[1:]]
    assert lines == layout_lines(run["compiles"][0]["shardings"])
    assert lines[0] == f"input 0: f32[16,8] {SPLIT}, 128.00B per device"
    assert lines[-1].startswith("per device: inputs 260.00B, outputs ")
    # Executions of the cached graph repeat no layout: it belongs to the compile.
    assert debug.count("Sharding:") == 1


def test_the_tui_graph_view_shows_the_shardings(run):
    model = model_from_lines(run["lines"])
    [graph] = model.snapshot().graphs
    assert graph.shardings == tuple(layout_lines(run["compiles"][0]["shardings"]))
    text = detail_text(graph).plain
    assert f"sharding over the devices:\n  input 0: f32[16,8] {SPLIT}, 128.00B per device\n" in text


def test_layout_lines_count_what_they_do_not_list():
    entry = {"shape": "f32[2]", "sharding": "{replicated}", "device_bytes": 8}
    split = {"shape": "f32[8]", "sharding": "{devices=[2]0,1}", "device_bytes": 16}
    lines = layout_lines({"inputs": [entry] * 14 + [split], "outputs": []}, limit=3)
    # The split input first though it came last; the rest counted; the total covers them all.
    assert lines == ["input 14: f32[8] {devices=[2]0,1}, 16.00B per device", "input 0: f32[2] {replicated}, "
                     "8.00B per device", "input 1: f32[2] {replicated}, 8.00B per device",
                     "... and 12 more inputs", "per device: inputs 128.00B, outputs 0.00B"]
