"""SPMD on 4 local devices where a split does not divide the shape (PyTorch/XLA pads the last pieces), a tensor
updated in place keeping its sharding, and input sharding through `xs.ShardingSpec` in the loaders.

One child process (CPU_NUM_DEVICES=4; tests/runtime/uneven_sharding_script.py) does the work through the torch_xla
alias and prints what it saw. Before these, a split of 5 elements over 4 devices raised jax's IndivisibleError,
and `input_sharding` was refused. Bounds: float32 rounding (parity_bounds) and SGD's step size.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.parity_bounds import GRAD_REL, PARAM_REL, loss_rtol
from tests.runtime.spmd_child import run_on_four_devices

SCRIPT = Path(__file__).with_name("uneven_sharding_script.py")


@pytest.fixture(scope="module")
def seen() -> dict:
    return run_on_four_devices(SCRIPT)


def test_an_uneven_split_pads_the_last_pieces_as_pytorch_xla_does(seen):
    v = seen["vector"]
    assert (v["spec"], v["type"]) == ("{devices=[4]0,1,2,3}", "TILED")
    # 5 elements over 4 devices: pieces of ceil(5/4) = 2, the third holding one value and a zero, the last
    # only padding (an empty slice of the tensor).
    assert [s["indices"] for s in v["shards"]] == [[[0, 2, 1]], [[2, 4, 1]], [[4, 5, 1]], [[5, 5, 1]]]
    assert [s["data"] for s in v["shards"]] == [[0, 1], [2, 3], [4, 0], [0, 0]]
    assert [s["unpadded"] for s in v["shards"]] == [[0, 1], [2, 3], [4], []]
    assert [s["device"] for s in v["shards"]] == ["xla:0", "xla:1", "xla:2", "xla:3"]
    assert {s["replica"] for s in v["shards"]} == {0}
    # Each graph that reads it constrains it to the split (XLA's partitioner splits the work), and the
    # values are exact (small integers times 3).
    assert v["hlo_constrains"]
    assert v["times3"] == [0, 3, 6, 9, 12]
    assert v["spec_after_sync"] == v["spec"]
    # Pieces written back (padding cut off) make the whole value again, still split the same way.
    assert v["loaded"] == [[10, 11, 12, 13, 14], v["spec"], [[10, 11], [12, 13], [14, 0], [0, 0]]]
    assert v["load_short"] == ["RuntimeError", "load_local_shards_: no shard for xla:3: give one for each of the 4 "
                                               "devices"]


def test_an_uneven_split_with_a_replicated_mesh_axis_numbers_its_copies(seen):
    r = seen["rows"]
    assert r["spec"] == "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"
    rows = torch.arange(15.0).reshape(3, 5)
    assert [s["replica"] for s in r["shards"]] == [0, 1, 0, 1]
    for s in r["shards"]:
        (r0, r1, _), (c0, c1, _) = s["indices"]
        assert s["unpadded"] == rows[r0:r1, c0:c1].tolist()
        assert torch.tensor(s["data"]).shape == (2, 5)  # ceil(3/2) rows, zero-padded
    assert r["shards"][2]["data"][1] == [0.0] * 5


def test_a_pending_value_marked_unevenly_is_computed_and_keeps_its_mark(seen):
    p = seen["pending"]
    assert p["spec"] == "{devices=[2,2]0,1,2,3}"
    assert p["value"] == p["want"]  # a multiplication by 2 is exact
    want = torch.tensor(p["want"])
    for s in p["shards"]:
        (r0, r1, _), (c0, c1, _) = s["indices"]
        assert s["unpadded"] == want[r0:r1, c0:c1].tolist()
        assert torch.tensor(s["data"]).shape == (2, 3)


def test_a_tensor_updated_in_place_keeps_its_sharding(seen):
    i = seen["inplace"]
    assert i["marked"] == i["pending"] == i["synced"] == "{devices=[2,2]0,1,2,3}"
    # The in-place result is constrained to the split in the graph (PyTorch/XLA's Sharding custom call), so
    # the buffer comes back split: 8x4 over a 2x2 mesh is 4x2 per device.
    assert 'custom_call_target="Sharding", sharding={devices=[2,2]' in i["hlo"].split("ROOT", 1)[1]
    assert i["split_buffer"] == [4, 2]
    # cleared, then updated and synced: a graph's output left whole, `{replicated}` as PyTorch/XLA reports it
    assert i["cleared"] == "{replicated}"


def test_training_on_batches_that_do_not_split_evenly_matches_eager(seen):
    """Batches of 6 rows over 4 devices through MpDeviceLoader's input_sharding, and a 10-row weight split over
    4: three SGD steps against eager CPU. Rounding: each gradient within GRAD_REL of the model's gradient
    scale G, so each step moves a weight by at most lr·GRAD_REL·G more, plus PARAM_REL of it per step."""
    t = seen["train"]
    assert t["batch_specs"] == [["{devices=[4,1]0,1,2,3}"] * 2] * 3
    assert t["weight_spec"] == "{devices=[4,1]0,1,2,3}"  # kept through the optimizer's in-place updates
    for cpu, xla in t["losses"]:
        assert abs(xla - cpu) <= loss_rtol() * abs(cpu)
    steps, lr = len(t["losses"]), 0.1
    for name, want in t["params"].items():
        want = torch.tensor(want, dtype=torch.float64)
        bound = steps * (lr * GRAD_REL * t["grad_scale"] + PARAM_REL * float(want.abs().max()))
        torch.testing.assert_close(torch.tensor(t["got"][name], dtype=torch.float64), want, rtol=0, atol=bound)


def test_input_sharding_marks_each_batch_as_a_sharding_spec_says(seen):
    i = seen["input"]
    split = "{devices=[2,1,1,2]0,1,2,3 last_tile_dim_replicate}"
    # The 3-D batch takes the spec; the 1-D labels (another rank) stay replicated, as PyTorch/XLA's loader.
    assert i["batch"] == [split, ""]
    assert i["explicit"] == i["xla_spec"] == split
    assert i["can_apply"] == [True, False] and i["not_applicable"] is None
    assert i["sent"] == [split, 48.0]
    assert i["by_key"] == {"x": split, "y": "{devices=[4]0,1,2,3}"}


def test_input_sharding_mistakes_get_clear_errors(seen):
    i = seen["input"]
    assert i["missing_key"] == ["KeyError", "\"Keys: ['y'] are missing from input_sharding.\""]
    assert i["not_a_dict"][0] == "ValueError" and "must be a dict too; got a tuple" in i["not_a_dict"][1]
    assert i["minibatch"][0] == "RuntimeError"
    assert i["minibatch"][1].startswith("When minibatch is configured, the per-host batch size must be divisible "
                                        "by local runtime device count.")
    assert "torch.Size([3, 3, 2])" in i["minibatch"][1] and "local_runtime_device_count = 4" in i["minibatch"][1]
    assert i["bad_axis"] == ["ValueError", "mark_sharding: the mesh has no axis 'batch' (it has data, model)"]
    assert i["not_a_spec"][0] == "TypeError" and "got tuple" in i["not_a_spec"][1]


def test_a_checkpoint_of_an_uneven_split_loads_into_another_uneven_split(seen):
    # Saved from 7 rows over 4 devices, loaded into 9 columns over 4: before, the load waited for the padding's
    # elements too, never wrote the pieces, and left zeros.
    assert seen["checkpoint"] == {"equal": True, "spec": "{devices=[1,4]0,1,2,3}"}


def test_a_sharded_tensor_is_made_from_cpu_pieces_as_checkpoint_loaders_make_it(seen):
    f = seen["from_shards"]
    assert f["tiled"] == [list(range(16)), "{devices=[4]0,1,2,3}"]
    # 13 of the 16 values: the last piece's 3 are padding (less than a piece, PyTorch/XLA's rule).
    assert f["trimmed"] == [list(range(13)), "{devices=[4]0,1,2,3}"]
    assert f["replicated"] == [7.0]  # a replicated sharding takes pieces of any rank
    assert f["remade"] and f["remade_spec"] == "{devices=[2,2]0,1,2,3}"  # an uneven tensor's own padded pieces
    assert f["too_few"] == ["RuntimeError", "_global_tensor_from_cpu_shards: 3 shards for 4 devices: give one per "
                                            "device, in device order"]
    for case in ("too_big", "too_small", "replicated_smaller"):  # 17 > 16; 12 leaves a piece of padding only
        assert f[case][0] == "RuntimeError" and "cannot make a tensor of shape" in f[case][1], f[case]


def test_an_uneven_result_beside_other_outputs_compiles_and_keeps_its_mark(seen):
    """A graph whose outputs include a result split unevenly: it comes back whole on each device, said in the
    graph (jax could not name XLA's split of it beside the other outputs, and the compile failed)."""
    b = seen["beside"]
    assert b["value"] == [[3.0, 3.0], [3.0, 3.0]] and b["spec"] == "{devices=[1,4]0,1,2,3}"
