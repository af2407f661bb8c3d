"""`torch_xla._dynamo.dynamo_bridge` on xladev: `extract_compiled_graph`, xladev's FX-graph program."""

from torch_xla import _xladev
from xladev.runtime.dynamo.dynamo_backend import extract_compiled_graph  # noqa: F401

__getattr__ = _xladev.module_getattr(__name__)
