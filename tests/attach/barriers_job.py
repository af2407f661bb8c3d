"""A torch_xla job that steps through each of PyTorch/XLA's barriers: a compiled region, StepTrace, optimizer_step.

Run by tests/attach/test_real_torch_xla_attach.py under `xladev attach` (torch_xla's Python, not xladev's)."""
import torch, torch_xla, torch_xla.core.xla_model as xm
import torch_xla.debug.profiler as xp
dev = torch_xla.device()
m = torch.nn.Linear(8, 4).to(dev)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
def train(x):
    opt.zero_grad(); m(x).sum().backward(); opt.step()
for i in range(3):
    with torch_xla.compile(name="train_step"):
        train(torch.randn(4, 8, device=dev))
for i in range(3):
    with xp.StepTrace("train", step_num=i):
        train(torch.randn(4, 8, device=dev))
for i in range(3):
    train(torch.randn(4, 8, device=dev))
    xm.optimizer_step(opt, barrier=True)
