"""The jax side of the device: which PJRT backend, its devices (and `xla:N` indices), host<->device copies."""

from __future__ import annotations

import functools
import sys

import warnings

import numpy as np
import torch

from xladev._flags import ConfigError, config
from xladev.runtime.graph import fork_guard, world

_PLATFORM_FOR = {"CPU": "cpu", "CUDA": "cuda", "GPU": "cuda"}


@functools.cache
def jax_module():
    """Imports jax once, with 64-bit types on: torch uses int64 indices and float64 tensors."""
    import jax

    jax.config.update("jax_enable_x64", True)
    _set_cpu_device_count(jax)
    _quiet_fork_warning()
    return jax


def _quiet_fork_warning() -> None:
    """Keeps jax from warning at every `os.fork()` (each DataLoader worker) that a deadlock is likely.

    jax registers that warning when its backends start. Under xladev a child that never touches the device
    (a worker loading CPU data) is fine, and one that does fails at once with a clear error (fork_guard)
    instead of hanging: the warning would only be noise, once per worker. A process whose jax backends
    started before xladev's keeps jax's warning (that jax use is the script's own).
    """
    bridge = sys.modules.get("jax._src.xla_bridge")
    if bridge is not None and not getattr(bridge, "_backends", None) and hasattr(bridge, "_at_fork_handler_installed"):
        bridge._at_fork_handler_installed = True


def _set_cpu_device_count(jax) -> None:
    """Gives jax's CPU backend CPU_NUM_DEVICES devices, as PyTorch/XLA's CPU runtime has.

    Raises:
      ConfigError: jax's CPU backend was started before xladev, with another number of devices.
    """
    wanted = config.cpu_num_devices
    if not wanted:
        return
    try:
        jax.config.update("jax_num_cpu_devices", wanted)
    except Exception:  # jax refuses once its backends exist; fine if they already have the count asked
        have = len(jax.local_devices(backend="cpu"))
        if have != wanted:
            raise ConfigError(
                f"CPU_NUM_DEVICES={wanted} cannot take effect: jax's CPU backend was already started in this "
                f"process with {have} device(s). Set CPU_NUM_DEVICES before the first use of jax or of the "
                f"xla device.") from None


@functools.cache
def jax_devices() -> tuple:
    """The jax devices behind `xla:0..N-1`, chosen by PJRT_DEVICE.

    Raises:
      ConfigError: PJRT_DEVICE names a backend that jax cannot provide here.
    """
    jax = jax_module()
    wanted = config.pjrt_device
    platform = _PLATFORM_FOR[wanted]
    world.job.start(jax)  # several processes: join the job before jax starts its backend
    try:
        devices = world.local_devices(jax, platform)
    except RuntimeError as exc:
        raise ConfigError(
            f"PJRT_DEVICE={wanted} asks for jax's {platform} backend, which is not available: {exc}. "
            f"Install jax's CUDA plugin (pip install 'jax[cuda12]==0.10.2') on a machine with a GPU, "
            f"or unset PJRT_DEVICE to use the CPU."
        ) from None
    if not devices:
        raise ConfigError(f"PJRT_DEVICE={wanted}: jax found no {platform} devices")
    return tuple(devices)


@functools.cache
def replica_mesh():
    """The mesh of the job's replicas: one device per process (its `xla:0`), in rank order, on the axis
    `world.REPLICA_AXIS`. Graphs holding collectives run over it."""
    jax = jax_module()
    platform = jax_devices()[0].platform
    first: dict[int, object] = {}
    for device in sorted(jax.devices(platform), key=lambda d: d.id):
        first.setdefault(device.process_index, device)
    return jax.sharding.Mesh(np.array([first[p] for p in sorted(first)]), (world.REPLICA_AXIS,))


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
    count = len(jax_devices())
    if not 0 <= index < count:
        raise ValueError(f"xla:{index} does not exist: this process has {count} xla device(s)")
    return index


def initialised() -> bool:
    """Whether this process has started jax's runtime (PJRT client, thread pools), here or by the user.

    Takes no lock: it is asked in a freshly forked child (fork_guard).
    """
    if jax_devices.cache_info().currsize:
        return True
    bridge = sys.modules.get("jax._src.xla_bridge")
    return bool(getattr(bridge, "_backends", None))


def describe() -> dict:
    """The backend and package versions, as the event bus hands them to records (`Bus.describe_runtime`)."""
    import jaxlib

    import xladev

    jax = jax_module()
    try:
        device = device_kind()
    except Exception as exc:  # a description of a backend that failed to start still says why
        device = f"unknown ({type(exc).__name__}: {exc})"
    return {"device": device,
            "versions": {"xladev": xladev.__version__, "torch": torch.__version__, "jax": jax.__version__,
                         "jaxlib": getattr(jaxlib, "__version__", "?"), "python": sys.version.split()[0]}}


def device_kind() -> str:
    """A short description of the backend, e.g. `CPU (cpu:0)`."""
    devices = jax_devices()
    return f"{config.pjrt_device} ({devices[0].platform}, {len(devices)} device(s), {devices[0].device_kind})"


@functools.cache
def _bfloat16():
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16)


def torch_to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A private numpy copy of a CPU tensor (never aliases torch memory, which torch may mutate)."""
    tensor = tensor.detach()
    if tensor.dtype == torch.bfloat16:
        return tensor.contiguous().view(torch.int16).numpy().view(_bfloat16()).copy()
    return np.array(tensor.resolve_conj().resolve_neg().numpy(), copy=True)


def numpy_to_torch(array: np.ndarray, dtype: torch.dtype, copy: bool = True) -> torch.Tensor:
    """A CPU tensor of `array`'s values, of the given torch dtype: a copy of its own, or with `copy=False` a view
    of `array` itself where the dtypes allow (only to be read: jax's host copies are read-only)."""
    host = np.array(array, copy=True) if copy else np.asarray(array)
    if dtype == torch.bfloat16:
        host = host.view(np.int16)
    if copy:
        out = torch.from_numpy(host)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # from_numpy of a read-only array
            out = torch.from_numpy(host)
    if dtype == torch.bfloat16:
        return out.view(torch.bfloat16)
    return out if out.dtype == dtype else out.to(dtype)


_JNP_DTYPES: dict = {}


def to_jnp_dtype(dtype: torch.dtype):
    """The numpy/jax dtype for a torch dtype."""
    found = _JNP_DTYPES.get(dtype)
    if found is None:
        if dtype == torch.bfloat16:
            found = _bfloat16()
        else:
            found = torch.empty((), dtype=dtype).numpy().dtype
        _JNP_DTYPES[dtype] = found
    return found


_TORCH_DTYPES: dict = {}


def to_torch_dtype(dtype) -> torch.dtype:
    """The torch dtype for a numpy/jax dtype (the inverse of `to_jnp_dtype`).

    Raises:
      TypeError: torch has no such dtype (jax's float0, a PRNG key type...).
    """
    dtype = np.dtype(dtype)
    found = _TORCH_DTYPES.get(dtype)
    if found is None:
        if dtype == _bfloat16():
            found = torch.bfloat16
        else:
            try:
                found = torch.from_numpy(np.empty((0,), dtype)).dtype
            except TypeError:
                raise TypeError(f"torch has no dtype for {dtype}") from None
        _TORCH_DTYPES[dtype] = found
    return found


# SPMD mode (spmd.use_spmd): xla:0 stands for every local device, and a value with no sharding of its own
# is replicated on all of them (this sharding); None otherwise.
spmd_replicated = None


def put(array: np.ndarray, index: int = 0):
    """Copies a host array to device `index` (in SPMD mode, to every device: replicated).

    Args:
      array: a numpy array of the caller's own that nothing writes afterwards: on the CPU, jax may keep it as
        the device buffer instead of copying it (every caller passes a private copy, `torch_to_numpy`).
      index: the `xla:N` it goes to.

    Returns:
      The jax array.

    Raises:
      RuntimeError: in a forked child of a process that had started the device (fork_guard).
    """
    fork_guard.check()
    jax = jax_module()
    if spmd_replicated is not None and index == 0:
        return jax.device_put(array, spmd_replicated)
    global _direct_put
    device = jax_devices()[index]
    if _direct_put is not None:
        try:
            return _direct_put(array, device)
        except Exception:
            result = jax.device_put(array, device)  # an array jax cannot take raises jax's own error here
            _direct_put = None  # jax's public call took what the private one refused: another jax version, for good
            return result
    return jax.device_put(array, device)


def _put_to_device(array: np.ndarray, device):
    """One host array to one device through jax's batched transfer, below `jax.device_put`.

    `jax.device_put` checks and converts its arguments in Python on every call: 30 us of a tiny array's 33,
    and `torch.tensor(data, device="xla")` took 140 us with it against 75 us without. Every upload in a step
    (a batch, a Python scalar fed to a graph) paid that.
    The array's dtype is already jax's (x64 is on), so nothing needs converting.
    """
    from jax._src.interpreters import pxla

    sharding = _single_sharding.get(device)
    if sharding is None:
        from jax.sharding import SingleDeviceSharding

        sharding = _single_sharding[device] = SingleDeviceSharding(device)
    aval = _avals.get((array.shape, array.dtype))
    if aval is None:
        from jax._src import core

        aval = _avals[(array.shape, array.dtype)] = core.ShapedArray(array.shape, array.dtype)
        if len(_avals) > 4096:  # shapes that change every step: keep the cache bounded
            _avals.clear()
    return pxla.batched_device_put(aval, sharding, [array], [device], True)


_single_sharding: dict = {}
_avals: dict = {}
# Set to None when this jax's private call refuses the arguments (another jax version): `jax.device_put` then.
_direct_put = _put_to_device
