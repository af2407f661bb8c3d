"""Running OpInfo samples on the CPU and on `xla`: moving them, calling the op, watching the bus.

Shared by the value checks (_check.py) and the distribution checks of random ops (_random_check.py).
"""

from __future__ import annotations

import contextlib

import torch
from torch.utils import _pytree as pytree

import xladev
from xladev.errors import XladevError
from xladev.events import Fallback, Ops, bus
from xladev.coverage._plan import CheckResult


# ---- running one sample ------------------------------------------------------------------------------
class _Incomparable(XladevError):
    """The CPU itself rejects the sample (or it has nothing to differentiate): not counted."""


class _Random(XladevError):
    """Two CPU runs of the same sample differ: the op is random and cannot be compared."""


class _Watch:
    """Collects CPU fallbacks and lowered op names from the event bus while active.

    Lowered ops are only counted inside `ops_of_interest()`: the op under test, not the transfers
    around it (uploading an input records `empty_strided`, for instance).
    """

    def __init__(self) -> None:
        self.fallbacks: set[str] = set()
        self.lowered: set[str] = set()
        self.random_draws = 0
        self._counting = False

    def __call__(self, event) -> None:
        if isinstance(event, Fallback):
            self.fallbacks.add(event.name)
        elif isinstance(event, Ops) and self._counting:
            self.lowered.update(n for n in event.counts if n.startswith("aten::"))
            self.random_draws += event.counts.get("xla::rng", 0)  # random ops record as xla::rng

    @contextlib.contextmanager
    def active(self):
        xladev.mark_step()  # flush what earlier code recorded, so it is not counted here
        sub = bus.subscribe(self, (Fallback, Ops))
        try:
            yield self
        finally:
            try:
                xladev.mark_step()
            finally:
                sub.close()

    @contextlib.contextmanager
    def ops_of_interest(self):
        """Counts the ops recorded inside the block; a barrier on each side delimits them."""
        xladev.mark_step()  # the inputs' uploads are flushed uncounted
        self._counting = True
        try:
            yield
            xladev.mark_step()  # a barrier always flushes the op counts into an Ops event
        finally:
            self._counting = False


def _is_xla(t) -> bool:
    return isinstance(t, torch.Tensor) and t.device.type == "xla"


def _xla_device_arg(value):
    """`device='cpu'` in a factory sample becomes the xla device."""
    if isinstance(value, torch.device) and value.type == "cpu":
        return torch.device("xla", 0)
    if isinstance(value, str) and value == "cpu":
        return "xla"
    return value


def names_another_device(sample) -> bool:
    """Whether a sample asks for a device other than the CPU (`device='cuda'` in factory samples, which
    PyTorch's OpInfos add when CUDA is present): the oracle then ran there, and xla cannot stand in."""

    def other(value) -> bool:
        if isinstance(value, str):
            return value.split(":")[0] in ("cuda", "mps", "xpu", "meta")
        return isinstance(value, torch.device) and value.type not in ("cpu", "xla")

    return any(other(v) for v in list(sample.args) + list(sample.kwargs.values()))


def _to_xla(sample, requires_grad: bool = False, keep_args_on_cpu: bool = False):
    def move(t):
        if isinstance(t, torch.dtype):
            return t
        out = t.detach().to("xla")
        if requires_grad and t.requires_grad:
            out.requires_grad_(True)
        return out

    args = sample.args
    moved = sample.transform(move)
    if keep_args_on_cpu:
        moved.args = args
    moved.args = tuple(_xla_device_arg(a) for a in moved.args)
    if "device" in moved.kwargs:
        moved.kwargs = dict(moved.kwargs, device=_xla_device_arg(moved.kwargs["device"]))
    return moved


def _fresh_cpu(sample):
    """A copy of the sample, so that an op writing to its inputs cannot change the next run."""

    def copy(t):
        if isinstance(t, torch.dtype):
            return t
        out = t.detach().clone()
        if t.requires_grad:
            out.requires_grad_(True)
        return out

    return sample.transform(copy)


def _call(op, sample):
    return op(sample.input, *sample.args, **sample.kwargs)


def _read_back(value, what: str):
    """CPU copies of the device tensors in `value` (a tensor, a number or a nest of them)."""

    def down(v):
        if isinstance(v, torch.Tensor):
            if not _is_xla(v):
                raise AssertionError(f"{what} is on {v.device}, not on xla")
            return v.detach().cpu()
        return v

    return pytree.tree_map(down, value)


def short_error(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    text = " ".join(lines[:4]) if isinstance(exc, AssertionError) else (lines[0] if lines else "")
    return f"{type(exc).__name__}: {text}"[:300]


def _same(a, b) -> bool:
    try:
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)
        return True
    except Exception:
        return False


def _tensors(sample) -> list[torch.Tensor]:
    leaves = pytree.tree_leaves((sample.input, sample.args, sample.kwargs))
    return [t for t in leaves if isinstance(t, torch.Tensor)]


_SEED = 1234


def _samples(op, dtype, requires_grad: bool, limit: int) -> list:
    """The first `limit` samples, seeded before each one as `OpInfo.sample_inputs` does.

    `sample_inputs_func` is called directly: `OpInfo.sample_inputs` inspects the Python stack to find
    the calling test (a quarter of a second per call), which a sweep does not need.
    """
    torch.manual_seed(_SEED)
    samples = iter(op.sample_inputs_func(op, "cpu", dtype, requires_grad))
    out = []
    while len(out) < limit:
        torch.manual_seed(_SEED + len(out))
        try:
            sample = next(samples)
        except StopIteration:
            break
        if not names_another_device(sample):
            out.append(sample)
    return out


def settle(result: CheckResult, watch: _Watch, failure: str | None, why_none: str = "no samples") -> CheckResult:
    """Fills in `result` once its samples ran: the ops `watch` saw, and the status they and `failure` give.

    Args:
      result: the check's result, with `samples` counted.
      watch: what ran during the check (fallbacks, lowered ops).
      failure: why a sample failed, or None.
      why_none: the reason given when no sample was compared.

    Returns:
      `result`: failing, skipped (nothing compared), fallback (some op ran on the CPU) or lowered.
    """
    result.fallbacks = sorted(watch.fallbacks)
    result.lowered = sorted(watch.lowered)
    if failure:
        result.status, result.reason = "failing", failure
    elif not result.samples:
        result.status, result.reason = "skipped", why_none
    elif result.fallbacks:
        result.status, result.reason = "fallback", ", ".join(result.fallbacks)
    else:
        result.status = "lowered"
    return result


def _dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")
