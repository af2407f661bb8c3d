"""A script in the style of PyTorch/XLA's debug and metrics tests, run by test_torch_xla_alias.py under xladev run.

    PT_XLA_DEBUG_LEVEL=1 PT_XLA_DEBUG_FILE=debug.txt python -m xladev.run debug_script.py results.json

Each case starts from an empty debug file, drives `torch_xla` the way a PyTorch/XLA user (or its test suite)
would, and keeps what the debug file and the warnings said; the test reads `results.json` and judges. The
pitfall cases (dynamic shapes, `.item()` in the step, a loop without a barrier) come broken and fixed, as in
examples/pitfalls/. Needs `XLADEV_GRAPH_GROWTH_WARNING` low (300) for the missing-barrier case.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import warnings

import torch
import torch.nn.functional as F

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.debug.profiler as xp
import torch_xla.distributed.parallel_loader as pl

DEBUG_FILE = os.environ["PT_XLA_DEBUG_FILE"]
results: dict[str, dict] = {}
device = torch_xla.device()


def case(fn):
    """Runs `fn` as one case: its debug-file text, its warnings, and what it returned, under its name."""
    xm.mark_step()  # what earlier cases left pending is not this case's
    xm.wait_device_ops()
    open(DEBUG_FILE, "w").close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        extra = fn() or {}
        xm.wait_device_ops()
    with open(DEBUG_FILE) as f:
        results[fn.__name__] = {"debug": f.read(), "warnings": [str(w.message) for w in caught], **extra}
    return fn


@case
def user_sync():
    torch.randn(2, 2, device=device)
    torch_xla.sync()


@case
def step_trace():
    with xp.StepTrace("train_pt_xla_debug"):
        torch.randn(3, 3, device=device)


@case
def parallel_loader():
    batches = [(torch.zeros(10, 3, 8, 8), torch.zeros(10, dtype=torch.int64)) for _ in range(10)]
    loader = pl.MpDeviceLoader(batches, device, loader_prefetch_size=8, device_prefetch_size=4,
                               host_to_device_transfer_threads=1)
    for data, target in loader:
        dummy = data + 100  # noqa: F841  (a live result: a discarded one is never computed)


@case
def compile_fn():
    t1 = torch.randn(12, 4, device=device)
    result = torch_xla.compile(lambda t: torch.logsumexp(t, 1))(t1)
    return {"matches_cpu": bool(torch.allclose(result.cpu(), torch.logsumexp(t1.cpu(), 1)))}


@case
def print_tensor():
    print(torch.randn(5, 5, device=device))


@case
def dynamic_shapes():
    for rows in (8, 9, 10):  # a different batch size each step
        x = torch.randn(rows, 4).to(device)
        total = (x * 2).sum()  # noqa: F841
        xm.mark_step()


@case
def dynamic_shapes_fixed():
    for rows in (8, 9, 10):  # padded to one bucket size, the padding masked out
        x, mask = F.pad(torch.randn(rows, 4), (0, 0, 0, 16 - rows)).to(device), (torch.arange(16) < rows).to(device)
        total = ((x * 2).sum(1) * mask).sum()  # noqa: F841
        xm.mark_step()


@case
def item_in_step():
    loss = (torch.ones(4, 4, device=device) * 3).sum()
    loss.item()  # a sync in the middle of the step
    xm.mark_step()


@case
def item_in_step_fixed():
    loss = (torch.ones(4, 4, device=device) * 3).sum()
    values = []
    xm.add_step_closure(lambda value: values.append(value.item()), args=(loss,))
    xm.mark_step()
    return {"closure_values": values}


@case
def missing_barrier():
    x = torch.ones(4, device=device)
    for _ in range(400):
        x = x * 1.0001 + 0.5
    xm.mark_step()


@case
def missing_barrier_fixed():
    x = torch.ones(4, device=device)
    for _ in range(400):
        x = x * 1.0001 + 0.5
        xm.mark_step()


@case
def metrics():
    # As PyTorch/XLA's test_metrics.py: counters appear, clear, and count again.
    t1 = torch.tensor(100, device=device)
    t1 += 2
    before = "xla::add" in met.metrics_report()
    met.clear_counters()
    cleared = [met.counter_value("xla::add"), len(met.counter_names())]
    t1 += 2
    return {"before": before, "cleared": cleared, "after": "xla::add" in met.metrics_report()}


@case
def unsupported_import():
    try:
        from torch_xla.core.xla_model import send  # noqa: F401
    except ImportError as exc:
        return {"error": [base.__name__ for base in type(exc).__bases__], "message": str(exc)}
    return {"error": None}


@case
def child_process():
    # A child process the script starts imports the alias too (PYTHONPATH).
    code = "import importlib.util; print(importlib.util.find_spec('torch_xla').origin)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return {"child_origin": out.strip(), "own_origin": importlib.util.find_spec("torch_xla").origin}


with open(sys.argv[1], "w") as f:
    json.dump(results, f, indent=1)
