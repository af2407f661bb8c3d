"""Run by tests/runtime/test_dtensor_bridge.py with CPU_NUM_DEVICES=4 under the torch_xla alias: torch's DTensor
API on a DeviceMesh of type `xla` (distribute_tensor, distribute_module, placements, redistribute), printed as
one JSON line. CPU references are computed here in eager PyTorch; the bounds are the test's."""

import json
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn

from tests.runtime.spmd_child import error
from xladev.cli.run import ALIAS_DIR

sys.path.insert(0, ALIAS_DIR)
import torch_xla  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
from torch.distributed.device_mesh import DeviceMesh  # noqa: E402
from torch.distributed.tensor import Partial, Replicate, Shard, distribute_module, distribute_tensor  # noqa: E402


spec_of = torch_xla._XLAC._get_xla_sharding_spec
out = {}
mesh1 = DeviceMesh("xla", list(range(4)))
mesh2 = DeviceMesh("xla", torch.arange(4).reshape(2, 2), mesh_dim_names=("dp", "tp"))

# distribute_tensor: a CPU tensor split over the mesh; ops on it run as sharded graphs.
t = torch.randn(8, 6, generator=torch.Generator().manual_seed(0))
xt = distribute_tensor(t, mesh1, [Shard(0)])
doubled = xt * 2
torch_xla.sync()
out["tensor"] = {"type": type(xt).__name__, "spec": xt.sharding_spec, "device": str(xt.global_tensor.device),
                 "values": xt.global_tensor.cpu().tolist() == t.tolist(),
                 "doubled": doubled.global_tensor.cpu().tolist() == (t * 2).tolist(),
                 "result_type": type(doubled).__name__, "result_spec": spec_of(doubled.global_tensor),
                 "placements": [str(p) for p in xt.placements],
                 "two_d": distribute_tensor(torch.ones(4, 8), mesh2, [Replicate(), Shard(1)]).sharding_spec,
                 "replicated": distribute_tensor(torch.ones(4), mesh1).sharding_spec}

# A mark's DTensor view: placements per mesh dimension, the spec's DeviceMesh.
m22 = xs.Mesh(np.arange(4), (2, 2), ("data", "model"))
marked = xs.mark_sharding(torch.zeros(4, 6).to("xla"), m22, ("model", None))
spec = marked._spec
out["view"] = {"placements": [str(p) for p in marked.placements], "mesh_type": spec.mesh.device_type,
               "mesh_shape": list(spec.mesh.mesh.shape), "names": list(spec.mesh.mesh_dim_names),
               "shape": list(spec.tensor_meta.shape),
               "unknown": error(lambda: xs.XLAShardedTensor(torch.zeros(2).to("xla")).placements)}

# redistribute: in place, or on a copy (async_op), and its refusals.
r = xs.mark_sharding(torch.arange(16.0).reshape(4, 4).to("xla"), xs.Mesh(np.arange(4), (4,)), (0, None))
before = r.global_tensor
moved = r.redistribute(xs.Mesh(np.arange(4), (4,)), [Shard(1)])
copy = moved.redistribute(mesh2, [Replicate(), Shard(0)], async_op=True)
out["redistribute"] = {
    "in_place": moved.global_tensor is before, "spec": spec_of(before), "partition_spec": list(moved.partition_spec),
    "copy_is_new": copy.global_tensor is not before, "copy_spec": copy.sharding_spec, "kept": spec_of(before),
    "values": copy.global_tensor.cpu().tolist() == torch.arange(16.0).reshape(4, 4).tolist(),
    "too_many": error(lambda: r.redistribute(mesh1, [Shard(0), Shard(1)])),
    "no_dim": error(lambda: r.redistribute(mesh1, [Shard(2)])),
    "partial": error(lambda: r.redistribute(mesh1, [Partial()]))}

# distribute_module: Linear weights split by a partition_fn, input and output hooks; trains as eager CPU.
torch.manual_seed(1)
cpu_net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
net = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 1))
net.load_state_dict(cpu_net.state_dict())
net = net.to("xla")


def partition(name, module, device_mesh):
    if isinstance(module, nn.Linear) and module.out_features == 8:
        module.weight = nn.Parameter(distribute_tensor(module.weight, device_mesh, [Shard(0)]))


seen_hooks = []
distribute_module(net, mesh1, partition,
                  input_fn=lambda mod, inputs, dm: seen_hooks.append(("in", type(mod).__name__, dm.device_type)),
                  output_fn=lambda mod, outputs, dm: seen_hooks.append(("out", list(outputs.shape))))
opt, cpu_opt = torch.optim.SGD(net.parameters(), lr=0.1), torch.optim.SGD(cpu_net.parameters(), lr=0.1)
g = torch.Generator().manual_seed(2)
losses, grad_scale = [], 0.0
for _ in range(3):
    bx, by = torch.randn(8, 6, generator=g), torch.randn(8, 1, generator=g)
    cpu_opt.zero_grad()
    cpu_loss = ((cpu_net(bx) - by) ** 2).mean()
    cpu_loss.backward()
    grad_scale = max(grad_scale, max(float(p.grad.abs().max()) for p in cpu_net.parameters()))
    cpu_opt.step()
    opt.zero_grad()
    loss = ((net(bx.to("xla")) - by.to("xla")) ** 2).mean()
    loss.backward()
    opt.step()
    torch_xla.sync()
    losses.append((float(cpu_loss), float(loss.detach().cpu())))
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    distribute_module(nn.Linear(2, 2).to("xla"), mesh1, input_fn=lambda inputs, dm: None)
out["module"] = {
    "weight_spec": spec_of(net[0].weight), "hooks": seen_hooks[:2], "losses": losses, "grad_scale": grad_scale,
    "params": {k: v.tolist() for k, v in cpu_net.state_dict().items()},
    "got": {k: xs.unwrap_sharded_tensor(v).detach().cpu().tolist() for k, v in net.state_dict().items()},
    "two_arg_warns": [str(w.category.__name__) for w in caught if "deprecated" in str(w.message)],
    "four_args": error(lambda: distribute_module(nn.Linear(2, 2).to("xla"), mesh1,
                                                 output_fn=lambda a, b, c, d: None)),
    "auto": error(lambda: distribute_module(nn.Linear(2, 2), mesh1, xs.auto_policy))}

# Refusals: a Partial placement, a mesh not over every device, placements of another length.
out["errors"] = {"partial": error(lambda: distribute_tensor(torch.ones(4), mesh1, [Partial()])),
                 "three": error(lambda: distribute_tensor(torch.ones(4), DeviceMesh("xla", [0, 1, 2]), [Shard(0)])),
                 "length": error(lambda: distribute_tensor(torch.ones(4), mesh2, [Shard(0)]))}
print("RESULT " + json.dumps(out))
