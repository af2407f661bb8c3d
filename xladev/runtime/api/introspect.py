"""Looking at pending graphs without running them: IR text, HLO, StableHLO, Graphviz, hashes.

The debug API (`xladev.debug`) reads graphs through this module: the graph of some tensors, the one
the next barrier would run, and their text forms (irtext.py) and lowering (graph_lowering.py).
"""

from __future__ import annotations

from xladev.runtime.lowering.graph_lowering import lowered
from xladev.runtime.graph.ir import DataNode, Graph
from xladev.runtime.graph.irtext import dtype_short, graph_to_dot, graph_to_text, plain_shape, root_hashes
from xladev.runtime.graph.sharding_text import sharding_text
from xladev.runtime.distributed.spmd_sharding import get_sharding_spec
from xladev.runtime.graph.storage import pending_storages
from xladev.runtime.record.tensor import XlaTensor

__all__ = ["buffer_pointer", "element_type", "graph_of", "graph_to_dot", "lowered", "pending_graph", "root_hashes",
           "tensor_debug_info", "text"]


def graph_of(tensors) -> Graph:
    """The graph computing these device tensors (their current values), as a barrier would build it."""
    nodes = []
    for t in tensors:
        if not isinstance(t, XlaTensor):
            raise TypeError(f"expected xla tensors, got {type(t).__name__} on {getattr(t, 'device', '?')}")
        nodes.append(t._node())
    return Graph(nodes)


def pending_graph() -> Graph:
    """The graph the next `mark_step` would run (every live tensor with pending IR)."""
    storages = pending_storages()
    return Graph([s.value for s in storages])


def text(graph: Graph) -> str:
    return graph_to_text(graph)


def tensor_debug_info(t) -> str:
    """What a device tensor holds now, in the layout of PyTorch/XLA's `_get_xla_tensor_debug_info`.

    The block names the tensor's storage, device and shape, its sharding, its pending IR node (`IR: None` once
    it is device data) and its device buffer (`XLAData: None` while it is still pending), so a test can ask
    whether a value was materialised without running anything.

    Args:
      t: any tensor.

    Returns:
      The block, or "Not a XLATensor" for a tensor of another device.
    """
    if not isinstance(t, XlaTensor):
        return "Not a XLATensor\n"
    node = t._node()
    lines = ["XLATensor {", f"TensorID: {t._st.sid}", f"AliasID: {t._st.sid}", f"Device: {t.device}",
             f"XLA Shape: {plain_shape(node.meta)}", f"ShardingSpec: {get_sharding_spec(t) or 'None'}"]
    if isinstance(node, DataNode) and node.array is not None and len(node.array.sharding.device_set) > 1:
        # SPMD data over several devices: PyTorch/XLA's sharded data block, on its virtual SPMD device.
        lines += ["IR: None", "XLAShardedData: ", "  Data Device: SPMD:0", f"  Data Shape: {plain_shape(node.meta)}",
                  f"  OpSharding: {sharding_text(node.array.sharding, len(node.meta.shape))}",
                  f"  NumShards: {len(node.array.addressable_shards)}"]
    elif isinstance(node, DataNode) and node.array is not None:
        lines += ["IR: None", "XLAData: ", f"  Data Device: {t.device}", f"  Data Shape: {plain_shape(node.meta)}",
                  f"  Data Handle: {id(node.array)}"]
    else:
        lines += [f"IR: {node.op.name}, xla_shape={plain_shape(node.meta)}", "XLAData: None"]
    lines += ["Tensor on host: None", "}"]
    return "\n".join(lines) + "\n"


def element_type(t) -> str:
    """XLA's name of a device tensor's element type (`f32`, `bf16`, `s64`...), as its IR and HLO print it.

    Raises:
      TypeError: not a device tensor.
    """
    if not isinstance(t, XlaTensor):
        raise TypeError(f"expected an xla tensor, got a tensor on {getattr(t, 'device', '?')}")
    return dtype_short(t._node().meta.dtype)


def buffer_pointer(t) -> int:
    """The address of the device buffer holding a tensor's value. A pending value is computed first (a barrier
    runs), since only a computed value has a buffer.

    Raises:
      TypeError: not a device tensor.
      ValueError: the value is sharded over several devices (one buffer per device, no single address).
    """
    if not isinstance(t, XlaTensor):
        raise TypeError(f"expected an xla tensor, got a tensor on {getattr(t, 'device', '?')}")
    node = t._node()
    if not (isinstance(node, DataNode) and node.array is not None):
        from xladev.runtime.api.training import sync

        sync(wait=True)
        node = t._node()
    array = node.array
    if len(array.sharding.device_set) > 1:
        raise ValueError(f"the tensor is sharded over {len(array.sharding.device_set)} devices: each shard has its "
                         "own buffer (read them with XLAShardedTensor.local_shards)")
    array.block_until_ready()
    return array.unsafe_buffer_pointer()
