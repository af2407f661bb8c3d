"""Device memory in a captured profile: xladev's buffers as xprof's Memory Profile reads them.

xprof's Memory Profile tool builds its timeline and its table of what was live at the peak from allocator events
on the host plane: TraceMe events named `MemoryAllocation` and `MemoryDeallocation` carrying the allocator's
figures (bytes in use, peak, capacity) and the buffer's (size, address, op, region, dtype, shape). A GPU's
allocator writes them; the CPU client writes none, so the tool showed nothing for a CPU run.

While a capture records, each step's end compares every device's live buffers (jax's live arrays, each buffer
once, as `device_memory` counts them) with the previous step's end, and writes one event per buffer that appeared
or went: the allocator is the device (`xla:N`); the op is the graph run that made the buffer and its user line (or
"live before the capture", or "made outside a graph": an upload, the RNG key, a Python number fed to a graph); the
capacity is the device's limit (`device_memory.limit_bytes`). The tool numbers the capture's steps itself. Its
timeline is then the live bytes at each step's end, exact for the buffers, without the temporaries inside a
running graph (the Memory Viewer shows those per graph, from XLA's buffer assignment). With no capture recording,
a step's end costs one check.
"""

from __future__ import annotations

import threading

from xladev.runtime.execute import device_memory
from xladev.runtime.graph import annotate, backend

# TensorFlow's DataType numbers, which the tool's `data_type` holds (`tensorflow/core/framework/types.proto`).
_TF_DTYPES = {"float32": 1, "float64": 2, "int32": 3, "uint8": 4, "int16": 5, "int8": 6, "complex64": 8,
              "int64": 9, "bool": 10, "bfloat16": 14, "uint16": 17, "complex128": 18, "float16": 19,
              "uint32": 22, "uint64": 23, "float8_e5m2": 24, "float8_e4m3fn": 25}
BEFORE_CAPTURE = "live before the capture"
OUTSIDE_GRAPHS = "made outside a graph (an upload, the RNG key, a Python number fed to a graph)"
# Outputs remembered between two step ends, at most (a step runs a few graphs; each output is one entry).
_MAX_MADE = 100_000

_lock = threading.Lock()
_made: dict[int, str] = {}  # id of a graph's output array -> what made it
_live: dict | None = None  # device -> {buffer key: (bytes, op, dtype, shape)}, from the previous step's end
_peaks: dict = {}


def graph_outputs(outputs, label: str) -> None:
    """Remembers which graph run made `outputs` (called only while a capture records).

    Args:
      outputs: the jax arrays a graph run returned.
      label: the graph and the user's line, as the tool's op column shows it.
    """
    with _lock:
        if len(_made) < _MAX_MADE:
            for out in outputs:
                _made[id(out)] = label


def step_ended() -> None:
    """At a step's end: writes the buffers that appeared and went since the last one, when a capture records."""
    global _live
    if not annotate.enabled():
        if _live is not None:  # a capture ended: the next one starts afresh
            with _lock:
                _live = None
                _made.clear()
                _peaks.clear()
        return
    devices = backend.jax_devices()
    now = _snapshot(devices)
    with _lock:
        before, _live = _live, now
        _made.clear()
    first = before is None
    for index, device in enumerate(devices):
        _write(f"xla:{index}", (before or {}).get(device, {}), now[device], first, device_memory.limit_bytes(device))


def _snapshot(devices) -> dict:
    """device -> {buffer key: (bytes, op, dtype, shape)} of the live buffers."""
    live: dict = {device: {} for device in devices}
    with _lock:
        made = dict(_made)
    for device, key, array, data in device_memory.live_shards(devices):
        op = made.get(id(array))
        known = live[device].get(key)
        if known is None or (known[1] is None and op is not None):
            # `[16x32]`: a bare number would be read as an integer, and a comma cuts TraceMe's argument.
            live[device][key] = (data.nbytes, op, str(data.dtype), f"[{'x'.join(str(d) for d in data.shape)}]")
    return live


def _write(allocator: str, before: dict, now: dict, first: bool, limit: int) -> None:
    """One device's events: the buffers gone, then those new, each with the bytes in use after it (the tool's
    timeline), the peak, and what is left of `limit` (the tool's capacity; 0: not known)."""
    from jax.profiler import TraceAnnotation

    in_use = sum(entry[0] for entry in before.values())
    peak = _peaks.get(allocator, in_use)
    free = lambda: max(limit - in_use, 0)  # noqa: E731
    for key in before.keys() - now.keys():
        nbytes = before[key][0]
        in_use -= nbytes
        with TraceAnnotation("MemoryDeallocation", allocator_name=allocator, bytes_allocated=in_use,
                             bytes_reserved=0, bytes_available=free(), peak_bytes_in_use=peak,
                             requested_bytes=nbytes, allocation_bytes=nbytes, addr=key):
            pass
    for key in now.keys() - before.keys():
        nbytes, op, dtype, shape = now[key]
        in_use += nbytes
        peak = max(peak, in_use)
        what = op or (BEFORE_CAPTURE if first else OUTSIDE_GRAPHS)
        with TraceAnnotation("MemoryAllocation", allocator_name=allocator, bytes_allocated=in_use, bytes_reserved=0,
                             bytes_available=free(), peak_bytes_in_use=peak, requested_bytes=nbytes,
                             allocation_bytes=nbytes, addr=key, tf_op=annotate.arg_text(what),
                             region_type="device buffer", data_type=_TF_DTYPES.get(dtype, 0), shape=shape):
            pass
    _peaks[allocator] = peak
