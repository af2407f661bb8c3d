"""Scenarios of PyTorch/XLA's debug-tool tests (test/debug_tool/), written against `torch_xla`, run under xladev run.

    PT_XLA_DEBUG_LEVEL=2 PT_XLA_DEBUG_FILE=debug.txt python -m xladev.run debug_blocks_script.py OUT_DIR

Each scenario starts from an empty debug file, runs, waits for the device, and leaves the debug file's bytes
in `OUT_DIR/<scenario>.txt`; test_debug_blocks_parsed.py parses them the way PyTorch/XLA's tests do. Each
scenario runs one call deeper than the module (in `scenario`), so a barrier's stack is deeper than the
default 8 frames, as under PyTorch/XLA's unittest runner.
"""

from __future__ import annotations

import os
import shutil
import sys

import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.profiler as xp
import torch_xla.distributed.parallel_loader as pl

DEBUG_FILE = os.environ["PT_XLA_DEBUG_FILE"]
OUT_DIR = sys.argv[1]
device = torch_xla.device()


def scenario(fn):
    """Runs `fn` from an empty debug file and keeps the file as `OUT_DIR/<fn name>.txt`."""
    xm.mark_step()  # what earlier scenarios left pending is not this one's
    xm.wait_device_ops()
    open(DEBUG_FILE, "w").close()
    fn()
    xm.wait_device_ops()
    shutil.copyfile(DEBUG_FILE, os.path.join(OUT_DIR, fn.__name__ + ".txt"))
    return fn


@scenario
def user_sync():  # test_user_sync
    t1 = torch.randn(2, 2, device=device)  # noqa: F841  (live at the sync, as in PyTorch/XLA's test)
    torch_xla.sync()


@scenario
def step_trace():  # test_step_trace
    with xp.StepTrace("train_pt_xla_debug"):
        t1 = torch.randn(3, 3, device=device)  # noqa: F841


@scenario
def parallel_loader():  # test_parallel_loader: ten batches, one compile, ten executions
    batches = [(torch.zeros(10, 3, 8, 8), torch.zeros(10, dtype=torch.int64)) for _ in range(10)]
    loader = pl.MpDeviceLoader(batches, device, loader_prefetch_size=8, device_prefetch_size=4,
                               host_to_device_transfer_threads=1)
    for data, target in loader:
        dummy = data + 100  # noqa: F841  (live until the next batch's barrier)


@scenario
def print_tensor():  # test_print
    print(torch.randn(5, 5, device=device))


@scenario
def frame():  # test_frame
    t1 = torch.randn(6, 6, device=device)  # noqa: F841
    torch_xla.sync()


@scenario
def launch():  # test_mp_pt_xla_debug: the same through torch_xla.launch (one process here)
    def _mp_fn(index):
        t1 = torch.randn(10, 10, device=device)
        t2 = t1 * 100  # noqa: F841
        torch_xla.sync()
        xm.wait_device_ops()

    torch_xla.launch(_mp_fn, args=())


@scenario
def compile_fn():  # test_torch_xla_compile
    t1 = torch.randn(12, 4, device=device)

    def toy_program(t1):
        return torch.logsumexp(t1, 1)

    torch_xla.compile(toy_program)(t1)


# Beyond PyTorch/XLA's tests: xladev writes more (a recompilation's cause, the exact read or fallback, an
# optimizer barrier) and its parsers must still read every block.


@scenario
def recompile():  # a new batch size each step: three graphs, each with xladev's Recompilation Cause section
    for rows in (8, 9, 10):
        total = (torch.ones(rows, 4).to(device) * 2).sum()  # noqa: F841
        xm.mark_step()


@scenario
def item_in_step():  # a read in the middle of the step, then the barrier
    loss = (torch.ones(4, 4, device=device) * 3).sum()
    loss.item()
    xm.mark_step()


@scenario
def optimizer_barrier():  # xm.optimizer_step(barrier=True): PyTorch/XLA names it "user torch_xla.sync"
    model = torch.nn.Linear(4, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(torch.ones(2, 4, device=device)).sum().backward()
    xm.optimizer_step(optimizer, barrier=True)
