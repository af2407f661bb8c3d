"""A step of SPMD training on 4 CPU devices through the torch_xla alias: a weight split by rows over the mesh, a
replicated batch. Run by tests/runtime/test_sharding_layout.py with the event log and PT_XLA_DEBUG_FILE on."""

from __future__ import annotations

import sys

import numpy as np
import torch

from xladev.cli.run import ALIAS_DIR

sys.path.insert(0, ALIAS_DIR)
import torch_xla  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402

xr.use_spmd()
mesh = xs.Mesh(np.arange(4), (4, 1), ("fsdp", "model"))
device = torch_xla.device()
weight = torch.arange(16 * 8, dtype=torch.float32).reshape(16, 8).div(100).to(device).requires_grad_()
xs.mark_sharding(weight, mesh, ("fsdp", None))
batch = torch.ones(4, 8).to(device)
for _ in range(2):
    loss = (batch @ weight.T).relu().sum()
    loss.backward()
    with torch.no_grad():
        weight -= 0.01 * weight.grad
        weight.grad = None
    torch_xla.sync()
print(loss.item())
