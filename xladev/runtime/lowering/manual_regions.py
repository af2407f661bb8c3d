"""Lowering a manual region (distributed/manual_sharding.py) as one `jax.shard_map`.

A region is the ops between its starts (`xla::spmd_full_to_shard_shape`, one per input) and its end
(`xla::spmd_shard_to_full_shape`): recorded with one device's shapes, they run per device. `regions` finds each
end's region in a graph's lowering plan; the plan's walk skips the region's ops, and at the end `run` lowers them
inside `jax.shard_map` over the mesh, the inputs split as the starts' specs say and the result put back together
as the end's spec says. Values from outside the region that it reads enter it whole (replicated), as jax treats a
shard_map's closure.
"""

from __future__ import annotations

import dataclasses

from xladev.errors import XladevError
from xladev.runtime.graph.ir import FULL_TO_SHARD_OP_NAME, SHARD_TO_FULL_OP_NAME
from xladev.runtime.graph.spmd_mesh import jax_mesh_of


class ManualRegionError(XladevError, RuntimeError):
    """A value computed inside a manual region is used outside it other than through its end."""


_MARKERS = (FULL_TO_SHARD_OP_NAME, SHARD_TO_FULL_OP_NAME)
_OUTSIDE = ("a value computed inside a manual region (per device, after enable_manual_sharding) is read or kept "
            "without disable_manual_sharding, which puts the pieces back together: end the region with it")


@dataclasses.dataclass
class Region:
    """One manual region of a plan: `starts` (plan indices of its starts, in order), `body` (its other ops'
    indices, in plan order) and `result` (the index of the value its end puts back together)."""

    starts: list[int]
    body: list[int]
    result: int


def inside_region(node) -> bool:
    """Whether `node` depends on a region's start, not through a region's end: a value computed per device,
    which no graph can give back on its own.

    Args:
      node: an IR node (device data is outside every region).
    """
    seen: set[int] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        name = n.op.name if getattr(n, "op", None) is not None else ""
        if name == FULL_TO_SHARD_OP_NAME:
            return True
        if name == SHARD_TO_FULL_OP_NAME:
            continue
        stack.extend(getattr(n, "operands", ()) or ())
    return False


def regions(plan, roots: tuple[int, ...]) -> tuple[dict[int, Region], frozenset[int]]:
    """Each region end's region, and every plan index inside a region (not lowered by the plan's walk).

    Args:
      plan: the lowering plan, `(node, operand indices, is_scalar)` per entry (node None for an input).
      roots: the plan indices of the graph's outputs.

    Returns:
      ({end's index: Region}, the indices inside regions).

    Raises:
      ManualRegionError: a value inside a region is used outside it other than by its end, or is an output.
    """
    ends, starts = [], []
    for i, (node, _, _) in enumerate(plan):
        if node is not None and node.op.name in _MARKERS:
            (ends if node.op.name == SHARD_TO_FULL_OP_NAME else starts).append(i)
    if not starts:
        return {}, frozenset()
    inside: dict[int, bool] = {}

    def depends_on_start(i: int) -> bool:
        # Iterative, memoized: a region may be thousands of ops deep.
        stack = [i]
        while stack:
            j = stack.pop()
            if j in inside:
                continue
            node = plan[j][0]
            if node is None or node.op.name == SHARD_TO_FULL_OP_NAME:
                inside[j] = False
                continue
            if node.op.name == FULL_TO_SHARD_OP_NAME:
                inside[j] = True
                continue
            pending = [k for k in plan[j][1] if k not in inside]
            if pending:
                stack.append(j)
                stack.extend(pending)
                continue
            inside[j] = any(inside[k] for k in plan[j][1])
        return inside[i]

    found, skipped = {}, set()
    for end in ends:
        result = plan[end][1][0]
        depends_on_start(result)
        members, stack = set(), [result]
        while stack:
            j = stack.pop()
            if j in members or not inside.get(j):
                continue
            members.add(j)
            if plan[j][0].op.name != FULL_TO_SHARD_OP_NAME:
                stack.extend(k for k in plan[j][1] if depends_on_start(k))
        own_starts = sorted(j for j in members if plan[j][0].op.name == FULL_TO_SHARD_OP_NAME)
        found[end] = Region(own_starts, sorted(members.difference(own_starts)), result)
        skipped |= members
    if any(i not in skipped for i in starts) or any(r in skipped for r in roots):
        raise ManualRegionError(_OUTSIDE)
    for i, (node, operands, _) in enumerate(plan):
        if node is None or i in skipped or i in found:
            continue
        used = [k for k in operands if k in skipped]
        if used:
            culprit = plan[used[0]][0]
            raise ManualRegionError(
                f"{node.op.name} uses {culprit.op.name}'s result, computed inside a manual region (per device, "
                "between enable_manual_sharding and disable_manual_sharding): use it through "
                "disable_manual_sharding, which puts the pieces back together")
    return found, frozenset(skipped)


def run(region: Region, end_node, plan, values: list, lower_node):
    """The region's end value: its ops lowered per device inside `jax.shard_map`.

    Args:
      region: the region.
      end_node: its end (`xla::spmd_shard_to_full_shape`: mesh, spec and full shape in its template).
      plan: the lowering plan.
      values: the plan's lowered values so far (the region's inputs and what it reads from outside).
      lower_node: lowers one node from its operand values (the plan walk's own).
    """
    import jax

    _, mesh_key, out_spec, _ = end_node.template[0]
    specs = tuple(jax.sharding.PartitionSpec(*plan[j][0].template[0][2]) for j in region.starts)
    wholes = [values[plan[j][1][0]] for j in region.starts]

    def per_device(*pieces):
        local = dict(zip(region.starts, pieces))
        for j in region.body:
            node, operands, _ = plan[j]
            local[j] = lower_node(node, [local[k] if k in local else values[k] for k in operands])
        return local[region.result]

    return jax.shard_map(per_device, mesh=jax_mesh_of(mesh_key), in_specs=specs,
                         out_specs=jax.sharding.PartitionSpec(*out_spec), check_vma=False)(*wholes)
