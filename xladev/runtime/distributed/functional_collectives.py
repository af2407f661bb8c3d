"""torch.distributed's functional collectives on device tensors: the `_c10d_functional` ops, as xladev's collectives.

`torch.distributed._functional_collectives` (`all_reduce`, `all_gather_tensor`, `reduce_scatter_tensor`,
`all_to_all_single`, `broadcast`, and their coalesced forms) calls the `_c10d_functional` ops; so does the
graph TorchDynamo traces from them, or from `dist.all_reduce` and friends inside `torch.compile`. On xla
tensors each becomes the xladev collective of the same meaning, recorded into the step's graph (or into the
compiled program), as PyTorch/XLA registers them for its device. `wait_tensor` has nothing to wait for: the
step's graph runs the collective.

The group is an `xla` process group (`dist.init_process_group("xla")`, `dist.new_group`) named by the op;
`""`, PyTorch/XLA's spelling in `xm.all_reduce`, is every replica. Point-to-point ops (`isend`, `irecv`,
`batch_p2p_ops`) are refused by name: use `dist.send`/`dist.recv` outside the compiled code.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from xladev.runtime.distributed import collectives as c
from xladev.runtime.distributed.process_group import ProcessGroupXla
from xladev.runtime.record.special_handlers import special

_F = None  # torch.ops._c10d_functional, once registered

# torch.distributed's reduce op names (lower case, as the functional collectives pass them) -> xladev's, and
# PyTorch/XLA's own names.
_REDUCE = {"sum": c.REDUCE_SUM, "avg": c.REDUCE_SUM, "product": c.REDUCE_MUL, "mul": c.REDUCE_MUL,
           "min": c.REDUCE_MIN, "max": c.REDUCE_MAX, "band": c.REDUCE_AND, "and": c.REDUCE_AND,
           "bor": c.REDUCE_OR, "or": c.REDUCE_OR}


def _reduce(op: str, name: str) -> str:
    found = _REDUCE.get(str(op).lower())
    if found is None:
        raise NotImplementedError(f"{name} on xla tensors: reduce op {op!r} is not supported; use one of "
                                  + ", ".join(sorted(_REDUCE)))
    return found


def process_group(group_name, name: str):
    """The `xla` process group `group_name` names; None for every replica.

    Args:
      group_name: a group's registered name, the group itself, or "" (every replica).
      name: the op, for errors.

    Raises:
      ValueError: no such group, or a group of another backend.
    """
    if group_name in ("", None):
        return None
    group = group_name
    if isinstance(group_name, str):
        names = dist.distributed_c10d._world.pg_names if dist.is_initialized() else {}
        group = next((pg for pg, known in names.items() if known == group_name), None)
        if group is None:
            raise ValueError(f"{name}: no process group is named {group_name!r}; create the groups with "
                             "dist.init_process_group('xla') and dist.new_group")
    if not isinstance(group, ProcessGroupXla):
        raise ValueError(f"{name} on xla tensors: group {group_name!r} is a {type(group).__name__} of backend "
                         f"{getattr(group, 'getBackendName', lambda: '?')()}, not an 'xla' group")
    return group


def group_of(group_name, name: str):
    """(replica groups, or None for every replica; the group's size) of the group `group_name` names.

    Raises:
      ValueError: no such group, or a group of another backend.
    """
    group = process_group(group_name, name)
    groups = group._groups() if group is not None else None
    return groups, (len(groups[0]) if groups else c.world_size())


def _checked_size(group_size: int, size: int, name: str) -> None:
    if group_size != size:
        raise ValueError(f"{name}: group_size={group_size}, but the group has {size} replica(s)")


def _all_reduce(input, reduce_op, group_name):
    return _all_reduce_coalesced([input], reduce_op, group_name)[0]


def _all_reduce_coalesced(inputs, reduce_op, group_name):
    name = "all_reduce"
    reduce_type = _reduce(reduce_op, name)
    groups, size = group_of(group_name, name)
    scale = 1.0 / size if str(reduce_op).lower() == "avg" else 1.0
    results = c.reduced(reduce_type, list(inputs), scale, groups)
    return [t.clone() for t in inputs] if results is None else results


def _all_reduce_(input, reduce_op, group_name):
    _all_reduce_coalesced_([input], reduce_op, group_name)
    return input


def _all_reduce_coalesced_(inputs, reduce_op, group_name):
    results = _all_reduce_coalesced(inputs, reduce_op, group_name)
    with torch.no_grad():
        for t, result in zip(inputs, results):
            t.copy_(result)
    return inputs


def _all_gather_into_tensor(input, group_size, group_name):
    name = "all_gather_into_tensor"
    groups, size = group_of(group_name, name)
    _checked_size(group_size, size, name)
    return c.all_gather(input, 0, groups)


def _all_gather_into_tensor_coalesced(inputs, group_size, group_name):
    name = "all_gather_into_tensor_coalesced"
    groups, size = group_of(group_name, name)
    _checked_size(group_size, size, name)
    return c.all_gather(list(inputs), 0, groups)


def _all_gather_into_tensor_out(input, group_size, group_name, *, out):
    return c._into(out, _all_gather_into_tensor(input, group_size, group_name), "all_gather_into_tensor")


def _reduce_scatter_tensor(input, reduce_op, group_size, group_name):
    name = "reduce_scatter_tensor"
    groups, size = group_of(group_name, name)
    _checked_size(group_size, size, name)
    scale = 1.0 / size if str(reduce_op).lower() == "avg" else 1.0
    return c.reduce_scatter(_reduce(reduce_op, name), input, scale, 0, size, groups)


def _reduce_scatter_tensor_coalesced(inputs, reduce_op, group_size, group_name):
    name = "reduce_scatter_tensor_coalesced"
    groups, size = group_of(group_name, name)
    _checked_size(group_size, size, name)
    scale = 1.0 / size if str(reduce_op).lower() == "avg" else 1.0
    return c.reduce_scatter(_reduce(reduce_op, name), list(inputs), scale, 0, size, groups)


def _reduce_scatter_tensor_out(input, reduce_op, group_size, group_name, *, out):
    return c._into(out, _reduce_scatter_tensor(input, reduce_op, group_size, group_name), "reduce_scatter_tensor")


def _all_to_all_single(input, output_split_sizes, input_split_sizes, group_name):
    name = "all_to_all_single"
    groups, size = group_of(group_name, name)
    if groups:
        raise NotImplementedError(f"{name} on xla tensors: only over every replica (a sub-group's exchange is not "
                                  "supported)")
    chunk = input.shape[0] // size if input.dim() else 0
    for what, sizes in (("output_split_sizes", output_split_sizes), ("input_split_sizes", input_split_sizes)):
        if sizes and any(int(s) != chunk for s in sizes):
            raise NotImplementedError(f"{name} on xla tensors: {what}={list(sizes)}; only equal splits of dimension "
                                      f"0 ({chunk} each) are supported")
    return c.all_to_all(input, 0, 0, size)


def _broadcast(input, src, group_name):
    out = input.clone()
    _broadcast_(out, src, group_name)
    return out


def _broadcast_(input, src, group_name):
    name = "broadcast"
    group = process_group(group_name, name)
    groups = group._groups() if group is not None else None
    root = dist.get_global_rank(group, int(src)) if groups else int(src)  # `src` is a rank of the group
    c.broadcast([input], root=root, groups=groups)
    return input


def _wait_tensor(tensor):
    return tensor  # the collective runs in the step's graph (or the compiled program): nothing to wait for


def _refused(func, args, kwargs):
    """Point-to-point functional ops: refused by name.

    Raises:
      NotImplementedError: always.
    """
    raise NotImplementedError(
        f"{func} on xla tensors is not supported by xladev: a point-to-point op runs on its two ranks only, and "
        "each graph with collectives runs on every rank at once. Use dist.send/dist.recv (eager, as "
        "collective_permute pairs) or xm.collective_permute with every (source, target) pair")


def register() -> None:
    """Registers the handlers of the `_c10d_functional` ops on xla tensors. Idempotent."""
    global _F
    if _F is not None or not hasattr(torch.ops, "_c10d_functional"):
        return
    f = torch.ops._c10d_functional
    handlers = {"all_reduce": _all_reduce, "all_reduce_": _all_reduce_, "all_reduce_coalesced": _all_reduce_coalesced,
                "all_reduce_coalesced_": _all_reduce_coalesced_, "all_gather_into_tensor": _all_gather_into_tensor,
                "all_gather_into_tensor_coalesced": _all_gather_into_tensor_coalesced,
                "all_gather_into_tensor_out": _all_gather_into_tensor_out,
                "reduce_scatter_tensor": _reduce_scatter_tensor,
                "reduce_scatter_tensor_coalesced": _reduce_scatter_tensor_coalesced,
                "reduce_scatter_tensor_out": _reduce_scatter_tensor_out, "all_to_all_single": _all_to_all_single,
                "broadcast": _broadcast, "broadcast_": _broadcast_, "wait_tensor": _wait_tensor}
    for op_name, fn in handlers.items():
        packet = getattr(f, op_name, None)
        if packet is not None:
            special(*(getattr(packet, o) for o in packet.overloads()))(
                lambda func, args, kwargs, fn=fn: fn(*args, **kwargs))
    for op_name in ("isend", "irecv", "batch_p2p_ops"):
        packet = getattr(f, op_name, None)
        if packet is not None:
            special(*(getattr(packet, o) for o in packet.overloads()))(_refused)
    _F = f
