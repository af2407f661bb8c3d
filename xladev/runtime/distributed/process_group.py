"""torch.distributed's `xla` backend and `xla://` rendezvous, over xladev's collectives.

    dist.init_process_group("xla", init_method="xla://")     # under torchrun or xladev.launch

Registered when the runtime starts, as PyTorch/XLA registers them when `torch_xla.distributed.xla_backend`
is imported. Each `dist.*` call on device tensors records the collective into the step's graph
(collectives.py), so `DistributedDataParallel` over this backend all-reduces its gradient buckets inside
the compiled step, as it does on PyTorch/XLA. The rendezvous hands out the job's TCPStore at
`MASTER_ADDR:MASTER_PORT` and this process's rank and world size; creating the group joins the job through
jax's distributed runtime if the device has not done so yet.
"""

from __future__ import annotations

import datetime
import logging

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup

from xladev.runtime.graph import backend
from xladev.runtime.distributed import collectives, point_to_point
from xladev.runtime.record.special_handlers import special
from xladev.runtime.graph.world import DistributedError, job, placement

# (ReduceOp, reduce type). Matched with ==: `opts.reduceOp` is a ReduceOp object, equal to its RedOpType.
_REDUCE_TYPES = (
    (dist.ReduceOp.SUM, collectives.REDUCE_SUM), (dist.ReduceOp.PRODUCT, collectives.REDUCE_MUL),
    (dist.ReduceOp.BAND, collectives.REDUCE_AND), (dist.ReduceOp.BOR, collectives.REDUCE_OR),
    (dist.ReduceOp.MIN, collectives.REDUCE_MIN), (dist.ReduceOp.MAX, collectives.REDUCE_MAX),
)


def _work(result):
    """A completed `Work` holding `result`: the collective is recorded; the step's graph runs it."""
    future = torch.futures.Future()
    future.set_result(result)
    return torch._C._distributed_c10d._create_work_from_future(future)


def _reduce_type(op) -> str:
    for reduce_op, reduce_type in _REDUCE_TYPES:
        if op == reduce_op:
            return reduce_type
    raise NotImplementedError(f"the xla backend does not support reduce op {op}")


class ProcessGroupXla(ProcessGroup):
    """The `xla` process group: PyTorch/XLA's `ProcessGroupXla`, on xladev's collectives.

    Args:
      store: the rendezvous store (kept, as PyTorch/XLA keeps it).
      rank: this process's rank.
      size: the world size.
      timeout: the group's timeout.
    """

    def __init__(self, store, rank: int, size: int, timeout) -> None:
        super().__init__(rank, size)
        self.store = store
        self.timeout = timeout
        self._mesh: list[list[int]] = []  # replica groups of a sub-group (new_group), [] for the world

    def getBackendName(self) -> str:
        return "xla"

    def _set_group_name(self, name: str) -> None:
        self._group_name = name

    @property
    def group_name(self) -> str:
        return self._group_name

    def _groups(self):
        return self._mesh or None

    def allreduce(self, tensors, opts):
        collectives.all_reduce(_reduce_type(opts.reduceOp), tensors, groups=self._groups())
        return _work(tensors)

    def allreduce_coalesced(self, tensors, opts):
        collectives.all_reduce(_reduce_type(opts.reduceOp), tensors, groups=self._groups())
        return _work(tensors)

    def _allgather_base(self, output, input, opts=None):
        flat = input.reshape(1) if input.dim() == 0 else input
        result = collectives.all_gather(flat, dim=0, groups=self._groups())
        if result.shape != output.shape:
            stacked = torch.stack(torch.split(result, flat.shape[0]), dim=0)
            if stacked.shape != output.shape:
                raise ValueError(f"all_gather_into_tensor: input of shape {tuple(input.shape)} and output of shape "
                                 f"{tuple(output.shape)} do not match: the output must hold every rank's input, "
                                 "concatenated or stacked")
            result = stacked
        with torch.no_grad():
            output.copy_(result)
        return _work([output])

    def allgather(self, output_lists, inputs, opts=None):
        for input, outputs in zip(inputs, output_lists):
            scalar = input.dim() == 0
            flat = input.reshape(1) if scalar else input
            result = collectives.all_gather(flat, dim=0, groups=self._groups())
            with torch.no_grad():
                for out, part in zip(outputs, torch.split(result, flat.shape[0])):
                    out.copy_(part.reshape(()) if scalar else part)
        return _work([t for outputs in output_lists for t in outputs])

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        return self.allgather(output_lists, inputs, opts)

    def broadcast(self, tensors, opts):
        root = self._global(opts.rootRank)
        collectives.broadcast([tensors[opts.rootTensor]], root=root, groups=self._groups())
        return _work([tensors[opts.rootTensor]])

    def reduce_scatter(self, outputs, input_lists, opts):
        for output, inputs in zip(outputs, input_lists):
            first = inputs[0].shape
            for i, t in enumerate(inputs[1:], 1):
                if t.shape != first:
                    raise ValueError(f"reduce_scatter: input {i} has shape {tuple(t.shape)}, input 0 {tuple(first)}")
            shards = len(self._mesh[0]) if self._mesh else self.size()
            collectives.reduce_scatter(_reduce_type(opts.reduceOp), torch.cat(inputs), 1.0, 0, shards,
                                       groups=self._groups(), output=output)
        return _work(outputs)

    def _reduce_scatter_base(self, output, input, opts):
        shards = len(self._mesh[0]) if self._mesh else self.size()
        collectives.reduce_scatter(_reduce_type(opts.reduceOp), input, 1.0, 0, shards, groups=self._groups(),
                                   output=output)
        return _work(output)

    # torch.distributed calls these (all_gather_into_tensor, reduce_scatter_tensor, all_to_all_single...) on the
    # group object; ProcessGroup's own would send them through the dispatcher to a C++ backend.
    def all_gather_single(self, output, input, opts=None):
        return self._allgather_base(output, input, opts)

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        for output, input in zip(outputs, inputs):
            self._allgather_base(output, input, opts)
        return _work(outputs)

    def reduce_scatter_single(self, output, input, opts):
        return self._reduce_scatter_base(output, input, opts)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts)

    def reduce(self, tensors, opts):
        # Every rank computes the reduction (the graphs stay the same on every rank); only the root keeps it.
        for tensor in tensors:
            result = collectives.all_reduce(_reduce_type(opts.reduceOp), tensor, groups=self._groups())
            if self.rank() == opts.rootRank:
                with torch.no_grad():
                    tensor.copy_(result)
        return _work(tensors)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts):
        if output_split_sizes or input_split_sizes:
            raise NotImplementedError("the xla backend exchanges equal splits only (no split sizes)")
        with torch.no_grad():
            output.copy_(collectives.all_to_all(input, 0, 0, self.size()))
        return _work(output)

    def alltoall(self, outputs, inputs, opts):
        stacked = collectives.all_to_all(torch.stack(inputs), 0, 0, len(inputs))
        with torch.no_grad():
            for out, part in zip(outputs, torch.chunk(stacked, len(inputs))):
                out.copy_(part.squeeze(0))
        return _work(outputs)

    def barrier(self, opts=None):
        # PyTorch/XLA's barrier returns at once; this one waits for every rank, through a collective.
        collectives.barrier("torch.distributed.barrier")
        return _work([])

    def _global(self, rank: int) -> int:
        return dist.get_global_rank(self, rank) if self._mesh else rank

    def send(self, tensors, dst, tag=0):
        # As PyTorch/XLA's: a collective permute of the pair, run at once (point_to_point.py).
        point_to_point.send(tensors, self._global(dst))
        return _work(tensors)

    def recv(self, tensors, src, tag=0):
        point_to_point.recv(tensors, self._global(src))
        return _work(tensors)

    def recv_anysource(self, tensors, tag=0):
        raise NotImplementedError("recv from any source is not supported by the xla backend: every rank runs "
                                  "the same program, so the receive must name its source (dist.recv(t, src))")


def _create(store, rank: int, size: int, timeout) -> ProcessGroupXla:
    """torch.distributed's factory of `xla` groups: joins the job (jax's runtime) if not joined yet.

    Raises:
      DistributedError: the rank and world size differ from the job's environment, or joining failed.
    """
    where = placement()
    if size > 1 and (rank, size) != (where.rank, where.world_size):
        raise DistributedError(f"init_process_group('xla'): rank={rank}, world_size={size}, but this process is rank "
                               f"{where.rank} of {where.world_size} (RANK, WORLD_SIZE): the xla backend replicates "
                               "over the processes of the job")
    job.wanted = True
    if job.store is None:
        # The group's own store (env:// or xla://) hands out the coordinator's address: a second store on
        # MASTER_PORT would collide with it.
        job.store = store
    backend.jax_devices()
    return ProcessGroupXla(store, rank, size, timeout)


def _rendezvous(url: str, timeout: datetime.timedelta = None, **kwargs):
    """`xla://`: the job's store, this process's rank and the world size, from the environment."""
    where = placement()
    yield job.tcp_store(), where.rank, where.world_size


def _c10d_op(func, args, kwargs):
    """A `c10d::` op reached through the dispatcher rather than the group's Python methods: refused clearly.

    Raises:
      NotImplementedError: always (the CPU fallback would fail with a message about a missing CPU backend).
    """
    raise NotImplementedError(
        f"{func} on xla tensors: the xla backend serves torch.distributed's Python API (dist.all_reduce, "
        "all_gather, all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor, all_to_all_single, broadcast, "
        "barrier...), not its dispatcher ops")


def _c10d_ops() -> list:
    ops = []
    for name in torch._C._dispatch_get_all_op_names():
        if name.startswith("c10d::"):
            packet = getattr(torch.ops.c10d, name.split("::", 1)[1], None)
            if packet is not None:
                ops.extend(getattr(packet, overload) for overload in packet.overloads())
    return ops


_registered = False
_original_new_group = None


def register() -> None:
    """Registers the `xla` backend and the `xla://` rendezvous with torch.distributed, once."""
    global _registered, _original_new_group
    if _registered or not dist.is_available():
        return
    if "xla" not in dist.Backend.backend_list:
        dist.Backend.register_backend("xla", _create, devices="xla")
    special(*_c10d_ops())(_c10d_op)
    try:
        dist.register_rendezvous_handler("xla", _rendezvous)
    except RuntimeError:  # already registered (a real torch_xla was imported too)
        logging.getLogger(__name__).debug("the xla:// rendezvous was already registered")
    _original_new_group = dist.new_group
    dist.new_group = new_group
    _registered = True


def new_group(ranks=None, timeout=None, backend=None, pg_options=None, **kwargs):
    """`dist.new_group` for `xla` groups: a sub-group's collectives reduce over its ranks (replica groups).

    Raises:
      ValueError: (xla groups) the ranks do not split the world into groups of one size.
    """
    args = {"ranks": ranks, "backend": backend, "pg_options": pg_options, **kwargs}
    if timeout is not None:
        args["timeout"] = timeout
    group = _original_new_group(**args)
    if isinstance(group, ProcessGroupXla) and ranks is not None:
        world = dist.get_world_size()
        ranks = sorted(ranks)
        if ranks != list(range(world)):
            size = len(ranks)
            if world % size:
                raise ValueError(f"new_group(ranks={ranks}): the xla backend splits the {world} ranks into groups of "
                                 "one size; this group's size does not divide the world size")
            # PyTorch/XLA infers the other groups of the same shape (contiguous or strided slices).
            step = ranks[1] - ranks[0] if size > 1 else 1
            if step == 1:
                group._mesh = [list(range(s, s + size)) for s in range(0, world, size)]
            else:
                group._mesh = [list(range(s, world, step)) for s in range(step)]
            if ranks not in group._mesh:
                raise ValueError(f"new_group(ranks={ranks}): the xla backend needs groups that split the ranks "
                                 f"evenly (contiguous or evenly strided); got {ranks}")
    return group
