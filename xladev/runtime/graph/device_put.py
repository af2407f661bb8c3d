"""Every host→device copy, timed and published: tensors, Python scalars fed as graph inputs, RNG seeds.

PyTorch/XLA counts each of them as a transfer (`TransferToDeviceTime`, `TensorToData`), so a script
reading those counters sees the same numbers here.
"""

from __future__ import annotations

import time

from xladev.events import TransferToDevice, bus
from xladev.runtime.graph import annotate, backend, steps
from xladev.runtime.graph.span_clock import spent


def put(host_array, device_index: int):
    """`backend.put`, published as a `TransferToDevice` event.

    Args:
      host_array: a numpy array.
      device_index: the xla device it goes to.

    Returns:
      The device array.
    """
    start = time.perf_counter_ns()
    with annotate.to_device_span(int(host_array.nbytes), steps.current()):
        array = backend.put(host_array, device_index)
    now = time.perf_counter_ns()
    spent(now - start)
    if bus.active:
        bus.emit(TransferToDevice(now, steps.current(), int(host_array.nbytes), now - start))
    return array
