"""The torch_xla side of bench_attach.py: one training process, timed block by block on its parent's command.

    PJRT_DEVICE=CPU ~/txla/bin/python tools/bench/_attach_worker.py WIDTH BATCH WARMUP

Reads "K" lines on stdin (K steps of an MLP, each ending in torch_xla.sync(), then a wait for the device) and
answers the seconds per step on stdout; an empty line ends it. Imports nothing of xladev: under `xladev attach`
the adapter attaches through its import hook, exactly as for a user's script.
"""

import sys
import time

import torch
import torch_xla
import torch_xla.core.xla_model as xm

width, batch, warmup = (int(a) for a in sys.argv[1:4])
device = torch_xla.device()
torch.manual_seed(0)
model = torch.nn.Sequential(*[m for _ in range(4) for m in (torch.nn.Linear(width, width), torch.nn.ReLU())]).to(device)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(batch, width, device=device)


def step():
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()
    torch_xla.sync()


for _ in range(warmup):
    step()
xm.wait_device_ops()
attached = getattr(sys.modules.get("xladev.attach"), "_attached", None)
# The adapter's time from here on: the steady steps', not the first steps' compiles.
before = (attached.own_ns, attached.poll_ns, attached.step) if attached is not None else None
print("ready", flush=True)
for line in sys.stdin:
    if not line.strip():
        if attached is not None:  # the adapter's own time at the barriers and on its thread, per step
            own, poll, first = before
            steps = max(1, attached.step - first)
            print(f"{(attached.own_ns - own) / 1e9 / steps} {(attached.poll_ns - poll) / 1e9 / steps}", flush=True)
        break
    steps = int(line)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    xm.wait_device_ops()
    print((time.perf_counter() - start) / steps, flush=True)
