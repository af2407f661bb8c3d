"""`torch_xla.debug.metrics` (`met`) on xladev: xladev's own module, `xladev.debug.metrics`, under this name.

`metrics_report()`, `short_metrics_report()`, `counter_names()`, `counter_value()`, `metric_names()`,
`metric_data()`, `clear_counters()`, `clear_metrics()`, `clear_all()` and `executed_fallback_ops()` keep
PyTorch/XLA's signatures and report format; xladev's `snapshot`, `diff` and `to_dataframe` come along.
"""

from xladev.debug.metrics import *  # noqa: F401,F403  (the whole public surface, renamed)
from xladev.debug.metrics import __all__  # noqa: F401

from torch_xla import _xladev

__getattr__ = _xladev.module_getattr(__name__)
