"""A torch_xla job of 400 short steps (a few ms each), printing torch_xla's own LazyTracing count and total at the
end: the adapter reads the tracing time every few barriers there, and must still give each step its own.

Run by tests/attach/test_real_torch_xla_attach.py under `xladev attach` (torch_xla's Python, not xladev's)."""
import torch, torch_xla, torch_xla.debug.metrics as met, torch_xla.core.xla_model as xm
dev = torch_xla.device()
m = torch.nn.Linear(64, 64).to(dev)
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x = torch.randn(8, 64, device=dev)
for i in range(400):
    opt.zero_grad(); m(x).sum().backward(); opt.step(); torch_xla.sync()
xm.wait_device_ops()
count, total, *_ = met.metric_data("LazyTracing")
print("LazyTracing", count, int(total), flush=True)
