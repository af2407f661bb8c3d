"""Child process of the cross-process tests: a real training loop on xla with a profiler server.

    python _child_train.py PORT MAX_SECONDS

Prints `READY <graph hash>` once the server runs and the step has compiled, then trains until killed
or MAX_SECONDS have passed (a safety bound: the parent always kills it first).
"""

import sys
import time

import torch

import xladev
import xladev.debug.profiler as xp
from xladev.runtime.api.runtime_state import executor


def main() -> None:
    port, max_seconds = int(sys.argv[1]), float(sys.argv[2])
    xp.start_server(port)
    device = xladev.device()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 16).to(device), torch.randn(8, 1).to(device)

    def step(i: int) -> None:
        with xp.StepTrace("child_train", step_num=i):
            with xp.Trace("child_forward"):
                loss = ((model(x) - y) ** 2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()

    for i in range(3):
        step(i)
    print("READY", " ".join(executor.by_hash), flush=True)
    end = time.monotonic() + max_seconds
    i = 3
    while time.monotonic() < end:
        step(i)
        i += 1
        time.sleep(0.002)


if __name__ == "__main__":
    main()
