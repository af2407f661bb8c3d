"""`torch_xla.debug` on xladev: `metrics` and `profiler` are xladev's own (`xladev.debug.*`)."""

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__, submodules=("metrics", "metrics_compare_utils", "profiler"))
