"""SPMD sharding: one program over every local device, tensors split over a device mesh (PyTorch/XLA's `xs`).

    xladev.spmd.use_spmd()
    mesh = xladev.spmd.Mesh(range(4), (2, 2), ("data", "model"))
    xladev.spmd.mark_sharding(weight, mesh, (None, "model"))     # or mesh axis numbers: (None, 1)

After `use_spmd()`, `xla:0` stands for all of this process's devices: a value with no sharding of its own is
replicated on each, and a graph runs as one program that XLA's partitioner (GSPMD) splits by the shardings
of its inputs and of the values marked inside it. A mark maps to a jax `NamedSharding` over a jax `Mesh`:
on device data it moves the buffer at once (`jax.device_put`); on a value still being recorded it becomes
a sharding constraint in the graph (`xla::custom_sharding`, `jax.lax.with_sharding_constraint`). Shardings
print as HLO sharding text (`{devices=[2,1]0,1}`) in the IR, the HLO dumps and the visualizers.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch

from xladev.runtime.graph import backend, ir, storage
from xladev.runtime.execute.execution import lock as _execution_lock
from xladev.runtime.graph.ir import SLOT, DataNode, Meta, Node, OpDef
from xladev.runtime.graph.op_ledger import recorder
from xladev.runtime.graph.sharding_text import (  # noqa: F401 (this module's API)
    REPLICATED, parse_sharding_text, sharding_text,
)
from xladev.runtime.graph.spmd_mesh import HybridMesh, Mesh, jax_mesh_of  # noqa: F401 (this module's API)
from xladev.runtime.lowering.manual_regions import inside_region
from xladev.runtime.record.tensor import XlaTensor


def use_spmd() -> None:
    """Turns SPMD mode on for this process: `xla:0` stands for every local device (PyTorch/XLA's `xr.use_spmd()`).

    Values made before it are copied to every device when a graph first uses them.
    """
    import jax

    if backend.spmd_replicated is not None:
        return
    devices = backend.jax_devices()
    mesh = jax.sharding.Mesh(np.array(devices), ("devices",))
    backend.spmd_replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    ir.sharding_of = _sharding_text_of
    storage.mark_keeper = _keep_mark


def is_spmd() -> bool:
    """Whether SPMD mode is on."""
    return backend.spmd_replicated is not None


def _require_spmd(name: str) -> None:
    if backend.spmd_replicated is None:
        raise RuntimeError(f"{name} needs SPMD mode: call xladev.spmd.use_spmd() (torch_xla.runtime.use_spmd()) first")


def _partition_spec(mesh: Mesh, partition_spec: Sequence, ndim: int):
    """A jax PartitionSpec for PyTorch/XLA's partition spec (mesh axis numbers or names, None, tuples of them).

    Raises:
      ValueError: the spec has another length than the tensor's rank, or names an axis the mesh lacks, twice.
    """
    import jax

    if len(partition_spec) != ndim:
        raise ValueError(f"mark_sharding: partition_spec {tuple(partition_spec)} has {len(partition_spec)} entries "
                         f"for a tensor of {ndim} dimension(s)")

    axis_names = mesh.jax_axis_names()

    def axis(a):
        if isinstance(a, (int, np.integer)) and not isinstance(a, bool):
            if not 0 <= a < len(axis_names):
                raise ValueError(f"mark_sharding: mesh axis {a} does not exist (the mesh has {len(axis_names)})")
            return axis_names[a]
        if mesh.axis_names is None or a not in mesh.axis_names:
            raise ValueError(f"mark_sharding: the mesh has no axis {a!r} "
                             f"(it has {', '.join(mesh.axis_names) if mesh.axis_names else 'numbered axes only'})")
        return a

    entries = []
    used: list[str] = []
    for entry in partition_spec:
        if entry is None:
            entries.append(None)
            continue
        names = tuple(axis(a) for a in entry) if isinstance(entry, (tuple, list)) else (axis(entry),)
        used.extend(names)
        entries.append(names if len(names) > 1 else names[0])
    if len(set(used)) != len(used):
        raise ValueError(f"mark_sharding: partition_spec {tuple(partition_spec)} uses a mesh axis twice")
    return jax.sharding.PartitionSpec(*entries)


def split_counts(sharding, ndim: int) -> tuple[int, ...]:
    """How many pieces a jax NamedSharding cuts each of `ndim` dimensions into."""
    sizes = dict(zip(sharding.mesh.axis_names, sharding.mesh.devices.shape))
    counts = []
    for entry in tuple(sharding.spec) + (None,) * (ndim - len(sharding.spec)):
        names = () if entry is None else (entry if isinstance(entry, tuple) else (entry,))
        counts.append(math.prod(sizes[n] for n in names))
    return tuple(counts)


def divides(sharding, shape: tuple) -> bool:
    """Whether `sharding` cuts every dimension of `shape` into equal pieces (what a jax buffer needs)."""
    return all(size % count == 0 for size, count in zip(shape, split_counts(sharding, len(shape))))


def piece_shape(sharding, shape: tuple) -> tuple[int, ...]:
    """One device's piece of `shape`: each dimension divided by its pieces, rounded up (PyTorch/XLA's padding)."""
    return tuple(-(-size // count) for size, count in zip(shape, split_counts(sharding, len(shape))))


def padded_shape(sharding, shape: tuple) -> tuple[int, ...]:
    """`shape` with each split dimension rounded up to a multiple of its pieces (PyTorch/XLA's padding)."""
    return tuple(p * c for p, c in zip(piece_shape(sharding, shape), split_counts(sharding, len(shape))))


def device_order() -> dict:
    """jax device id -> `xla:N`'s N."""
    return {d.id: i for i, d in enumerate(backend.jax_devices())}


def _lower_custom_sharding(ctx, x, mesh_key, spec):
    import jax

    return jax.lax.with_sharding_constraint(x, jax.sharding.NamedSharding(jax_mesh_of(mesh_key),
                                                                         jax.sharding.PartitionSpec(*spec)))


# PyTorch/XLA's IR name for a sharding annotation on a value being recorded.
CUSTOM_SHARDING = OpDef("xla::custom_sharding", _lower_custom_sharding, params=("input", "mesh", "spec"))


class ShardingNode(Node):
    """A sharding annotation's node: `sharding` is its text, printed in the IR as PyTorch/XLA prints it;
    `uneven` the jax sharding when the split does not divide the shape (the result then comes back whole on
    each device, and keeps the mark as `DataNode.uneven`), else None."""

    __slots__ = ("sharding", "uneven")

    def __init__(self, operand: Node, template, meta: Meta, sharding: str, uneven=None):
        super().__init__(CUSTOM_SHARDING, (operand,), template, meta, *recorder.debug_info())
        self.sharding = sharding
        self.uneven = uneven


def shard_tensor(t: XlaTensor, mesh: Mesh, partition_spec: Sequence) -> None:
    """Splits device tensor `t` over `mesh` in place as `partition_spec` says: what `xs.mark_sharding` does
    (`sharded_tensor.mark_sharding`, which also wraps the result).

    Args:
      t: a device tensor (not a view).
      mesh: the device mesh.
      partition_spec: per dimension of `t`, the mesh axis (number or name, or a tuple of them) it is split
        along, or None to keep it whole.

    Raises:
      RuntimeError: SPMD mode is off, or `t`'s data is split another way already (clear it first, as
        PyTorch/XLA asks). TypeError: not an xla tensor. ValueError: a view, or a bad spec.
    """
    sharding, text, template = _split_of(t, mesh, partition_spec, "mark_sharding")
    node = t._st.value
    if type(node) is DataNode and node.sharding not in (None, REPLICATED, MANUAL):
        # As PyTorch/XLA: device data split one way is never split another way on the user's behalf.
        if node.sharding == text:
            return  # the same split again (a mark in every step): nothing to do
        raise RuntimeError(f"Existing annotation must be cleared first: {node.sharding}; call "
                           f"xs.clear_sharding(t) before marking it {text}")
    _place(t, sharding, text, template)


def annotate_tensor(t: XlaTensor, mesh: Mesh, partition_spec: Sequence) -> None:
    """Gives `t` a sharding annotation in its graph, leaving its data where it is: the next graph that reads it
    constrains it to the split (PyTorch/XLA's `xs.annotate_custom_sharding`; allowed on data split another way).

    Args:
      t: a device tensor (not a view).
      mesh: the device mesh.
      partition_spec: as `shard_tensor` takes it.

    Raises:
      RuntimeError: SPMD mode is off. TypeError: not an xla tensor. ValueError: a view, or a bad spec.
    """
    _place(t, *_split_of(t, mesh, partition_spec, "annotate_custom_sharding"), in_graph=True)


def _split_of(t: XlaTensor, mesh: Mesh, partition_spec: Sequence, name: str) -> tuple:
    """(jax sharding, its HLO text, the annotation's template) of a mark of `t` by API `name`, checked first."""
    import jax

    _require_spmd(name)
    _check_base(t, name)
    spec = _partition_spec(mesh, partition_spec, t.dim())
    sharding = jax.sharding.NamedSharding(mesh.jax_mesh(), spec)
    return sharding, sharding_text(sharding, t.dim()), ((SLOT, mesh.key(), tuple(spec)), ())


def _check_base(t, name: str) -> None:
    if not isinstance(t, XlaTensor):
        raise TypeError(f"{name} takes an xla tensor, got a {type(t).__name__} on {t.device}")
    if t._chain is not None and not _whole_view(t):
        raise ValueError(f"{name} of a view: give it the tensor it views (its base) instead")


# View ops that, at the base's own shape, see all of it as it is (autograd's backward hooks return such views).
_WHOLE_VIEW_OPS = frozenset(("aten::view", "aten::alias", "aten::_unsafe_view", "aten::reshape"))


def _whole_view(t: XlaTensor) -> bool:
    """Whether view `t` is all of its base, as it is (a mark on it is a mark on the base)."""
    shape = tuple(t._st.value.meta.shape)
    return all(step.opdef.name in _WHOLE_VIEW_OPS and tuple(step.meta.shape) == shape for step in t._chain)


def _place(t: XlaTensor, sharding, text: str, template, in_graph: bool = False) -> None:
    """Gives `t` the jax `sharding`, known as `text` ('' for none of its own): device data moves now (as
    PyTorch/XLA reshards it), a value being recorded (or any value, `in_graph`) gets a sharding constraint in its
    graph."""
    import jax

    with _execution_lock:
        node = t._st.value
        if type(node) is DataNode and not in_graph:
            shape = tuple(node.meta.shape)
            if divides(sharding, shape):
                data = DataNode(jax.device_put(node.array, sharding), node.meta)
            else:
                # jax holds no buffer split unevenly (PyTorch/XLA pads the last pieces): the value stays whole
                # on each device, and each graph that reads it constrains it to the split, so XLA's
                # partitioner still splits the work; `local_shards` shows the padded pieces.
                whole = jax.sharding.NamedSharding(sharding.mesh, jax.sharding.PartitionSpec())
                data = DataNode(jax.device_put(node.array, whole), node.meta)
                data.uneven = sharding
            # A replicated mark is a sharding of its own ({replicated}), which the buffer alone does not tell.
            data.sharding = text or None
            t._st.set(data)
        else:
            recorder.count(CUSTOM_SHARDING.name)
            shape = tuple(t.shape)
            # On the storage: `t` is a base, or a whole view of one (`_whole_view`).
            t._st.set(ShardingNode(node, template, Meta(shape, t.dtype), text,
                                   None if divides(sharding, shape) else sharding))


def _keep_mark(old: Node, new: Node) -> Node:
    """`new` (a tensor's value written in place over `old`) constrained to the split `old` had, if any: a
    split buffer's (marked, or as XLA's partitioner made it) or a pending mark's. Other values pass as they are."""
    import jax

    if type(new) is ShardingNode or new.meta.shape != old.meta.shape:
        return new
    if type(old) is ShardingNode:
        if old.template[0][2] == ():  # a cleared mark (replicated again): nothing to keep
            return new
        return ShardingNode(new, old.template, new.meta, old.sharding, old.uneven)
    if type(old) is not DataNode or old.sharding is None:
        return new
    sharding = old.uneven if old.uneven is not None else old.array.sharding
    if not isinstance(sharding, jax.sharding.NamedSharding) or sharding.is_fully_replicated:
        return new
    key, spec = _key_and_spec(sharding, len(new.meta.shape))
    return ShardingNode(new, ((SLOT, key, spec), ()), new.meta, old.sharding, old.uneven)


def _key_and_spec(sharding, ndim: int) -> tuple[tuple, tuple]:
    """The (`Mesh.key()`, spec per dimension) of a jax `NamedSharding`."""
    order = device_order()
    mesh = sharding.mesh
    key = (tuple(order[d.id] for d in mesh.devices.flat), tuple(mesh.devices.shape), tuple(mesh.axis_names))
    return key, tuple(sharding.spec) + (None,) * (ndim - len(sharding.spec))


def own_split(t: XlaTensor) -> tuple[tuple, tuple] | None:
    """The (`Mesh.key()`, spec per dimension) of `t`'s own sharding (`mark_sharding`, `{replicated}` too), None
    when it has none."""
    import jax

    node = t._st.value if t._chain is not None and _whole_view(t) else t._node()
    if type(node) is ShardingNode:
        _, key, spec = node.template[0]
        return None if spec == () else (key, tuple(spec))
    if type(node) is DataNode and node.sharding is not None:
        sharding = node.uneven if node.uneven is not None else node.array.sharding
        if isinstance(sharding, jax.sharding.NamedSharding):
            return _key_and_spec(sharding, len(node.meta.shape))
    return None


def jax_named(mesh_key: tuple, spec: tuple):
    """The jax `NamedSharding` of a `Mesh.key()` and a spec per dimension."""
    import jax

    return jax.sharding.NamedSharding(jax_mesh_of(mesh_key), jax.sharding.PartitionSpec(*spec))


def unshard_tensor(t: XlaTensor) -> None:
    """Drops device tensor `t`'s sharding in place: it is replicated on every device again, with no sharding
    of its own (what `xs.clear_sharding` does).

    Raises:
      RuntimeError: SPMD mode is off. TypeError: not an xla tensor. ValueError: a view.
    """
    _require_spmd("clear_sharding")
    _check_base(t, "clear_sharding")
    replicated = backend.spmd_replicated
    count = len(backend.jax_devices())
    _place(t, replicated, "", ((SLOT, (tuple(range(count)), (count,), replicated.mesh.axis_names), ()), ()))


MANUAL = "{manual}"  # HLO's sharding text of a value computed per device, inside a manual region


def get_sharding_spec(t: torch.Tensor) -> str:
    """`t`'s sharding as HLO sharding text (`{devices=[2,1]0,1}`), '' when it has none (PyTorch/XLA's
    `torch_xla._XLAC._get_xla_sharding_spec`). A value still being recorded answers with its last mark; one
    computed inside a manual region (`manual_sharding`) is `{manual}`; a synced graph's output not split is
    `{replicated}` (an upload or a cleared sharding has none)."""
    t = getattr(t, "global_tensor", t)  # an XLAShardedTensor answers for the tensor it wraps
    if not isinstance(t, XlaTensor):
        return ""
    node = t._st.value if t._chain is not None and _whole_view(t) else t._node()
    if in_manual_region(node):
        return MANUAL
    sharding = getattr(node, "sharding", None)
    if sharding:
        return sharding
    return REPLICATED if type(node) is DataNode and node.spmd_result else ""


# Set when the process records its first manual region's start: until then no value can be inside one, and
# `in_manual_region` walks no graph (the sharding getters are called on every parameter of a large model).
manual_regions = [False]


def in_manual_region(node: Node) -> bool:
    """Whether `node` depends on a manual region's start, not through a region's end: a value computed per
    device (`manual_sharding`)."""
    if not manual_regions[0] or type(node) is DataNode:
        return False
    return inside_region(node)


def _sharding_text_of(array) -> str | None:
    """The sharding text of a buffer split over devices; None for one held whole (replicated or one device)."""
    sharding = getattr(array, "sharding", None)
    if sharding is None or sharding.is_fully_replicated:
        return None
    return sharding_text(sharding, len(array.shape))
