"""PyTorch/XLA's SPMD API on 4 local devices: XLAShardedTensor and its shards, Mesh and HybridMesh's checks,
mark_sharding_with_gradients and xla_patched_nn_linear_forward, against eager CPU values.

One child process (CPU_NUM_DEVICES=4; tests/runtime/spmd_api_script.py) does the work through the torch_xla
alias and prints what it saw; the bounds here come from float32 rounding (n terms summed in another order
differ by at most n·u times the sum of their magnitudes).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.models.tolerances import U
from tests.parity_bounds import GRAD_REL, PARAM_REL, loss_rtol
from tests.runtime.spmd_child import run_on_four_devices
from xladev.dumps.dump_file import read_records

SCRIPT = Path(__file__).with_name("spmd_api_script.py")


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("spmd_api") / "graphs.txt"


@pytest.fixture(scope="module")
def seen(dump) -> dict:
    return run_on_four_devices(SCRIPT, XLA_SAVE_TENSORS_FILE=str(dump), XLA_SAVE_TENSORS_FMT="hlo")


def close(got, want, atol):
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=0, atol=atol)


def test_mark_sharding_returns_the_wrapper_of_the_tensor(seen):
    w = seen["wrapper"]
    assert w["type"] == "XLAShardedTensor" and w["is_global"] and w["repr"] == "XLAShardedTensor"
    assert w["is_dtensor"]  # as PyTorch/XLA's: code asking isinstance(x, DTensor) finds one
    assert w["spec"] == w["spec_of_t"] == w["v1"] == "{devices=[2,2]0,1,2,3}"
    assert (w["shape"], w["mesh_shape"], w["partition_spec"]) == ([8, 4], [2, 2], [0, 1])
    assert (w["type_tiled"], w["type_int"]) == ("TILED", 3)
    assert w["cleared"] == ["", None]
    # PyTorch/XLA's block for data split over the devices.
    assert ("IR: None\nXLAShardedData: \n  Data Device: SPMD:0\n  Data Shape: f32[8,4]\n"
            "  OpSharding: {devices=[2,2]0,1,2,3}\n  NumShards: 4\n") in w["debug_info"]
    assert (w["type_replicated"], w["spec_replicated"]) == ("REPLICATED", "{replicated}")
    assert w["type_partial"] == "PARTIAL"
    assert seen["env"] == "1"


def test_a_run_over_every_device_is_timed_as_execute_replicated(seen):
    m = seen["metrics"]
    assert m["replicated"][0] == 1 and m["replicated"][1] > 0 and m["counter"] == 1
    assert m["plain"] is None


def _expect_shards(shards, whole, pieces):
    """Each shard is the CPU tensor's slice at its indices, on xla:i in order."""
    whole = torch.tensor(whole)
    assert [s["device"] for s in shards] == [f"xla:{i}" for i in range(4)]
    for s, (indices, replica) in zip(shards, pieces):
        assert s["on_cpu"] and s["replica"] == replica
        assert s["indices"] == indices
        index = tuple(slice(a, b) for a, b, _ in indices) if indices is not None else Ellipsis
        assert torch.equal(torch.tensor(s["data"]), whole[index])
        assert s["unpadded"] == s["data"]


def test_local_shards_are_the_pieces_of_the_cpu_tensor(seen):
    sh = seen["shards"]
    _expect_shards(sh["tiled"], sh["vector"], [([[2 * i, 2 * i + 2, 1]], 0) for i in range(4)])
    _expect_shards(sh["replicated"], sh["vector"], [(None, i) for i in range(4)])
    # (None, 1) over a 2x2 mesh: columns split over "model", each piece held by the two rows of the mesh.
    _expect_shards(sh["partial"], sh["matrix"], [([[0, 8, 1], [4 * (i % 2), 4 * (i % 2) + 4, 1]], i // 2)
                                                 for i in range(4)])
    doubled = [2 * v for v in sh["vector"]]
    _expect_shards(sh["pending"], doubled, [([[2 * i, 2 * i + 2, 1]], 0) for i in range(4)])


def test_load_local_shards_writes_the_pieces_back_and_refuses_bad_ones(seen):
    load = seen["load"]
    assert load["got"] == load["want"] and load["spec"] == "{devices=[4]0,1,2,3}"
    assert load["missing"] == ["RuntimeError", "load_local_shards_: no shard for xla:3: give one for each of the "
                                               "4 devices"]
    assert load["shape"][0] == "RuntimeError" and "has shape (4,), the device's piece (2,)" in load["shape"][1]
    assert load["replicated"][0] == "RuntimeError" and "replicated" in load["replicated"][1]


def test_a_mesh_of_reordered_devices_names_where_the_data_is(seen):
    # Regression: the text named the mesh's positions (0,1,2,3), not its devices (3,2,1,0).
    flipped = seen["flipped"]
    assert flipped["spec"] == "{devices=[1,4]3,2,1,0}"
    matrix = torch.tensor(seen["shards"]["matrix"])
    for i, s in enumerate(flipped["shards"]):
        columns = slice(2 * (3 - i), 2 * (3 - i) + 2)  # xla:i holds the (3-i)th column block
        assert s["indices"] == [[0, 8, 1], [columns.start, columns.stop, 1]]
        assert torch.equal(torch.tensor(s["data"]), matrix[:, columns])


def test_ops_on_the_wrapper_come_back_wrapped_and_match_the_cpu(seen):
    # Regression: the device's dispatcher took ops with a wrapper operand ("found at least two devices,
    # xla:0 and xla:0"), and an unmarked layer after a 2x2-mesh mark failed to compile.
    ops = seen["ops"]
    assert (ops["type"], ops["cpu_type"], ops["plain_type"]) == ("XLAShardedTensor", "XLAShardedTensor", "XlaTensor")
    assert ops["in_repr"] and not ops["plain_repr"]
    close(ops["got"], ops["want"], ops["terms"] * U * ops["scale"])


def test_mesh_checks_assert_as_pytorch_xla_does(seen):
    mesh = seen["mesh"]
    assert mesh["ids_type"] == "ndarray" and mesh["logical"] == [[0, 1], [2, 3]]
    assert mesh["shape"] == [["data", 2], ["model", 2]] and mesh["numbered"] == [[0, 4]] and mesh["size"] == 4
    assert mesh["axis_idx"] == [1, None] and mesh["roundtrip"] and mesh["from_bad"]
    assert mesh["too_few"] == ["AssertionError", "Number of device IDs (2) must match the global number of "
                                                 "devices (4)"]
    assert mesh["bad_shape"] == ["AssertionError", "Number of device IDs (4) must match mesh size (6)"]
    assert mesh["names"] == ["AssertionError", "Number of axis names (1) must match mesh dimensions (2)"]
    assert mesh["unique_names"] == ["AssertionError", "Axis names must be unique, got: ('a', 'a')"]
    assert mesh["repeated_ids"][0] == "AssertionError" and "Device IDs must be unique" in mesh["repeated_ids"][1]
    assert mesh["by_name_unnamed"] == ["ValueError", "mark_sharding: the mesh has no axis 'x' (it has numbered "
                                                     "axes only)"]


def test_hybrid_mesh_is_one_slice(seen):
    hybrid = seen["hybrid"]
    assert hybrid["shape"] == [["dcn", 1], ["ici", 4]] and hybrid["ids"] == [0, 1, 2, 3] and hybrid["global"]
    assert hybrid["multislice"] == ["ValueError", "Invalid dcn_mesh_shape for single slice mesh"]
    assert hybrid["lengths"][0] == "AssertionError" and "differ in length" in hybrid["lengths"][1]


def test_mark_sharding_with_gradients_shards_a_copy_and_trains_as_the_cpu(seen):
    wg = seen["with_gradients"]
    assert wg["spec"] == "{devices=[2,2]0,1,2,3}" and wg["input_spec"] == ""
    assert wg["wrong_rank"] == ["AssertionError", "Partition spec length (1) should be equal to the input rank (2)."]
    forward = 6 * U * wg["value_scale"]  # h = a @ w sums 6 products
    close(wg["value"], wg["value_want"], forward)
    # The gradient sums 8 products a·sech²(h): the sum's rounding and sech²'s own (a few ulps), plus h's error
    # carried through sech² (whose slope is at most 4/(3√3) < 0.77), each times the sum of |a| (sech² ≤ 1).
    close(wg["grad"], wg["want"], ((8 + 4) * U + 0.77 * forward) * wg["scale"])


def test_xla_patched_linear_matches_nn_linear(seen):
    p = seen["patched"]
    # Forward: 5 products and a bias. Backward: each gradient sums its products of 2·out, with its own
    # rounding (the number of terms, relative to the sum of their magnitudes) and out's error (`forward`,
    # absolute) times what multiplies it.
    forward = 6 * U * p["out_scale"]
    close(p["got"], p["want"], forward)
    n = p["positions"]
    close(p["grad_w"], p["want_w"], n * U * p["w_scale"] + 2 * forward * p["x_colsum"])
    close(p["grad_b"], p["want_b"], n * U * p["b_scale"] + 2 * forward * n)
    close(p["grad_in"], p["want_in"], 3 * U * p["in_scale"] + 2 * forward * p["w_colsum"])


def test_a_manual_region_runs_per_device_and_comes_back_whole(seen):
    manual = seen["manual"]
    # A (2, 2) mesh over 8 x 8n: each device holds 4 rows and 4n columns, and sums its own piece's rows.
    assert manual["piece_shape"][0] == 4 and manual["back_shape"] == [8, 2]
    assert manual["back"] == manual["want"]  # integers in float32: exact
    assert manual["plain_ok"]


def test_a_gradient_flows_through_a_manual_region_as_through_eager(seen):
    grad = seen["manual"]["grad"]
    # 2 cos(x) w with |w| <= 1, x in [0, 1): a few float32 roundings of values below 2 (cos differs by an ulp or two).
    close(grad["got"], grad["want"], 16 * U * 2)


def test_pytorch_xlas_manual_sharding_bindings_make_the_same_region(seen):
    bindings = seen["manual"]["bindings"]
    # The (2, 2) mesh over 8 x 8n: each device's piece is 4 x 4n; the whole comes back as it went in, times 2.
    assert bindings["piece_shape"] == [4, bindings["back_shape"][1] // 2] and bindings["exact"], bindings
    assert bindings["named"] == ["MANUAL", "{manual}"] and bindings["back_shape"][0] == 8
    assert bindings["back_spec"].startswith("{devices=[2,2]"), bindings["back_spec"]
    kind, text = bindings["unmarked"]
    assert kind == "ManualShardingError" and "no sharding of its own" in text
    kind, text = bindings["outside"]
    assert kind == "ManualShardingError" and "not computed inside a manual region" in text
    assert bindings["is_runtime_error"]  # PyTorch/XLA's tests catch RuntimeError


def test_manual_sharding_refuses_what_would_compute_wrong_values(seen):
    manual = seen["manual"]
    kind, text = manual["kept_inside"]
    assert kind == "ManualRegionError" and "without disable_manual_sharding" in text
    kind, text = manual["dangling_beside_a_region"]
    assert kind == "ManualRegionError" and "without disable_manual_sharding" in text
    kind, text = manual["not_dividing"]
    assert kind == "ManualShardingError" and "(3, 4)" in text and "do not divide" in text
    kind, text = manual["no_region"]
    assert kind == "ManualShardingError" and "not computed inside a manual region" in text


def test_a_barrier_leaves_a_region_never_ended_uncomputed_and_computes_the_rest(seen):
    dangling = seen["dangling"]
    assert len(dangling["warned"]) == 1 and "disable_manual_sharding" in dangling["warned"][0], dangling
    assert dangling["other_is_data"] and dangling["other"] == [3.0] * 4
    kind, text = dangling["read"]
    assert kind == "ManualRegionError" and "without disable_manual_sharding" in text


def test_the_hlo_dump_ends_an_spmd_record_with_its_output_shardings(seen, dump):
    text = Path(str(dump) + ".0").read_text()
    last = text[text.rindex("[ScheduleSyncTensorsGraph]"):]
    # As PyTorch/XLA writes it: after ## END_GRAPH, one line per output, `shape sharding`.
    assert last.endswith("## END_GRAPH\n\n\n#OUTPUT_SHARDING_BEGIN\n\nf32[8,32] {devices=[1,4]0,1,2,3}\n\n"
                         "#OUTPUT_SHARDING_END\n\n")
    assert seen["dump_spec"] == "{devices=[1,4]0,1,2,3}"
    assert text.count("#OUTPUT_SHARDING_BEGIN") == text.count("## END_GRAPH") > 10
    warnings: list[str] = []
    records = read_records(str(dump), warnings)
    assert warnings == [] and len(records) == text.count("## END_GRAPH")


def test_fsdp_v2_splits_parameters_and_output_and_trains_as_the_cpu(seen):
    f = seen["fsdp"]
    want = {"_orig_module.fc1._orig_module.weight": "{devices=[4,1]0,1,2,3}",  # (32, 16): along its 32 rows
            "_orig_module.fc1._orig_module.bias": "{devices=[4]0,1,2,3}",
            "_orig_module.fc2._orig_module.weight": "{devices=[1,4]0,1,2,3}",  # (1, 32): along its 32 columns
            "_orig_module.fc2._orig_module.bias": ""}  # (1,): 4 devices do not divide it, so it stays whole
    # After a training step every parameter is a graph's output: the one left whole is `{replicated}`, as
    # PyTorch/XLA reports a synced value's sharding (test_propagate_replicated_sharding).
    after = dict(want, **{"_orig_module.fc2._orig_module.bias": "{replicated}"})
    assert f["specs"] == want and f["specs_after"] == after
    assert f["output_spec"] == "{devices=[4,1]0,1,2,3}"
    assert f["no_fsdp"] == ["ValueError", "The mesh must have an axis named 'fsdp'."]
    assert f["twice"][0] == "RuntimeError" and "already wrapped" in f["twice"][1]
    assert f["module_list"][0] == "RuntimeError" and "ModuleList has none" in f["module_list"][1]
    assert f["policy"] == {"wrapped": ["SpmdFullyShardedDataParallel"] * 2, "same_mesh": True,
                           "fc1_weight": "{devices=[4,1]0,1,2,3}", "by_callable": ["Linear", "Linear"]}
    assert f["callable_alone"] == ["ValueError", "auto_wrapper_callable wraps the submodules auto_wrap_policy "
                                                 "picks: give a policy too"]
    # Each wrapped module's backward passes through one optimization barrier (PyTorch/XLA's FSDPv2 does the
    # same): fc2's weight and bias gradients and the gradient of its 8x32 input, as PyTorch/XLA's
    # test_fsdp_v2_basic finds them.
    assert f["barriers"] == ["(f32[1,32]{1,0}, f32[1]{0}, f32[8,32]{1,0})"]
    for cpu_loss, xla_loss in f["losses"]:
        assert xla_loss == pytest.approx(cpu_loss, rel=loss_rtol())
    steps, lr = 3, 0.1
    for name, value in f["params"].items():
        torch.testing.assert_close(torch.tensor(f["got"][name]), torch.tensor(value), rtol=steps * PARAM_REL,
                                   atol=2 * steps * lr * GRAD_REL * f["grad_scale"], msg=name)


def test_split_device_data_is_not_split_another_way_until_cleared(seen):
    """PyTorch/XLA's rule: marking device data split one way with another split is refused, naming the split and
    `clear_sharding`; the same split again changes nothing; once cleared, it is marked anew; the value is kept."""
    r = seen["remark"]
    split = r["before"]
    assert split.startswith("{devices=[1,2,2]") and split.endswith(" last_tile_dim_replicate}")  # (None, 1)
    assert r["same_again"] == r["after_refusal"] == split
    assert r["refused"].startswith(f"Existing annotation must be cleared first: {split}")
    assert "xs.clear_sharding" in r["refused"] and r["refused"].endswith("{devices=[2,2]0,1,2,3}")
    assert r["after_clear"] == "{devices=[2,2]0,1,2,3}" and r["value"]
    # annotate_custom_sharding may give data split one way another split (a constraint in the graph), as
    # PyTorch/XLA's redistribute does; the split is kept through the sync, the value unchanged
    kind, annotated = r["annotated"]
    assert kind == "XLAShardedTensor" and annotated == r["annotated_synced"] == split and r["annotated_value"]
