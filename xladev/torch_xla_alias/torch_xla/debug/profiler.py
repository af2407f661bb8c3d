"""`torch_xla.debug.profiler` (`xp`) on xladev: xladev's own profiler (`xladev.debug.profiler`) under this name.

`Trace`, `StepTrace`, `trace_me`, `start_trace` and `stop_trace` are xladev's, unchanged (a StepTrace's exit
marks the step, as in PyTorch/XLA). `start_server`, `trace` and `trace_detached` take PyTorch/XLA's extra
arguments and pass the rest on. The profiles open in TensorBoard's Profile tab, as PyTorch/XLA's do.
"""

from __future__ import annotations

from xladev.debug import profiler as _profiler
from xladev.debug.profiler import *  # noqa: F401,F403  (Trace, StepTrace, trace_me, start_trace, stop_trace...)
from xladev.debug.profiler import __all__  # noqa: F401

from torch_xla import _xladev


def start_server(port: int, only_on_master: bool = True):
    """Starts this process's profiler server: `xladev.debug.profiler.start_server`.

    Args:
      port: the TCP port.
      only_on_master: as PyTorch/XLA's; this process is the master.

    Returns:
      The server.

    Raises:
      ProfilerError: the port is in use or invalid.
    """
    return _profiler.start_server(port)


def trace(service_addr: str, logdir: str, duration_ms: int = 1000, num_tracing_attempts: int = 3,
          host_tracer_level: int = 2, device_tracer_level: int = 1, delay_ms: int = 0, timeout_s: float = 120,
          interval_s: float = 5):
    """Captures a profile from a profiler server: `xladev.debug.profiler.trace`.

    Args:
      service_addr, logdir, duration_ms, num_tracing_attempts, host_tracer_level, device_tracer_level,
      delay_ms, timeout_s: as PyTorch/XLA's.
      interval_s: accepted; xladev spaces its attempts itself.

    Returns:
      The path of the written `.xplane.pb` (PyTorch/XLA returns None).

    Raises:
      ProfilerError: nothing to capture from, nothing captured, or no time left.
    """
    return _profiler.trace(service_addr, logdir, duration_ms, num_tracing_attempts, host_tracer_level,
                           device_tracer_level, delay_ms, timeout_s=timeout_s)


def trace_detached(service_addr: str, logdir: str, duration_ms: int = 1000, num_tracing_attempts: int = 3,
                   host_tracer_level: int = 2, device_tracer_level: int = 1, delay_ms: int = 0,
                   timeout_s: float = 120, interval_s: float = 5):
    """`trace(...)` on a background thread: `xladev.debug.profiler.trace_detached`.

    Returns:
      xladev's capture handle (`.join()` gives the path); PyTorch/XLA returns None.
    """
    return _profiler.trace_detached(service_addr, logdir, duration_ms, num_tracing_attempts, host_tracer_level,
                                    device_tracer_level, delay_ms, timeout_s=timeout_s)


__getattr__ = _xladev.module_getattr(__name__)
