"""The value behind device tensors: a `Storage` per base tensor, and the set of those still pending.

A storage holds its base tensor's current value as an IR node; every view of that base shares it
(tensor.py). Barriers read `pending_storages()` to know what to compute, and replace each computed
value by its device data (`Storage.set_data`).
"""

from __future__ import annotations

import functools
import itertools
import threading
import weakref

from xladev.runtime.ir import DataNode, Node

_storage_ids = itertools.count()
# Serialises writes to a storage's value with a barrier's check-and-replace (Storage.set/set_data).
_write_lock = threading.Lock()

# Storages whose value is a pending IR node (not device data): creation id → a weak reference to the
# storage, so that the order of graph outputs is deterministic and a dead tensor is never synced. A
# storage's death removes its entry through the reference's callback, `pending.pop(sid)` bound with
# functools.partial: C calls only, where a WeakValueDictionary runs three Python functions per storage
# (every recorded op makes one).
pending: "dict[int, weakref.ref[Storage]]" = {}
_unregister = pending.pop


class Storage:
    """The value of a base tensor, shared by all its views.

    Attributes:
      value: the current IR node (a DataNode once synced).
      version: bumped on every write, so views know to re-read.
      device_index: which `xla:N`.
      sid: creation order.
      donor: a weak reference to the device data this storage held before its pending value was
        written (an in-place update since the last sync), or None. The step barrier may donate that
        buffer to the graph computing the new value (execution.py).
      internal: the runtime's own state (the RNG key), not a user tensor: a graph output for it is not
        counted among the graph's outputs, as PyTorch/XLA keeps that state outside its graphs.
    """

    __slots__ = ("value", "version", "device_index", "sid", "donor", "internal", "_ref", "__weakref__")

    def __init__(self, value: Node, device_index: int):
        self.value = value
        self.version = 0
        self.device_index = device_index
        sid = self.sid = next(_storage_ids)
        self.donor = None
        self.internal = False
        if type(value) is not DataNode:
            ref = self._ref = weakref.ref(self, functools.partial(_unregister, sid))
            pending[sid] = ref
        else:
            self._ref = None

    def _pending_ref(self) -> "weakref.ref[Storage]":
        """This storage's entry in `pending` (one reference for its life: its callback removes the entry)."""
        ref = self._ref
        if ref is None:
            ref = self._ref = weakref.ref(self, functools.partial(_unregister, self.sid))
        return ref

    def set(self, value: Node) -> None:
        # Under the lock: a barrier on another thread must not replace this write by older data.
        with _write_lock:
            old = self.value
            self.value = value
            self.version += 1
            if type(value) is not DataNode:
                if type(old) is DataNode:
                    # Weak: the old buffer must die when nothing computes from it any more.
                    self.donor = weakref.ref(old)
                pending[self.sid] = self._pending_ref()
            else:  # e.g. `copy_` of uploaded data: nothing left to compute
                self.donor = None
                pending.pop(self.sid, None)

    def set_data(self, value: DataNode, computed: Node) -> bool:
        """Replaces the pending value `computed` by its data; False if another thread wrote since.

        A write recorded on another thread while the barrier ran is newer than the data: it stays
        pending (it reads `computed`, so it is still right) and the next barrier computes it.
        """
        with _write_lock:
            if self.value is not computed:
                return False
            self.value = value
            self.version += 1
            self.donor = None
            pending.pop(self.sid, None)
            return True


def write_data(writes: list) -> None:
    """Sets each storage's value to device data, under one lock: a compiled program's writes into its arguments
    (an optimizer's parameters and state: a hundred or more per call), as `Storage.set` would one by one.

    Args:
      writes: (storage, DataNode) pairs.
    """
    with _write_lock:
        for storage, value in writes:
            storage.value = value
            storage.version += 1
            storage.donor = None
            pending.pop(storage.sid, None)


def pending_storages() -> list[Storage]:
    """The live storages with a pending value, in creation order (deterministic graph outputs).

    Safe while other threads record: the weak dictionary is copied in one step, not iterated.
    """
    refs = list(pending.values())
    storages = [s for s in (r() for r in refs) if s is not None]
    storages.sort(key=_by_sid)
    return storages


def _by_sid(storage: Storage) -> int:
    return storage.sid
