"""Device RNG: a threefry key kept as device data and threaded through the graph.

Each random op consumes the current key and leaves a new one, recorded as IR, so a training step has
the same graph every step (no recompiles) and `manual_seed(s)` makes the device's numbers
reproducible. The numbers differ from the CPU generator's, as they do on any accelerator.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import torch

from xladev.events import Cause, CauseKind
from xladev.runtime.graph import backend, device_put
from xladev.runtime.record.dispatch import handle
from xladev.runtime.graph.ir import SLOT, DataNode, Meta, Node, OpDef, getitem
from xladev.runtime.graph.op_ledger import recorder
from xladev.runtime.record.recording import expand_to
from xladev.runtime.record.special_handlers import special
from xladev.runtime.graph.storage import Storage
from xladev.runtime.record.tensor import XlaTensor
from xladev.runtime.execute.transfers import arrays_of

aten = torch.ops.aten
DEFAULT_SEED = 101
_states: dict[int, Storage] = {}
KEY_META = Meta((2,), torch.uint32)


def _seed_node(seed: int, device_index: int):
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    key = np.array([(seed >> 32) & 0xFFFFFFFF, seed & 0xFFFFFFFF], dtype=np.uint32)
    return DataNode(device_put.put(key, device_index), KEY_META)  # the seed's upload is a transfer too


def manual_seed(seed: int, device_index: int | None = None) -> None:
    """Seeds the device RNG (every device when `device_index` is None)."""
    indices = range(len(backend.jax_devices())) if device_index is None else [device_index]
    for index in indices:
        state = _states.get(index)
        if state is None:
            state = _states[index] = Storage(_seed_node(seed, index), index)
            state.internal = True
        else:
            state.set(_seed_node(seed, index))


def get_rng_state(device_index: int = 0) -> torch.Tensor:
    """The device generator's state as a CPU uint8 tensor (its threefry key): `torch.xla.get_rng_state()`."""
    key = XlaTensor(_state(device_index), KEY_META)
    array = np.asarray(arrays_of([key], Cause(CauseKind.VALUE_ACCESS, "get_rng_state()"))[0], dtype=np.uint32)
    return torch.from_numpy(array.copy().view(np.uint8))


def set_rng_state(state: torch.Tensor, device_index: int = 0) -> None:
    """Restores a state returned by `get_rng_state`."""
    key = np.frombuffer(state.detach().cpu().contiguous().numpy().tobytes(), dtype=np.uint32)
    if key.shape != (2,):
        raise ValueError(f"an xla RNG state is 8 bytes (a threefry key), got {state.numel()} elements")
    _state(device_index).set(DataNode(device_put.put(key.copy(), device_index), KEY_META))


def seed_of(device_index: int = 0) -> int:
    """The device generator's state as one 64-bit integer, PyTorch/XLA's `xm.get_rng_state()` form.

    The threefry key is the seed's two 32-bit halves (see `_seed_node`), so `manual_seed(s)` then `seed_of()`
    gives `s` back, and `manual_seed(seed_of())` restores the generator exactly. Reading it computes the key when
    random ops left it pending, and copies 8 bytes to the host.

    Args:
      device_index: the device.

    Returns:
      The state, in [0, 2**64).
    """
    high, low = (int(v) for v in np.asarray(materialized_key(
        device_index, Cause(CauseKind.VALUE_ACCESS, "xm.get_rng_state()")), dtype=np.uint32))
    return (high << 32) | low


def state_of(device_index: int) -> Storage:
    """The storage holding a device's RNG key (seeded with DEFAULT_SEED on first use)."""
    return _state(device_index)


def key_node(device_index: int):
    """A device's current RNG key node: device data, or a pending node after lazy random ops."""
    return _state(device_index).value


@contextlib.contextmanager
def keyed(device_index: int, node) -> Iterator[Storage]:
    """Makes `node` the device's RNG key inside the block (random ops draw from it and advance it); the key
    the device had before is put back after. Yields the key's storage.

    Gradient checkpointing replays the forward's key this way, and a scan traces its body with a placeholder key.
    """
    state = _state(device_index)
    saved = (state.value, state.donor)
    state.set(node)
    try:
        yield state
    finally:
        state.put_back(*saved)


def key_nodes() -> dict:
    """Every device generator's current key, as its IR node (nothing is read from the device)."""
    return {index: state.value for index, state in _states.items()}


def key_tensor(device_index: int) -> XlaTensor:
    """A device tensor over a device's RNG key (to compute a pending key together with other tensors)."""
    return XlaTensor(_state(device_index), KEY_META)


def materialized_key(device_index: int, cause: Cause):
    """A device's RNG key as a device array, computing it (one graph) when random ops left it pending."""
    return arrays_of([key_tensor(device_index)], cause)[0]


def set_key(array, device_index: int) -> None:
    """Makes `array` (a key a compiled program returned) the device's RNG key."""
    _state(device_index).set(DataNode(array, KEY_META))


def _state(device_index: int) -> Storage:
    state = _states.get(device_index)
    if state is None:
        manual_seed(DEFAULT_SEED, device_index)
        state = _states[device_index]
    return state


# kind -> fn(key, shape, dtype, params, *operands) returning the draw as a jax array of `dtype` (or
# castable to it). `dtype` is the output's jnp dtype; `params` are recorded constants; `operands` are the
# draw's tensor inputs (probabilities, rates) as jax arrays. random_ops.py registers more kinds.
SAMPLERS: dict = {}


def sampler(kind: str):
    """Registers `fn` as the sampler of random kind `kind` (see SAMPLERS)."""

    def register(fn):
        SAMPLERS[kind] = fn
        return fn

    return register


def _lower_random(ctx, key, kind, shape, params, *operands):
    import jax

    value_key, next_key = jax.random.split(key)
    dtype = ctx.dtype_of(0)
    value = SAMPLERS[kind](value_key, shape, dtype, params, *operands)
    return value.astype(dtype), next_key


def _float_for(dtype):
    import jax.numpy as jnp

    return dtype if jnp.issubdtype(dtype, jnp.floating) else jnp.float32


def _real_parts(dtype, shape, draw):
    """`draw(shape, real_dtype)` for a real `dtype`; for a complex one, real and imaginary parts drawn
    independently (PyTorch fills a complex tensor as its real view: two real numbers per element)."""
    import jax.numpy as jnp

    if jnp.issubdtype(dtype, jnp.complexfloating):
        real = jnp.finfo(dtype).dtype
        parts = draw(tuple(shape) + (2,), real)
        return parts[..., 0] + 1j * parts[..., 1]
    return draw(shape, _float_for(dtype))


@sampler("normal")
def _normal(key, shape, dtype, params):
    import jax
    import jax.numpy as jnp

    mean, std = params
    if jnp.issubdtype(dtype, jnp.complexfloating):
        std = std / 2 ** 0.5  # PyTorch: each part has variance std**2 / 2, so |z - mean| has variance std**2
    return _real_parts(dtype, shape, lambda s, d: jax.random.normal(key, s, dtype=d) * std + mean)


@sampler("uniform")
def _uniform(key, shape, dtype, params):
    import jax

    low, high = params
    return _real_parts(dtype, shape, lambda s, d: jax.random.uniform(key, s, dtype=d, minval=low, maxval=high))


@sampler("bernoulli")
def _bernoulli(key, shape, dtype, params):
    import jax

    (p,) = params
    return jax.random.bernoulli(key, p, shape)


@sampler("bernoulli_tensor")
def _bernoulli_tensor(key, shape, dtype, params, p):
    import jax

    return jax.random.uniform(key, shape, dtype=_float_for(p.dtype)) < p


@sampler("randint")
def _randint(key, shape, dtype, params):
    import jax

    low, high = params
    return jax.random.randint(key, shape, low, high, dtype="int64")


@sampler("exponential")
def _exponential(key, shape, dtype, params):
    import jax

    (lambd,) = params
    return jax.random.exponential(key, shape, dtype=_float_for(dtype)) / lambd


RANDOM_OP = OpDef("xla::rng", _lower_random)


def random_node(kind: str, shape: tuple, dtype: torch.dtype, params, device_index: int, extra=()) -> Node:
    """Records a random draw; advances the device's key.

    Args:
      kind: a key of SAMPLERS.
      shape, dtype: the draw's.
      params: hashable constants for the sampler (recorded in the graph).
      device_index: whose generator draws.
      extra: operand nodes (device tensors' nodes) the sampler takes after `params`.
    """
    state = _state(device_index)
    template = ((SLOT, kind, tuple(shape), params) + (SLOT,) * len(extra), ())
    node = Node(RANDOM_OP, (state.value,) + tuple(extra), template, (Meta(tuple(shape), dtype), KEY_META),
                *recorder.debug_info())
    state.set(getitem(node, 1))
    recorder.count("xla::rng")
    return getitem(node, 0)


def random_tensor(kind: str, shape: tuple, dtype: torch.dtype, params, device_index: int, extra=()) -> XlaTensor:
    """`random_node`'s draw as a new device tensor."""
    node = random_node(kind, shape, dtype, params, device_index, extra)
    return XlaTensor(Storage(node, device_index), Meta(tuple(shape), dtype))


def _fill_random(self: XlaTensor, kind: str, params, extra=()) -> XlaTensor:
    node = random_node(kind, tuple(self.shape), self.dtype, params, self._st.device_index, extra)
    self._assign(node)
    return self


@special(aten.normal_.default)
def _normal_(func, args, kwargs):
    self = args[0]
    mean = kwargs.get("mean", args[1] if len(args) > 1 else 0.0)
    std = kwargs.get("std", args[2] if len(args) > 2 else 1.0)
    return _fill_random(self, "normal", (float(mean), float(std)))


@special(aten.uniform_.default)
def _uniform_(func, args, kwargs):
    self = args[0]
    low = kwargs.get("from", args[1] if len(args) > 1 else 0.0)
    high = kwargs.get("to", args[2] if len(args) > 2 else 1.0)
    return _fill_random(self, "uniform", (float(low), float(high)))


@special(aten.bernoulli_.float)
def _bernoulli_float_(func, args, kwargs):
    p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
    return _fill_random(args[0], "bernoulli", (float(p),))


@special(aten.bernoulli_.Tensor)
def _bernoulli_tensor_(func, args, kwargs):
    self, p = args[0], args[1]
    return _fill_random(self, "bernoulli_tensor", None, extra=(_broadcast(p, self.shape)._node(),))


@special(aten.bernoulli.default)
def _bernoulli(func, args, kwargs):
    p = args[0]
    return random_tensor("bernoulli_tensor", tuple(p.shape), p.dtype, None, p._st.device_index, extra=(p._node(),))


@special(aten.bernoulli.p)
def _bernoulli_p(func, args, kwargs):
    self = args[0]
    p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
    return random_tensor("bernoulli", tuple(self.shape), self.dtype, (float(p),), self._st.device_index)


@special(getattr(aten.random_, "from"), aten.random_.to, aten.random_.default)
def _random_(func, args, kwargs):
    self = args[0]
    if func is aten.random_.default:
        low, high = 0, _default_high(self.dtype)
    elif func is aten.random_.to:
        low, high = 0, args[1]
    else:
        low, high = args[1], args[2] if args[2] is not None else _default_high(self.dtype)
    return _fill_random(self, "randint", (int(low), int(high)))


def _default_high(dtype: torch.dtype) -> int:
    if dtype.is_floating_point:
        return 2 ** torch.finfo(dtype).nmant + 1
    if dtype == torch.bool:
        return 2
    return min(torch.iinfo(dtype).max, 2 ** 62)


@special(aten.exponential_.default)
def _exponential_(func, args, kwargs):
    lambd = kwargs.get("lambd", args[1] if len(args) > 1 else 1.0)
    return _fill_random(args[0], "exponential", (float(lambd),))


@special(aten.native_dropout.default)
def _native_dropout(func, args, kwargs):
    x, p, train = args[0], float(args[1]), args[2] if len(args) > 2 else kwargs.get("train")
    if train is False or p == 0.0:
        ones = handle(aten.ones_like.default, (x,), {"dtype": torch.bool})
        return handle(aten.clone.default, (x,), {}), ones
    index = x._st.device_index
    mask = random_tensor("bernoulli", tuple(x.shape), torch.bool, (1.0 - p,), index)
    scaled = handle(aten.mul.Tensor, (handle(aten.mul.Tensor, (x, mask), {}), 1.0 / (1.0 - p)), {})
    return scaled, mask


def _broadcast(t: XlaTensor, shape) -> XlaTensor:
    """`t` broadcast to `shape` (a no-op when it already has it)."""
    return t if tuple(t.shape) == tuple(shape) else expand_to(t, tuple(shape))
