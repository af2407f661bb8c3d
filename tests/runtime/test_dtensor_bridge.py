"""torch's DTensor API on a DeviceMesh of type `xla` over 4 local devices: distribute_tensor and distribute_module
map onto SPMD marks (torch hands them to `torch_xla.distributed.spmd`), and the XLAShardedTensor answers DTensor's
questions (placements, _spec, redistribute).

One child process (CPU_NUM_DEVICES=4; tests/runtime/dtensor_script.py) does the work through the torch_xla alias.
Before, torch's `distribute_tensor` failed at `from torch_xla.distributed.spmd import xla_distribute_tensor`.
Bounds: float32 rounding (parity_bounds) and SGD's step size.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.parity_bounds import GRAD_REL, PARAM_REL, loss_rtol
from tests.runtime.spmd_child import run_on_four_devices

SCRIPT = Path(__file__).with_name("dtensor_script.py")


@pytest.fixture(scope="module")
def seen() -> dict:
    return run_on_four_devices(SCRIPT)


def test_distribute_tensor_splits_a_cpu_tensor_over_the_mesh(seen):
    t = seen["tensor"]
    assert (t["type"], t["spec"], t["device"]) == ("XLAShardedTensor", "{devices=[4,1]0,1,2,3}", "xla:0")
    assert t["values"] and t["doubled"]  # exact: a copy, and a multiplication by 2
    # Ops run on the split tensor as a sharded graph, and come back wrapped and split.
    assert (t["result_type"], t["result_spec"]) == ("XLAShardedTensor", "{devices=[4,1]0,1,2,3}")
    assert t["placements"] == ["S(0)"]
    # Replicate on mesh dimension 0, Shard(1) on dimension 1: columns split in two, each half on two devices.
    assert t["two_d"] == "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"
    assert t["replicated"] == "{replicated}"  # no placements: Replicate on every mesh dimension


def test_a_mark_answers_dtensors_questions(seen):
    v = seen["view"]
    # ("model", None) on a (data, model) mesh: mesh dimension 1 splits tensor dimension 0.
    assert v["placements"] == ["R", "S(0)"]
    assert (v["mesh_type"], v["mesh_shape"], v["names"], v["shape"]) == ("xla", [2, 2], ["data", "model"], [4, 6])
    assert v["unknown"][0] == "ValueError" and "has no mesh_shape" in v["unknown"][1]


def test_redistribute_moves_the_split_in_place_or_on_a_copy(seen):
    r = seen["redistribute"]
    assert r["in_place"] and r["spec"] == "{devices=[1,4]0,1,2,3}" and r["partition_spec"] == [None, 0]
    assert r["copy_is_new"] and r["copy_spec"] == "{devices=[2,1,2]0,2,1,3 last_tile_dim_replicate}"
    assert r["kept"] == "{devices=[1,4]0,1,2,3}"  # the copy's split leaves the original's
    assert r["values"]
    assert r["too_many"] == ["ValueError", "Number of placements (2) must match mesh dimensions (1)"]
    assert r["no_dim"] == ["IndexError", "Shard dimension 2 is out of bounds for a tensor of 2 dimensions"]
    assert r["partial"][0] == "NotImplementedError"


def test_distribute_module_splits_parameters_runs_hooks_and_trains_as_eager(seen):
    m = seen["module"]
    assert m["weight_spec"] == "{devices=[4,1]0,1,2,3}"  # kept through the optimizer's steps
    assert m["hooks"] == [["in", "Sequential", "xla"], ["out", [8, 1]]]
    for cpu, xla in m["losses"]:
        assert abs(xla - cpu) <= loss_rtol() * abs(cpu)
    steps, lr = len(m["losses"]), 0.1
    for name, want in m["params"].items():
        want = torch.tensor(want, dtype=torch.float64)
        bound = steps * (lr * GRAD_REL * m["grad_scale"] + PARAM_REL * float(want.abs().max()))
        torch.testing.assert_close(torch.tensor(m["got"][name], dtype=torch.float64), want, rtol=0, atol=bound)
    assert m["two_arg_warns"] == ["FutureWarning"]
    assert m["four_args"] == ["ValueError", "output_fn should take 3 arguments (module, values, device_mesh), but "
                                            "takes 4"]
    # XLA's auto-sharding: refused, naming why.
    assert m["auto"][0] == "NotImplementedError" and "jax 0.10.2 no longer offers" in m["auto"][1]


def test_what_dtensor_on_xla_cannot_do_is_refused_by_name(seen):
    e = seen["errors"]
    assert e["partial"] == ["ValueError", "Unsupported placement type: Partial (DTensor over SPMD takes Shard and "
                                          "Replicate)"]
    assert e["three"][0] == "AssertionError" and "holds 3 devices, this process has 4" in e["three"][1]
    assert e["length"] == ["ValueError", "1 placement(s) for a DeviceMesh of 2 dimension(s): give one per mesh "
                                         "dimension"]
