"""Device tensors meeting TorchDynamo's fake tensors: the op is run on fakes, under their fake mode.

While TorchDynamo traces a function for `torch.compile`, a device tensor can be made for real inside the
trace (`torch.tensor([...], device="xla")` builds a host tensor and copies it with the fake mode set aside)
and then meet the trace's fake tensors in one op. Such an op is not the device's to record: it is run by the
fake mode, the device tensors converted to fakes of the same shape, dtype and device.
"""

from __future__ import annotations

import torch
from torch.utils import _pytree as pytree

from xladev.errors import XladevError


class FakeOperands(XladevError):
    """An op's operands mix device tensors with a fake mode's tensors (raised while its arguments are read)."""

    def __init__(self, fake: torch.Tensor) -> None:
        super().__init__("an xla op met a fake tensor")
        self.mode = fake.fake_mode

    def run_faked(self, func, args, kwargs):
        """Runs `func` under the fake mode, every device tensor among the arguments made a fake of itself."""
        from xladev.runtime.record.tensor import XlaTensor

        def to_fake(value):
            return self.mode.from_tensor(value) if isinstance(value, XlaTensor) else value

        args, kwargs = pytree.tree_map(to_fake, (args, kwargs))
        with self.mode:
            return func(*args, **kwargs)


def is_fake(value: torch.Tensor) -> bool:
    """True for a FakeTensor (TorchDynamo's and AOTAutograd's tracing tensors)."""
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(value, FakeTensor)

