"""`torch_xla.amp` through `xladev run`: PyTorch/XLA's AMP training scripts run unchanged.

One real subprocess of `xladev run` on a script in the style of PyTorch/XLA's `test_train_mp_mnist_amp.py`
(autocast, GradScaler, a syncfree optimizer, `xm._fetch_gradients` + `xm.all_reduce` before `scaler.step`)
and of `examples/train_resnet_amp.py` (autocast around the forward pass only, `xm.optimizer_step`).
"""

from __future__ import annotations

import json

from tests.compat.test_torch_xla_alias import _run, _xladev

SCRIPT = '''
import json, sys
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
from torch_xla import runtime as xr
from torch_xla.amp import autocast, GradScaler, syncfree

torch.manual_seed(0)
device = torch_xla.device()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 3 * 3, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return F.log_softmax(self.fc(torch.flatten(x, 1)), dim=1)


data = [(torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,)))] * 6  # one batch: the loss must fall
results = {}

# test_train_mp_mnist_amp.py's step: float16 with the scaler and a sync-free optimizer.
model = Net().to(device)
optimizer = syncfree.SGD(model.parameters(), lr=0.1, momentum=0.5)
scaler = GradScaler()
losses, reads = [], []
for x, y in data:
    optimizer.zero_grad()
    with autocast(device, dtype=torch.float16):
        output = model(x.to(device))
        loss = F.nll_loss(output, y.to(device))
    results.setdefault("dtypes", [str(output.dtype), str(loss.dtype)])
    scaler.scale(loss).backward()
    gradients = xm._fetch_gradients(optimizer)
    xm.all_reduce("sum", gradients, scale=1.0 / xr.world_size())
    before = met.metric_data("TransferFromDeviceTime")
    scaler.step(optimizer)
    scaler.update()
    after = met.metric_data("TransferFromDeviceTime")
    reads.append((after or (0,))[0] - (before or (0,))[0])
    xm.mark_step()
    losses.append(loss.item())
results["scaler"] = {"losses": losses, "reads": reads, "scale": scaler.get_scale()}

# examples/train_resnet_amp.py's step: bfloat16, no scaler.
model = Net().to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []
for x, y in data:
    optimizer.zero_grad()
    with autocast(device):
        loss = F.nll_loss(model(x.to(device)), y.to(device))
    loss.backward()
    xm.optimizer_step(optimizer)
    xm.mark_step()
    losses.append(loss.item())
results["bf16"] = {"losses": losses}
results["fallbacks"] = [n for n in met.counter_names() if n.startswith("aten::") and n != "aten::_local_scalar_dense"]
# PyTorch/XLA keeps each sync-free optimizer in a module of its own; scripts import them from there too.
from torch_xla.amp.syncfree.adam import Adam
from torch_xla.amp.syncfree.adamw import AdamW
from torch_xla.amp.syncfree.sgd import SGD
results["submodules"] = [Adam is syncfree.Adam, AdamW is syncfree.AdamW, SGD is syncfree.SGD]
json.dump(results, open(sys.argv[1], "w"))
'''


def test_pytorch_xla_amp_scripts_train_under_xladev_run(tmp_path):
    script = tmp_path / "train_amp.py"
    script.write_text(SCRIPT)
    result = _run([*_xladev(), "run", str(script), str(tmp_path / "out.json")], tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["dtypes"] == ["torch.float32", "torch.float32"]  # log_softmax and nll_loss: PyTorch/XLA's fp32 list
    scaler = out["scaler"]
    assert scaler["reads"] == [0] * 6  # scaler.step and update with syncfree.SGD: nothing read back
    assert scaler["scale"] == 2.0 ** 16  # no overflow at this scale, growth only every 2000 steps
    for losses in (scaler["losses"], out["bf16"]["losses"]):
        assert all(0 < v < 10 for v in losses) and losses[-1] < losses[0], losses
    assert out["fallbacks"] == []  # the amp ops are recorded, not run on the CPU
    assert out["submodules"] == [True, True, True]
