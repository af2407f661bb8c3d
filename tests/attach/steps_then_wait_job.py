"""A torch_xla job that trains 3 steps, says so, then waits (no barrier) until its parent creates the file named
by its argument: the adapter's log must show the 3 steps meanwhile, not at the next barrier or the end.

Run by tests/attach/test_real_torch_xla_attach.py under `xladev attach` (torch_xla's Python, not xladev's)."""
import os, sys, time
import torch, torch_xla, torch_xla.core.xla_model as xm
dev = torch_xla.device()
m = torch.nn.Linear(1024, 1024).to(dev)  # big enough that each step's run outlasts the barrier
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(3):
    opt.zero_grad(); m(torch.ones(1024, 1024, device=dev)).sum().backward(); opt.step()
    torch_xla.sync()
xm.wait_device_ops()
print("stepped", flush=True)
deadline = time.monotonic() + 120
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.05)
