"""The collectives inside `torch.compile`: `all_reduce`, `all_gather` and `reduce_scatter` as ops TorchDynamo traces.

TorchDynamo does not trace xladev's own code (dynamo_backend.install): a collective recorded by Python code
would be a graph break, and with `fullgraph=True` an error. So, as PyTorch/XLA routes `xm.all_reduce`
through `torch.ops._c10d_functional.all_reduce` under TorchDynamo, each collective here is an op of its own
(`torch.ops.xladev.all_reduce`, `all_gather`, `reduce_scatter`; a list of tensors in, a list out), and its
public function (collectives.py) calls it while TorchDynamo traces (`torch.compiler.is_compiling()`). The op's
fake implementation gives TorchDynamo and AOTAutograd its output shapes; when the compiled graph first runs on
device tensors (fx_program.py), the op reaches the lazy runtime like any other and records the same
collective as the eager call, so the graph compiles into one program over the replica mesh.

`install()`, called when xladev's TorchDynamo support is installed, defines the ops and lets TorchDynamo trace
the public functions and the functions below (a rule in TorchDynamo's own table, by object and, for a
function passed to `torch.compile` itself, by file and name; added again whenever torch clears that table).
"""

from __future__ import annotations

import threading

import torch

from xladev.runtime.distributed import collectives as c
from xladev.runtime.record.special_handlers import special

_lock = threading.Lock()
_installed = False


# ---- what TorchDynamo traces ------------------------------------------------------------------------
def flat_groups(groups) -> tuple[list[int], int]:
    """Replica groups as an op argument: (every replica, group by group; the group size), ([], 0) for none."""
    flat = []
    size = 0
    if groups:
        size = len(groups[0])
        for group in groups:
            for replica in group:
                flat.append(int(replica))
    return flat, size


def all_reduce(reduce_type, inputs, scale=1.0, groups=None, pin_layout=True):
    """`xladev.all_reduce` as TorchDynamo traces it (same arguments and results)."""
    flat, size = flat_groups(groups)
    if isinstance(inputs, torch.Tensor):
        return torch.ops.xladev.all_reduce([inputs], reduce_type, float(scale), flat, size)[0]
    tensors = list(inputs)
    results = torch.ops.xladev.all_reduce(tensors, reduce_type, float(scale), flat, size)
    with torch.no_grad():  # in place, as the eager call
        for t, result in zip(tensors, results):
            t.copy_(result)
    return inputs


def all_gather(value, dim=0, groups=None, output=None, pin_layout=True):
    """`xladev.all_gather` as TorchDynamo traces it (same arguments and results)."""
    flat, size = flat_groups(groups)
    single = isinstance(value, torch.Tensor)
    results = torch.ops.xladev.all_gather([value] if single else list(value), int(dim), flat, size)
    return _written(results[0] if single else results, output)


def reduce_scatter(reduce_type, input, scale, scatter_dim, shard_count, groups=None, output=None, pin_layout=True):
    """`xladev.reduce_scatter` as TorchDynamo traces it (same arguments and results)."""
    flat, size = flat_groups(groups)
    single = isinstance(input, torch.Tensor)
    results = torch.ops.xladev.reduce_scatter([input] if single else list(input), reduce_type, float(scale),
                                              int(scatter_dim), int(shard_count), flat, size)
    return _written(results[0] if single else results, output)


def _written(results, output):
    """`results`, or `output` with them written into it (a tensor, or a list of tensors)."""
    if output is None:
        return results
    with torch.no_grad():
        if isinstance(output, torch.Tensor):
            output.copy_(results)
        else:
            for out, result in zip(output, results):
                out.copy_(result)
    return output


# ---- the ops on device tensors (and their refusal on others) -------------------------------------------
def _groups_of(flat: list[int], size: int):
    if not size:
        return None
    return [list(flat[i:i + size]) for i in range(0, len(flat), size)]


def _all_reduce(inputs, reduce_type, scale, groups, group_size):
    results = c.reduced(reduce_type, list(inputs), scale, _groups_of(groups, group_size))
    return [t.clone() for t in inputs] if results is None else results


def _all_gather(inputs, dim, groups, group_size):
    groups = _groups_of(groups, group_size)
    if len(inputs) == 1:  # the op of the eager call of one tensor (xla::all_gather)
        return [c.all_gather(inputs[0], dim, groups)]
    return c.all_gather(list(inputs), dim, groups)


def _reduce_scatter(inputs, reduce_type, scale, scatter_dim, shard_count, groups, group_size):
    groups = _groups_of(groups, group_size)
    if len(inputs) == 1:
        return [c.reduce_scatter(reduce_type, inputs[0], scale, scatter_dim, shard_count, groups)]
    return c.reduce_scatter(reduce_type, list(inputs), scale, scatter_dim, shard_count, groups)


def _gathered_count(groups, group_size: int) -> int:
    return group_size if group_size else c.world_size()


def _resized(t: torch.Tensor, dim: int, factor: int, divide: bool) -> torch.Tensor:
    shape = list(t.shape)
    if shape:
        dim = dim % len(shape)
        shape[dim] = shape[dim] // factor if divide else shape[dim] * factor
    return t.new_empty(shape)


def _define() -> None:
    """Defines the ops (torch.library), their fake implementations and their device handlers."""
    lib = "xladev"

    @torch.library.custom_op(f"{lib}::all_reduce", mutates_args=())
    def all_reduce_op(inputs: list[torch.Tensor], reduce_type: str, scale: float, groups: list[int],
                      group_size: int) -> list[torch.Tensor]:
        return _all_reduce(inputs, reduce_type, scale, groups, group_size)

    @all_reduce_op.register_fake
    def _(inputs, reduce_type, scale, groups, group_size):
        return [t.new_empty(t.shape) for t in inputs]

    @torch.library.custom_op(f"{lib}::all_gather", mutates_args=())
    def all_gather_op(inputs: list[torch.Tensor], dim: int, groups: list[int], group_size: int) -> list[torch.Tensor]:
        return _all_gather(inputs, dim, groups, group_size)

    @all_gather_op.register_fake
    def _(inputs, dim, groups, group_size):
        return [_resized(t, dim, _gathered_count(groups, group_size), divide=False) for t in inputs]

    @torch.library.custom_op(f"{lib}::reduce_scatter", mutates_args=())
    def reduce_scatter_op(inputs: list[torch.Tensor], reduce_type: str, scale: float, scatter_dim: int,
                          shard_count: int, groups: list[int], group_size: int) -> list[torch.Tensor]:
        return _reduce_scatter(inputs, reduce_type, scale, scatter_dim, shard_count, groups, group_size)

    @reduce_scatter_op.register_fake
    def _(inputs, reduce_type, scale, scatter_dim, shard_count, groups, group_size):
        return [_resized(t, scatter_dim, max(shard_count, 1), divide=True) for t in inputs]

    # On device tensors the op reaches XlaTensor's dispatch, whose handler records the collective.
    for op, fn in ((torch.ops.xladev.all_reduce.default, _all_reduce),
                   (torch.ops.xladev.all_gather.default, _all_gather),
                   (torch.ops.xladev.reduce_scatter.default, _reduce_scatter)):
        special(op)(lambda func, args, kwargs, fn=fn: fn(*args, **kwargs))


def install() -> None:
    """Defines the ops and lets TorchDynamo trace the collectives' public functions. Idempotent."""
    global _installed
    with _lock:
        if _installed:
            return
        from torch._dynamo import trace_rules

        _define()
        _add_rules()
        clear = trace_rules.clear_lru_cache

        def clear_lru_cache() -> None:
            # torch clears TorchDynamo's rule table (dist.init_process_group does, before any distributed code is
            # compiled); the rules here must outlive that.
            clear()
            _add_rules()

        trace_rules.clear_lru_cache = clear_lru_cache
        c.traced = _this_module()
        _installed = True


def _add_rules() -> None:
    """Lets TorchDynamo trace the public collectives and the functions above (its table of rules by object, and
    by file and name for a function handed to torch.compile itself)."""
    from torch._dynamo.trace_rules import get_torch_obj_rule_map
    from torch._dynamo.variables import UserFunctionVariable

    rules = get_torch_obj_rule_map()
    for fn in (all_reduce, all_gather, reduce_scatter, flat_groups, _written):
        rules[fn] = UserFunctionVariable
    for fn in (c.all_reduce, c.all_gather, c.reduce_scatter):
        rules[fn] = UserFunctionVariable
        rules[f"{fn.__code__.co_filename}#{fn.__name__}"] = UserFunctionVariable


def _this_module():
    import sys

    return sys.modules[__name__]
