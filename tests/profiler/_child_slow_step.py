"""Child process of the profile-contents tests: a training loop with every host-side cost a profile must explain.

    XLADEV_EVENT_LOG=run.events.jsonl XLADEV_PROFILE_STEPS=2:5 XLADEV_PROFILE_DIR=logs python _child_slow_step.py

Each step uploads its batch, reads the loss mid-step (`.item()`, then `print`), runs an op with no lowering
on the CPU (`torch.nonzero`), and queues a step closure that reads a tensor; step 3 gets a longer batch,
so its graphs recompile at the same lines. The lines the tests look for carry a `# <- name` marker.
"""

import torch

import xladev
import xladev.debug.profiler as xp

STEPS = 5  # the profiled window is steps 2-4
RECOMPILE_AT = 3


def train() -> None:
    device = xladev.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = []
    for step in range(STEPS):
        rows = 12 if step >= RECOMPILE_AT else 8
        x = torch.randn(rows, 16).to(device)  # <- upload
        y = torch.randn(rows, 1).to(device)
        with xp.StepTrace("train", step_num=step):
            loss = ((model(x) - y) ** 2).mean()
            seen.append(loss.item())  # <- item
            print("loss", loss)  # <- print
            kept = torch.nonzero(x > 0)  # <- fallback
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            xladev.add_step_closure(lambda t: seen.append(float(t.sum().cpu())), args=(kept,))  # <- closure
    print("DONE", len(seen), flush=True)


if __name__ == "__main__":
    train()
