"""A PyTorch/XLA-style script of collectives over two processes, run by `xladev run` (test_collectives_job.py).

`torch_xla.launch` starts one process per CPU device (CPU_NUM_DEVICES=2). Each rank takes its inputs from
`inputs(rank)` (the test recomputes both ranks' on the CPU for its oracle), runs every case, and saves what
it got into OUT/rank<R>.pt: tensors as CPU tensors, errors as their messages, the graphs TorchDynamo captured
as their text. Last, rank 0 waits in a rendezvous rank 1 never joins (it has returned): OUT/late.txt says what
rank 0 got.
"""

import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

from tests.distributed.collectives_inputs import inputs

def _error(fn) -> str:
    try:
        fn()
    except Exception as exc:  # the message is the result
        return f"{type(exc).__name__}: {exc}"
    return "no error"


def cpu(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return [cpu(v) for v in value]
    if isinstance(value, dict):
        return {k: cpu(v) for k, v in value.items()}
    return value


def list_collectives(dev, data) -> dict:
    xs = [t.to(dev) for t in data["list"]]
    outputs = [torch.zeros(3, 2, 2, device=dev) for _ in xs]
    written = xm.reduce_scatter(xm.REDUCE_SUM, xs, 0.5, 1, 2, output=outputs, pin_layout=False)
    return cpu({
        "rs_pinned": xm.reduce_scatter(xm.REDUCE_SUM, xs, 0.5, 1, 2, pin_layout=True),
        "rs_output": outputs, "rs_output_is_output": written is outputs,
        "rs_bucketized": xm.reduce_scatter_bucketized(xm.REDUCE_SUM, xs, 0.5, 1, 2, bucket_cap_mb=0),
        "rs_max": xm.reduce_scatter(xm.REDUCE_MAX, xs[:2], 1.0, 2, 2, pin_layout=True),
        "ag_list": xm.all_gather(xs[:2], dim=1, pin_layout=True),
    })


def replica_groups(dev, data) -> dict:
    x = data["x"].to(dev)
    return cpu({
        "rs_reversed_group": xm.reduce_scatter(xm.REDUCE_SUM, x, 1.0, 0, 2, groups=[[1, 0]]),
        "ag_reversed_group": xm.all_gather(x, 0, groups=[[1, 0]]),
        "ar_own_groups": xm.all_reduce(xm.REDUCE_SUM, x, groups=[[0], [1]]),
    })


def rendezvous(rank: int) -> dict:
    from xladev.runtime.distributed import subgroup_rendezvous

    return {
        "own": xm.rendezvous("alone", f"ORD={rank}".encode(), replicas=[rank]),
        "reversed": xm.rendezvous("all", f"r{rank}".encode(), replicas=[1, 0]),
        # The exchange between members, twice under one tag: each round gets its own payloads.
        "rounds": [subgroup_rendezvous.exchange("pair", f"{rank}:{n}".encode() * (rank + 1), (rank, 1 - rank))
                   for n in range(2)],
        "not_a_member": _error(lambda: xm.rendezvous("x", b"", replicas=[1 - rank])),
    }


def _capturing(graphs: list):
    """A TorchDynamo backend keeping each captured graph's text, then compiling it with xladev's backend."""
    from xladev.runtime.dynamo.dynamo_backend import xladev_backend

    def backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        return xladev_backend(gm, example_inputs)

    return backend


def all_reduce_sum(t):
    return xm.all_reduce(xm.REDUCE_SUM, t)


def step(a, b, x):
    xm.all_reduce(xm.REDUCE_SUM, [a, b], scale=0.5)  # in place
    gathered = xm.all_gather(a * 2, dim=0)
    shards = xm.reduce_scatter(xm.REDUCE_SUM, [x, gathered], 1.0, 0, 2, pin_layout=False)
    return gathered, shards


def compiled(dev, data) -> dict:
    graphs: list = []
    x, y = data["x"].to(dev), data["y"].to(dev)
    out = {"xm_all_reduce": torch.compile(xm.all_reduce, backend=_capturing(graphs), fullgraph=True)(xm.REDUCE_SUM, x)}
    a, b = x.clone(), y.clone()
    gathered, shards = torch.compile(step, backend=_capturing(graphs), fullgraph=True)(a, b, x)
    out.update(step_a=a, step_b=b, step_gathered=gathered, step_shards=shards)
    out["openxla"] = torch.compile(all_reduce_sum, backend="openxla", fullgraph=True)(y)
    out["eager_backend"] = torch.compile(all_reduce_sum, backend="eager", fullgraph=True)(y)
    out = cpu(out)
    out["graphs"] = graphs
    return out


def functional(rank: int, dev, data) -> dict:
    world = dist.group.WORLD
    x, y = data["x"].to(dev), data["y"].to(dev)

    def fc_sum_twice(t):
        return fc.all_reduce(t, "sum", world) * 2

    def dist_all_reduce(t):
        dist.all_reduce(t)
        return t

    graphs: list = []
    return {**cpu({
        "all_reduce": fc.all_reduce(x, "sum", world),
        "avg": fc.all_reduce(y, "avg", world),
        "all_gather": fc.all_gather_tensor(x, 0, world),
        "reduce_scatter": fc.reduce_scatter_tensor(x, "sum", 0, world),
        "all_to_all": fc.all_to_all_single(y, None, None, world),
        "broadcast": fc.broadcast(y, 1, world),
        "compiled": torch.compile(fc_sum_twice, backend=_capturing(graphs), fullgraph=True)(x),
        "compiled_dist": torch.compile(dist_all_reduce, backend=_capturing(graphs), fullgraph=True)(x.clone()),
        # init_process_group cleared TorchDynamo's rules: xm's collectives are still traced.
        "xm_after_init": torch.compile(xm.all_reduce, backend=_capturing(graphs), fullgraph=True)(xm.REDUCE_SUM, y),
    }), "graphs": graphs}


def send_recv(rank: int, dev, data) -> dict:
    sent = data["x"].to(dev) * (rank + 1)
    got = torch.zeros(4, 3, device=dev)
    if rank == 0:  # the ranks send and receive in the same order of pairs: 0 -> 1, then 1 -> 0
        dist.send(sent, 1)
        dist.recv(got, 1)
    else:
        dist.recv(got, 0)
        dist.send(sent, 0)
    # The same through isend/irecv (completed works): 1 -> 0 first this time.
    back = torch.zeros(4, 3, device=dev)
    if rank == 1:
        dist.isend(sent, 0).wait()
        dist.irecv(back, 0).wait()
    else:
        dist.irecv(back, 1).wait()
        dist.isend(sent, 1).wait()
    # A receive into a buffer of another shape than what is sent: the ranks' programs differ, and both say so.
    small = torch.zeros(2, device=dev)
    mismatch = _error(lambda: dist.send(sent, 1) if rank == 0 else dist.recv(small, 0))
    return {"received": got.cpu(), "received_async": back.cpu(), "mismatch": mismatch}


def profiled(rank: int, dev, data, out) -> list:
    """One all_reduce of a [4, 3] float32 tensor and one all_gather of it, captured by the profiler: the args of
    each `xladev.execute` span of this rank's trace."""
    import xladev.debug.profiler as xp
    from xladev.debug._profiler_common import load_trace, trace_events

    x = data["x"].to(dev)
    torch_xla.sync()
    xp.start_trace(f"{out}/profile{rank}")
    reduced = xm.all_reduce(xm.REDUCE_SUM, x * 1)
    gathered = xm.all_gather(x * 1, dim=0)
    torch_xla.sync()
    reduced.cpu(), gathered.cpu()
    path = xp.stop_trace()
    return [dict(e["args"]) for e in trace_events(load_trace(path)) if e["name"].startswith("xladev.execute")]


def _mp_fn(index, out):
    dev = torch_xla.device()
    rank = xr.global_ordinal()
    data = inputs(rank)
    seen = {"rank": rank, "world": xr.world_size()}
    seen["lists"] = list_collectives(dev, data)
    seen["groups"] = replica_groups(dev, data)
    seen["rendezvous"] = rendezvous(rank)
    seen["compiled"] = compiled(dev, data)
    seen["profile"] = profiled(rank, dev, data, out)
    dist.init_process_group("xla", init_method="xla://")
    seen["functional"] = functional(rank, dev, data)
    seen["send_recv"] = send_recv(rank, dev, data)
    torch.save(seen, f"{out}/rank{rank}.pt")
    if rank == 0:
        from xladev.runtime.distributed import subgroup_rendezvous

        late = _error(lambda: subgroup_rendezvous.exchange("late", b"", (0, 1)))
        with open(f"{out}/late.txt", "w") as fh:
            fh.write(late)


if __name__ == "__main__":
    torch_xla.launch(_mp_fn, args=(sys.argv[1],))
