"""xladev: a lazy XLA device for PyTorch, and the debugging and profiling toolkit around it.

    import xladev
    device = xladev.device()
    model = model.to(device)
    ...
    loss.backward(); optimizer.step(); xladev.mark_step()
"""

from xladev._flags import ConfigError, config
from xladev.runtime.device import register as _register

_register()

from xladev.runtime.device import device, device_count, devices  # noqa: E402
from xladev.runtime.executor import XlaCompileError  # noqa: E402
from xladev.runtime.training import (  # noqa: E402
    DeviceLoader,
    add_step_closure,
    initialize_cache,
    manual_seed,
    mark_step,
    optimizer_step,
    sync,
    wait_device_ops,
)

from xladev import debug  # noqa: E402  (xladev.debug.get_tensors_text, metrics, ...)

__version__ = "0.1.0"


def _start_sinks() -> None:
    # Always-on counters and compile history; sinks subscribe to the runtime's event bus (the
    # runtime never calls them). The history summarises each compiled graph (not each step), so a
    # later recompilation can be explained against any earlier graph of its site.
    from xladev.sinks.analysis.history import site_history

    site_history.start()
    if config.metrics_enabled or config.metrics_file:
        from xladev.sinks.metrics import sink

        sink.start()
    from xladev.sinks.analysis.sink import start_from_flags

    start_from_flags()
    if config.save_tensors_file:
        from xladev.sinks import dumps

        dumps.start_from_flags()
    if config.event_log:
        from xladev.sinks import eventlog

        eventlog.start_from_flags()
    if config.profile_steps:
        from xladev.debug import _profiler_steps

        _profiler_steps.start_from_flags()


_start_sinks()
if config.compilation_cache_dir:
    initialize_cache(config.compilation_cache_dir)

__all__ = [
    "ConfigError", "DeviceLoader", "debug", "XlaCompileError", "add_step_closure", "config", "device", "device_count",
    "devices", "initialize_cache", "manual_seed", "mark_step", "optimizer_step", "sync", "wait_device_ops",
]
