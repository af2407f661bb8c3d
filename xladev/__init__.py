"""xladev: a lazy XLA device for PyTorch, and the debugging and profiling toolkit around it.

    import xladev
    device = xladev.device()
    model = model.to(device)
    ...
    loss.backward(); optimizer.step(); xladev.mark_step()
"""

import sys as _sys

__version__ = "0.1.0"

__all__ = [
    "ConfigError", "DeviceLoader", "debug", "GraphGrowthWarning", "XlaCompileError", "add_step_closure", "config", "device", "device_count",
    "devices", "initialize_cache", "manual_seed", "mark_step", "optimizer_step", "sync", "wait_device_ops",
]


def _load_runtime() -> None:
    """Registers the `xla` device and starts the sinks (what `import xladev` does). Idempotent."""
    if "device" not in globals():
        from xladev import _startup

        globals().update(_startup.load())


# The `xladev` command marks file-only commands (report, diff, tui) so they never import torch or jax.
if "_xladev_light_import" not in _sys.modules:
    _load_runtime()
