"""Run by tests/runtime/test_spmd.py in a process with CPU_NUM_DEVICES=4: prints what it saw as one JSON line."""

import json

import torch
import torch.nn as nn

import xladev
import xladev.debug
import xladev.spmd as xs

out = {}
try:
    xs.mark_sharding(torch.ones(2, device="xla"), xs.Mesh(range(4), (4,)), (0,))
except RuntimeError as exc:
    out["before_use_spmd"] = str(exc)
xs.use_spmd()
dev = xladev.device()
mesh = xs.Mesh(range(4), (2, 2), ("data", "model"))

# A sharded matmul: rows of a over "data", columns of b over "model", the result over both.
torch.manual_seed(0)
a, b = torch.randn(8, 6), torch.randn(6, 4)
xa, xb = a.to(dev), b.to(dev)
xs.mark_sharding(xa, mesh, ("data", None))
xs.mark_sharding(xb, mesh, (None, 1))
c = xa @ xb
xs.mark_sharding(c, mesh, ("data", "model"))  # a value being recorded: a constraint in the graph
out["specs"] = [xs.get_sharding_spec(t) for t in (xa, xb, c)]
out["ir"] = xladev.debug.get_tensors_text([c])
out["hlo"] = xladev.debug.get_tensors_hlo([c])
xladev.mark_step()
out["matmul"] = {"got": c.cpu().tolist(), "want": (a @ b).tolist(),
                 "scale": (a.abs() @ b.abs()).max().item(), "terms": 6, "spec_after": xs.get_sharding_spec(c)}

# An MLP trained with the batch split over "data" and the hidden layer over "model" (Megatron-style), against
# the same MLP trained unsharded on the CPU.
def build():
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 8))

cpu_model, model = build(), build().to(dev)
xs.mark_sharding(model[0].weight, mesh, ("model", None))
xs.mark_sharding(model[0].bias, mesh, ("model",))
xs.mark_sharding(model[2].weight, mesh, (None, "model"))
out["weight_specs"] = [xs.get_sharding_spec(p) for p in model.parameters()]
cpu_opt = torch.optim.SGD(cpu_model.parameters(), lr=0.1, momentum=0.9)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
g = torch.Generator().manual_seed(2)
losses, grad_scale = [], 0.0
for step in range(5):
    x, y = torch.randn(16, 16, generator=g), torch.randn(16, 8, generator=g)
    cpu_opt.zero_grad()
    cpu_loss = ((cpu_model(x) - y) ** 2).mean()
    cpu_loss.backward()
    grad_scale = max(grad_scale, max(float(p.grad.abs().max()) for p in cpu_model.parameters()))
    cpu_opt.step()
    opt.zero_grad()
    xx = x.to(dev)
    xs.mark_sharding(xx, mesh, ("data", None))
    loss = ((model(xx) - y.to(dev)) ** 2).mean()
    loss.backward()
    opt.step()
    xladev.mark_step()
    losses.append((float(cpu_loss), loss.item()))
out["mlp"] = {"losses": losses, "grad_scale": grad_scale,
              "params": {n: p.detach().cpu().tolist() for n, p in model.named_parameters()},
              "cpu_params": {n: p.detach().tolist() for n, p in cpu_model.named_parameters()}}
import io, contextlib
text = io.StringIO()
with contextlib.redirect_stdout(text):
    xs.visualize_tensor_sharding(c, use_color=False)
    xs.visualize_sharding("{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}", use_color=False)
    xs.visualize_sharding("{replicated}", use_color=False)
out["visual"] = text.getvalue()
try:
    xs.mark_sharding(xa, mesh, ("data", "data"))
except ValueError as exc:
    out["bad_spec"] = str(exc)
# PyTorch/XLA's names for the same (the alias `xladev run` gives a script).
import sys
from xladev.cli.run import ALIAS_DIR
sys.path.insert(0, ALIAS_DIR)
import torch_xla.distributed.spmd as alias_xs
import torch_xla.distributed.spmd.debugging as alias_debugging
import torch_xla.runtime as xr
alias_xs.set_global_mesh(alias_xs.get_1d_mesh("data"))
out["alias"] = {"is_spmd": xr.is_spmd(), "mark_sharding": alias_xs.mark_sharding is xs.mark_sharding,
                "visualize": alias_debugging.visualize_tensor_sharding is xs.visualize_tensor_sharding,
                "mesh": alias_xs.get_global_mesh().shape()}
print("RESULT " + json.dumps(out))
