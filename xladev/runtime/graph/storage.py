"""The value behind device tensors: a `Storage` per base tensor, and the set of those still pending.

A storage holds its base tensor's current value as an IR node; every view of that base shares it
(tensor.py). Barriers read `pending_storages()` to know what to compute, and replace each computed
value by its device data (`Storage.set_data`).
"""

from __future__ import annotations

import itertools
import threading
import weakref

from xladev.runtime.graph.ir import DataNode, Node

_storage_ids = itertools.count()
# Serialises writes to a storage's value with a barrier's check-and-replace (Storage.set/set_data).
_write_lock = threading.Lock()

# Storages whose value is a pending IR node (not device data): creation id → a weak reference to the
# storage, so that the order of graph outputs is deterministic and a dead tensor is never synced. The
# reference has no callback: a dead storage's entry is dropped by the next barrier (`pending_storages`), or by
# a sweep once the entries outgrow the live ones (`_sweep`). A callback (a functools.partial of pending.pop)
# cost a third of a microsecond per recorded op, which makes one such storage each.
pending: "dict[int, weakref.ref[Storage]]" = {}
# The size of `pending` at which its dead entries are swept (a graph that grows without a barrier).
_SWEEP_FLOOR = 1 << 16
_sweep_at = _SWEEP_FLOOR


# SPMD (set by `use_spmd`): (old value, new value) -> the new value, constrained to the old one's sharding when
# it had one: a tensor updated in place keeps its sharding, as PyTorch/XLA's does.
mark_keeper = None


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
      seed: the constant this storage was created with (`torch.zeros_like`...), when it has been written in
        place since, before any sync: a barrier makes it device data first (seeds.py), so that the graph of a
        tensor's first update is the graph of all later ones. None otherwise.
      viewers: the views that cached a node replayed from the pending value (`id` -> weak reference), or None.
        When the value becomes data their caches are dropped: a stale cached node would keep the whole graph it
        was part of alive, and with it that graph's input buffers (the step's batch), until the view is read.
    """

    __slots__ = ("value", "version", "device_index", "sid", "donor", "internal", "seed", "viewers", "__weakref__")

    def __init__(self, value: Node, device_index: int):
        self.value = value
        self.version = 0
        self.device_index = device_index
        sid = self.sid = next(_storage_ids)
        self.donor = None
        self.internal = False
        self.seed = None
        self.viewers = None
        if type(value) is not DataNode:
            pending[sid] = weakref.ref(self)
            if len(pending) > _sweep_at:
                _sweep()

    def set(self, value: Node) -> None:
        # Under the lock: a barrier on another thread must not replace this write by older data.
        with _write_lock:
            old = self.value
            if mark_keeper is not None and type(value) is not DataNode:
                value = mark_keeper(old, value)
            self.value = value
            if self.version == 0 and type(old) is Node and not old.operands:
                self.seed = old  # the first write over the constant this storage was created with
            self.version += 1
            if type(value) is not DataNode:
                if type(old) is DataNode:
                    # Weak: the old buffer must die when nothing computes from it any more.
                    self.donor = weakref.ref(old)
                pending[self.sid] = weakref.ref(self)  # the storage's one callback-less reference, reused
            else:  # e.g. `copy_` of uploaded data: nothing left to compute
                self.donor = None
                self.seed = None
                pending.pop(self.sid, None)
                _drop_view_caches(self)

    def set_data(self, value: DataNode, computed: Node) -> bool:
        """Replaces the pending value `computed` by its data; False if another thread wrote since.

        A write recorded on another thread while the barrier ran is newer than the data: it stays
        pending (it reads `computed`, so it is still right) and the next barrier computes it.
        """
        with _write_lock:
            if self.value is not computed:
                return False
            donor = self.donor
            if donor is not None:  # updated in place: the data is still the one first made (a parameter's upload)
                old = donor()
                if old is not None and old.origin is not None:
                    value.origin = old.origin
            self.value = value
            self.version += 1
            self.donor = None
            self.seed = None
            pending.pop(self.sid, None)
            _drop_view_caches(self)
            return True


    def cache_view(self, view) -> None:
        """Remembers that `view` cached a node replayed from this storage's value (see `viewers`)."""
        viewers = self.viewers
        if viewers is None:
            self.viewers = {id(view): weakref.ref(view)}
        elif id(view) not in viewers:  # a view writing in place again: once is enough (a weak reference costs)
            viewers[id(view)] = weakref.ref(view)

    def release(self, value: Node) -> None:
        """Gives up the storage's buffer (or pending value) for `value`, a placeholder no barrier computes: FSDP's
        full parameter between its uses holds no memory. A graph that reads the placeholder fails at its lowering,
        which says what was read."""
        with _write_lock:
            self.value = value
            self.version += 1
            self.donor = None
            self.seed = None
            pending.pop(self.sid, None)

    def put_back(self, value: Node, donor) -> None:
        """Gives the storage an earlier value and donor back (a traced function's writes undone)."""
        with _write_lock:
            self.value = value
            self.version += 1
            self.donor = donor
            if type(value) is DataNode:
                pending.pop(self.sid, None)
            else:
                pending[self.sid] = weakref.ref(self)


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
            storage.seed = None
            pending.pop(storage.sid, None)
            if storage.viewers is not None:
                _drop_view_caches(storage)


def _drop_view_caches(storage: Storage) -> None:
    """Drops the cached nodes of the views that replayed the storage's pending value (it is data now)."""
    viewers, storage.viewers = storage.viewers, None
    if viewers:
        for ref in viewers.values():
            view = ref()
            if view is not None and type(view.__dict__.get("_vnode")) is not DataNode:
                view._vnode = None
                view._vver = -1


def pending_storages() -> list[Storage]:
    """The live storages with a pending value (deterministic graph outputs): first those updated in place
    since their last data or constant (the model's and the optimizer's state), then the others, each in
    creation order. State created in a step (Adam's `exp_avg`, seeded) then sorts as it will in every
    later step, before that step's fresh tensors (the loss): the first step's graph is the later steps'."""
    storages = _live_storages()
    storages.sort(key=_in_place_first)
    return storages


def _live_storages() -> list[Storage]:
    """The live storages in `pending`, in no particular order; drops the entries of dead ones.

    Safe while other threads record: the weak dictionary is copied in one step, not iterated.
    """
    storages = []
    for sid, ref in list(pending.items()):
        storage = ref()
        if storage is not None:
            storages.append(storage)
        else:  # dead: its sid is never used again, so no other thread re-adds it
            pending.pop(sid, None)
    return storages


def _sweep() -> None:
    """Drops the entries of dead storages from `pending`, and sets the size of the next sweep to twice the live
    entries (at least `_SWEEP_FLOOR`): recording stays amortised O(1) however long a graph grows."""
    global _sweep_at
    _sweep_at = max(_SWEEP_FLOOR, 2 * len(_live_storages()))


def _in_place_first(storage: Storage) -> tuple[bool, int]:
    return (storage.donor is None and storage.seed is None, storage.sid)
