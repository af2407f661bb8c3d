"""Tracing a scan's `fn` once: its forward body, its backward body, and what the backward saves.

`trace` runs `fn(carry, x)` on placeholder tensors (subgraph.py) with autograd on, then asks autograd for
the gradients of its outputs with placeholder incoming gradients: the backward ops are recorded as IR too,
through the same lowerings as any backward. Each recording is cut into a `Body`:

- forward: `(carry, x, captures) -> (new carry, y, residuals)`;
- backward: `(grad new carry, closure grads so far, grad y, residuals, captures) -> (grad carry, closure grads,
  grad x)`.

Residuals are what the backward reads of the forward: by default the forward's own values (saved per
iteration by the forward scan, as PyTorch/XLA's default partition saves activations), or, with any other
`partition_fn`, only the forward's inputs (the backward computes the forward again, step by step). A
residual that is a slice of `xs` is read from `xs` itself, never stacked again.

Tensors `fn` reads from outside (a weight it closes over) are captures. Those that require grad get their
gradient too: the backward scan carries its running sum. The RNG key is a carry of its own when `fn` draws
random numbers, so each iteration draws different ones.
"""

from __future__ import annotations

import dataclasses

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import TreeSpec, tree_flatten, tree_leaves, tree_unflatten

from xladev.runtime.graph.ir import Meta, Node
from xladev.runtime.record.subgraph import Body, Cut, InputWrittenError, Tracing, numbered, placeholder
from xladev.runtime.record.tensor import XlaTensor


@dataclasses.dataclass
class ScanPlan:
    """A traced `fn`: its bodies and how their parameters and outputs line up with the scan's tensors.

    Attributes:
      device_index: the xla device every tensor is on.
      carry_spec, carry_metas: the carry's pytree and its leaves' metadata.
      x_metas: each `xs` leaf's slice metadata (its shape without the leading dimension).
      y_spec, y_metas: `fn`'s y pytree (None leaves included) and each tensor leaf's slice metadata (None for a
        None leaf).
      uses_rng: `fn` draws random numbers (the RNG key is the last carry).
      forward: the forward body; forward_captures: what it reads from outside, in parameter order.
      residual_outputs: how many outputs the forward body has after its carries and ys: the values it saves
        for the backward, stacked over the iterations.
      residuals: where each of the backward body's residual parameters comes from: ("out", k) the forward's k-th
        residual output, ("xs", j) the j-th `xs` leaf itself.
      closures: tensors from outside that require grad (their gradients come back through the backward scan).
      backward: the backward body (None when nothing needs a gradient); backward_captures as forward's.
      grad_carries: positions of the carries that have gradients (floating point ones).
      grad_ys: positions (among y leaves) of the ys whose gradients the backward reads.
      grad_xs: positions of the `xs` leaves that get gradients.
      reads_outside: `fn` read xla tensors it was not given (a closed-over weight): its plan holds their values of
        the time it was traced, so it is never reused.
    """

    device_index: int
    carry_spec: TreeSpec
    carry_metas: list[Meta]
    x_metas: list[Meta]
    y_spec: TreeSpec
    y_metas: list[Meta | None]
    uses_rng: bool
    forward: Body | None
    forward_captures: list[Node]
    residual_outputs: int = 0
    residuals: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    closures: list[torch.Tensor] = dataclasses.field(default_factory=list)
    backward: Body | None = None
    backward_captures: list[Node] = dataclasses.field(default_factory=list)
    grad_carries: list[int] = dataclasses.field(default_factory=list)
    grad_ys: list[int] = dataclasses.field(default_factory=list)
    grad_xs: list[int] = dataclasses.field(default_factory=list)
    reads_outside: bool = False

    @property
    def forward_carries(self) -> int:
        """Carries of the forward scan: the user's, then the RNG key when `fn` draws."""
        return len(self.carry_metas) + int(self.uses_rng)


class _ClosureWatch(TorchFunctionMode):
    """Notes the xla tensors a traced function reads without having made them, and which of them require grad."""

    def __init__(self, made: list[torch.Tensor]):
        super().__init__()
        self.made = {id(t) for t in made}
        self.keep = list(made)  # ids stay unique while their tensors live
        self.found: dict[int, torch.Tensor] = {}
        self.read_outside = False

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for t in tree_leaves((args, kwargs)):
            if type(t) is XlaTensor and id(t) not in self.made:
                self.read_outside = True
                if id(t) not in self.found and t.requires_grad:
                    self.found[id(t)] = t
        out = func(*args, **kwargs)
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and id(t) not in self.made:
                self.made.add(id(t))
                self.keep.append(t)
        return out


def _floating(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point or dtype.is_complex


def _meta(t: torch.Tensor, drop_leading: bool = False) -> Meta:
    shape = tuple(t.shape)
    return Meta(shape[1:] if drop_leading else shape, t.dtype)


# What autograd says when a function writes in place into a placeholder that requires grad (a carry does,
# under grad mode, in case the function reads a parameter).
_LEAF_WRITE = "a leaf Variable that requires grad is being used in an in-place operation"


def trace(fn, init: list[XlaTensor], carry_spec: TreeSpec, xs: list[XlaTensor], xs_spec: TreeSpec,
          save_activations: bool, what: str = "scan") -> ScanPlan:
    """Traces `fn` into a ScanPlan: once, or twice when it writes its carry in place (`acc += x`).

    A function that writes its inputs in place is traced again on placeholders that do not require grad, as
    PyTorch/XLA's scan allows when no gradient flows through it; when one does, it is refused.

    Raises:
      ValueError: `fn` returns something other than `(carry, y)`, or a carry unlike `init`.
      RuntimeError: `fn` reads a value, writes into a tensor from outside, or changes an input in place while
        gradients flow through it.
    """
    if not torch.is_grad_enabled():  # no gradient can flow: writes are only new values
        return _trace(fn, init, carry_spec, xs, xs_spec, save_activations, what, inputs_writable=True)
    try:
        return _trace(fn, init, carry_spec, xs, xs_spec, save_activations, what, inputs_writable=False)
    except RuntimeError as error:
        if not isinstance(error, InputWrittenError) and _LEAF_WRITE not in str(error):
            raise
        if any(t.requires_grad for t in init + xs):
            raise _writes_with_grad(what) from None
    return _trace(fn, init, carry_spec, xs, xs_spec, save_activations, what, inputs_writable=True)


def _writes_with_grad(what: str) -> RuntimeError:
    return RuntimeError(f"{what}: the function changes its carry or its x in place (an in-place operation such as "
                        f"`acc += x`) while gradients flow through {what}; write `acc = acc + x` instead")


def _trace(fn, init: list[XlaTensor], carry_spec: TreeSpec, xs: list[XlaTensor], xs_spec: TreeSpec,
           save_activations: bool, what: str, inputs_writable: bool) -> ScanPlan:
    """Traces `fn` once into a ScanPlan.

    Args:
      fn: `fn(carry, x) -> (new_carry, y)`.
      init: the carry's leaves; carry_spec: its pytree.
      xs: the scanned leaves (each with the leading dimension); xs_spec: their pytree.
      save_activations: the backward reads the forward's values (True) or computes them again (False).
      what: the API's name, for errors.

    Returns:
      The plan.

    Raises:
      ValueError: `fn` returns something other than `(carry, y)`, or a carry unlike `init`.
      RuntimeError: `fn` reads a value, writes into a tensor from outside, or changes an input in place (unless
        `inputs_writable`, when no gradient flows through it).
    """
    device = init[0]._st.device_index if init else xs[0]._st.device_index
    grad_mode = torch.is_grad_enabled()
    tracing = Tracing(device, what, inputs_writable)
    carry_grad = grad_mode and not inputs_writable
    try:
        carries = [tracing.placeholder(_meta(t), carry_grad and _floating(t.dtype)) for t in init]
        slices = [tracing.placeholder(_meta(t, True), grad_mode and t.requires_grad and _floating(t.dtype)) for t in xs]
        # The body's parameters, taken before the function may write its inputs in place.
        carry_params, slice_params = [t._st.value for t in carries], [t._st.value for t in slices]
        watch = _ClosureWatch(carries + slices)
        reason = f"{what} tracing its function"
        with tracing.active(reason):
            with watch:
                out = fn(tree_unflatten(carries, carry_spec), tree_unflatten(slices, xs_spec))
            new_carry, ys, y_spec = _check_outputs(out, init, carry_spec, device, what)
        plan = ScanPlan(device, carry_spec, [_meta(t) for t in init], [_meta(t, True) for t in xs], y_spec,
                        [None if y is None else _meta(y) for y in ys], tracing.key_out is not tracing.key,
                        forward=None, forward_captures=[])
        fwd_params = carry_params + ([tracing.key] if plan.uses_rng else []) + slice_params
        fwd_outputs = [t._node() for t in new_carry] + ([tracing.key_out] if plan.uses_rng else []) + \
            [y._node() for y in ys if y is not None]
        closures = list(watch.found.values())
        wants_grad = grad_mode and (any(t.requires_grad for t in init + xs) or bool(closures))
        if wants_grad and inputs_writable:  # a parameter it reads needs its gradient through the written carry
            raise _writes_with_grad(what)
        residual_nodes: list[Node] = []
        if wants_grad:
            residual_nodes = _trace_backward(plan, fwd_params, fwd_outputs, carries, slices, new_carry, ys, closures,
                                             save_activations)
        fwd = Cut(fwd_outputs + residual_nodes, fwd_params)
        mapping = numbered(fwd_params)
        mapping.update(numbered(fwd.outer, len(fwd_params)))
        plan.forward = Body(fwd.copy(mapping), len(fwd_params) + len(fwd.outer))
        plan.forward_captures = fwd.outer
        plan.residual_outputs = len(residual_nodes)
        plan.reads_outside = watch.read_outside
    finally:
        # What the trace made is nobody's to compute, whether it succeeded or not (a traceback keeps its tensors).
        tracing.release()
    return plan


def _check_outputs(out, init, carry_spec, device, what):
    """`fn`'s result as (carry leaves, y leaves, y pytree), checked against the carry it was given."""
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise ValueError(f"{what}: fn must return a pair (new_carry, y), got {type(out).__name__}"
                         + (f" of length {len(out)}" if isinstance(out, (tuple, list)) else ""))
    new_carry, spec = tree_flatten(out[0])
    if spec != carry_spec:
        raise ValueError(f"{what}: fn must return a carry with the structure of init: init is {carry_spec}, "
                         f"fn returned {spec}")
    for i, (t, want) in enumerate(zip(new_carry, init)):
        if not isinstance(t, XlaTensor) or t._st.device_index != device:
            raise ValueError(f"{what}: carry leaf {i} returned by fn is not a tensor on xla:{device}")
        if tuple(t.shape) != tuple(want.shape) or t.dtype != want.dtype:
            raise ValueError(f"{what}: fn must keep the carry's shape and dtype: carry leaf {i} is "
                             f"{want.dtype} {list(want.shape)} in init but {t.dtype} {list(t.shape)} from fn")
    ys, y_spec = tree_flatten(out[1])
    for i, y in enumerate(ys):
        if y is not None and (not isinstance(y, XlaTensor) or y._st.device_index != device):
            raise ValueError(f"{what}: y leaf {i} returned by fn is not a tensor on xla:{device} (nor None)")
    return new_carry, ys, y_spec


def _trace_backward(plan, fwd_params, fwd_outputs, carries, slices, new_carry, ys, closures, save_activations):
    """Records the body's backward and cuts it into `plan.backward`; returns the forward values it saves."""
    device = plan.device_index
    plan.grad_carries = [i for i, m in enumerate(plan.carry_metas) if _floating(m.dtype)]
    plan.grad_ys = [j for j, y in enumerate(ys) if y is not None and y.requires_grad]
    plan.grad_xs = [j for j, t in enumerate(slices) if t.requires_grad]
    grad_carry = [placeholder(plan.carry_metas[i], device) for i in plan.grad_carries]
    sums = [placeholder(_meta(c), device) for c in closures]
    grad_y = [placeholder(plan.y_metas[j], device) for j in plan.grad_ys]
    outputs = [(new_carry[i], g) for i, g in zip(plan.grad_carries, grad_carry) if new_carry[i].requires_grad]
    outputs += [(ys[j], g) for j, g in zip(plan.grad_ys, grad_y)]
    wrt = [carries[i] for i in plan.grad_carries] + [slices[j] for j in plan.grad_xs] + closures
    wanted = [t for t in wrt if t.requires_grad]
    grads = {}
    if outputs and wanted:
        found = torch.autograd.grad([o for o, _ in outputs], wanted, [g for _, g in outputs], allow_unused=True)
        grads = {id(t): g for t, g in zip(wanted, found)}
    # A tensor from outside that the outputs do not depend on (only its shape was read) gets no gradient, as in
    # eager: its .grad stays None.
    kept = [k for k, c in enumerate(closures) if grads.get(id(c)) is not None]
    closures = plan.closures = [closures[k] for k in kept]
    sums = [sums[k] for k in kept]
    with torch.no_grad():
        def grad_of(t):
            g = grads.get(id(t))
            return g if g is not None else torch.zeros(t.shape, dtype=t.dtype, device=t.device)

        carry_out = [grad_of(carries[i]) for i in plan.grad_carries]
        sums_out = [s if grads.get(id(c)) is None else s + grads[id(c)] for s, c in zip(sums, closures)]
        x_out = [grad_of(slices[j]) for j in plan.grad_xs]
    bwd_outputs = [t._node() for t in carry_out + sums_out + x_out]
    bwd_inputs = [t._st.value for t in grad_carry + sums + grad_y]
    fwd_ids = {id(p) for p in fwd_params}
    if save_activations:
        first = Cut(fwd_outputs, fwd_params)
        stop = frozenset(first.inside) | fwd_ids
        cut = Cut(bwd_outputs, bwd_inputs, stop)
        residuals = [n for n in cut.outer if id(n) in cut.stop]
        captures = [n for n in cut.outer if id(n) not in cut.stop]
    else:
        cut = Cut(bwd_outputs, bwd_inputs + fwd_params)
        residuals = [n for n in cut.used if id(n) in fwd_ids]
        captures = cut.outer
    slice_of = {id(t._st.value): j for j, t in enumerate(slices)}
    saved: list[Node] = []
    for node in residuals:
        j = slice_of.get(id(node))
        if j is not None:
            plan.residuals.append(("xs", j))
        else:
            plan.residuals.append(("out", len(saved)))
            saved.append(node)
    mapping = numbered(bwd_inputs)
    mapping.update(numbered(residuals, len(bwd_inputs)))
    mapping.update(numbered(captures, len(bwd_inputs) + len(residuals)))
    plan.backward = Body(cut.copy(mapping), len(mapping))
    plan.backward_captures = captures
    return saved
