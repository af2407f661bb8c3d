"""`XlaTensor`: the torch tensor of the `xla` device, and views over a shared value.

Each tensor refers to a `Storage` (storage.py) that holds the current value of its base as an IR
node. A view holds the chain of view ops from its base; reading it replays the chain on the base's
current value, and writing to it scatters the new value back into the base, so aliasing behaves as in
eager PyTorch. Ops on a tensor go to the dispatcher that `device.register()` sets (dispatch.py).
"""

from __future__ import annotations

import threading
import weakref

import torch

from xladev.runtime.graph.ir import DataNode, Meta, Node
from xladev.runtime.graph.op_ledger import recorder
from xladev.runtime.graph.storage import Storage
from xladev.runtime.execute.transfers import reading, tensor_repr
from xladev.runtime.lowering.views import replay, scatter_into_base

_lock = threading.RLock()

_DEVICES: dict[int, torch.device] = {}


def torch_device(index: int) -> torch.device:
    device = _DEVICES.get(index)
    if device is None:
        device = _DEVICES[index] = torch.device("xla", index)
    return device


def set_dispatcher(torch_dispatch) -> None:
    """Makes `torch_dispatch(cls, func, types, args=(), kwargs=None)` XlaTensor's `__torch_dispatch__`, the
    function every aten op on an XlaTensor is handed to (dispatch.torch_dispatch, set by `device.register()`).
    Installed as the classmethod itself rather than called from one: a Python frame less on every op."""
    XlaTensor.__torch_dispatch__ = classmethod(torch_dispatch)


class XlaTensor(torch.Tensor):
    """A tensor on `xla:N`. Ops on it are recorded, not run, until a barrier or a value read."""

    # No __slots__: `torch.utils.swap_tensors` (how `module.to` keeps Parameters, see module_conversion)
    # needs the same slots on both sides, and a CPU Parameter has none. The fields live in __dict__;
    # a base tensor (no view chain) only sets `_st`, the others read these class defaults.
    _chain = None  # the view ops from the base, or None for a base tensor
    _vnode = None  # the view's value as last replayed, for storage version `_vver`
    _vver = -1

    @staticmethod
    def __new__(cls, storage: Storage, meta: Meta, chain=None, strides=None, offset=0, requires_grad=False):
        t = torch.Tensor._make_wrapper_subclass(
            cls, meta.shape, strides=strides, storage_offset=offset if strides is not None else None, dtype=meta.dtype,
            device=torch_device(storage.device_index), requires_grad=requires_grad,
        )
        t._st = storage
        if chain is not None:
            t._chain = chain
        recorder.tensors_created += 1
        return t

    def __init__(self, *args, **kwargs):
        pass

    # PyTorch/XLA's DestroyXlaTensor. Not a method: a `functools.partial` has no `__get__`, so the finalizer calls it
    # with no arguments, and it runs no Python bytecode in which a signal handler's exception would be lost
    # (Recorder.tensors_destroyed says why).
    __del__ = recorder.count_freed

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __coerce_same_metadata_as_tangent__(self, expected_metadata, expected_type=None):
        # AOTAutograd (torch.compile) checks that a backward's incoming gradient has the type it traced with,
        # a plain tensor on the `xla` device: a device tensor is exactly that.
        return self

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        """Every aten op on a device tensor: replaced by dispatch.torch_dispatch when the device is registered."""
        raise RuntimeError(f"{func} on an xla tensor before the device was registered (xladev.runtime.device.register)")

    # ---- reading and writing the lazy value --------------------------------------------------
    def _node(self) -> Node:
        chain = self._chain
        if chain is None:
            return self._st.value
        st = self._st
        if self._vver == st.version:
            return self._vnode
        node = replay(chain, st.value)
        self._vnode = node
        self._vver = st.version
        if type(node) is not DataNode:
            st.cache_view(self)
        return node

    def _assign(self, node: Node) -> None:
        """Writes a new value (an in-place op's result) into this tensor and every alias."""
        chain = self._chain
        if chain is None:
            self._st.set(node)
            return
        st = self._st
        st.set(scatter_into_base(chain, st.value, node))
        self._vnode = node
        self._vver = st.version
        st.cache_view(self)

    # ---- value reads: each names its exact cause ---------------------------------------------
    def __repr__(self, *, tensor_contents=None):
        return tensor_repr(self)

    def item(self):
        with reading(".item()"):
            return super().item()

    def tolist(self):
        with reading(".tolist()"):
            return self.cpu().tolist()

    def numpy(self, *, force: bool = False):
        with reading(".numpy()"):
            return self.cpu().numpy()

    def __bool__(self):
        with reading("bool() in control flow"):
            return super().__bool__()

    def __float__(self):
        with reading("float()"):
            return super().__float__()

    def __int__(self):
        with reading("int()"):
            return super().__int__()

    def __index__(self):
        with reading("used as an index"):
            return super().__index__()

    def __format__(self, spec):
        if self.dim() == 0 and spec:
            return format(self.item(), spec)
        return object.__format__(self, spec) if spec else self.__repr__()

    def cpu(self, memory_format=torch.preserve_format):
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

    def __copy__(self):
        # `copy.copy` of a tensor shares its data, as torch's does on the CPU (a new tensor over the same storage,
        # with the user's attributes); without this it went through `__reduce_ex__`'s pickling path and failed.
        new = alias_of(self)
        if self.requires_grad and self.is_leaf:
            new.requires_grad_(True)
        extra = {k: v for k, v in self.__dict__.items() if k not in _LAZY_FIELDS}
        if extra:
            new.__dict__.update(extra)
        return new

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


# Called with positional arguments (size, strides, storage_offset, memory_format, dtype, layout, device):
# PyTorch parses them a fifth faster than keywords, and every recorded op makes a tensor.
_make_wrapper = torch.Tensor._make_wrapper_subclass
_STRIDED = torch.strided


def wrap(storage: Storage, meta: Meta) -> XlaTensor:
    """A new base tensor over `storage` whose value has `meta`: `XlaTensor(storage, meta)`, without the
    Python `__new__`/`__init__` calls and keyword arguments (every recorded op makes one)."""
    index = storage.device_index
    device = _DEVICES.get(index)
    if device is None:
        device = torch_device(index)
    t = _make_wrapper(XlaTensor, meta[0], None, None, None, meta[1], _STRIDED, device)
    t._st = storage
    recorder.tensors_created += 1
    return t


def wrap_view(storage: Storage, meta: Meta, chain: tuple, strides, offset: int) -> XlaTensor:
    """A new tensor over `storage` with these strides and view chain (None: a base tensor):
    `XlaTensor(storage, meta, chain, strides, offset)`, as `wrap` makes it."""
    index = storage.device_index
    device = _DEVICES.get(index)
    if device is None:
        device = torch_device(index)
    t = _make_wrapper(XlaTensor, meta[0], strides, offset, None, meta[1], _STRIDED, device)
    t._st = storage
    if chain is not None:
        t._chain = chain
    recorder.tensors_created += 1
    return t


def new_tensor(node: Node, device_index: int, requires_grad: bool = False) -> XlaTensor:
    """A fresh base tensor holding `node`."""
    return wrap(Storage(node, device_index), node.meta)


def alias_of(t: XlaTensor) -> XlaTensor:
    """A new tensor sharing `t`'s storage and view (detach, alias)."""
    return wrap_view(t._st, (t.shape, t.dtype), t._chain, t.stride(), t.storage_offset())
