"""State created as a constant and updated in place becomes device data before its first graph.

An optimizer creates its state inside its first step (`exp_avg = torch.zeros_like(p)`, then
`exp_avg.lerp_(grad, ...)`): the first step's graph would hold the zeros as a constant, and every later
step's reads `exp_avg` as an input, so the second step compiled a second graph. A storage remembers the
constant it was created with when it is first written in place (`Storage.seed`); before a barrier computes
such storages, each seed is made device data (the constant computed on the host by PyTorch and uploaded,
a counted host→device transfer), and the nodes reading it read the data instead. The first step's graph
is then the graph of every later step, and the zeros' buffer can be donated to the updated value.
"""

from __future__ import annotations

import weakref

import torch

from xladev.runtime.graph import backend, device_put
from xladev.runtime.graph.ir import DataNode, Graph, rebuild

aten = torch.ops.aten

# Factories whose value PyTorch computes on the host exactly as the lowering does (no randomness, no
# undefined contents).
_CONSTANT_FACTORIES = frozenset((aten.full.default, aten.zeros.default, aten.ones.default))


def _data_of(seed, device_index: int) -> DataNode:
    args, kwargs = rebuild(seed.template, ())
    value = seed.op.aten(*args, **kwargs)
    data = DataNode(device_put.put(backend.torch_to_numpy(value), device_index), seed.meta)
    data.origin = (seed.op.name, seed.template, seed.location)  # the line that created it (memory_census)
    return data


def materialize(storages: list) -> None:
    """Makes the seeds of `storages` device data and rewires the pending nodes that read them.

    Args:
      storages: the storages a barrier is about to compute (one device's or several).
    """
    datas: dict[int, DataNode] = {}
    seeded = []
    for storage in storages:
        seed = storage.seed
        if seed is None:
            continue
        storage.seed = None
        if seed.op.aten not in _CONSTANT_FACTORIES or type(storage.value) is DataNode:
            continue
        data = datas.get(id(seed))
        if data is None:
            data = datas[id(seed)] = _data_of(seed, storage.device_index)
        seeded.append((storage, data))
    if not datas:
        return
    by_device: dict[int, list] = {}
    for storage in storages:
        if type(storage.value) is not DataNode:
            by_device.setdefault(storage.device_index, []).append(storage.value)
    for device_index, roots in by_device.items():
        # Nodes are shared by reference: rewiring them in place is seen by every tensor and view holding
        # them, and the value each computes is unchanged (the data holds the constant's value).
        for node in Graph(roots, device_index).nodes:
            operands = node.operands
            if operands and any(id(o) in datas for o in operands):
                node.operands = tuple(datas.get(id(o), o) for o in operands)
    for storage in storages:
        data = datas.get(id(storage.value))
        if data is not None:  # a tensor whose value is the constant itself (a clone of it): nothing to compute
            storage.set_data(data, storage.value)
    for storage, data in seeded:
        # The constant's buffer is this storage's old value: the barrier may donate it to the new value.
        storage.donor = weakref.ref(data)
