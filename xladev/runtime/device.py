"""Registers the `xla` device with PyTorch, without C++: PrivateUse1 renamed, hooks, guard, factories."""

from __future__ import annotations

import torch

from xladev.runtime import backend

_registered = False
_lib = None


class _BackendModule:
    """What `torch.xla` answers: device count, availability, RNG seeding."""

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
        return 0

    @staticmethod
    def _is_in_bad_fork() -> bool:
        # True in a forked child of a process that used the device: `torch.manual_seed` (called by every
        # DataLoader worker) then leaves the xla generator alone instead of touching the parent's runtime.
        from xladev.runtime.fork_guard import in_bad_fork

        return in_bad_fork()

    @staticmethod
    def manual_seed(seed: int) -> None:
        from xladev.runtime.rng import manual_seed

        manual_seed(seed)

    manual_seed_all = manual_seed

    @staticmethod
    def get_rng_state(device="xla") -> torch.Tensor:
        from xladev.runtime.rng import get_rng_state

        return get_rng_state(_device_index(device))

    @staticmethod
    def set_rng_state(new_state: torch.Tensor, device="xla") -> None:
        from xladev.runtime.rng import set_rng_state

        set_rng_state(new_state, _device_index(device))

    @staticmethod
    def get_amp_supported_dtype():
        return [torch.float16, torch.bfloat16]


def _device_index(device) -> int:
    return check_index(device if isinstance(device, int) else device_index(device))


def device_index(device) -> int:
    """The index of an `xla` device argument (`device=`, `.to()`), checked against the devices that exist.

    Args:
      device: a torch.device, a string such as "xla:1", or None (xla:0).

    Raises:
      ValueError: that device does not exist in this process.
    """
    index = None if device is None else torch.device(device).index
    # xla:0 always exists (or jax_devices raises); not asking keeps lazy factories from starting jax.
    return 0 if not index else check_index(index)


def check_index(index: int) -> int:
    """`index`, if `xla:index` is one of this process's devices.

    Raises:
      ValueError: it is not (the one place that words this error).
      ConfigError: PJRT_DEVICE names a backend jax cannot provide.
    """
    count = len(backend.jax_devices())
    if not 0 <= index < count:
        raise ValueError(f"xla:{index} does not exist: this process has {count} xla device(s)")
    return index


def register() -> None:
    """Makes `device='xla'` work in PyTorch. Idempotent."""
    global _registered, _lib
    if _registered:
        return
    from torch.utils.backend_registration import _DummyDeviceGuard, _DummyPrivateUse1Hook

    # `_setup_privateuseone_for_python_backend` would also generate `Tensor.is_xla`, which torch
    # already defines, so the steps are done one by one here.
    torch.utils.rename_privateuse1_backend("xla")
    torch._register_device_module("xla", _BackendModule())

    class _Hooks(_DummyPrivateUse1Hook):
        def device_count(self) -> int:
            return len(backend.jax_devices())

    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_DummyDeviceGuard())

    from xladev.events import bus

    bus.describe_runtime = backend.describe
    from xladev.runtime import handlers, rng  # noqa: F401  (register the special handlers)
    from xladev.runtime import lowering  # noqa: F401  (registers all lowerings)

    _lib = torch.library.Library("aten", "IMPL")
    for op in handlers.FACTORY_OPS:
        name = op._schema.name.split("::")[1] + (f".{op._schema.overload_name}" if op._schema.overload_name else "")
        _lib.impl(name, handlers.factory_kernel(op), "PrivateUse1")
    _lib.impl("_copy_from", _copy_from, "PrivateUse1")
    from xladev.runtime import fork_guard

    fork_guard.install()
    _registered = True


def _copy_from(src, dst, non_blocking=False):
    # Reached from copy kernels below the Python key (e.g. `torch.tensor(..., device='xla')`).
    from xladev.runtime.handlers import copy_into

    return copy_into(dst, src)


def device(n: int | None = None) -> torch.device:
    """The torch device `xla:n` (`xla:0` when n is None).

    Raises:
      ValueError: n is not a valid device index.
    """
    from xladev.runtime.tensor import torch_device

    return torch_device(0 if n is None else check_index(int(n)))


def devices() -> list[torch.device]:
    """All xla devices of this process."""
    return [device(i) for i in range(len(backend.jax_devices()))]


def device_count() -> int:
    return len(backend.jax_devices())
