"""Mixed precision on the `xla` device: `xladev.amp` (PyTorch/XLA's `torch_xla.amp`).

    import xladev.amp as amp
    with amp.autocast(device):                    # = torch.autocast("xla"): bfloat16 by default
        loss = loss_fn(model(x), y)
    loss.backward()

    scaler = amp.GradScaler()                     # float16: scale the loss, skip steps with infs
    optimizer = amp.syncfree.AdamW(model.parameters())
    scaler.scale(loss).backward()
    scaler.step(optimizer)                        # with a syncfree optimizer: no host read in the step
    scaler.update()

Which ops autocast casts is PyTorch/XLA's policy (xladev/runtime/record/autocast.py, docs/amp.md).
"""

from __future__ import annotations

import inspect

import xladev

xladev._load_runtime()

import torch  # noqa: E402

from xladev.amp import syncfree  # noqa: E402
from xladev.runtime.record.autocast import DEFAULT_DTYPE, DEVICE_TYPE  # noqa: E402
from xladev.runtime.distributed.collectives import fetch_gradients  # noqa: E402

__all__ = ["GradScaler", "autocast", "syncfree"]


class autocast(torch.amp.autocast_mode.autocast):  # noqa: N801 (PyTorch/XLA's name)
    """`torch.autocast("xla", ...)` with PyTorch/XLA's signature: bfloat16 unless `dtype` says otherwise.

    Args:
      device: an xla device (`xladev.device()`, `"xla:0"`).
      enabled: False leaves autocast off in the region.
      dtype: bfloat16 (default) or float16; another dtype warns and disables autocast, as torch does.
      cache_enabled: accepted for the signature (xladev's casts are not cached: XLA merges repeated ones).

    Raises:
      ValueError: `device` is not an xla device.
    """

    def __init__(self, device, enabled: bool = True, dtype: torch.dtype | None = None, cache_enabled: bool = True):
        if torch.device(device).type != DEVICE_TYPE:
            # PyTorch/XLA asserts "torch_xla.autocast is available for XLA:TPU"; for a CPU or CUDA tensor
            # torch.autocast("cpu"/"cuda") is the tool.
            raise ValueError(f"autocast({str(device)!r}): xladev.amp.autocast is for xla devices; use "
                             f"torch.autocast({torch.device(device).type!r}) for others")
        super().__init__(DEVICE_TYPE, enabled=enabled, dtype=DEFAULT_DTYPE if dtype is None else dtype,
                         cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """`torch.amp.GradScaler("xla")` with PyTorch/XLA's signature, and steps without a host read.

    The gradient check and the scale update run on the device (xladev/runtime/record/amp_ops.py). `step`:
    - with an optimizer whose `step` takes `found_inf` (`xladev.amp.syncfree`'s), passes it the sum of the
      found-inf flags: the optimizer skips the update in the graph, nothing is read back;
    - else with `use_zero_grad=True`, zeroes the gradients in the graph on an inf (NaNs and infs replaced
      first) and steps: no host read, but the step is taken (momentum and Adam's moments still decay);
    - else reads the flag back, as torch does, and steps only when it is zero (a host read per step).

    Args:
      init_scale, growth_factor, backoff_factor, growth_interval, enabled: as torch.amp.GradScaler's.
      use_zero_grad: see above.
    """

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True, use_zero_grad: bool = False):
        super().__init__(DEVICE_TYPE, init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval, enabled=enabled)
        self.use_zero_grad = use_zero_grad

    def _maybe_opt_step(self, optimizer, optimizer_state, *args, **kwargs):
        flags = tuple(optimizer_state["found_inf_per_device"].values())
        if "found_inf" in inspect.signature(optimizer.step).parameters:
            kwargs["found_inf"] = torch.stack(flags).sum()
            return optimizer.step(*args, **kwargs)
        if self.use_zero_grad:
            keep = (torch.stack(flags).sum() == 0).float()
            with torch.no_grad():
                for grad in fetch_gradients(optimizer):
                    grad.nan_to_num_().mul_(keep.to(grad.dtype))
            return optimizer.step(*args, **kwargs)
        return super()._maybe_opt_step(optimizer, optimizer_state, *args, **kwargs)

