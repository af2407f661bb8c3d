"""Run by tests/runtime/test_distributed_checkpoint.py with CPU_NUM_DEVICES=4 under the torch_xla alias:
torch.distributed.checkpoint with SPMDSavePlanner/SPMDLoadPlanner and CheckpointManager in one process, each
check's findings printed in one JSON line. CPU references are eager PyTorch tensors made here; checkpoints
copy values, so the test compares them exactly."""

import json
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
import torch.distributed.checkpoint as dist_cp

from xladev.cli.run import ALIAS_DIR

sys.path.insert(0, ALIAS_DIR)
import torch_xla  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402
from torch_xla.experimental.distributed_checkpoint import (  # noqa: E402
    CheckpointManager, SPMDLoadPlanner, SPMDSavePlanner, prime_optimizer,
)
from torch_xla.experimental.distributed_checkpoint._helpers import _sharded_cpu_state_dict  # noqa: E402

warnings.simplefilter("ignore")  # torch.distributed.checkpoint warns that a lone process has no group
out = {}
tmp = Path(tempfile.mkdtemp())


def error(fn):
    try:
        fn()
    except BaseException as exc:  # noqa: BLE001 - CheckpointException is a BaseException; the message is checked
        return [type(exc).__name__, str(exc)]
    return None


def equal(device_tensor, cpu_tensor) -> bool:
    return bool(torch.equal(device_tensor.cpu(), cpu_tensor))


def spec(t) -> str:
    return torch_xla._XLAC._get_xla_sharding_spec(t)


# torch's default file writer copies device tensors under `torch.xla.stream(...)` (before streams existed on
# the xla device module it failed with AttributeError: no `current_stream`).
plain = {"a": torch.arange(6.0).to("xla"), "n": 3}
dist_cp.save(plain, storage_writer=dist_cp.FileSystemWriter(tmp / "plain"))
back = {"a": torch.zeros(6).to("xla"), "n": 0}
dist_cp.load(back, storage_reader=dist_cp.FileSystemReader(tmp / "plain"))
out["default_writer"] = {"a": equal(back["a"], torch.arange(6.0)), "n": back["n"]}

xr.use_spmd()
n = xr.global_runtime_device_count()
ids = np.arange(n)
torch.manual_seed(0)
W, B = torch.randn(16, 8), torch.randn(16)


def sharded(mesh_shape=None, partition=None, w=None):
    """A state dict of a 16x8 weight (sharded over `mesh_shape` as `partition`, or not) and a bias."""
    weight = (W if w is None else w).clone().to("xla")
    if mesh_shape is not None:
        xs.mark_sharding(weight, xs.Mesh(ids, mesh_shape), partition)
    return {"layer": {"weight": weight, "bias": B.clone().to("xla")}, "epoch": 7}


def blank(mesh_shape=None, partition=None):
    return {**sharded(mesh_shape, partition, w=torch.zeros(16, 8)), "epoch": None}


# Saved over a 2x2 mesh: each device's tile is one chunk, at its place, with its device's values.
source = sharded((2, 2), (0, 1))
dist_cp.save(source, storage_writer=dist_cp.FileSystemWriter(tmp / "tiles"), planner=SPMDSavePlanner())
md = dist_cp.FileSystemReader(tmp / "tiles").read_metadata()
on_cpu = {"layer": {"weight": torch.zeros(16, 8), "bias": torch.zeros(16)}, "epoch": None}
dist_cp.load(on_cpu, storage_reader=dist_cp.FileSystemReader(tmp / "tiles"))  # torch's own planner, on the CPU
out["tiles"] = {"chunks": [[list(c.offsets), list(c.sizes)] for c in md.state_dict_metadata["layer.weight"].chunks],
                "bias_chunks": len(md.state_dict_metadata["layer.bias"].chunks),
                "shards": [[s.shard_device, [[i.start, i.stop] for i in s.indices]]
                           for s in xs.wrap_if_sharded(source["layer"]["weight"]).local_shards],
                "weight": bool(torch.equal(on_cpu["layer"]["weight"], W)), "bias": bool(torch.equal(on_cpu["layer"]["bias"], B)),
                "epoch": on_cpu["epoch"], "world_size": md.planner_data["xladev.world_size"],
                "files": sorted(p.name for p in (tmp / "tiles").iterdir())}

# Loaded back onto other shardings (and none); saved from CPU copies of the shards (what save_async writes).
targets = {"4x1": ((4, 1), (0, 1)), "1x4": ((1, 4), (0, 1)), "transposed": ((2, 2), (1, 0)),
           "partial": ((2, 2), (None, 1)), "replicated": ((2, 2), (None, None)), "unsharded": (None, None)}
out["reshard"] = {}
for source_kind in ("device", "cpu_shards"):
    state = sharded((2, 2), (0, 1))
    path = tmp / f"from_{source_kind}"
    dist_cp.save(_sharded_cpu_state_dict(state) if source_kind == "cpu_shards" else state,
                 storage_writer=dist_cp.FileSystemWriter(path), planner=SPMDSavePlanner())
    for name, (mesh_shape, partition) in targets.items():
        into = blank(mesh_shape, partition)
        before = spec(into["layer"]["weight"])
        dist_cp.load(into, storage_reader=dist_cp.FileSystemReader(path), planner=SPMDLoadPlanner())
        loaded = {"weight": equal(into["layer"]["weight"], W), "bias": equal(into["layer"]["bias"], B),
                  "epoch": into["epoch"]}  # read: the load's graph has run
        out["reshard"][f"{source_kind}->{name}"] = {**loaded, "before": before, "after": spec(into["layer"]["weight"])}

# An unsharded save loaded into a sharded tensor.
dist_cp.save(sharded(), storage_writer=dist_cp.FileSystemWriter(tmp / "whole"), planner=SPMDSavePlanner())
into = blank((4, 1), (0, 1))
dist_cp.load(into, storage_reader=dist_cp.FileSystemReader(tmp / "whole"), planner=SPMDLoadPlanner())
out["unsharded_to_sharded"] = equal(into["layer"]["weight"], W) and spec(into["layer"]["weight"]) == "{devices=[4,1]0,1,2,3}"

# A partially replicated tensor: each distinct piece written once.
dist_cp.save(sharded((2, 2), (None, 1)), storage_writer=dist_cp.FileSystemWriter(tmp / "partial"),
             planner=SPMDSavePlanner())
partial_md = dist_cp.FileSystemReader(tmp / "partial").read_metadata()
out["partial_chunks"] = [[list(c.offsets), list(c.sizes)] for c in partial_md.state_dict_metadata["layer.weight"].chunks]

# A checkpoint that does not fit: another shape, a missing value.
bad = {"layer": {"weight": torch.zeros(8, 8).to("xla"), "bias": torch.zeros(16).to("xla")}, "extra": torch.zeros(2).to("xla")}
xs.mark_sharding(bad["layer"]["weight"], xs.Mesh(ids, (4, 1)), (0, 1))
out["misfit"] = error(lambda: dist_cp.load(bad, storage_reader=dist_cp.FileSystemReader(tmp / "tiles"),
                                           planner=SPMDLoadPlanner()))


# A model and its AdamW state after a step, restored into a fresh pair after prime_optimizer.
def model_and_optimizer(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to("xla")
    xs.mark_sharding(model[0].weight, xs.Mesh(ids, (2, 2)), (0, 1))
    xs.mark_sharding(model[2].weight, xs.Mesh(ids, (4, 1)), (None, 0))
    return model, torch.optim.AdamW(model.parameters(), lr=0.1)


model, optim = model_and_optimizer(1)
model(torch.ones(3, 8).to("xla")).square().sum().backward()
optim.step()
torch_xla.sync()
saved = {"model": model.state_dict(), "optim": optim.state_dict()}
reference = {k: v.cpu() for k, v in model.state_dict().items()}
moments = {i: {k: v.cpu() for k, v in s.items()} for i, s in optim.state_dict()["state"].items()}
dist_cp.save(saved, storage_writer=dist_cp.FileSystemWriter(tmp / "optim"), planner=SPMDSavePlanner())
model2, optim2 = model_and_optimizer(2)
prime_optimizer(optim2)
fresh = {"model": model2.state_dict(), "optim": optim2.state_dict()}
dist_cp.load(fresh, storage_reader=dist_cp.FileSystemReader(tmp / "optim"), planner=SPMDLoadPlanner())
model2.load_state_dict(fresh["model"])
optim2.load_state_dict(fresh["optim"])
state2 = optim2.state_dict()
out["optimizer"] = {
    "params": all(torch.equal(v.cpu(), reference[k]) for k, v in model2.state_dict().items()),
    "moments": all(torch.equal(state2["state"][i][k].cpu(), moments[i][k]) for i in moments for k in moments[i]),
    "keys": sorted(state2["state"][0]), "groups": state2["param_groups"] == optim.state_dict()["param_groups"],
    "sharding": spec(model2[0].weight)}

# CheckpointManager in one process: steps, keep-last-N by time taken, asynchronous saves, restore.
base = tmp / "manager"
mgr = CheckpointManager(str(base), save_interval=10, max_to_keep=2, chkpt_on_preemption=False)
state = sharded((2, 2), (0, 1))
found = {"initial": mgr.all_steps(), "off_interval": [mgr.save(s, state) for s in (1, 5, 9)]}
found["saved"] = [mgr.save(s, state) for s in (10, 20)] + [mgr.all_steps()]
mgr.save(30, state)
found["after_30"] = mgr.all_steps()
mgr.save(10, state)  # the oldest by time taken goes (20), not the lowest step
found["after_10_again"] = mgr.all_steps()
found["forced"] = mgr.save(31, state, force=True)
found["after_forced"] = mgr.all_steps()
mgr2 = CheckpointManager(str(base), save_interval=10, max_to_keep=2, chkpt_on_preemption=False)
found["reopened"] = mgr2.all_steps()
found["dirs"] = sorted(p.name for p in base.iterdir())
state40 = sharded((2, 2), (0, 1), w=W + 40)
found["async"] = [mgr2.save_async(s, state40) for s in (39, 40)]
mgr2.join()
found["after_async"] = mgr2.all_steps()
into = blank((1, 4), (None, 0))
mgr2.restore(40, into)
found["restored"] = equal(into["layer"]["weight"], W + 40) and equal(into["layer"]["bias"], B) and into["epoch"] == 7
# An asynchronous save that fails (a value pickle cannot write) is reported by join, and not committed.
found["async_failure_started"] = mgr2.save_async(50, {**sharded((2, 2), (0, 1)), "note": lambda: None})
found["async_failure"] = error(mgr2.join)
found["after_async_failure"] = mgr2.all_steps()
found["restore_missing"] = error(lambda: mgr2.restore(20, blank()))
found["restore_misfit"] = error(lambda: mgr2.restore(40, {"layer": {"weight": torch.zeros(4, 4).to("xla")}}))
found["no_preemption"] = error(lambda: mgr2.reached_preemption(41))
found["url"] = error(lambda: CheckpointManager("gs://bucket/run", save_interval=1, chkpt_on_preemption=False))
found["bad_interval"] = error(lambda: CheckpointManager(str(base), save_interval=0, chkpt_on_preemption=False))
# A directory named like a step with no completion marker (copied by hand, or written by another tool).
(base / "50").mkdir()
found["unmarked"] = CheckpointManager(str(base), save_interval=10, chkpt_on_preemption=False).all_steps()
out["manager"] = found

print("RESULT " + json.dumps(out), flush=True)
