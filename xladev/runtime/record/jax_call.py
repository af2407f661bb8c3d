"""`call_jax`: a jax function run on device tensors as one node of the lazy graph (PyTorch/XLA's `xb.call_jax`).

The function is traced once per *specialization* (the function, the pytree structure of its arguments,
their static values, each tensor's shape and dtype, jax's trace context, the device's platform) to a
closed jaxpr; its outputs' shapes and dtypes are what tracing gives (`jax.make_jaxpr(..., return_shape=True)`,
jax's `eval_shape`). The recorded node, `xla::call_jax`, names the function and holds a `JaxComputation`:
when the graph is lowered, the node's lowering evaluates the jaxpr inside a nested `jax.jit` named
`call_jax.<name>`, so HLO dumps show it as a called computation of that name and profiles carry it in
every fused op's name (`jit(xladev_...)/jit(call_jax.<name>)/sin`).

**Graph keys.** A `JaxComputation` is equal to another exactly when their lowered StableHLO (with the
jaxpr's constants) is, as PyTorch/XLA keys a jax function by its lowered computation. So the same function
at the same shapes reuses the compiled graph from step to step even when the step builds the function
afresh (a lambda or closure made each step), and two functions that compute the same thing share it. The
jaxpr's text is not enough: it leaves out what a Pallas call's block specs index (two kernels differing only
in their index maps print alike). Lowering costs milliseconds, so specializations are cached by a key of
the function (`jax_keys.function_key`: code and captured values, not identity): a repeated call pays for
flattening its arguments and one dict lookup.

**Autograd.** When a tensor argument requires grad, the call runs through a `torch.autograd.Function`
whose backward records a second `call_jax` node (named `<name>_backward`) running `jax.vjp` of the same
jaxpr with respect to the floating-point inputs that need a gradient.

**Pallas.** On a CPU device, functions are traced with Pallas's interpret mode forced on (a `pallas_call`
then lowers to plain XLA loops); on a GPU, Pallas lowers as it does under jax (Triton or Mosaic GPU).
"""

from __future__ import annotations

import collections
import hashlib
import threading

import numpy as np
import torch

from xladev.errors import XladevError
from xladev.events import Cause, CauseKind
from xladev.runtime.graph import annotate, backend, steps
from xladev.runtime.execute.execution import execution, lock as _execution_lock
from xladev.runtime.graph.ir import CALL_JAX_OP_NAME, SLOT, Meta, Node, OpDef, getitem
from xladev.runtime.graph.jax_keys import function_key, value_key
from xladev.runtime.graph import span_clock
from xladev.runtime.graph.op_ledger import recorder
from xladev.runtime.graph.storage import Storage
from xladev.runtime.record.tensor import XlaTensor, wrap

OP_NAME = CALL_JAX_OP_NAME
# Specializations kept (least recently used dropped first): a function keyed by identity and rebuilt every
# step makes one per step, so the cache must not grow without bound.
CACHE_SIZE = 512


class CallJaxError(XladevError, RuntimeError):
    """jax could not trace or differentiate a function given to `call_jax`; the message names it and why."""


class JaxComputation:
    """A traced jax function as a template constant of an `xla::call_jax` node.

    Equal (and hashing alike) exactly when the digests are: the same lowered computation. Its `repr` (part
    of the graph hash) is the full digest; IR text shows the first 16 hex digits.

    Attributes:
      digest: SHA-256 hex of the lowered StableHLO and the constants.
      jaxpr: the closed jaxpr, evaluated by the node's lowering.
    """

    __slots__ = ("digest", "jaxpr", "_named")

    def __init__(self, digest: str, jaxpr) -> None:
        self.digest = digest
        self.jaxpr = jaxpr
        self._named: dict = {}

    def __eq__(self, other) -> bool:
        return type(other) is JaxComputation and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return f"JaxComputation({self.digest})"

    def __str__(self) -> str:
        return self.digest[:16]

    def function(self, name: str):
        """The jaxpr as a jitted function named `call_jax.<name>` (a named computation in the HLO)."""
        fn = self._named.get(name)
        if fn is None:
            fn = self._named[name] = _named_function(self.jaxpr, f"call_jax.{name}")
        return fn


def _named_function(closed, name: str):
    import jax
    from jax.extend.core import jaxpr_as_fun

    run = jaxpr_as_fun(closed)

    def call(*arrays):
        return run(*arrays)

    call.__name__ = call.__qualname__ = name
    return jax.jit(call)


def _lower_call_jax(ctx, inputs, name, computation):
    out = computation.function(name)(*inputs)
    return out[0] if type(ctx.meta) is Meta else tuple(out)


CALL_JAX = OpDef(OP_NAME, _lower_call_jax, params=("inputs", "name", "jaxpr"))


class Specialization:
    """One traced specialization of a function.

    Attributes:
      computation: the `JaxComputation`.
      in_metas: each tensor input's Meta.
      out_metas: each output's Meta, flattened.
      out_tree: the jax treedef of the function's result.
      float_outputs: positions of the floating-point outputs (those a gradient flows through).
    """

    __slots__ = ("computation", "in_metas", "out_metas", "out_tree", "float_outputs", "platform", "_backward")

    def __init__(self, computation, in_metas, out_metas, out_tree, platform: str) -> None:
        self.computation = computation
        self.in_metas = in_metas
        self.out_metas = out_metas
        self.out_tree = out_tree
        self.float_outputs = tuple(i for i, m in enumerate(out_metas) if m.dtype.is_floating_point)
        self.platform = platform
        self._backward: dict = {}

    def backward(self, wrt: tuple[int, ...], name: str) -> "Specialization":
        """The specialization computing the gradients of inputs `wrt` from (inputs..., cotangents of the
        floating outputs...): `jax.vjp` of this one's jaxpr (kept, per `wrt`). `name` is the function's."""
        found = self._backward.get(wrt)
        if found is None:
            found = self._backward[wrt] = _trace_vjp(self, wrt, name)
        return found


class _LRU(collections.OrderedDict):
    """The specialization cache: a dict that drops its least recently used entry beyond `CACHE_SIZE`."""

    def lookup(self, key):
        found = self.get(key)
        if found is not None:
            self.move_to_end(key)
        return found

    def store(self, key, value) -> None:
        self[key] = value
        if len(self) > CACHE_SIZE:
            self.popitem(last=False)


# Every specialization traced and not yet dropped (PyTorch/XLA's `xb._JAX_TO_XLA_COMPUTATION_CACHE`).
SPECIALIZATIONS = _LRU()
_cache_lock = threading.Lock()


def call_jax(jax_func, args, kwargs=None, name: str | None = None, override_hash=None):
    """Runs a jax function on xla tensors inside the recorded graph, as one `xla::call_jax` node.

    Args:
      jax_func: a function of jax arrays that `jax.jit` can trace.
      args: a tuple of its positional arguments: pytrees whose tensor leaves (xla tensors) become jax arrays
        and whose other leaves (numbers, strings, None, dtypes) are passed as they are (static: a new value
        traces again). A `torch.dtype` is passed as the jax dtype.
      kwargs: its keyword arguments, likewise.
      name: the name the IR, HLO and profile show (default: the function's `__name__`).
      override_hash: a hashable value to key the function by instead of its code and captured values
        (PyTorch/XLA's argument).

    Returns:
      The function's result, in the pytree structure it returns, with xla tensors for its arrays.

    Raises:
      TypeError: `jax_func` is not callable, `args` is not a tuple or list, an argument is a tensor that
        is not on an xla device, or tensors on different xla devices.
      CallJaxError: jax could not trace the function at these arguments.
    """
    if not callable(jax_func):
        raise TypeError(f"call_jax: jax_func must be callable, got {type(jax_func).__name__}")
    if not isinstance(args, (tuple, list)):
        raise TypeError(f"call_jax: args must be a tuple of arguments, got {type(args).__name__} "
                        "(wrap a single argument: (x,))")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise TypeError(f"call_jax: kwargs must be a dict or None, got {type(kwargs).__name__}")
    name = name or name_of(jax_func)
    started = span_clock.op_began()
    with _execution_lock:
        spec, tensors, index = _specialize(jax_func, tuple(args), kwargs or {}, name, override_hash)
        flat = invoke(spec, tensors, index, name)
    recorder.add_tracing_time(span_clock.op_ended(started))
    _run_if_eager()
    import jax

    return jax.tree_util.tree_unflatten(spec.out_tree, flat)


def _run_if_eager() -> None:
    """XLA_USE_EAGER_DEBUG_MODE: the call just recorded runs now, as any op does."""
    if recorder.eager_debug:
        execution.flush(Cause(CauseKind.EAGER_DEBUG, OP_NAME))


def name_of(fn) -> str:
    """The name `call_jax` gives a function by default: its `__name__` (a partial's function's), else its type's."""
    while hasattr(fn, "func") and not hasattr(fn, "__name__"):  # functools.partial
        fn = fn.func
    return getattr(fn, "__name__", None) or type(fn).__name__


def _specialize(fn, args: tuple, kwargs: dict, name: str, override_hash):
    """The specialization of `fn` at these arguments (traced on first use), its tensor inputs and device."""
    import jax

    leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
    tensors = []
    statics = []
    index = None
    for position, leaf in enumerate(leaves):
        if isinstance(leaf, torch.Tensor):
            if not isinstance(leaf, XlaTensor):
                raise TypeError(_not_device_tensor(leaf, _where(args, kwargs, position)))
            device = leaf._st.device_index
            if index is None:
                index = device
            elif device != index:
                raise TypeError(f"call_jax: {_where(args, kwargs, position)} is on xla:{device}, an earlier tensor "
                                f"argument on xla:{index}; every tensor must be on one xla device")
            tensors.append(leaf)
            statics.append(None)
        else:
            statics.append(value_key(leaf))
    index = index or 0
    metas = tuple(Meta(tuple(t.shape), t.dtype) for t in tensors)
    platform = backend.jax_devices()[index].platform
    fn_key = function_key(fn) if override_hash is None else ("override", override_hash)
    key = (fn_key, treedef, tuple(statics), metas, _trace_context(), platform)
    with _cache_lock:
        spec = SPECIALIZATIONS.lookup(key)
    if spec is None:
        with annotate.call_jax_span(name, steps.current()):
            spec = _trace(_flat_function(fn, leaves, treedef), metas, platform, name)
        with _cache_lock:
            SPECIALIZATIONS.store(key, spec)
    return spec, tensors, index


def _not_device_tensor(t: torch.Tensor, where: str) -> str:
    if t.device.type != "xla":
        return (f"call_jax: {where} is a tensor on {t.device}; call_jax takes tensors on the xla device (move it "
                "there with .to('xla'))")
    # A wrapper of a device tensor: torch.compile's or functorch's tracing (FakeTensor, FunctionalTensor).
    return (f"call_jax: {where} is a {type(t).__name__} on {t.device}, not a device tensor itself: call_jax runs "
            "on the lazy device's tensors, not inside torch.compile/AOTAutograd tracing (call it outside the "
            "compiled function)")


def _where(args, kwargs, position: int) -> str:
    """`args[1]['x']`: the path of flattened leaf `position` (for error messages)."""
    import jax

    paths = jax.tree_util.tree_flatten_with_path((args, kwargs))[0]
    path = paths[position][0]
    text = jax.tree_util.keystr(path[1:])
    return ("args" if path[0].idx == 0 else "kwargs") + text


def _trace_context():
    try:
        from jax._src import config

        return config.trace_context()
    except (ImportError, AttributeError):  # another jax: no context in the key (PyTorch/XLA's fallback too)
        return None


def _flat_function(fn, leaves: list, treedef):
    """`fn` as a function of its tensor leaves only, the static leaves put back in place."""
    import jax

    tensor_positions = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    template = [_jax_static(leaf) for leaf in leaves]

    def flat(*arrays):
        filled = list(template)
        for position, array in zip(tensor_positions, arrays):
            filled[position] = array
        call_args, call_kwargs = jax.tree_util.tree_unflatten(treedef, filled)
        return fn(*call_args, **call_kwargs)

    return flat


def _jax_static(leaf):
    if isinstance(leaf, torch.dtype):
        return backend.to_jnp_dtype(leaf)  # as PyTorch/XLA hands dtypes to jax
    return None if isinstance(leaf, torch.Tensor) else leaf


def _avals(metas):
    import jax

    return [jax.ShapeDtypeStruct(m.shape, backend.to_jnp_dtype(m.dtype)) for m in metas]


def _signature(metas) -> str:
    from xladev.runtime.graph.irtext import shape_text

    return "(" + ", ".join(shape_text(m) for m in metas) + ")"


def _trace(flat_fn, metas, platform: str, name: str) -> Specialization:
    """Traces `flat_fn` at `metas` to a Specialization.

    Raises:
      CallJaxError: jax could not trace it, or it returns something that is not arrays.
    """
    import jax

    try:
        with _pallas_interpret(platform == "cpu"), jax.enable_x64(needs_x64(metas)):
            closed, out_shapes = jax.make_jaxpr(flat_fn, return_shape=True)(*_avals(metas))
            out_leaves, out_tree = jax.tree_util.tree_flatten(out_shapes)
            out_metas = tuple(Meta(tuple(s.shape), backend.to_torch_dtype(s.dtype)) for s in out_leaves)
            digest = _digest(closed, metas)
    except CallJaxError:
        raise
    except Exception as exc:  # jax's errors are of many types; each says what went wrong
        raise CallJaxError(f"call_jax: jax could not trace {name} at inputs {_signature(metas)}: "
                           f"{type(exc).__name__}: {exc}") from exc
    return Specialization(JaxComputation(digest, closed), metas, out_metas, out_tree, platform)


_WIDE = (torch.float64, torch.int64, torch.complex128, torch.uint64)


def needs_x64(metas) -> bool:
    """Whether a function is traced with jax's 64-bit types on: only when an input is 64-bit.

    Otherwise it is traced as jax runs by default (and as PyTorch/XLA's jax runs it): Python numbers and
    `jnp.arange` are 32-bit, and kernels written for those defaults (jax's own Pallas kernels mix int32
    program ids with Python ints) trace as they do under jax.
    """
    return any(m.dtype in _WIDE for m in metas)


def _digest(closed, metas) -> str:
    """SHA-256 of the jaxpr lowered to StableHLO (no locations) and of its constants' bytes."""
    lowered = _named_function(closed, "call_jax").lower(*_avals(metas))
    h = hashlib.sha256(lowered.as_text(debug_info=False).encode())
    for const in closed.consts:
        array = np.asarray(const)
        h.update(f"|{array.dtype.str}{array.shape}|".encode())
        h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()


class _pallas_interpret:
    """Pallas's interpret mode forced on while tracing for a CPU device (no Pallas backend runs there)."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.previous = None

    def __enter__(self):
        if self.on:
            try:
                from jax._src import config
            except ImportError:
                self.on = False
                return self
            self.setting = getattr(config, "pallas_tpu_interpret_mode_context_manager", None)
            if self.setting is None:  # another jax: kernels run as they ask (interpret=True on the CPU)
                self.on = False
            else:
                self.previous = self.setting.swap_local(True)
        return self

    def __exit__(self, *exc) -> bool:
        if self.on:
            self.setting.set_local(self.previous)
        return False


def _trace_vjp(spec: Specialization, wrt: tuple[int, ...], name: str) -> Specialization:
    """The backward of `spec`: from (inputs..., cotangents of its floating outputs...), the gradients of `wrt`."""
    import jax
    from jax.extend.core import jaxpr_as_fun

    forward = jaxpr_as_fun(spec.computation.jaxpr)
    count = len(spec.in_metas)
    float_outputs = spec.float_outputs

    def vjp(*arrays):
        primals, cotangents = list(arrays[:count]), list(arrays[count:])

        def of_wrt(*values):
            full = list(primals)
            for i, value in zip(wrt, values):
                full[i] = value
            outs = forward(*full)
            return [outs[j] for j in float_outputs]

        _, pullback = jax.vjp(of_wrt, *[primals[i] for i in wrt])
        return list(pullback(cotangents))

    metas = spec.in_metas + tuple(spec.out_metas[j] for j in float_outputs)
    try:
        return _trace(vjp, metas, spec.platform, f"{name}_backward")
    except CallJaxError as exc:
        raise CallJaxError(f"call_jax: jax could not differentiate {name}: {exc.__cause__}") from exc.__cause__


def invoke(spec: Specialization, tensors: list, index: int, name: str) -> list:
    """Records `spec` on `tensors` (through autograd when one requires grad); the flat list of outputs."""
    if not spec.out_metas:
        return []
    if torch.is_grad_enabled() and spec.float_outputs and any(t.requires_grad for t in tensors):
        out = _JaxFunction.apply(spec, name, index, *tensors)
        return list(out) if isinstance(out, tuple) else [out]
    return record(spec, tensors, index, name)


def record(spec: Specialization, tensors: list, index: int, name: str) -> list:
    """The `xla::call_jax` node of `spec` on `tensors`, and a device tensor per output."""
    template = (((SLOT,) * len(tensors), name, spec.computation), ())
    metas = spec.out_metas
    meta = metas[0] if len(metas) == 1 else metas
    node = Node(CALL_JAX, tuple(t._node() for t in tensors), template, meta, *recorder.debug_info())
    recorder.count(OP_NAME)
    if len(metas) == 1:
        return [wrap(Storage(node, index), meta)]
    return [wrap(Storage(getitem(node, i), index), m) for i, m in enumerate(metas)]


class _JaxFunction(torch.autograd.Function):
    """A `call_jax` node in autograd: the backward is another `call_jax` node, running `jax.vjp`."""

    @staticmethod
    def forward(ctx, spec, name, index, *tensors):
        ctx.spec, ctx.name, ctx.index = spec, name, index
        ctx.save_for_backward(*tensors)
        outs = record(spec, list(tensors), index, name)
        ctx.mark_non_differentiable(*[o for i, o in enumerate(outs) if i not in spec.float_outputs])
        return outs[0] if len(outs) == 1 else tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        spec, name = ctx.spec, ctx.name
        tensors = ctx.saved_tensors
        wrt = tuple(i for i, need in enumerate(ctx.needs_input_grad[3:]) if need)
        for i in wrt:
            if not spec.in_metas[i].dtype.is_floating_point:
                raise CallJaxError(f"call_jax: {name}: gradients of {spec.in_metas[i].dtype} inputs are not supported "
                                   "(only real floating-point inputs)")
        if not wrt:
            return (None,) * (3 + len(tensors))
        with _execution_lock:
            back = spec.backward(wrt, name)
            cotangents = [grads[j] for j in spec.float_outputs]
            computed = invoke(back, list(tensors) + cotangents, ctx.index, f"{name}_backward")
        _run_if_eager()
        out: list = [None] * len(tensors)
        for i, grad in zip(wrt, computed):
            out[i] = grad
        return (None, None, None, *out)
