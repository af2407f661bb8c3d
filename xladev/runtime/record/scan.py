"""`scan(fn, init, xs)` and `scan_layers(layers, x)`: a loop whose body is traced and compiled once.

`fn` is traced once on placeholders (scan_trace.py) into a forward body and, when anything needs a gradient,
a backward body. The scan itself is one IR node, `xla::scan`, whose template holds the body: its lowering
is `jax.lax.scan` over the body's jax function, so the graph holds the body once however long the loop, and
XLA compiles it once. Autograd sees one `torch.autograd.Function`: its forward records the forward scan
(which also stacks the residuals the backward needs), its backward records a second, reversed scan over the
backward body.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Iterable

import torch
from torch.autograd.function import once_differentiable
from torch.utils._pytree import tree_flatten, tree_unflatten

from xladev.runtime.record import rng
from xladev.runtime.execute.execution import lock
from xladev.runtime.graph.ir import SLOT, Meta, Node, OpDef, getitem
from xladev.runtime.graph.op_ledger import recorder
from xladev.runtime.record.scan_trace import ScanPlan, trace
from xladev.runtime.record.subgraph import Body
from xladev.runtime.record.tensor import XlaTensor, new_tensor


def _lower_scan(ctx, *operands, body: Body, carries: int, xs: int, length: int, reverse: bool):
    import jax

    fn = body.function()
    strong = [jax.lax.convert_element_type(v, v.dtype) for v in operands[:carries]]  # loop types may not be weak
    scanned = tuple(operands[carries:carries + xs])
    consts = operands[carries + xs:]

    def step(carry, x):
        out = fn(*carry, *x, *consts)
        new = tuple(jax.lax.convert_element_type(o, c.dtype) for o, c in zip(out[:carries], carry))
        return new, tuple(out[carries:])

    final, ys = jax.lax.scan(step, tuple(strong), scanned, length=length, reverse=reverse)
    return tuple(final) + tuple(ys)


# PyTorch/XLA's IR name for its scan (`xla::scan`, a While loop over the body's computation).
SCAN = OpDef("xla::scan", _lower_scan, multi_output=True)


def scan_node(body: Body, carries: list[Node], xs: list[Node], captures: list[Node], length: int,
              reverse: bool = False) -> list[Node]:
    """Records one `xla::scan` node.

    Args:
      body: `(carry..., x..., capture...) -> (new carry..., y...)`.
      carries, xs, captures: the operand nodes (each xs node with the leading dimension `length`).
      length: the number of iterations.
      reverse: iterate from the last slice to the first (ys still stack in slice order).

    Returns:
      The final carries, then each y stacked over the iterations.
    """
    out = body.output_metas
    metas = tuple(out[:len(carries)]) + tuple(Meta((length,) + m.shape, m.dtype) for m in out[len(carries):])
    operands = tuple(carries) + tuple(xs) + tuple(captures)
    template = ((SLOT,) * len(operands), (("body", body), ("carries", len(carries)), ("xs", len(xs)),
                                          ("length", length), ("reverse", reverse)))
    node = Node(SCAN, operands, template, metas, *recorder.debug_info())
    recorder.count(SCAN.name)
    return [getitem(node, i) for i in range(len(metas))]


def _run_forward(plan: ScanPlan, init: list[XlaTensor], xs: list[XlaTensor], length: int):
    """Records the forward scan; returns (final carry tensors, y tensors, residual tensors)."""
    device = plan.device_index
    with lock:
        carries = [t._node() for t in init]
        state = rng.state_of(device) if plan.uses_rng else None
        if state is not None:
            carries.append(state.value)
        outs = scan_node(plan.forward, carries, [t._node() for t in xs], plan.forward_captures, length)
        if state is not None:
            state.set(outs[len(init)])  # the key after the last iteration: the next draws differ
        tensors = [new_tensor(n, device) for n in outs]
    n = plan.forward_carries
    ys = len(tensors) - n - plan.residual_outputs
    return tensors[:len(init)], tensors[n:n + ys], tensors[n + ys:]


def _run_backward(plan: ScanPlan, grad_carry: list, grad_ys: list, saved: list, xs: list, length: int):
    """Records the backward scan; returns (grads of the grad carries, closure grads, grads of grad_xs)."""
    device = plan.device_index
    with lock, torch.no_grad():
        zeros = [torch.zeros(c.shape, dtype=c.dtype, device=c.device) for c in plan.closures]
        carries = [g._node() for g in grad_carry] + [z._node() for z in zeros]
        residuals = [saved[k]._node() if kind == "out" else xs[k]._node() for kind, k in plan.residuals]
        outs = scan_node(plan.backward, carries, [g._node() for g in grad_ys] + residuals, plan.backward_captures,
                         length, reverse=True)
        tensors = [new_tensor(n, device) for n in outs]
    n = len(plan.grad_carries)
    c = len(plan.closures)
    return tensors[:n], tensors[n:n + c], tensors[n + c:]


# fn -> {what its trace depends on: ScanPlan}: the traces of functions scanned with is_fn_pure=True, as
# PyTorch/XLA's `_SCAN_COMPUTATION_CACHE` (the alias exposes it under that name).
SCAN_COMPUTATION_CACHE: "weakref.WeakKeyDictionary[Callable, dict]" = weakref.WeakKeyDictionary()


def _traced(fn, init, carry_spec, xs, xs_spec, save: bool, pure: bool) -> ScanPlan:
    """`trace(...)`, or for a pure `fn` the plan of an earlier call with the same signature."""
    key = (save, carry_spec, xs_spec, torch.is_grad_enabled(),
           tuple((tuple(t.shape), t.dtype, t.requires_grad, t._st.device_index) for t in init + xs))
    plans = SCAN_COMPUTATION_CACHE.get(fn) if pure else None
    if plans is not None and key in plans:
        return plans[key]
    plan = trace(fn, init, carry_spec, xs, xs_spec, save)
    if pure and not plan.reads_outside:
        try:
            SCAN_COMPUTATION_CACHE.setdefault(fn, {})[key] = plan
        except TypeError:  # a callable without weak references is traced on every call
            pass
    return plan


class _ScanFunction(torch.autograd.Function):
    """Autograd's view of one scan: inputs are the carry's leaves, the xs leaves and the closed-over tensors
    requiring grad; outputs the final carry's leaves and each stacked y."""

    @staticmethod
    def forward(ctx, plan: ScanPlan, length: int, *tensors):
        n_c, n_x = len(plan.carry_metas), len(plan.x_metas)
        init, xs = list(tensors[:n_c]), list(tensors[n_c:n_c + n_x])
        carry, ys, residuals = _run_forward(plan, init, xs, length)
        ctx.plan, ctx.length = plan, length
        aliased = sorted({k for kind, k in plan.residuals if kind == "xs"})
        ctx.aliased = aliased
        ctx.save_for_backward(*residuals, *[xs[k] for k in aliased])
        outputs = carry + ys
        ctx.mark_non_differentiable(*[t for t in outputs if not (t.dtype.is_floating_point or t.dtype.is_complex)])
        return tuple(outputs)

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads):
        plan, length = ctx.plan, ctx.length
        saved = ctx.saved_tensors
        residuals = list(saved[:plan.residual_outputs])
        xs: list = [None] * len(plan.x_metas)
        for k, t in zip(ctx.aliased, saved[plan.residual_outputs:]):
            xs[k] = t
        n_c = len(plan.carry_metas)
        present = [j for j, m in enumerate(plan.y_metas) if m is not None]
        y_grads = dict(zip(present, grads[n_c:]))
        grad_carry = [grads[i] for i in plan.grad_carries]
        grad_ys = [y_grads[j] for j in plan.grad_ys]
        d_carry, d_closures, d_xs = _run_backward(plan, grad_carry, grad_ys, residuals, xs, length)
        init_grads: list = [None] * n_c
        for i, g in zip(plan.grad_carries, d_carry):
            init_grads[i] = g
        xs_grads: list = [None] * len(plan.x_metas)
        for j, g in zip(plan.grad_xs, d_xs):
            xs_grads[j] = g
        return (None, None, *init_grads, *xs_grads, *d_closures)


def _default_partition() -> Callable:
    from torch._functorch.partitioners import default_partition

    return default_partition


def scan(fn: Callable, init: Any, xs: Any, partition_fn: Callable | None = None,
         is_fn_pure: bool = False) -> tuple[Any, Any]:
    """Loops `fn` over the leading dimension of `xs`, carrying `init` along (PyTorch/XLA's
    `torch_xla.experimental.scan.scan`, jax's `lax.scan`).

    Equal to `carry = init; for i: carry, y_i = fn(carry, xs[i])`, returning the last carry and the ys stacked,
    but `fn` is traced once and the graph holds it once, as one `xla::scan` node.

    Args:
      fn: `fn(carry, x) -> (new_carry, y)` on pytrees of xla tensors; the new carry has the carry's structure,
        shapes and dtypes; y's leaves may be None.
      init: the first carry (a pytree of xla tensors).
      xs: a pytree of xla tensors, all with the same leading dimension.
      partition_fn: how the backward gets the forward's values: `default_partition` (or None) saves them per
        iteration; any other (`min_cut_rematerialization_partition`...) saves only each iteration's inputs and
        computes the forward again in the backward.
      is_fn_pure: `fn` depends on nothing but its arguments: its trace is kept (SCAN_COMPUTATION_CACHE) and
        reused by calls with the same pytrees, shapes, dtypes and requires_grad. A trace in which `fn` read an
        xla tensor it was not given (a closed-over weight) is never reused, so a changed weight is never missed.

    Returns:
      (final carry, stacked ys), with the pytrees `fn` returned.

    Raises:
      ValueError: `fn` is not callable, `xs` is empty or its leaves differ in length, a leaf is not an xla
        tensor, or `fn` returns a carry unlike `init`.
      RuntimeError: `fn` reads a tensor's value, writes into a tensor from outside, or changes an input in place.
    """
    if not callable(fn):
        raise ValueError(f"`fn` {fn!r} must be callable.")
    x_leaves, xs_spec = tree_flatten(xs)
    if not x_leaves:
        raise ValueError(f"`xs` {xs!r} is an empty PyTree.")
    init_leaves, carry_spec = tree_flatten(init)
    devices = set()
    for kind, leaves in (("init", init_leaves), ("xs", x_leaves)):
        for i, t in enumerate(leaves):
            if not isinstance(t, XlaTensor):
                got = type(t).__name__ if not isinstance(t, torch.Tensor) else f"a tensor on {t.device}"
                raise ValueError(f"scan: every leaf of `{kind}` must be an xla tensor; leaf {i} is {got}")
            devices.add(t._st.device_index)
    if len(devices) > 1:
        raise ValueError(f"scan: init and xs are on several devices ({sorted(devices)}); a scan runs on one")
    length = None
    for t in x_leaves:
        if t.dim() == 0:
            raise ValueError("scan: every leaf of `xs` needs a leading dimension to scan over; a 0-d tensor has none")
        if length is None:
            length = t.shape[0]
        elif t.shape[0] != length:
            raise ValueError(f"The leaves of the `xs` input PyTree must have the same leading dimension size. "
                             f"Got {length} and {t.shape[0]}")
    save = partition_fn is None or partition_fn is _default_partition()
    plan = _traced(fn, init_leaves, carry_spec, x_leaves, xs_spec, save, is_fn_pure)
    tensors = init_leaves + x_leaves + plan.closures
    if plan.backward is not None:
        outputs = _ScanFunction.apply(plan, length, *tensors)
    else:
        with torch.no_grad():
            carry, ys, _ = _run_forward(plan, init_leaves, x_leaves, length)
        outputs = carry + ys
    carry = tree_unflatten(list(outputs[:len(init_leaves)]), carry_spec)
    stacked = iter(outputs[len(init_leaves):])
    y_leaves = [None if m is None else next(stacked) for m in plan.y_metas]
    return carry, tree_unflatten(y_leaves, plan.y_spec)


def scan_layers(layers: Iterable[torch.nn.Module], input_data: Any, partition_fn: Callable | None = None,
                is_layer_pure: bool = False) -> Any:
    """Runs `layers` one after another on `input_data` as one scan over their stacked weights (PyTorch/XLA's
    `torch_xla.experimental.scan_layers.scan_layers`): `nn.Sequential(*layers)(input_data)`, traced once.

    Args:
      layers: modules of one structure (the same parameter and buffer names and shapes) computing the same
        function of their weights.
      input_data: the first layer's input; each layer's output is the next one's input.
      partition_fn, is_layer_pure: as `scan`'s `partition_fn` and `is_fn_pure`.

    Returns:
      The last layer's output (`input_data` itself when `layers` is empty).

    Raises:
      ValueError: two layers differ in parameter or buffer names or shapes.
    """
    layers = list(layers)
    if not layers:
        return input_data
    weights = [dict(layer.named_parameters()) for layer in layers]
    buffers = [dict(layer.named_buffers()) for layer in layers]
    _same_structure(weights)
    _same_structure(buffers)
    stacked = tuple({name: torch.stack([d[name] for d in dicts]) for name in dicts[0]} for dicts in (weights, buffers))
    one_layer = _one_layer_fn(layers[0], partition_fn, is_layer_pure)
    final, _ = scan(one_layer, input_data, stacked, partition_fn=partition_fn, is_fn_pure=is_layer_pure)
    return final


# (id(partition_fn), id(first layer)) -> its one-layer function, for pure layers: the same function on every call,
# so that scan's trace cache finds it (PyTorch/XLA's `_ONE_LAYER_CACHE`). An entry goes when its layer does.
ONE_LAYER_CACHE: dict[tuple[int, int], Callable] = {}


def _one_layer_fn(first: torch.nn.Module, partition_fn, pure: bool) -> Callable:
    """`fn(carry, (weights, buffers)) -> (first layer's output with those weights, None)`; a tuple carry is the
    layer's positional arguments, as in PyTorch/XLA."""
    key = (id(partition_fn), id(first))
    if pure and key in ONE_LAYER_CACHE:
        return ONE_LAYER_CACHE[key]
    layer = weakref.ref(first)  # the cache must not keep the layer alive

    def one_layer(carry, weights_and_buffers):
        # The first layer computes, with each layer's weights in turn (its own are not used).
        return torch.func.functional_call(layer(), weights_and_buffers, carry, strict=True), None

    if pure:
        ONE_LAYER_CACHE[key] = one_layer
        weakref.finalize(first, ONE_LAYER_CACHE.pop, key, None)
    return one_layer


def _same_structure(dicts: list[dict]) -> None:
    """Raises ValueError, in PyTorch/XLA's words, when a layer's names or shapes differ from the first layer's."""
    reference = dicts[0]
    for index, d in enumerate(dicts[1:], start=1):
        if d.keys() != reference.keys():
            message = f"Layer {index} has mismatched keys."
            missing = set(reference) - set(d)
            extra = set(d) - set(reference)
            if missing:
                message += f" Missing keys: {missing}."
            if extra:
                message += f" Extra keys: {extra}."
            raise ValueError(message)
        for name, value in reference.items():
            if d[name].shape != value.shape:
                raise ValueError(f"Shape mismatch for '{name}' in layer {index}: expected {value.shape}, "
                                 f"got {d[name].shape}.")

