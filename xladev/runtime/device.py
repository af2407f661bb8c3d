"""Registers the `xla` device with PyTorch, without C++: PrivateUse1 renamed, hooks, guard, factories.

The top of the runtime: importing this module loads every layer below it, and the handler modules and
the lowering catalog register their ops as they load. `register()` then connects the runtime to torch,
to the event bus and to `os.fork`, once.
"""

from __future__ import annotations

import contextlib
import threading

import torch
from torch.utils.backend_registration import _DummyDeviceGuard, _DummyPrivateUse1Hook

from xladev.events import bus
from xladev.runtime.record import amp_ops  # noqa: F401  (registers the gradient-scaling ops' handlers)
from xladev.runtime.record import autocast, backward_errors, checkpoint, foreach, rng, sparse_gradients
from xladev.runtime.record import fused_optimizers  # noqa: F401  (registers the fused Adam(W) kernels)
from xladev.runtime.graph import backend, fork_guard
from xladev.runtime.api import host_memory_growth, memory_growth, optimizer_state
from xladev.runtime.record import random_ops  # noqa: F401  (registers the distributions; after handlers.py's *_like)
# The handlers of ops whose lowerings alone cannot do their job (reads back, list outputs, PyTorch's errors).
from xladev.runtime.record import attention, einsum, histogram_edges, linalg_handlers, static_handlers  # noqa: F401
from xladev.runtime.graph.backend import check_index, device_index
from xladev.runtime.record.dispatch import torch_dispatch
from xladev.runtime.execute.execution import execution
from xladev.runtime.record.handlers import FACTORY_OPS, copy_into, factory_kernel
from xladev.runtime.lowering import catalog  # noqa: F401  (registers every lowering)
from xladev.runtime.record.tensor import set_dispatcher, torch_device

_registered = False
_lib = None


class _CurrentDevice(threading.local):
    index = 0


_current = _CurrentDevice()


class _DeviceContext:
    """`with torch.xla.device(i):` makes `xla:i` the device `torch.xla`'s RNG state functions default to."""

    def __init__(self, index) -> None:
        self.index = _device_index(index) if index is not None else _current.index

    def __enter__(self) -> None:
        self.saved, _current.index = _current.index, self.index

    def __exit__(self, *exc) -> None:
        _current.index = self.saved


class _Stream:
    """The one stream of an xla device, for code written against CUDA's streams.

    torch.distributed.checkpoint's file writer copies device tensors to the CPU under
    `device_module.stream(device_module.current_stream())` and then synchronizes the stream. xladev runs a
    device's graphs in order and a copy to the CPU waits for the graph it reads, so one stream per device
    says all there is: waiting on another stream is a no-op, and `synchronize` waits for the graphs running.
    """

    device_type = "xla"

    def __init__(self, index: int) -> None:
        self.device_index = index
        self.device = torch.device("xla", index)

    @staticmethod
    def synchronize() -> None:
        execution.settle()

    @staticmethod
    def wait_stream(stream) -> None:
        pass  # one stream per device: work on it is already in order

    @staticmethod
    def query() -> bool:
        return not execution.in_flight

    def __repr__(self) -> str:
        return f"<xla stream of {self.device}>"


_streams: dict[int, _Stream] = {}


class _BackendModule:
    """What `torch.xla` answers: device count, availability, RNG seeding, its (one) stream per device."""

    # torch.utils.checkpoint saves and replays a device's RNG state only when its module says it is initialised
    # (a region checkpointed through a reference to torch's function taken before xladev routed it: without
    # this its recomputation would draw new dropout masks).
    _initialized = True
    device = _DeviceContext

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return len(backend.jax_devices())

    @staticmethod
    def current_device() -> int:
        return _current.index

    @staticmethod
    def _is_in_bad_fork() -> bool:
        # True in a forked child of a process that used the device: `torch.manual_seed` (called by every
        # DataLoader worker) then leaves the xla generator alone instead of touching the parent's runtime.
        return fork_guard.in_bad_fork()

    @staticmethod
    def manual_seed(seed: int) -> None:
        rng.manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def get_rng_state(device=None) -> torch.Tensor:
        return rng.get_rng_state(_current.index if device is None else _device_index(device))

    @staticmethod
    def set_rng_state(new_state: torch.Tensor, device=None) -> None:
        rng.set_rng_state(new_state, _current.index if device is None else _device_index(device))

    @staticmethod
    def get_amp_supported_dtype():
        return [torch.float16, torch.bfloat16]

    @staticmethod
    def current_stream(device=None) -> _Stream:
        index = _current.index if device is None else _device_index(device)
        return _streams.setdefault(index, _Stream(index))

    default_stream = current_stream

    @staticmethod
    def stream(stream) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext(stream)

    @staticmethod
    def synchronize(device=None) -> None:
        execution.settle()


def _device_index(device) -> int:
    return check_index(device if isinstance(device, int) else device_index(device))


def register() -> None:
    """Makes `device='xla'` work in PyTorch. Idempotent.

    Also: ops on device tensors go to `dispatch.torch_dispatch`, `torch.autocast("xla")` applies PyTorch/XLA's
    policy (autocast.py), torch's optimizers take their foreach path (foreach.py), the event bus settles
    running graphs before a new subscriber joins and describes the backend in records, and forked children
    are guarded, live device memory and host memory that grow step over step are told (memory_growth.py,
    host_memory_growth.py), and SGD's momentum
    buffers exist before its first step (optimizer_state.py).
    """
    global _registered, _lib
    if _registered:
        return
    # `_setup_privateuseone_for_python_backend` would also generate `Tensor.is_xla`, which torch
    # already defines, so the steps are done one by one here.
    torch.utils.rename_privateuse1_backend("xla")
    torch._register_device_module("xla", _BackendModule())

    class _Hooks(_DummyPrivateUse1Hook):
        def device_count(self) -> int:
            return len(backend.jax_devices())

    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_DummyDeviceGuard())

    set_dispatcher(torch_dispatch)
    bus.describe_runtime = backend.describe
    bus.before_subscribe.append(execution.settle)

    _lib = torch.library.Library("aten", "IMPL")
    for op in FACTORY_OPS:
        name = op._schema.name.split("::")[1] + (f".{op._schema.overload_name}" if op._schema.overload_name else "")
        _lib.impl(name, factory_kernel(op), "PrivateUse1")
    _lib.impl("_copy_from", _copy_from, "PrivateUse1")
    autocast.register()
    sparse_gradients.register(_lib)
    fork_guard.install(backend.initialised)
    checkpoint.install()
    foreach.install()
    memory_growth.install()
    host_memory_growth.install()
    optimizer_state.install()
    backward_errors.install()
    _registered = True


def _copy_from(src, dst, non_blocking=False):
    # Reached from copy kernels below the Python key (e.g. `torch.tensor(..., device='xla')`).
    return copy_into(dst, src)


_meta_warmed = False


def _warm_meta_kernels() -> None:
    """Runs one op on the meta device, once.

    torch imports its meta-kernel machinery (about a second: `torch._dynamo`) on the first meta op. The
    runtime infers every recorded op's shape on the meta device, so without this the first op a user
    records would carry that start-up in its `LazyTracing` sample.
    """
    global _meta_warmed
    if not _meta_warmed:
        _meta_warmed = True
        torch.empty(1, device="meta") + 1


def device(n: int | None = None) -> torch.device:
    """The torch device `xla:n` (`xla:0` when n is None).

    Raises:
      ValueError: n is not a valid device index.
    """
    _warm_meta_kernels()
    return torch_device(0 if n is None else check_index(int(n)))


def devices() -> list[torch.device]:
    """All xla devices of this process."""
    return [device(i) for i in range(len(backend.jax_devices()))]


def device_count() -> int:
    return len(backend.jax_devices())
