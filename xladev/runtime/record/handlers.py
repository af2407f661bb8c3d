"""Ops with behaviour of their own: copies between host and device, value reads, aliases, factories."""

from __future__ import annotations

import math

import torch

from xladev.runtime.graph import fork_guard, stack
from xladev.runtime.graph.backend import device_index
from xladev.runtime.record.dispatch import handle_regular
from xladev.runtime.record.fallback import run_on_cpu
from xladev.runtime.graph.ir import Meta
from xladev.runtime.lowering.registry import LOWERINGS
from xladev.runtime.graph.meta import MetaUnsupported, scalar_type_name
from xladev.runtime.record.recording import convert, record, write_into
from xladev.runtime.record.special_handlers import special
from xladev.runtime.graph.storage import Storage
from xladev.runtime.record.tensor import XlaTensor, alias_of, new_tensor, wrap
from xladev.runtime.execute.transfers import download, upload

aten = torch.ops.aten


@special(aten._local_scalar_dense.default)
def _item(func, args, kwargs):
    return download([args[0]], ".item()")[0].item()


@special(aten.detach.default, aten.alias.default, aten.lift_fresh.default)
def _alias(func, args, kwargs):
    return alias_of(args[0])


@special(aten.clone.default)
def _clone(func, args, kwargs):
    t = args[0]
    # IR nodes are immutable, so the copy can share the value until either side is written.
    node = t._node()
    return wrap(Storage(node, t._st.device_index), node.meta)


@special(aten._fused_sdp_choice.default)
def _sdp_choice(func, args, kwargs):
    return 0  # SDPBackend.math: attention decomposes into matmuls and softmax, which XLA fuses


def _is_xla_device(device) -> bool:
    return device is not None and torch.device(device).type == "xla"


@special(aten._to_copy.default)
def _to_copy(func, args, kwargs):
    src = args[0]
    device = kwargs.get("device")
    dtype = kwargs.get("dtype") or src.dtype
    if device is not None and not _is_xla_device(device):
        cpu = download([src], ".cpu()")[0]
        return cpu.to(device=device, dtype=dtype)
    if isinstance(src, XlaTensor):
        target_index = None if device is None or torch.device(device).index is None else device_index(device)
        if target_index is not None and target_index != src._st.device_index:
            cpu = download([src], f".to({device})")[0]
            return new_tensor(upload(cpu.to(dtype), target_index), target_index)
        if dtype == src.dtype:
            return _clone(func, (src,), {})
        return record(func, (src,), {"dtype": dtype})
    index = device_index(device)
    return new_tensor(upload(src.to(dtype), index), index)


# `*_like` ops whose value is a constant, with it (None: full_like's own `fill_value`).
_CONSTANT_LIKE = {aten.ones_like.default: 1, aten.zeros_like.default: 0, aten.full_like.default: None}
_NOT_CONSTANT = object()


@special(aten.new_empty.default, aten.new_empty_strided.default, aten.new_full.default, aten.new_ones.default,
         aten.new_zeros.default, aten.empty_like.default, aten.full_like.default, aten.ones_like.default,
         aten.zeros_like.default, aten.rand_like.default, aten.randn_like.default, aten.randint_like.default)
def _like(func, args, kwargs):
    """`zeros_like(x, device=d)`, `x.new_zeros(n, device=d)`: the result goes to `d`, not to `x`'s device.

    Raises:
      ValueError: `d` names an xla device that does not exist.
    """
    device, self = kwargs.get("device"), args[0]
    fill = _CONSTANT_LIKE.get(func, _NOT_CONSTANT)
    if (fill is not _NOT_CONSTANT and device is None and isinstance(self, XlaTensor) and self.is_contiguous()
            and kwargs.get("memory_format") in (None, torch.preserve_format, torch.contiguous_format)):
        # Its value does not depend on `self`'s: recorded as the factory, with no operand, it is a constant
        # (loss.backward()'s seed, ones_like(loss), is then computed once for all steps by a compiled backward).
        value = args[1] if fill is None else fill
        return create(aten.full.default, (list(self.shape), value),
                      {"dtype": kwargs.get("dtype") or self.dtype, "device": self.device})
    if device is None or not isinstance(self, XlaTensor):
        return handle_regular(func, args, kwargs)
    if not _is_xla_device(device):
        # Only the shape, strides and dtype of `self` matter: make the result from a CPU stand-in.
        return func(torch.empty_strided(self.shape, self.stride(), dtype=self.dtype), *args[1:], **kwargs)
    index = self._st.device_index if torch.device(device).index is None else device_index(device)
    result = handle_regular(func, args, kwargs)
    if index == self._st.device_index:
        return result
    return _to_copy(aten._to_copy.default, (result,), {"device": device})


@special(aten.copy_.default)
def _copy(func, args, kwargs):
    return copy_into(args[0], args[1])


def copy_into(dst, src):
    """`dst.copy_(src)` for any mix of host and device tensors.

    Unlike an in-place op, copy_ converts `src` to any dtype of `dst`, as eager does: toward zero from
    floating point to integers, nonzero to True, the real part from complex to real.

    Args:
      dst: the tensor written (on the device or the host).
      src: the values, broadcastable to `dst`'s shape.

    Returns:
      dst.

    Raises:
      RuntimeError: in a forked child of a process that had started the device (fork_guard), or `src`
        does not broadcast to `dst`'s shape.
    """
    fork_guard.check()
    func = aten.copy_.default
    if not isinstance(dst, XlaTensor):  # device → host: the host's copy_ converts
        cpu = download([src], ".cpu()")[0]
        return dst.copy_(cpu)
    if not isinstance(src, XlaTensor):
        if src.numel() == 0 and src.shape == dst.shape:
            # Nothing to copy (transformers' caches make `torch.tensor([], device=...)` per layer and step):
            # no transfer, and `dst`, of the same empty shape, holds every value it should.
            return dst
        src = new_tensor(upload(src.detach(), dst._st.device_index), dst._st.device_index)
    elif src._st.device_index != dst._st.device_index:
        cpu = download([src], f".to({dst.device})")[0]
        src = new_tensor(upload(cpu, dst._st.device_index), dst._st.device_index)
    if src.dtype != dst.dtype:
        # write_into refuses what an in-place op may not write (torch.can_cast); copy_ converts anything.
        if src.dtype.is_complex and not dst.dtype.is_complex:
            stack.warn_at_user("Casting complex values to real discards the imaginary part")
        src = convert(src, dst.dtype)
    write_into(dst, src, func)
    return dst


@special(aten.resize_.default)
def _resize(func, args, kwargs):
    t, size = args[0], tuple(args[1])
    if tuple(t.shape) == size:
        return t
    raise RuntimeError(f"xla tensors cannot be resized in place (from {list(t.shape)} to {list(size)}); "
                       "create a new tensor instead")


def _index_with_cpu_indices(func, args, kwargs):
    """Indexing accepts CPU index tensors with device data, as in eager CUDA: upload them first."""
    self = args[0]
    index = self._st.device_index

    def to_device(v):
        if isinstance(v, torch.Tensor) and not isinstance(v, XlaTensor) and v.dim() > 0:
            return new_tensor(upload(v, index), index)
        return v

    indices = [to_device(i) if i is not None else None for i in args[1]]
    rest = tuple(to_device(a) for a in args[2:])
    if rest:
        _check_source_dtype(func, self, rest[0])
    if func is not aten.index.Tensor and func is not aten._unsafe_index.Tensor and _needs_mask_count(self, indices, rest):
        # Writing a vector through a boolean mask needs the mask's count: a data-dependent shape.
        return run_on_cpu(func, (self, indices) + rest, kwargs)
    return handle_regular(func, (self, indices) + rest, kwargs)


def _needs_mask_count(self, indices, rest) -> bool:
    """Whether writing `rest[0]` through these indices needs the number of True mask elements."""
    values = rest[0] if rest else None
    has_mask = any(i is not None and i.dtype in (torch.bool, torch.uint8) for i in indices)
    if not has_mask or not isinstance(values, torch.Tensor) or values.numel() == 1:
        return False
    if len(indices) == 1 and indices[0].dtype == torch.bool:
        # `x[mask] = v`: v broadcasts to (count, *x.shape[mask.dim():]). Only v's dims in front of those
        # trailing dims meet the count axis; when they are all 1, one row serves every selected position
        # (a jnp.where, lowering/shape.py) and the count is never needed.
        lead = values.dim() - (self.dim() - indices[0].dim())
        return lead > 0 and any(d != 1 for d in values.shape[:lead])
    return True


for _op in (aten.index.Tensor, aten.index_put.default, aten.index_put_.default, aten._unsafe_index.Tensor):
    special(_op)(_index_with_cpu_indices)


# Eager refuses a source of another dtype in these ops. PyTorch's meta kernels (index_put, index_add) and its
# decomposition of index_copy (into index_put) accept one, and the lowering would then cast it silently.
_INDEX_PUT_DTYPES = ("Index put requires the source and destination dtypes match, got {self} for the destination "
                     "and {source} for the source.")
_INDEX_COPY_DTYPES = ("index_copy_(): self and source expected to have the same dtype, but got (self) {self} and "
                      "(source) {source}")
_INDEX_ADD_DTYPES = "index_add_(): self ({self}) and source ({source}) must have the same scalar type"
_SOURCE_DTYPE_MESSAGES = {
    aten.index_put.default: _INDEX_PUT_DTYPES, aten.index_put_.default: _INDEX_PUT_DTYPES,
    aten.index_copy.default: _INDEX_COPY_DTYPES, aten.index_copy_.default: _INDEX_COPY_DTYPES,
    aten.index_add.default: _INDEX_ADD_DTYPES, aten.index_add_.default: _INDEX_ADD_DTYPES,
}


def _check_source_dtype(func, self, source) -> None:
    message = _SOURCE_DTYPE_MESSAGES.get(func)
    if message is not None and isinstance(source, torch.Tensor) and source.dtype != self.dtype:
        raise RuntimeError(message.format(self=scalar_type_name(self.dtype), source=scalar_type_name(source.dtype)))


@special(aten.index_copy.default, aten.index_copy_.default, aten.index_add.default, aten.index_add_.default)
def _index_copy_or_add(func, args, kwargs):
    """index_copy/index_add(self, dim, index, source): eager's dtype check, then the op as usual."""
    source = kwargs["source"] if "source" in kwargs else args[3]
    _check_source_dtype(func, args[0], source)
    return handle_regular(func, args, kwargs)


def factory_kernel(func):
    """A PrivateUse1 kernel for a factory op: record it lazily on the device named by `device=`."""

    def kernel(*args, **kwargs):
        return create(func, args, kwargs)

    return kernel


# Factory ops that are not plain lowerings (random ones draw from the device RNG): op -> fn(args, kwargs,
# device_index) with `device=` already removed from kwargs. rng.py and random_ops.py register them.
FACTORY_HANDLERS: dict = {}


def create(func, args, kwargs):
    """Runs factory op `func` for the device in `kwargs["device"]`: every new device tensor starts here.

    Raises:
      ValueError: `device=` names an xla device that does not exist.
      RuntimeError: in a forked child of a process that had started the device (fork_guard).
    """
    fork_guard.check()
    index = device_index(kwargs.get("device"))
    kwargs = {k: v for k, v in kwargs.items() if k not in ("device", "pin_memory")}
    if "layout" in kwargs and kwargs["layout"] in (None, torch.strided):
        kwargs.pop("layout")
    if func in _ARANGES:
        _check_range(func, args)
    special_factory = FACTORY_HANDLERS.get(func)
    if special_factory is not None:
        return special_factory(args, kwargs, index)
    if func in LOWERINGS:
        try:
            return record(func, args, kwargs, device_index=index)
        except MetaUnsupported:
            pass
    return run_on_cpu(func, args, kwargs)


_ARANGES = frozenset((aten.arange.start_step, aten.arange.start, aten.arange.default))


def _check_range(func, args) -> None:
    """Eager's first check of an arange: finite bounds (torch's shape function checks the step's sign first, and
    would say that instead)."""
    start, end = (0, args[0]) if func is aten.arange.default else (args[0], args[1])
    if not all(math.isfinite(float(v)) for v in (start, end) if isinstance(v, (int, float))):
        raise RuntimeError(f"unsupported range: {start} -> {end}")


FACTORY_OPS = [
    aten.empty.memory_format, aten.empty_strided.default, aten.arange.start_step, aten.arange.start,
    aten.arange.default, aten.full.default, aten.zeros.default, aten.ones.default, aten.eye.default,
    aten.eye.m, aten.linspace.default, aten.scalar_tensor.default, aten.randperm.default,
    aten.tril_indices.default, aten.triu_indices.default, aten._efficientzerotensor.default,
]


@special(aten.native_batch_norm.default)
def _native_batch_norm(func, args, kwargs):
    """Training-mode batch norm also updates running statistics in place (not visible in its schema)."""
    names = ["input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps"]
    bound = dict(zip(names, args))
    bound.update(kwargs)
    running_mean, running_var = bound["running_mean"], bound["running_var"]
    if not bound["training"] or running_mean is None:
        return record(func, args, kwargs)
    extra = (Meta(tuple(running_mean.shape), running_mean.dtype), Meta(tuple(running_var.shape), running_var.dtype))
    out, save_mean, save_invstd, new_mean, new_var = record(func, args, kwargs, extra_meta=extra)
    write_into(running_mean, new_mean)
    write_into(running_var, new_var)
    return out, save_mean, save_invstd


@special(aten.nll_loss_backward.default)
@special(aten.nll_loss2d_backward.default)
def _nll_loss_backward(func, args, kwargs):
    """The backward of a loss whose target holds Byte indices: the same Long ones (see `_nll_loss_forward`)."""
    args = list(args)
    if len(args) > 2 and isinstance(args[2], torch.Tensor) and args[2].dtype == torch.uint8:
        args[2] = args[2].long()
    return handle_regular(func, tuple(args), kwargs)


@special(aten.nll_loss_forward.default)
@special(aten.nll_loss2d_forward.default)
def _nll_loss_forward(func, args, kwargs):
    """Eager's first check of a class-index loss: the target holds Long or Byte indices (torch's decomposition,
    which gives the op's shapes here, would first fail in its gather with other words, and int32 would pass).
    Byte indices are taken as the same Long ones (the gather takes no uint8 index)."""
    args = list(args)
    target = args[1] if len(args) > 1 else kwargs["target"]
    if target.dtype not in (torch.int64, torch.uint8):
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {scalar_type_name(target.dtype)}")
    if target.dtype == torch.uint8 and func is aten.nll_loss2d_forward.default:
        raise RuntimeError("expected scalar type Long but found Byte")  # eager's 2-D kernel: Long only
    if target.dtype == torch.uint8:
        if len(args) > 1:
            args[1] = target.long()
        else:
            kwargs = {**kwargs, "target": target.long()}
    return handle_regular(func, tuple(args), kwargs)
