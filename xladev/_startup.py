"""What `import xladev` does: register the `xla` device with torch, start the always-on sinks.

Kept out of `xladev/__init__.py` so that the file-reading commands (`xladev report`, `diff`, `tui`)
can import the package without torch or jax (see `xladev_cli`).
"""

from __future__ import annotations


def start_sinks() -> None:
    """Subscribes the sinks the flags ask for to the runtime's event bus (the runtime never calls them).

    The compile history is always on: it summarises each compiled graph (not each step), so a later
    recompilation can be explained against any earlier graph of its site.
    """
    from xladev._flags import config
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


def load() -> dict:
    """Starts the runtime and returns the public names of `xladev`."""
    from xladev._flags import ConfigError, config
    from xladev.runtime.device import device, device_count, devices, register
    from xladev.runtime.executor import XlaCompileError
    from xladev.runtime.training import (
        DeviceLoader, add_step_closure, initialize_cache, manual_seed, mark_step, optimizer_step, sync,
        wait_device_ops,
    )

    register()
    from xladev.runtime.module_conversion import install

    install()
    start_sinks()
    if config.compilation_cache_dir:
        initialize_cache(config.compilation_cache_dir)
    from xladev import debug

    return {
        "ConfigError": ConfigError, "config": config, "device": device, "device_count": device_count,
        "devices": devices, "XlaCompileError": XlaCompileError, "DeviceLoader": DeviceLoader,
        "add_step_closure": add_step_closure, "initialize_cache": initialize_cache, "manual_seed": manual_seed,
        "mark_step": mark_step, "optimizer_step": optimizer_step, "sync": sync, "wait_device_ops": wait_device_ops,
        "debug": debug,
    }
