"""Run by tests/runtime/test_uneven_sharding.py with CPU_NUM_DEVICES=4 under the torch_xla alias: splits that do
not divide the shape (PyTorch/XLA pads the last pieces), and input sharding through `xs.ShardingSpec` in the
loaders, printed as one JSON line. CPU references are computed here in eager PyTorch; the bounds are the test's."""

import json
import sys

import numpy as np
import torch
import torch.nn as nn

from tests.runtime.spmd_child import error
from xladev.cli.run import ALIAS_DIR

sys.path.insert(0, ALIAS_DIR)
import torch_xla  # noqa: E402
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.distributed.parallel_loader as pl  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402


def shards(st):
    return [{"data": s.data.tolist(), "unpadded": s.unpadded_data.tolist(), "device": s.shard_device,
             "replica": s.replica_id, "indices": [[i.start, i.stop, i.step] for i in s.indices]}
            for s in st.local_shards]


spec_of = torch_xla._XLAC._get_xla_sharding_spec
out = {}
xr.use_spmd()
n = xr.global_runtime_device_count()
ids = np.arange(n)
mesh4 = xs.Mesh(ids, (n,))
mesh22 = xs.Mesh(ids, (2, 2), ("data", "model"))

# Device data split unevenly: 5 elements over 4 devices; then computed on, and kept through a sync.
t = torch.arange(5, dtype=torch.float32)
xt = xs.mark_sharding(t.to("xla"), mesh4, (0,))
out["vector"] = {"spec": xt.sharding_spec, "type": xt.sharding_type.name, "shards": shards(xt)}
hlo = torch_xla._XLAC._get_xla_tensors_hlo([xt.global_tensor * 3])
out["vector"]["hlo_constrains"] = "sharding={devices=[4]" in hlo
out["vector"]["times3"] = (xt.global_tensor * 3).cpu().tolist()
torch_xla.sync()
out["vector"]["spec_after_sync"] = spec_of(xt.global_tensor)
pieces = xt.local_shards
for s in pieces:
    s.unpadded_data = s.unpadded_data + 10
xt.load_local_shards_(pieces)
out["vector"]["loaded"] = [xt.global_tensor.cpu().tolist(), spec_of(xt.global_tensor),
                           [s.data.tolist() for s in xt.local_shards]]
out["vector"]["load_short"] = error(lambda: xt.load_local_shards_(pieces[:3]))

# A 2-D split with one mesh axis replicated (3 rows over 2, the columns whole): replica ids 0 and 1.
m = torch.arange(15, dtype=torch.float32).reshape(3, 5)
xm_ = xs.mark_sharding(m.to("xla"), mesh22, ("data", None))
out["rows"] = {"spec": xm_.sharding_spec, "shards": shards(xm_)}

# A value still being recorded, marked unevenly: computed, and the mark kept on the result.
a = torch.randn(3, 5, generator=torch.Generator().manual_seed(1))
pending = a.to("xla") * 2
xs.mark_sharding(pending, mesh22, (0, 1))
torch_xla.sync()
out["pending"] = {"spec": spec_of(pending), "value": pending.cpu().tolist(), "want": (a * 2).tolist(),
                  "shards": shards(xs.wrap_as_sharded_tensor(pending))}

# A tensor updated in place keeps its sharding (evenly split here), through the pending value and a sync; once
# cleared, it stays replicated.
w = torch.randn(8, 4).to("xla")
xs.mark_sharding(w, mesh22, (0, 1))
inplace = {"marked": spec_of(w)}
w.add_(1)
inplace["pending"] = spec_of(w)
inplace["hlo"] = torch_xla._XLAC._get_xla_tensors_hlo([w])
torch_xla.sync()
inplace["synced"] = spec_of(w)
inplace["split_buffer"] = len({s.data.shape for s in xs.wrap_as_sharded_tensor(w).local_shards}) == 1 and \
    list(xs.wrap_as_sharded_tensor(w).local_shards[0].data.shape)
xs.clear_sharding(w)
w.mul_(2)
torch_xla.sync()
inplace["cleared"] = spec_of(w)
out["inplace"] = inplace

# An uneven result beside another output of the same graph (PyTorch/XLA's test_execute_replicated_metrics after
# another test left a value pending): the graph compiles, and the uneven result keeps its mark.
other = xs.mark_sharding(torch.randn(2, 4, 8, 8).to("xla"), xs.Mesh(ids, (1, 1, 2, 2)), (0, 1, 2, 3)).global_tensor + 1
small = torch.ones(2, 2).to("xla")
xs.mark_sharding(small, xs.Mesh(ids, (1, 4)), (0, 1))
small += 2
torch_xla.sync()
out["beside"] = {"value": small.cpu().tolist(), "spec": spec_of(small), "other": spec_of(other)}

# Training on batches whose size does not divide over the devices (6 rows over 4), the model split too.
torch.manual_seed(3)
cpu_net = nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 1))
net = nn.Sequential(nn.Linear(6, 10), nn.Tanh(), nn.Linear(10, 1)).to("xla")
net.load_state_dict(cpu_net.state_dict())
xs.mark_sharding(net[0].weight, mesh4, (0, None))  # 10 rows over 4 devices: uneven too
opt, cpu_opt = torch.optim.SGD(net.parameters(), lr=0.1), torch.optim.SGD(cpu_net.parameters(), lr=0.1)
g = torch.Generator().manual_seed(5)
batches = [(torch.randn(6, 6, generator=g), torch.randn(6, 1, generator=g)) for _ in range(3)]
loader = pl.MpDeviceLoader(batches, torch_xla.device(), input_sharding=xs.ShardingSpec(mesh4, (0, None)))
losses, grad_scale, batch_specs = [], 0.0, []
for (bx, by), (cx, cy) in zip(loader, batches):
    batch_specs.append([spec_of(bx), spec_of(by)])
    cpu_opt.zero_grad()
    cpu_loss = ((cpu_net(cx) - cy) ** 2).mean()
    cpu_loss.backward()
    grad_scale = max(grad_scale, max(float(p.grad.abs().max()) for p in cpu_net.parameters()))
    cpu_opt.step()
    opt.zero_grad()
    loss = ((net(bx) - by) ** 2).mean()
    loss.backward()
    opt.step()
    losses.append((float(cpu_loss), loss.item()))
out["train"] = {"losses": losses, "grad_scale": grad_scale, "batch_specs": batch_specs,
                "params": {k: v.tolist() for k, v in cpu_net.state_dict().items()},
                "got": {k: v.cpu().tolist() for k, v in net.state_dict().items()},
                "weight_spec": spec_of(net[0].weight)}

# A distributed checkpoint of a weight split unevenly along its rows, loaded into one split unevenly along its
# columns (PyTorch/XLA's test_padded_tensor): the padding is neither written nor waited for.
import tempfile  # noqa: E402

import torch.distributed.checkpoint as dist_cp  # noqa: E402
from torch_xla.experimental.distributed_checkpoint import SPMDLoadPlanner, SPMDSavePlanner  # noqa: E402

src, dst = torch.randn(7, 9).to("xla"), torch.zeros(7, 9).to("xla")
xs.mark_sharding(src, mesh4, (0, None))
xs.mark_sharding(dst, mesh4, (None, 0))
folder = tempfile.mkdtemp()
dist_cp.save(state_dict={"w": src}, storage_writer=dist_cp.FileSystemWriter(folder), planner=SPMDSavePlanner())
dist_cp.load(state_dict={"w": dst}, storage_reader=dist_cp.FileSystemReader(folder), planner=SPMDLoadPlanner())
out["checkpoint"] = {"equal": torch.equal(src.cpu(), dst.cpu()), "spec": spec_of(dst)}

# A sharded tensor made of CPU pieces (torch_xla._XLAC._global_tensor_from_cpu_shards), as checkpoint loaders
# make one: tiled, with padding left over, replicated, from an uneven tensor's own pieces, and what cannot fit.
from_shards = torch_xla._XLAC._global_tensor_from_cpu_shards
tiled = mesh4.get_op_sharding((0,))
pieces4 = [torch.arange(4.0) + 4 * i for i in range(4)]
made = from_shards(pieces4, tiled)
trimmed = from_shards(pieces4, tiled, torch.Size((13,)))
uneven_pieces = [s.data for s in xs.wrap_as_sharded_tensor(pending).local_shards]
remade = from_shards(uneven_pieces, mesh22.get_op_sharding((0, 1)), torch.Size((3, 5)))
out["from_shards"] = {
    "tiled": [made.cpu().tolist(), spec_of(made)], "trimmed": [trimmed.cpu().tolist(), spec_of(trimmed)],
    "replicated": from_shards([torch.tensor([7.0])] * 4, mesh22.get_op_sharding((None, None))).cpu().tolist(),
    "remade": remade.cpu().tolist() == pending.cpu().tolist(), "remade_spec": spec_of(remade),
    "too_few": error(lambda: from_shards(pieces4[:3], tiled)),
    "too_big": error(lambda: from_shards(pieces4, tiled, torch.Size((17,)))),
    "too_small": error(lambda: from_shards(pieces4, tiled, torch.Size((12,)))),
    "replicated_smaller": error(lambda: from_shards([torch.ones(4)] * 4, mesh4.get_op_sharding((None,)),
                                                    torch.Size((3,))))}

# Input sharding: an even batch (8) and the loaders' and send_cpu_data_to_device's checks.
spec = xs.ShardingSpec(mesh22, ("data", None, None))
even = [(torch.zeros(8, 3, 2), torch.zeros(8, dtype=torch.int64))]
bx, by = next(iter(pl.MpDeviceLoader(even, torch_xla.device(), input_sharding=spec)))
explicit = xs.mark_sharding(torch.zeros(8, 3, 2).to("xla"), mesh22, ("data", None, None))
sent = xm.send_cpu_data_to_device([torch.ones(8, 3, 2)], torch_xla.device(), input_sharding=spec)
dict_batches = [{"x": torch.ones(4, 3, 2), "y": torch.ones(4)}]
by_key = next(iter(pl.MpDeviceLoader(dict_batches, torch_xla.device(),
                                     input_sharding={"x": spec, "y": xs.ShardingSpec(mesh4, (0,))})))
out["input"] = {
    "batch": [spec_of(bx), spec_of(by)], "explicit": explicit.sharding_spec, "xla_spec": spec.xla_spec(bx),
    "not_applicable": spec.xla_spec(by), "can_apply": [spec.can_apply(bx), spec.can_apply(by)],
    "sent": [spec_of(sent[0]), sent[0].cpu().sum().item()],
    "by_key": {k: spec_of(v) for k, v in by_key.items()},
    "missing_key": error(lambda: next(iter(pl.MpDeviceLoader(dict_batches, torch_xla.device(),
                                                             input_sharding={"x": spec})))),
    "not_a_dict": error(lambda: next(iter(pl.MpDeviceLoader(even, torch_xla.device(), input_sharding={"x": spec})))),
    "minibatch": error(lambda: next(iter(pl.MpDeviceLoader(
        [torch.zeros(3, 3, 2)], torch_xla.device(), input_sharding=xs.ShardingSpec(mesh4, (0, None, None),
                                                                                   minibatch=True))))),
    "bad_axis": error(lambda: xs.ShardingSpec(mesh22, ("batch", None))),
    "not_a_spec": error(lambda: xm.send_cpu_data_to_device([torch.ones(2)], torch_xla.device(),
                                                           input_sharding=(0,))),
}
print("RESULT " + json.dumps(out))
