"""torch.distributed.checkpoint of sharded state on 4 local devices, with PyTorch/XLA's SPMDSavePlanner and
SPMDLoadPlanner, and CheckpointManager in one process (tests/runtime/dcp_script.py, through the torch_xla alias).

A checkpoint copies values, so every comparison with the eager CPU tensors is exact. Processes that die
(kill -9 mid-save, SIGTERM) are tests/distributed/test_checkpoint_jobs.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("dcp_script.py")
REPO = SCRIPT.parents[2]


@pytest.fixture(scope="module")
def run() -> tuple[dict, str]:
    env = dict(os.environ, CPU_NUM_DEVICES="4", PYTHONPATH=str(REPO))
    for name in ("XLA_FLAGS", "XLA_USE_SPMD", "WORLD_SIZE", "RANK"):
        env.pop(name, None)
    done = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=480)
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT "):]), done.stderr


@pytest.fixture(scope="module")
def seen(run) -> dict:
    return run[0]


def test_torchs_default_file_writer_saves_xla_tensors(seen):
    # It copies device tensors under the device module's stream (torch.xla.current_stream / stream).
    assert seen["default_writer"] == {"a": True, "n": 3}


def test_each_devices_tile_is_written_once_at_its_place(seen):
    tiles = seen["tiles"]
    placed = [[[a, a + n] for a, n in zip(*chunk)] for chunk in tiles["chunks"]]
    assert placed == [indices for _, indices in tiles["shards"]]  # one chunk per device, its piece's place
    assert [device for device, _ in tiles["shards"]] == ["xla:0", "xla:1", "xla:2", "xla:3"]
    assert tiles["bias_chunks"] == 1 and tiles["epoch"] == 7
    # Read back by torch's own planner onto the CPU: the tiles make up the tensor, value for value.
    assert tiles["weight"] and tiles["bias"]
    assert tiles["world_size"] == 1 and tiles["files"] == [".metadata", "__0_0.distcp"]


def test_a_partially_replicated_tensor_writes_each_distinct_piece_once(seen):
    assert seen["partial_chunks"] == [[[0, 0], [16, 4]], [[0, 4], [16, 4]]]


@pytest.mark.parametrize("source", ["device", "cpu_shards"])
@pytest.mark.parametrize("target", ["4x1", "1x4", "transposed", "partial", "replicated", "unsharded"])
def test_a_sharded_checkpoint_loads_onto_another_sharding_with_equal_values(seen, source, target):
    got = seen["reshard"][f"{source}->{target}"]
    assert (got["weight"], got["bias"], got["epoch"]) == (True, True, 7)
    if target == "unsharded":
        # Never split, before or after; once the load's graph ran its output reports "{replicated}", as PyTorch/XLA
        # 2.9 reports any synced graph output left whole (an upload, before, reports "").
        assert (got["before"], got["after"]) == ("", "{replicated}")
    elif target != "replicated":  # a replicated mark's text is not kept by an in-place copy (it stays replicated)
        assert got["after"] == got["before"] != ""


def test_an_unsharded_checkpoint_loads_into_a_sharded_tensor(seen):
    assert seen["unsharded_to_sharded"] is True


def test_a_checkpoint_of_another_shape_names_each_difference(seen):
    kind, message = seen["misfit"]
    assert kind == "CheckpointException"  # torch.distributed.checkpoint wraps a planner's error with its traceback
    assert message.endswith("CheckpointError: the checkpoint does not fit the state dict:\n"
                            "  layer.weight: shape (16, 8) in the checkpoint, (8, 8) here\n"
                            "  extra: not in the checkpoint\n"
                            "the checkpoint holds, besides: epoch\n")


def test_model_and_optimizer_state_round_trip_after_prime_optimizer(seen):
    got = seen["optimizer"]
    assert got["params"] and got["moments"] and got["groups"]
    assert got["keys"] == ["exp_avg", "exp_avg_sq", "step"]
    assert got["sharding"] == "{devices=[2,2]0,1,2,3}"


def test_manager_saves_at_its_interval_and_keeps_the_newest_n_by_time_taken(seen):
    m = seen["manager"]
    assert m["initial"] == [] and m["off_interval"] == [False, False, False]
    assert m["saved"] == [True, True, [10, 20]]
    assert m["after_30"] == [20, 30]
    assert m["after_10_again"] == [10, 30]  # 20 was the oldest taken, though 10 is the lower step
    assert m["forced"] is True and m["after_forced"] == [10, 31]
    assert m["reopened"] == [10, 31] and m["dirs"] == ["10", "31"]  # the order holds across managers


def test_manager_async_saves_are_committed_by_join_and_restore_onto_another_sharding(seen):
    m = seen["manager"]
    assert m["async"] == [False, True] and m["after_async"] == [31, 40]
    assert m["restored"] is True


def test_a_failed_async_save_is_reported_and_not_committed(seen, run):
    m = seen["manager"]
    assert m["async_failure_started"] is True
    kind, message = m["async_failure"]
    assert kind == "CheckpointError" and message.startswith("an asynchronous checkpoint failed: ")
    assert "pickle" in message and "lambda" in message  # what failed, from the process that failed
    assert m["after_async_failure"] == [31, 40]
    # Told when it happened too, in case the script never joins.
    assert "xladev: CheckpointManager: the asynchronous checkpoint of step 50 failed and was not committed: " in run[1]


def test_manager_errors_name_what_is_wrong(seen, run):
    m = seen["manager"]
    kind, message = m["restore_missing"]
    assert kind == "CheckpointError"
    assert message.startswith("restore(20): ") and message.endswith(
        "holds no complete checkpoint of step 20; the complete ones are of steps [31, 40]")
    kind, message = m["restore_misfit"]
    assert kind == "CheckpointError" and "/manager/40: the checkpoint does not fit the state dict:\n" \
        "  layer.weight: shape (16, 8) in the checkpoint, (4, 4) here" in message
    assert m["no_preemption"] == ["CheckpointError", "reached_preemption: preemption detection is off; create the "
                                                     "CheckpointManager with chkpt_on_preemption=True"]
    assert m["url"][0] == "CheckpointError" and "'gs://bucket/run' is not a local path" in m["url"][1]
    assert m["bad_interval"] == ["CheckpointError", "CheckpointManager: save_interval must be an integer >= 1, got 0"]
    # A step directory without its completion marker is not a checkpoint, and the manager says so.
    assert m["unmarked"] == [31, 40]
    assert "ignoring invalid checkpoints: " in run[1] and "/manager/50: no .manager_metadata" in run[1]
