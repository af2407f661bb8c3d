"""Gradient checkpointing on the xla device: the backward computes a region's forward again, behind an
optimization barrier.

On a lazy device the forward and the backward of a step are one graph, so the recomputed forward would be
the same ops on the same values as the original one: XLA's common-subexpression elimination merges them and
the memory checkpointing was meant to save is spent after all. As PyTorch/XLA's
`torch_xla.utils.checkpoint` does, the recomputation starts from the outputs of one
`xla::optimization_barrier` over the region's inputs, the gradients arriving at its outputs and (for a module's
method) the module's weights and buffers: XLA can neither merge it with the forward nor run it before those
gradients exist.

`checkpoint` serves both `torch.utils.checkpoint.checkpoint` (either `use_reentrant`) and
`torch_xla.utils.checkpoint.checkpoint`: torch's own implementation does the autograd work, and the function
it is given is wrapped (`_Region`) so that its second and later calls, the recomputations, go through the
barrier and draw the same random numbers as the first. The device's RNG key is kept as its IR node, so
preserving it reads nothing from the device. The recomputed ops carry the IR scope `checkpoint_recompute`,
which the debug analysis counts.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings
from typing import Any, Callable

import torch
import torch.utils.checkpoint as torch_checkpoint
from torch.utils._pytree import tree_leaves

from xladev.runtime.record import rng
from xladev.runtime.record.opt_barrier import optimization_barrier_
from xladev.runtime.graph.op_ledger import RECOMPUTE_SCOPE, recorder
from xladev.runtime.record.tensor import XlaTensor

# torch's own `checkpoint`, kept when `install()` routes the module's name to `checkpoint` below.
_torch_checkpoint = torch_checkpoint.checkpoint


class _Region:
    """One checkpointed call: the wrapped function, and what its recomputation needs besides its inputs.

    Attributes:
      calls: how many times the function ran (the first is the forward; later ones recompute it).
      keys: each device's RNG key node when the forward ran (None: randomness is not preserved).
      cpu_state: the CPU generator's state then.
      grads: the gradients that arrived at the region's outputs, for the barrier.
    """

    def __init__(self, function: Callable, preserve_rng_state: bool):
        self.function = function
        self.preserve = preserve_rng_state
        self.calls = 0
        self.keys: dict[int, Any] | None = None
        self.cpu_state = None
        self.grads: list[torch.Tensor] = []
        functools.update_wrapper(self, function, updated=())

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls == 1:
            if self.preserve:
                self.keys = rng.key_nodes()
                self.cpu_state = torch.get_rng_state()
            return self.function(*args, **kwargs)
        return self._recompute(args, kwargs)

    def keep_grad(self, grad: torch.Tensor) -> None:
        """A tensor hook on each output: the gradient it received joins the next recomputation's barrier."""
        if isinstance(grad, XlaTensor):
            self.grads.append(grad)

    def _recompute(self, args, kwargs):
        grads, self.grads = self.grads, []  # a second backward (retain_graph) brings its own
        barrier = [t for t in tree_leaves((args, kwargs)) if isinstance(t, XlaTensor)] + grads + _weights(self.function)
        for device in sorted({t._st.device_index for t in barrier}):  # one barrier per device
            optimization_barrier_([t for t in barrier if t._st.device_index == device])
        with contextlib.ExitStack() as stack:
            if self.preserve:
                stack.enter_context(torch.random.fork_rng(devices=[]))
                torch.set_rng_state(self.cpu_state)
                for device, key in self.keys.items():
                    stack.enter_context(rng.keyed(device, key))
            recorder.push_scope(RECOMPUTE_SCOPE)
            stack.callback(recorder.pop_scope)
            return self.function(*args, **kwargs)


def _weights(function) -> list[torch.Tensor]:
    """The xla parameters and buffers of the module `function` is a method of (`checkpoint(block.forward, x)`), as
    PyTorch/XLA's barrier takes them; none for a module called as itself or a plain function."""
    if not inspect.ismethod(function) or not isinstance(function.__self__, torch.nn.Module):
        return []
    module = function.__self__
    return [t for t in list(module.parameters()) + list(module.buffers()) if isinstance(t, XlaTensor)]


def checkpoint(function: Callable, *args, use_reentrant: bool | None = None, **kwargs):
    """`torch.utils.checkpoint.checkpoint` for a region with xla tensors: the same arguments and results, with
    the recomputation behind an optimization barrier and the device's random numbers replayed lazily.

    Args:
      function: the region (a module, a method or any function).
      *args: its arguments.
      use_reentrant: as torch's (None warns, then means True, as torch does).
      **kwargs: `preserve_rng_state`, `context_fn`, `determinism_check`, `debug`, `early_stop`, and with
        `use_reentrant=False` keyword arguments for `function`; as torch's.

    Returns:
      What `function(*args)` returns.

    Raises:
      ValueError: as torch's checkpoint (an unexpected keyword argument with `use_reentrant=True`...).
    """
    if use_reentrant is None:
        # Said here, at the caller's line, as torch says it at its caller's.
        warnings.warn("torch.utils.checkpoint: the use_reentrant parameter should be passed explicitly; "
                      "use_reentrant=False is recommended. Checkpointing now uses use_reentrant=True.", stacklevel=3)
        use_reentrant = True
    preserve = kwargs.pop("preserve_rng_state", True)
    region = _Region(function, preserve)
    # torch's preserve_rng_state is off: the region keeps the CPU generator's state itself, and the device's
    # without reading it back from the device.
    out = _torch_checkpoint(region, *args, use_reentrant=use_reentrant, preserve_rng_state=False, **kwargs)
    for t in tree_leaves(out):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            t.register_hook(region.keep_grad)
    return out


@functools.wraps(_torch_checkpoint)
def _routed_checkpoint(function, *args, **kwargs):
    # torch.compile traces torch's own checkpoint (a higher-order op); a region with xla tensors goes to
    # `checkpoint`, any other to torch's unchanged.
    if not torch.compiler.is_compiling() and any(isinstance(t, XlaTensor) for t in tree_leaves((args, kwargs))):
        return checkpoint(function, *args, **kwargs)
    return _torch_checkpoint(function, *args, **kwargs)


def install() -> None:
    """Routes `torch.utils.checkpoint.checkpoint` (and `checkpoint_sequential`, which calls it) to `checkpoint`
    for regions with xla tensors. Code that imported the function before the device was registered keeps
    torch's, which is correct on xla but lets XLA merge the recomputation away."""
    torch_checkpoint.checkpoint = _routed_checkpoint
