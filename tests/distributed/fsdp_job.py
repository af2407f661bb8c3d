"""A PyTorch/XLA script run by `xladev run` (tests/distributed/test_fsdp_job.py): torch_xla.launch starts 2 processes
(CPU_NUM_DEVICES=2) that train the model of fsdp_models.py, each on its half of every batch, under FSDP in several
configurations and under ZeRO-1. Each case writes OUT/<case>.rank<R>.json (losses, collectives and executions per
step, memory, dtypes) and its checkpoints; the test compares them with eager CPU on the whole batch.
"""

import contextlib
import functools
import gc
import json
import os
import sys

import jax
import torch

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met
import torch_xla.runtime as xr
from torch_xla.distributed.fsdp import XlaFullyShardedDataParallel as FSDP, checkpoint_module
from torch_xla.distributed.fsdp.wrap import size_based_auto_wrap_policy, transformer_auto_wrap_policy
from torch_xla.distributed.zero_redundancy_optimizer import ZeroRedundancyOptimizer

from tests.distributed import fsdp_models as M

COUNTED = ("xla::all_gather", "xla::reduce_scatter")


def _counts() -> dict:
    counts = {name: met.counter_value(name) or 0 for name in COUNTED}
    counts["executions"] = (met.metric_data("ExecuteTime") or (0,))[0]
    return counts


def _live() -> dict:
    """The device's live buffers: their bytes (xladev's memory_info) and the largest one's element count.

    Dead tensors caught in reference cycles (autograd's graph, hooks) keep their buffers until Python's cyclic
    collector runs, at a moment that depends on the run: collect them first, so that the figures are the ones
    the program holds."""
    gc.collect()
    sizes = [a.size for a in jax.live_arrays() if not a.is_deleted()]
    return {"bytes": xm.get_memory_info()["bytes_used"], "largest": max(sizes, default=0)}


def _train(model, optimizer, rank, world, micro_batches=1, sync_each_step=True):
    """Trains on each process's half of every batch; returns the global mean loss per step, and the collectives
    recorded and graphs run per step."""
    device = torch_xla.device()
    losses, per_step = [], []
    for x, y in M.batches():
        x, y = M.half(x, rank, world).to(device), M.half(y, rank, world).to(device)
        before = _counts()
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for i, (xs, ys) in enumerate(zip(x.chunk(micro_batches), y.chunk(micro_batches))):
            last = i == micro_batches - 1
            context = model.no_sync() if not last else contextlib.nullcontext()
            with context:
                loss = M.loss_fn(model(xs), ys) / micro_batches
                loss.backward()
            total = total + loss.detach()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        xm.mark_step()
        after = _counts()
        per_step.append({k: after[k] - before[k] for k in after})
        losses.append(total)
    # Read once at the end: a read in the loop would run graphs of its own.
    mean = xm.all_reduce(xm.REDUCE_SUM, torch.stack(losses)) / world
    return mean.cpu().tolist(), per_step


def _save(out, case, model, rank, world, extra=None):
    ckpt = {"model": model.state_dict(), "shard_metadata": model.get_shard_metadata(), **(extra or {})}
    xm.save(ckpt, os.path.join(out, f"{case}_rank-{rank:08d}-of-{world:08d}.pth"), master_only=False)


def _write(out, case, rank, result):
    with open(os.path.join(out, f"{case}.rank{rank}.json"), "w") as fh:
        json.dump(result, fh)


def nested(out, rank, world):
    """Default options, one FSDP per Block by transformer_auto_wrap_policy, SGD with momentum."""
    xm.mark_step()
    base = _live()["bytes"]
    model = FSDP(M.build(), auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                                               transformer_layer_cls={M.Block}))
    wrapped = _live()["bytes"] - base
    optimizer = M.sgd(model.parameters())
    losses, per_step = _train(model, optimizer, rank, world)
    live = _live()
    # The whole model's gradient norm at the trained weights (on the first batch), without clipping; and
    # xm.optimizer_step, which would average different shards, refused.
    x, y = M.batches(1)[0]
    device = torch_xla.device()
    M.loss_fn(model(M.half(x, rank, world).to(device)), M.half(y, rank, world).to(device)).backward()
    norms = [float(model.clip_grad_norm_(1e9)), float(model.clip_grad_norm_(1e9, norm_type=float("inf")))]
    try:
        xm.optimizer_step(optimizer)
        refused = None
    except ValueError as error:
        refused = str(error)
    optimizer.zero_grad(set_to_none=True)
    xm.mark_step()
    _save(out, "nested", model, rank, world)
    _write(out, "nested", rank, {
        "losses": losses, "per_step": per_step, "wrapped_bytes": wrapped, "trained_bytes": live["bytes"] - base,
        "largest_live": live["largest"],
        "shard_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "buffer_bytes": sum(b.numel() * b.element_size() for b in model.buffers()),
        "momentum_bytes": sum(s["momentum_buffer"].numel() * 4 for s in optimizer.state.values()),
        "shards": {n: list(p.shape) for n, p in model.named_parameters()},
        "roots": [type(m.module.module).__name__ for m in model.modules() if isinstance(m, FSDP)],
        "grad_norms": norms, "optimizer_step": refused,
    })


def flat_checkpointed(out, rank, world):
    """flatten_parameters, size_based_auto_wrap_policy, each wrapped module checkpointed (checkpoint_module)."""
    policy = functools.partial(size_based_auto_wrap_policy, min_num_params=1000)
    model = FSDP(M.build(), flatten_parameters=True, auto_wrap_policy=policy,
                 auto_wrapper_callable=lambda m, *args, **kwargs: FSDP(checkpoint_module(m), *args, **kwargs))
    optimizer = M.sgd(model.parameters())
    losses, per_step = _train(model, optimizer, rank, world)
    _save(out, "flat", model, rank, world, {"optimizer": optimizer.state_dict()})
    _write(out, "flat", rank, {"losses": losses, "per_step": per_step,
                               "shards": {n: list(p.shape) for n, p in model.named_parameters()}})


def dim0_no_sync(out, rank, world):
    """shard_param_on_dim_0, FSDP nested by hand, Adam, and two micro-batches per step (the first under no_sync)."""
    net = M.build()
    for i, block in enumerate(net.blocks):
        net.blocks[i] = FSDP(block, shard_param_on_dim_0=True)
    model = FSDP(net, shard_param_on_dim_0=True)
    optimizer = M.adam(model.parameters())
    losses, per_step = _train(model, optimizer, rank, world, micro_batches=2)
    _save(out, "dim0", model, rank, world)
    _write(out, "dim0", rank, {"losses": losses, "per_step": per_step,
                               "shards": {n: list(p.shape) for n, p in model.named_parameters()}})


def bf16(out, rank, world):
    """compute_dtype=bfloat16: parameters gathered and used in bfloat16, shards and their gradients in float32."""
    model = FSDP(M.build(), compute_dtype=torch.bfloat16,
                 auto_wrap_policy=functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={M.Block}))
    optimizer = M.sgd(model.parameters())
    device = torch_xla.device()
    x, y = M.batches(1)[0]
    out_dtype = model(M.half(x, rank, world).to(device)).dtype
    M.loss_fn(model(M.half(x, rank, world).to(device)), M.half(y, rank, world).to(device)).backward()
    grad_dtypes = sorted({str(p.grad.dtype) for p in model.parameters()})
    optimizer.zero_grad(set_to_none=True)
    xm.mark_step()
    losses, per_step = _train(model, optimizer, rank, world)
    _save(out, "bf16", model, rank, world)
    fulls = sorted({str(t.dtype) for m in model.modules() if isinstance(m, FSDP) for t in m.full_params})
    _write(out, "bf16", rank, {"losses": losses, "per_step": per_step, "output_dtype": str(out_dtype),
                               "full_dtypes": fulls, "grad_dtypes": grad_dtypes,
                               "shard_dtypes": sorted({str(p.dtype) for p in model.parameters()}),
                               "buffer_dtypes": sorted({str(b.dtype) for b in model.buffers()})})


def zero1(out, rank, world):
    """ZeroRedundancyOptimizer over Adam with gradient clipping; then its state_dict saved and loaded."""
    device = torch_xla.device()
    model = M.build().to(device)
    xm.mark_step()
    base = _live()["bytes"]
    optimizer = ZeroRedundancyOptimizer(model.parameters(), torch.optim.Adam, lr=1e-2, grad_clipping=True,
                                        max_norm=M.CLIP, save_master_weights=True)
    losses, per_step = _train(model, optimizer, rank, world)
    state_bytes = sum(t.numel() * t.element_size() for s in optimizer.base_optimizer.state.values()
                      for t in s.values() if t.dim())
    master_bytes = sum(p.numel() * p.element_size() for g in optimizer.base_optimizer.param_groups
                       for p in g["params"])
    trained = _live()["bytes"] - base
    state = optimizer.state_dict()
    xm.save(state, os.path.join(out, f"zero1_state.rank{rank}.pth"), master_only=False)
    again = ZeroRedundancyOptimizer(model.parameters(), torch.optim.Adam, lr=1e-2, grad_clipping=True,
                                    max_norm=M.CLIP, save_master_weights=True)
    again.load_state_dict(state)
    same = all(torch.equal(a.cpu(), b.cpu()) for i, s in state["base_state"].items()
               for a, b in zip(s.values(), again.state_dict()["base_state"][i].values()) if torch.is_tensor(a))
    _write(out, "zero1", rank, {
        "losses": losses, "per_step": per_step, "trained_bytes": trained, "state_bytes": state_bytes,
        "master_bytes": master_bytes, "reloaded_state_equal": same,
        "params": {n: p.detach().cpu().flatten().tolist() for n, p in model.named_parameters()},
        "grad_norm": float(optimizer.grad_norm)})


CASES = {"nested": nested, "flat": flat_checkpointed, "dim0": dim0_no_sync, "bf16": bf16, "zero1": zero1}


def _mp_fn(index, out, cases):
    rank, world = xr.global_ordinal(), xr.world_size()
    for name in cases:
        CASES[name](out, rank, world)


if __name__ == "__main__":
    torch_xla.launch(_mp_fn, args=(sys.argv[1], sys.argv[2].split(",") if len(sys.argv) > 2 else list(CASES)))
