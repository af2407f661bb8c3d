"""Run by tests/runtime/test_spmd_api.py with CPU_NUM_DEVICES=4 under the torch_xla alias: PyTorch/XLA's SPMD API
(XLAShardedTensor, Mesh, HybridMesh, the autograd helpers), printed as one JSON line. CPU references are
computed here in eager PyTorch; the bounds are the test's."""

import json
import os
import re
import sys
import types
import warnings

import numpy as np
import torch
import torch.nn as nn
from torch.distributed.tensor import DTensor

from tests.runtime.spmd_child import error
from xladev.cli.run import ALIAS_DIR

sys.path.insert(0, ALIAS_DIR)
import torch_xla  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402
from torch_xla.distributed.spmd.debugging import construct_v1_sharding_str  # noqa: E402


out = {}
xr.use_spmd()
out["env"] = os.environ.get("XLA_USE_SPMD")
n = xr.global_runtime_device_count()
ids = np.arange(n)

# The wrapper: what mark_sharding returns, its sharding views.
mesh22 = xs.Mesh(ids, (2, 2), ("data", "model"))
t = torch.randn(8, 4)
xt = t.to("xla")
xst = xs.mark_sharding(xt, mesh22, (0, 1))
out["wrapper"] = {"type": type(xst).__name__, "is_global": xst.global_tensor is xt,
                  "spec": xst.sharding_spec, "spec_of_t": torch_xla._XLAC._get_xla_sharding_spec(xt),
                  "v1": construct_v1_sharding_str(xst), "type_tiled": xst.sharding_type.name,
                  "type_int": torch_xla._XLAC._get_xla_sharding_type(xt), "shape": list(xst.shape),
                  "mesh_shape": list(xst.mesh_shape), "partition_spec": list(xst.partition_spec),
                  "repr": repr(xst)[:16], "is_dtensor": isinstance(xst, DTensor)}
out["wrapper"]["debug_info"] = torch_xla._XLAC._get_xla_tensor_debug_info(xst.global_tensor)
xs.clear_sharding(xt)
out["wrapper"]["cleared"] = [torch_xla._XLAC._get_xla_sharding_spec(xt), torch_xla._XLAC._get_xla_sharding_type(xt)]
out["wrapper"]["type_replicated"] = xs.mark_sharding(xt, mesh22, (None, None)).sharding_type.name
out["wrapper"]["spec_replicated"] = torch_xla._XLAC._get_xla_sharding_spec(xt)
out["wrapper"]["type_partial"] = xs.mark_sharding(xt, mesh22, (None, 1)).sharding_type.name
# Split device data is never split another way unasked (PyTorch/XLA's rule); the same split again is a no-op.
remark = {"before": torch_xla._XLAC._get_xla_sharding_spec(xt)}
xs.mark_sharding(xt, mesh22, (None, 1))
remark["same_again"] = torch_xla._XLAC._get_xla_sharding_spec(xt)
try:
    xs.mark_sharding(xt, mesh22, (0, 1))
    remark["refused"] = None
except RuntimeError as refusal:
    remark["refused"] = str(refusal)
remark["after_refusal"] = torch_xla._XLAC._get_xla_sharding_spec(xt)
xs.clear_sharding(xt)
xs.mark_sharding(xt, mesh22, (0, 1))
remark["after_clear"] = torch_xla._XLAC._get_xla_sharding_spec(xt)
remark["value"] = xt.cpu().tolist() == t.tolist()
# annotate_custom_sharding: another split is allowed, as an annotation in the graph; the data is unchanged.
at = torch.arange(16.0).reshape(4, 4).to("xla")
xs.mark_sharding(at, mesh22, (0, None))
remark["annotated"] = [type(xs.annotate_custom_sharding(at, mesh22, (None, 1))).__name__,
                       torch_xla._XLAC._get_xla_sharding_spec(at)]
torch_xla.sync()
remark["annotated_synced"] = torch_xla._XLAC._get_xla_sharding_spec(at)
remark["annotated_value"] = at.cpu().tolist() == torch.arange(16.0).reshape(4, 4).tolist()
out["remark"] = remark

# Local shards: tiled, replicated, partially replicated, each against the CPU tensor.
mesh4 = xs.Mesh(ids, (n,))


def shards_of(st):
    return [{"data": s.data.tolist(), "device": s.shard_device, "replica": s.replica_id,
             "indices": None if s.indices is Ellipsis else [[i.start, i.stop, i.step] for i in s.indices],
             "unpadded": s.unpadded_data.tolist(), "on_cpu": s.data.device.type == "cpu"}
            for s in st.local_shards]


v = torch.arange(8, dtype=torch.float32)
m = torch.arange(64, dtype=torch.float32).reshape(8, 8)
out["shards"] = {"vector": v.tolist(), "matrix": m.tolist(),
                 "tiled": shards_of(xs.mark_sharding(v.to("xla"), mesh4, (0,))),
                 "replicated": shards_of(xs.mark_sharding(v.to("xla"), mesh4, (None,))),
                 "partial": shards_of(xs.mark_sharding(m.to("xla"), mesh22, (None, 1)))}
# A pending value is synced first: its shards are the computed value's.
pending = xs.mark_sharding(v.to("xla"), mesh4, (0,)) * 2
out["shards"]["pending"] = shards_of(pending)

# Loading shards back.
lt = xs.mark_sharding((v + 1).to("xla"), mesh4, (0,))
pieces = lt.local_shards
for s in pieces:
    s.data *= -1
lt.load_local_shards_(pieces)
out["load"] = {"got": lt.global_tensor.cpu().tolist(), "want": (-(v + 1)).tolist(),
               "spec": lt.sharding_spec,
               "missing": error(lambda: lt.load_local_shards_(pieces[:-1])),
               "shape": error(lambda: lt.load_local_shards_(
                   [xs.XLAShard(torch.zeros(4), s.indices, s.shard_device, 0) for s in pieces])),
               "replicated": error(lambda: xs.mark_sharding(v.to("xla"), mesh4, (None,)).load_local_shards_(
                   pieces))}

# A mesh over the devices in reverse order: the text and the shards must name where the data is.
flipped = xs.Mesh(np.flip(ids), (1, n))
ft = xs.mark_sharding(m.to("xla"), flipped, (0, 1))
out["flipped"] = {"spec": ft.sharding_spec, "shards": shards_of(ft)}

# Ops on the wrapper run on the tensor it wraps and come back wrapped; plain tensors stay plain.
torch.manual_seed(0)
lin = nn.Linear(4, 3)
x = torch.randn(8, 4)
xlin = nn.Linear(4, 3).to("xla")
xlin.load_state_dict(lin.state_dict())
wrapped = xs.mark_sharding(x.to("xla"), mesh22, ("data", None))
y = xlin(wrapped)
plain = xlin(x.to("xla"))
out["ops"] = {"type": type(y).__name__, "plain_type": type(plain).__name__, "got": y.global_tensor.cpu().tolist(), "cpu_type": type(y.cpu()).__name__,
              "want": lin(x).tolist(), "scale": (x.abs() @ lin.weight.abs().T + lin.bias.abs()).max().item(),
              "terms": 5, "in_repr": "XLAShardedTensor" in str(y), "plain_repr": "XLAShardedTensor" in str(plain)}

# Mesh checks, as PyTorch/XLA asserts them.
out["mesh"] = {"ids_type": type(mesh22.device_ids).__name__, "logical": mesh22.get_logical_mesh().tolist(),
               "shape": list(mesh22.shape().items()), "numbered": list(xs.Mesh(ids, (n,)).shape().items()),
               "size": int(mesh22.size()), "axis_idx": [mesh22.get_axis_name_idx("model"),
                                                        mesh22.get_axis_name_idx("nope")],
               "roundtrip": str(xs.Mesh.from_str(str(mesh22))) == str(mesh22),
               "from_bad": xs.Mesh.from_str("not a mesh") is None,
               "too_few": error(lambda: xs.Mesh(ids[:2], (2,))),
               "bad_shape": error(lambda: xs.Mesh(ids, (3, 2))),
               "names": error(lambda: xs.Mesh(ids, (2, 2), ("a",))),
               "unique_names": error(lambda: xs.Mesh(ids, (2, 2), ("a", "a"))),
               "repeated_ids": error(lambda: xs.Mesh([0, 0, 1, 2], (4,))),
               "by_name_unnamed": error(lambda: xs.mark_sharding(torch.zeros(4, device="xla"), mesh4, ("x",)))}
hybrid = xs.HybridMesh(ici_mesh_shape=(1, n), axis_names=("dcn", "ici"))
out["hybrid"] = {"shape": list(hybrid.shape().items()), "ids": hybrid.device_ids.tolist(),
                 "multislice": error(lambda: xs.HybridMesh(ici_mesh_shape=(1, 2), dcn_mesh_shape=(2, 1))),
                 "lengths": error(lambda: xs.HybridMesh(ici_mesh_shape=(1, n), dcn_mesh_shape=(1,)))}
xs.set_global_mesh(hybrid)
out["hybrid"]["global"] = xs.get_global_mesh() is hybrid

# mark_sharding_with_gradients: a sharded copy whose gradient is sharded too; against eager CPU.
a, w = torch.randn(8, 6), torch.randn(6, 4)
xa, xw = a.to("xla"), w.to("xla").requires_grad_()
h = xa @ xw
hs = xs.mark_sharding_with_gradients(h, mesh22, ("data", "model"))
out["with_gradients"] = {"spec": torch_xla._XLAC._get_xla_sharding_spec(hs),
                         "input_spec": torch_xla._XLAC._get_xla_sharding_spec(h),
                         "wrong_rank": error(lambda: xs.mark_sharding_with_gradients(h, mesh22, (0,)))}
(hs.tanh().sum()).backward()
cw = w.clone().requires_grad_()
((a @ cw).tanh().sum()).backward()
out["with_gradients"].update(grad=xw.grad.cpu().tolist(), want=cw.grad.tolist(), scale=a.abs().sum(0).max().item(),
                             terms=8 + 6, value=hs.detach().cpu().tolist(), value_want=(a @ w).tolist(),
                             value_scale=(a.abs() @ w.abs()).max().item())

# xla_patched_nn_linear_forward: a Linear through einsums, 3-d input, forward and gradients.
torch.manual_seed(3)
cpu_lin = nn.Linear(5, 3)
inp = torch.randn(2, 4, 5)
dev_lin = nn.Linear(5, 3).to("xla")
dev_lin.load_state_dict(cpu_lin.state_dict())
dev_lin.forward = types.MethodType(xs.xla_patched_nn_linear_forward, dev_lin)
dinp = inp.to("xla").requires_grad_()
dout = dev_lin(dinp)
dout.square().sum().backward()
cinp = inp.clone().requires_grad_()
cout = cpu_lin(cinp)
cout.square().sum().backward()
# Bounds' magnitudes: each value's sum of |terms| (the loss's gradient is 2·out).
absx, absw, g = inp.abs().reshape(-1, 5), cpu_lin.weight.detach().abs(), 2 * cout.detach().abs().reshape(-1, 3)
out["patched"] = {"got": dout.detach().cpu().tolist(), "want": cout.detach().tolist(),
                  "grad_w": dev_lin.weight.grad.cpu().tolist(), "want_w": cpu_lin.weight.grad.tolist(),
                  "grad_b": dev_lin.bias.grad.cpu().tolist(), "want_b": cpu_lin.bias.grad.tolist(),
                  "grad_in": dinp.grad.cpu().tolist(), "want_in": cinp.grad.tolist(),
                  "out_scale": float((absx @ absw.T + cpu_lin.bias.detach().abs()).max()),
                  "w_scale": float((g.T @ absx).max()), "b_scale": float(g.sum(0).max()),
                  "in_scale": float((g @ absw).max()), "x_colsum": float(absx.sum(0).max()),
                  "w_colsum": float(absw.sum(0).max()), "positions": absx.shape[0]}

# Manual sharding: a region written per device, between enable_manual_sharding and disable_manual_sharding. In a
# function, as PyTorch/XLA's kernels write it: a value inside a region still live at the next barrier is left
# uncomputed (below).
def manual_region():
    base = torch.arange(8 * 8 * n, dtype=torch.float32).reshape(8, 8 * n)
    whole = base.to("xla")
    piece = xs.enable_manual_sharding(whole, ("data", "model"), mesh=mesh22)
    per_device = piece.global_tensor.sum(dim=1, keepdim=True) * 2  # each device sums its own piece's rows
    back = xs.disable_manual_sharding(per_device, ("data", "model"), (8, 2), mesh=mesh22)
    xs.set_global_mesh(mesh22)
    # another split needs another tensor: `whole` is split already (PyTorch/XLA refuses to split it again)
    columns = base.to("xla")
    plain = xs.disable_manual_sharding(xs.enable_manual_sharding(columns, (None, "model")).global_tensor + 1,
                                       (None, "model"), whole.shape)
    return {
        "piece_shape": list(piece.global_tensor.shape), "back_shape": list(back.global_tensor.shape),
        "back": back.global_tensor.cpu().tolist(),
        "want": (base.reshape(2, 4, 2, 4 * n).sum(dim=3) * 2).reshape(8, 2).tolist(),
        "plain_ok": bool(torch.equal(plain.global_tensor.cpu(), base + 1)),
        "kept_inside": error(lambda: (xs.enable_manual_sharding(base.to("xla"), ("data", None), mesh=mesh22)
                                      .global_tensor + 1).cpu()),
        # In one graph with a region that ends, another start read without its end: still refused.
        "dangling_beside_a_region": error(lambda: (
            xs.disable_manual_sharding(xs.enable_manual_sharding(columns, (None, "model")).global_tensor * 3,
                                       (None, "model"), whole.shape).global_tensor.sum()
            + xs.enable_manual_sharding(columns, (None, "model")).global_tensor.sum()).cpu()),
        "not_dividing": error(lambda: xs.enable_manual_sharding(torch.ones(3, 4, device="xla"), ("data", None),
                                                                mesh=mesh22)),
        "no_region": error(lambda: xs.disable_manual_sharding(whole, ("data", None), (16, 8 * n), mesh=mesh22)),
        "grad": region_gradient(base),
        "bindings": region_through_bindings(base),
    }


def region_through_bindings(base):
    """The same region through PyTorch/XLA's bindings: the start split as the tensor's own mark says, the pieces
    named manual, the end as an OpSharding of the mesh says."""
    whole = base.to("xla")
    marked = xs.mark_sharding(whole, mesh22, ("data", "model"))
    piece = torch_xla._XLAC._spmd_full_to_shard_shape(marked.global_tensor)
    named = xs._mark_manual_sharding(piece * 2)
    back = torch_xla._XLAC._spmd_shard_to_full_shape(named.global_tensor, mesh22.get_op_sharding(("data", "model")),
                                                     base.shape, base.dtype)
    return {"piece_shape": list(piece.shape), "named": [named.sharding_type.name, named.sharding_spec],
            "back_spec": torch_xla._XLAC._get_xla_sharding_spec(back), "back_shape": list(back.shape),
            "exact": bool(torch.equal(back.cpu(), base * 2)),
            "unmarked": error(lambda: torch_xla._XLAC._spmd_full_to_shard_shape(torch.ones(4, 4, device="xla"))),
            "outside": error(lambda: xs._mark_manual_sharding(torch.ones(4, 4, device="xla") + 1)),
            "is_runtime_error": issubclass(type(_raised(lambda: xs._mark_manual_sharding(
                torch.ones(4, 4, device="xla")))), RuntimeError)}


def _raised(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 (the test asserts its class)
        return exc
    return None


def region_gradient(base):
    """d/dx of sum(2 sin(x) * w) through a region (each device's piece times its piece of w), against eager."""
    w_cpu = torch.linspace(-1, 1, base.numel()).reshape(base.shape)
    x = (base / base.numel()).to("xla").requires_grad_()
    w = w_cpu.to("xla")
    pieces = [xs.enable_manual_sharding(v, ("data", "model"), mesh=mesh22).global_tensor for v in (x, w)]
    out = xs.disable_manual_sharding(pieces[0].sin() * 2 * pieces[1], ("data", "model"), base.shape, mesh=mesh22)
    out.global_tensor.sum().backward()
    del pieces, out
    x_cpu = (base / base.numel()).requires_grad_()
    (x_cpu.sin() * 2 * w_cpu).sum().backward()
    return {"got": x.grad.cpu().tolist(), "want": x_cpu.grad.tolist()}


out["manual"] = manual_region()


# A region never ended, its value kept past a barrier (in a variable, or a failed test's traceback): the barrier
# computes the other tensors and warns; reading the value still raises.
def dangling_at_barrier():
    kept = xs.enable_manual_sharding(torch.ones(8, 8 * n, device="xla"), ("data", "model"),
                                     mesh=mesh22).global_tensor + 1
    other = torch.ones(4, device="xla") * 3
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch_xla.sync()
    return {"warned": [str(w.message) for w in caught if "manual region" in str(w.message)],
            "other_is_data": "XLAData: None" not in torch_xla._XLAC._get_xla_tensor_debug_info(other),
            "other": other.cpu().tolist(), "read": error(lambda: kept.cpu())}


out["dangling"] = dangling_at_barrier()
torch_xla.sync()  # the region's values died with the function: the barrier has nothing of them to sync
# FSDPv2: parameters split over "fsdp" along their largest dimension, the output along the batch; trains as
# the CPU model does.
from torch_xla.experimental.spmd_fully_sharded_data_parallel import SpmdFullyShardedDataParallel as FSDPv2  # noqa: E402


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 1)

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x)))


torch.manual_seed(4)
cpu_net = Net()
net = Net().to("xla")
net.load_state_dict(cpu_net.state_dict())
fsdp_mesh = xs.Mesh(ids, (n, 1), ("fsdp", "tensor"))
net.fc1 = FSDPv2(net.fc1, mesh=fsdp_mesh)
net.fc2 = FSDPv2(net.fc2, mesh=fsdp_mesh)
net = FSDPv2(net, mesh=fsdp_mesh)
fsdp = {"specs": {name: torch_xla._XLAC._get_xla_sharding_spec(p) for name, p in net.named_parameters()},
        "no_fsdp": error(lambda: FSDPv2(Net(), mesh=mesh22)),
        "twice": error(lambda: FSDPv2(net, mesh=fsdp_mesh)),
        "module_list": error(lambda: FSDPv2(nn.ModuleList([nn.Linear(2, 2)]), mesh=fsdp_mesh)),
        "callable_alone": error(lambda: FSDPv2(Net(), mesh=fsdp_mesh, auto_wrapper_callable=lambda m, **k: m))}
# auto_wrap_policy: the Linear layers wrapped first (each its own FSDPv2 on the same mesh), or by the callable.
import functools  # noqa: E402

from torch_xla.distributed.fsdp.wrap import transformer_auto_wrap_policy  # noqa: E402

linears = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={nn.Linear})
auto = FSDPv2(Net(), mesh=fsdp_mesh, auto_wrap_policy=linears)
by_callable = FSDPv2(Net(), mesh=fsdp_mesh, auto_wrap_policy=linears, auto_wrapper_callable=lambda m, *a, **k: m)
fsdp["policy"] = {"wrapped": [type(auto.fc1).__name__, type(auto.fc2).__name__],
                  "same_mesh": auto.fc1._mesh is fsdp_mesh,
                  "fc1_weight": torch_xla._XLAC._get_xla_sharding_spec(auto.fc1.weight),
                  "by_callable": [type(by_callable.fc1).__name__, type(by_callable.fc2).__name__]}
opt, cpu_opt = torch.optim.SGD(net.parameters(), lr=0.1), torch.optim.SGD(cpu_net.parameters(), lr=0.1)
g = torch.Generator().manual_seed(5)
losses, grad_scale = [], 0.0
for step in range(3):
    bx, by = torch.randn(8, 16, generator=g), torch.randn(8, 1, generator=g)
    cpu_opt.zero_grad()
    cpu_loss = ((cpu_net(bx) - by) ** 2).mean()
    cpu_loss.backward()
    grad_scale = max(grad_scale, max(float(p.grad.abs().max()) for p in cpu_net.parameters()))
    cpu_opt.step()
    opt.zero_grad()
    bxx = bx.to("xla")
    xs.mark_sharding(bxx, fsdp_mesh, ("fsdp", None))
    pred = net(bxx)
    fsdp.setdefault("output_spec", torch_xla._XLAC._get_xla_sharding_spec(pred))
    loss = ((pred - by.to("xla")) ** 2).mean()
    loss.backward()
    opt.step()
    torch_xla.sync()
    losses.append((float(cpu_loss), loss.item()))
fsdp.update(losses=losses, grad_scale=grad_scale,
            params={k: v.detach().cpu().tolist() for k, v in cpu_net.state_dict().items()},
            got={k.replace("_orig_module.", ""): v.detach().cpu().tolist() for k, v in net.state_dict().items()},
            specs_after={name: torch_xla._XLAC._get_xla_sharding_spec(p) for name, p in net.named_parameters()})
# The backward optimization barrier FSDPv2 puts on each wrapped module: fc2's gradients and its input's, in one.
opt.zero_grad()
((net(torch.randn(8, 16, generator=g).to("xla")) ** 2).mean()).backward()
barrier_hlo = torch_xla._XLAC._get_xla_tensors_hlo([net.fc2._orig_module.weight.grad])
fsdp["barriers"] = re.findall(r"= (\([^)]*\)) opt-barrier\(", barrier_hlo)
torch_xla.sync()
out["fsdp"] = fsdp

# A run over every device is timed and counted as PyTorch/XLA's SPMD mode does: ExecuteReplicatedTime and
# ExecuteReplicated, never ExecuteTime.
import torch_xla.core.xla_model as xm  # noqa: E402
import torch_xla.debug.metrics as met  # noqa: E402
met.clear_all()
mt = torch.ones(2, 2).to("xla")
xs.mark_sharding(mt, xs.Mesh(ids, (1, n)), (0, 1))
mt += 2
torch_xla.sync()
xm.wait_device_ops()
replicated = met.metric_data("ExecuteReplicatedTime")
out["metrics"] = {"replicated": None if replicated is None else replicated[:2],
                  "plain": met.metric_data("ExecuteTime"), "counter": met.counter_value("ExecuteReplicated")}

# The last graph (XLA_SAVE_TENSORS_FMT=hlo): its record ends with its output's sharding.
torch_xla.sync()
dx = xs.mark_sharding(torch.randn(8, 32).to("xla"), xs.Mesh(ids, (1, n)), (0, 1)).global_tensor
dres = dx + torch.randn(8, 32).to("xla")
torch_xla.sync()
out["dump_spec"] = torch_xla._XLAC._get_xla_sharding_spec(dres)
print("RESULT " + json.dumps(out))
