"""SPMD over 4 local devices: mark_sharding maps to jax shardings, sharded results match unsharded ones.

One child process (CPU_NUM_DEVICES=4; tests/runtime/spmd_script.py) does the work and prints what it saw;
the CPU references are computed there in eager PyTorch, the bounds here (float32 rounding, SGD's steps).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.models.tolerances import U
from tests.parity_bounds import GRAD_REL, PARAM_REL, loss_rtol

SCRIPT = Path(__file__).with_name("spmd_script.py")
REPO = SCRIPT.parents[2]


@pytest.fixture(scope="module")
def seen() -> dict:
    env = dict(os.environ, CPU_NUM_DEVICES="4", PYTHONPATH=str(REPO))
    env.pop("XLA_FLAGS", None)
    done = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_marks_map_to_shardings_in_pytorch_xlas_text(seen):
    assert seen["specs"] == ["{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}",   # rows over "data"
                             "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}",   # columns over "model"
                             "{devices=[2,2]0,1,2,3}"]                             # both
    assert seen["weight_specs"][0] == "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}"
    assert seen["before_use_spmd"].startswith("mark_sharding needs SPMD mode")
    assert "uses a mesh axis twice" in seen["bad_spec"]


def test_shardings_show_in_the_ir_and_the_hlo(seen):
    ir, hlo = seen["ir"], seen["hlo"]
    assert "xla::device_data(), xla_shape=f32[8,6]{1,0}, sharding={devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}" in ir
    assert "xla::custom_sharding(%2)" in ir and "sharding={devices=[2,2]0,1,2,3}" in ir
    assert "parameter(0), sharding={devices=[2,1,2]" in hlo
    assert 'custom_call_target="Sharding", sharding={devices=[2,2]' in hlo


def test_a_sharded_matmul_matches_the_unsharded_one(seen):
    m = seen["matmul"]
    # Six products summed in another order: at most 6 roundings of the largest partial sum, and the output
    # stays split as marked.
    torch.testing.assert_close(torch.tensor(m["got"]), torch.tensor(m["want"]), rtol=0,
                               atol=m["terms"] * U * m["scale"])
    assert m["spec_after"] == "{devices=[2,2]0,1,2,3}"


def test_a_sharded_mlp_trains_as_the_unsharded_one(seen):
    mlp = seen["mlp"]
    for cpu_loss, xla_loss in mlp["losses"]:
        assert xla_loss == pytest.approx(cpu_loss, rel=loss_rtol())
    steps, lr, momentum = 5, 0.1, 0.9
    drift = 2 * steps * lr * GRAD_REL * mlp["grad_scale"] / (1 - momentum)
    for name, want in mlp["cpu_params"].items():
        torch.testing.assert_close(torch.tensor(mlp["params"][name]), torch.tensor(want), rtol=steps * PARAM_REL,
                                   atol=drift, msg=name)


def test_visualize_draws_the_tiles_and_their_devices(seen):
    text = seen["visual"]
    assert "Visualizing {devices=[2,2]0,1,2,3} (showing up to the first two dimensions)" in text
    rows = [line for line in text.splitlines() if "CPU" in line]
    assert rows[:2] == ["│ CPU 0 │ CPU 1 │", "│ CPU 2 │ CPU 3 │"]  # PyTorch/XLA's drawing: a margin round each label
    assert rows[2:] == ["│ CPU [0, 1] │", "│ CPU [2, 3] │", "│ CPU [0, 1, 2, 3] │"]


def test_pytorch_xlas_names_are_xladevs(seen):
    assert seen["alias"] == {"is_spmd": True, "mark_sharding": True, "visualize": True, "mesh": {"data": 4}}


def test_mesh_checks_hold_under_python_dash_o():
    """`python -O` drops assert statements: the mesh's checks are raised, so a bad mesh is refused there too
    (before, Mesh(range(3), (3,)) on one device passed under -O and failed later inside jax)."""
    code = ("import xladev.spmd as xs\n"
            "for args in [(range(3), (3,)), ([0], (1,), ('a', 'b'))]:\n"
            "    try:\n"
            "        xs.Mesh(*args)\n"
            "    except AssertionError as exc:\n"
            "        print('refused:', exc)\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("CPU_NUM_DEVICES", None)
    env.pop("XLA_FLAGS", None)
    done = subprocess.run([sys.executable, "-O", "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == [
        "refused: Number of device IDs (3) must match the global number of devices (1)",
        "refused: Number of axis names (2) must match mesh dimensions (1)"]
