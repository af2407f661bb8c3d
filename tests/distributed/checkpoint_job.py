"""Jobs of tests/distributed/test_checkpoint_jobs.py: a CheckpointManager in processes that die.

    checkpoint_job.py killmid BASE FLAG   saves steps 1 and 2, then stalls mid-save of step 3 (touching FLAG)
    checkpoint_job.py verify BASE         what a new manager finds in BASE, as one JSON line
    checkpoint_job.py preempt BASE        saves each step; after SIGTERM, checkpoints the agreed step and ends
    checkpoint_job.py preempt2 BASE OUT   the same in two processes (xladev.launch), with save_async
    checkpoint_job.py idle BASE           detection on, no checkpoint: a forked child, then SIGTERM(s) or the grace

The state is exact: a sharded `w` (and `b`) holding `W0 + step` at each step, so a restored value says which
step it is. Everything runs through the torch_xla alias, as a PyTorch/XLA script would.
"""

import json
import os
import signal
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from xladev.cli.run import ALIAS_DIR

sys.path.insert(0, ALIAS_DIR)
import torch_xla  # noqa: E402
import torch_xla.distributed.spmd as xs  # noqa: E402
import torch_xla.runtime as xr  # noqa: E402
from torch_xla.experimental.distributed_checkpoint import CheckpointManager  # noqa: E402

warnings.simplefilter("ignore")  # torch.distributed.checkpoint warns that a lone process has no group

W0 = torch.arange(32, dtype=torch.float32).reshape(8, 4)


class Stall:
    """A value of the state dict whose pickling (torch.distributed.checkpoint pickles non-tensor values while
    it writes the checkpoint's files) stalls at one step, after touching a flag file: a save caught midway."""

    def __init__(self, step: int, stall_at: int, flag: str) -> None:
        self.step, self.stall_at, self.flag = step, stall_at, flag

    def __reduce__(self):
        if self.step == self.stall_at:
            Path(self.flag).write_text(str(os.getpid()))
            time.sleep(600)
        return (Stall, (self.step, self.stall_at, self.flag))


def state(step: int, sharded: bool = True) -> dict:
    w = (W0 + step).to("xla")
    b = torch.full((4,), float(step)).to("xla")
    if sharded:
        xs.mark_sharding(w, xs.Mesh(np.arange(xr.global_runtime_device_count()), (2,)), (0, None))
    return {"w": w, "b": b}


def killmid(base: str, flag: str) -> None:
    xr.use_spmd()
    mgr = CheckpointManager(base, save_interval=1, max_to_keep=2, chkpt_on_preemption=False)
    for step in (1, 2, 3):
        mgr.save(step, {"model": state(step), "note": Stall(step, 3, flag)})
    print("the save of step 3 finished, which it must not")


def verify(base: str) -> None:
    xr.use_spmd()
    mgr = CheckpointManager(base, save_interval=1, chkpt_on_preemption=False)
    out = {"steps": mgr.all_steps(), "left": sorted(p.name for p in Path(base).iterdir())}
    if out["steps"]:
        last = max(out["steps"])
        into = {"model": state(0)}
        try:
            mgr.restore(last, into)
            out["restored"] = {"step": last, "w": into["model"]["w"].cpu().tolist(), "b": into["model"]["b"].cpu().tolist(),
                               "w_sharding": torch_xla._XLAC._get_xla_sharding_spec(into["model"]["w"])}
        except Exception as exc:  # noqa: BLE001 - the type and message are what is checked
            out["restore_error"] = [type(exc).__name__, str(exc)]
    for step in (3,):
        try:
            mgr.restore(step, {"model": state(0)})
        except Exception as exc:  # noqa: BLE001
            out[f"restore_{step}"] = [type(exc).__name__, str(exc)]
    print("RESULT " + json.dumps(out), flush=True)


def preempt(base: str) -> None:
    xr.use_spmd()
    mgr = CheckpointManager(base, save_interval=1000)
    for step in range(1, 3000):
        reached = mgr.reached_preemption(step)
        print(f"step {step} reached={reached}", flush=True)
        mgr.save(step, {"model": state(step)})  # at the agreed step: written, then the process ends
        time.sleep(0.05)
    print("the loop ended without a preemption", flush=True)


def idle(base: str) -> None:
    """Detection on, then no checkpoint ever: only the second SIGTERM or the grace ends the process. First, a
    forked child (as a DataLoader worker) must still die by SIGTERM at once."""
    CheckpointManager(base, save_interval=1000)
    child = os.fork()
    if child == 0:
        time.sleep(60)
        os._exit(0)
    started = time.monotonic()
    os.kill(child, signal.SIGTERM)
    _, status = os.waitpid(child, 0)
    print(f"child ended by signal {os.WTERMSIG(status) if os.WIFSIGNALED(status) else None} "
          f"within 10 s: {time.monotonic() - started < 10}", file=sys.stderr, flush=True)
    print("ready", file=sys.stderr, flush=True)
    time.sleep(600)
    print("the idle process was not ended", file=sys.stderr, flush=True)


def _preempt2_rank(index: int, base: str, out: str) -> None:
    import torch.distributed as dist
    import torch_xla.core.xla_model as xm

    dist.init_process_group("xla", init_method="xla://")
    rank = xr.global_ordinal()
    log = open(os.path.join(out, f"rank{rank}.log"), "w", buffering=1)
    log.write(f"pid {os.getpid()}\n")
    mgr = CheckpointManager(base, save_interval=1000)
    w = W0.to("xla")
    for step in range(1, 3000):
        # The ranks step together, as data-parallel training does: each step's graph all-reduces.
        w = w + xm.all_reduce(xm.REDUCE_SUM, torch.ones((), device="xla")) / xr.world_size()
        torch_xla.sync()
        reached = mgr.reached_preemption(step)
        log.write(f"step {step} reached={reached}\n")
        mgr.save_async(step, {"model": {"w": w, "b": torch.full((4,), float(step)).to("xla")}})
        if reached:  # a rank without SIGTERM goes on: here it stops, as a script ending its job would
            mgr.join()
            log.write("stopped after the preemption checkpoint\n")
            return
        time.sleep(0.05)
    log.write("the loop ended without a preemption\n")


def preempt2(base: str, out: str) -> None:
    torch_xla.launch(_preempt2_rank, args=(base, out))


if __name__ == "__main__":
    mode, *rest = sys.argv[1:]
    {"killmid": killmid, "verify": verify, "preempt": preempt, "preempt2": preempt2, "idle": idle}[mode](*rest)
