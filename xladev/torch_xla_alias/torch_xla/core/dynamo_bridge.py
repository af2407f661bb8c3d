"""`torch_xla.core.dynamo_bridge` on xladev: the same as `torch_xla._dynamo.dynamo_bridge` (its old place,
which torch's own `openxla` backend imports)."""

from torch_xla import _xladev
from torch_xla._dynamo.dynamo_bridge import extract_compiled_graph  # noqa: F401

__getattr__ = _xladev.module_getattr(__name__)
