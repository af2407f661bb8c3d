"""`XlaTensor`: the torch tensor of the `xla` device, and the storage model behind views.

Each tensor refers to a `Storage` that holds the current value of its base as an IR node. A view holds
the chain of view ops from its base; reading it replays the chain on the base's current value, and
writing to it scatters the new value back into the base, so aliasing behaves as in eager PyTorch.
"""

from __future__ import annotations

import itertools
import threading
import weakref

import torch

from xladev.runtime.ir import DataNode, Meta, Node

_storage_ids = itertools.count()
_lock = threading.RLock()
# Serialises writes to a storage's value with a barrier's check-and-replace (Storage.set/set_data).
_write_lock = threading.Lock()

# Storages whose value is a pending IR node (not device data), keyed by creation id so that the
# order of graph outputs is deterministic. Weak: a dead tensor is never synced.
pending: "weakref.WeakValueDictionary[int, Storage]" = weakref.WeakValueDictionary()

_DEVICES: dict[int, torch.device] = {}


def torch_device(index: int) -> torch.device:
    device = _DEVICES.get(index)
    if device is None:
        device = _DEVICES[index] = torch.device("xla", index)
    return device


class Storage:
    """The value of a base tensor, shared by all its views.

    Attributes:
      value: the current IR node (a DataNode once synced).
      version: bumped on every write, so views know to re-read.
      device_index: which `xla:N`.
      sid: creation order.
    """

    __slots__ = ("value", "version", "device_index", "sid", "__weakref__")

    def __init__(self, value: Node, device_index: int):
        self.value = value
        self.version = 0
        self.device_index = device_index
        self.sid = next(_storage_ids)
        if type(value) is not DataNode:
            pending[self.sid] = self

    def set(self, value: Node) -> None:
        # Under the lock: a barrier on another thread must not replace this write by older data.
        with _write_lock:
            self.value = value
            self.version += 1
            if type(value) is not DataNode:
                pending[self.sid] = self
            else:  # e.g. `copy_` of uploaded data: nothing left to compute
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
            pending.pop(self.sid, None)
            return True


def pending_storages() -> list[Storage]:
    """The live storages with a pending value, in creation order (deterministic graph outputs).

    Safe while other threads record: the weak dictionary is copied in one step, not iterated.
    """
    refs = list(pending.data.values())
    storages = [s for s in (r() for r in refs) if s is not None]
    storages.sort(key=_by_sid)
    return storages


def _by_sid(storage: Storage) -> int:
    return storage.sid


class XlaTensor(torch.Tensor):
    """A tensor on `xla:N`. Ops on it are recorded, not run, until a barrier or a value read."""

    # No __slots__: `torch.utils.swap_tensors` (how `module.to` keeps Parameters, see module_conversion)
    # needs the same slots on both sides, and a CPU Parameter has none. The fields live in __dict__.

    @staticmethod
    def __new__(cls, storage: Storage, meta: Meta, chain=None, strides=None, offset=0, requires_grad=False):
        t = torch.Tensor._make_wrapper_subclass(
            cls, meta.shape, strides=strides, storage_offset=offset if strides is not None else None, dtype=meta.dtype,
            device=torch_device(storage.device_index), requires_grad=requires_grad,
        )
        t._st = storage
        t._chain = chain
        t._vnode = None
        t._vver = -1
        return t

    def __init__(self, *args, **kwargs):
        pass

    # The op handler lives in dispatch.py; it is attached there to keep this module small.
    __torch_function__ = torch._C._disabled_torch_function_impl

    # ---- reading and writing the lazy value --------------------------------------------------
    def _node(self) -> Node:
        chain = self._chain
        if chain is None:
            return self._st.value
        st = self._st
        if self._vver == st.version:
            return self._vnode
        from xladev.runtime.views import replay

        node = replay(chain, st.value)
        self._vnode = node
        self._vver = st.version
        return node

    def _assign(self, node: Node) -> None:
        """Writes a new value (an in-place op's result) into this tensor and every alias."""
        chain = self._chain
        if chain is None:
            self._st.set(node)
            return
        from xladev.runtime.views import scatter_into_base

        st = self._st
        st.set(scatter_into_base(chain, st.value, node))
        self._vnode = node
        self._vver = st.version

    # ---- value reads: each names its exact cause ---------------------------------------------
    def __repr__(self, *, tensor_contents=None):
        from xladev.runtime.access import tensor_repr

        return tensor_repr(self)

    def item(self):
        from xladev.runtime.access import reading

        with reading(".item()"):
            return super().item()

    def tolist(self):
        from xladev.runtime.access import reading

        with reading(".tolist()"):
            return self.cpu().tolist()

    def numpy(self, *, force: bool = False):
        from xladev.runtime.access import reading

        with reading(".numpy()"):
            return self.cpu().numpy()

    def __bool__(self):
        from xladev.runtime.access import reading

        with reading("bool() in control flow"):
            return super().__bool__()

    def __float__(self):
        from xladev.runtime.access import reading

        with reading("float()"):
            return super().__float__()

    def __int__(self):
        from xladev.runtime.access import reading

        with reading("int()"):
            return super().__int__()

    def __index__(self):
        from xladev.runtime.access import reading

        with reading("used as an index"):
            return super().__index__()

    def __format__(self, spec):
        if self.dim() == 0 and spec:
            return format(self.item(), spec)
        return object.__format__(self, spec) if spec else self.__repr__()

    def cpu(self, memory_format=torch.preserve_format):
        from xladev.runtime.access import reading

        with reading(".cpu()"):
            return super().cpu(memory_format=memory_format)

    # `p.data = other` swaps the C++ metadata; the lazy value must follow or the storage would be stale.
    @property
    def data(self):
        return torch._C.TensorBase.data.__get__(self)

    @data.setter
    def data(self, new):
        torch._C.TensorBase.data.__set__(self, new)
        if isinstance(new, XlaTensor):
            self._st = new._st
            self._chain = new._chain
            self._vnode = None
            self._vver = -1

    def __reduce_ex__(self, protocol):
        # torch.save of a device tensor goes through the CPU, as PyTorch/XLA users expect. Pickle's memo
        # keeps a tensor saved under two names (tied weights) one tensor when loaded.
        is_param = self.__dict__.get("_is_param", False)
        if self._chain is None:
            # Tensors over one storage (a state_dict's tied entries) share one saved value, so that after
            # torch.load they share storage again, as CPU tensors do.
            return (_rebuild_alias, (_saved_value(self._st), self.requires_grad, is_param))
        return (_rebuild_on_device, (self.detach().cpu(), self.device.index, self.requires_grad, is_param))

    def __deepcopy__(self, memo):
        # torch.Tensor's deepcopy would also deep-copy the lazy-value fields (a Storage, IR nodes); a copy
        # is instead a new tensor holding a recorded clone, with the user's attributes copied.
        if id(self) in memo:
            return memo[id(self)]
        if not self.is_leaf:
            # Eager PyTorch refuses this too: a copy of a tensor in an autograd graph has no meaning.
            raise RuntimeError("deepcopy of an xla tensor that is not a graph leaf: as in eager PyTorch, only tensors "
                               "the user created (leaves) can be deep-copied; detach() it first")
        import copy

        with torch.no_grad():
            new = self.clone(memory_format=torch.preserve_format)
        new.requires_grad_(self.requires_grad)
        memo[id(self)] = new
        extra = {k: v for k, v in self.__dict__.items() if k not in _LAZY_FIELDS}
        if extra:
            new.__dict__.update(copy.deepcopy(extra, memo))
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        return new


_LAZY_FIELDS = frozenset(("_st", "_chain", "_vnode", "_vver"))


class _SavedValue:
    """Pickles a storage's current value through the CPU; one per storage, so pickle's memo dedupes it."""

    __slots__ = ("storage", "__weakref__")

    def __init__(self, storage: Storage):
        self.storage = weakref.ref(storage)  # a strong reference would keep the cache's key alive

    def __reduce__(self):
        storage = self.storage()
        if storage is None:
            raise RuntimeError("the device tensor being saved was freed while pickling")
        base = XlaTensor(storage, storage.value.meta)
        return (_rebuild_on_device, (base.detach().cpu(), storage.device_index, False, False))


_saved_values: "weakref.WeakKeyDictionary[Storage, _SavedValue]" = weakref.WeakKeyDictionary()


def _saved_value(storage: Storage) -> _SavedValue:
    with _lock:
        saved = _saved_values.get(storage)
        if saved is None:
            saved = _saved_values[storage] = _SavedValue(storage)
        return saved


def _rebuild_alias(base, requires_grad, is_param):
    from xladev.runtime.dispatch import alias_of

    tensor = alias_of(base).requires_grad_(requires_grad)
    if is_param:
        tensor._is_param = True
    return tensor


def _rebuild_on_device(cpu_tensor, index, requires_grad, is_param=False):
    tensor = cpu_tensor.to(torch_device(index)).requires_grad_(requires_grad)
    if is_param:
        tensor._is_param = True  # what `nn.Parameter(device_tensor)` marks: isinstance(t, Parameter) holds
    return tensor


# torch.load's default (weights_only=True) unpickler calls only the functions it was told are safe;
# these two rebuild a device tensor from a CPU tensor and plain values, nothing else.
torch.serialization.add_safe_globals([_rebuild_on_device, _rebuild_alias])


def new_tensor(node: Node, device_index: int, requires_grad: bool = False) -> XlaTensor:
    """A fresh base tensor holding `node`."""
    return XlaTensor(Storage(node, device_index), node.meta)
