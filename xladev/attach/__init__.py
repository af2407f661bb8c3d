"""xladev's event log for a run of real torch_xla (2.5 to 2.9), on a TPU or wherever PyTorch/XLA runs.

    xladev tui -- python train.py          # live, as for a run on xladev
    xladev attach -- python train.py       # writes run.events.jsonl (--log PATH), then `xladev report` it
    XLADEV_EVENT_LOG=run.events.jsonl python train.py   # with `import xladev.attach` as the script's first line

When the job imports a real torch_xla, xladev attaches to it instead of running anything itself: its step
barriers are wrapped (`torch_xla.sync`, `xm.mark_step`, and through them `MpDeviceLoader`, `StepTrace`,
`torch_xla.compile`, `xm.optimizer_step`), and at each one it turns what PyTorch/XLA exposes into the same
records xladev's runtime writes: the step, counter and metric deltas, each compile and execution with its
graph hash, cause and frames (from PT_XLA_DEBUG analysis, which the adapter turns on into a file beside the
log), transfers and CPU fallbacks. The header names the runtime (`torch_xla`) and its version, and lists what
such a log cannot hold (`absent`). A torch_xla version the adapter does not know gets one line, and the
run goes on unobserved.
"""

from __future__ import annotations

import os
import sys
from typing import NamedTuple

from xladev.errors import XladevError

# The versions whose barriers, metrics and analysis blocks the adapter reads (their names did not change in them).
SUPPORTED = ((2, 5), (2, 6), (2, 7), (2, 8), (2, 9))
# Set in a process (and so in its children) that observes a real torch_xla: xladev's own runtime is not started
# there when torch is imported (`xladev/__init__.py`).
ATTACH_ENV = "XLADEV_ATTACH"
# The PT_XLA_DEBUG_FILE the adapter chose (not the user's): a child process picks its own instead of sharing it.
_OWN_DEBUG_FILE_ENV = "XLADEV_ATTACH_DEBUG_FILE"
_OWN_DUMP_ENV = "XLADEV_ATTACH_DUMP_FILE"  # the same for XLA_SAVE_TENSORS_FILE

# What an adapter's log cannot hold, named in its header so a reader does not take an absence for a zero.
ABSENT = (
    "a compile's start (a compile is seen when its step ends)",
    "per-op tracing samples (the count and total are exact)",
    "sites of reads of data already on the device, and of CPU fallbacks",
)
# ...and what it holds only with XLADEV_ATTACH_GRAPHS (PyTorch/XLA's graph dumps).
ABSENT_WITHOUT_GRAPHS = (
    "graph node counts at compile (executions carry torch_xla's TensorsGraphSize)",
    "IR text of graphs",
    "what changed at a recompilation (XLADEV_ATTACH_GRAPHS=1 has torch_xla dump its graphs to say it)",
)


class AttachError(XladevError, RuntimeError):
    """The adapter cannot observe this run (its message says why); the run itself goes on."""


def version_of(text: str) -> tuple[int, int] | None:
    """(major, minor) of a version string such as ``2.9.0+git1a2b``; None when it is not one."""
    parts = text.split("+", 1)[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def known_version(version: str) -> bool:
    """True for a torch_xla version the adapter reads; else says so in one line on stderr (the run goes on)."""
    if version_of(version) in SUPPORTED:
        return True
    print(f"xladev attach: torch_xla {version} is not a version the adapter knows "
          f"({SUPPORTED[0][0]}.{SUPPORTED[0][1]} to {SUPPORTED[-1][0]}.{SUPPORTED[-1][1]}); "
          "the run goes on unobserved", file=sys.stderr, flush=True)
    return False


def is_alias(path: str | None) -> bool:
    """True for a module file of xladev's own torch_xla alias (`xladev run`), which needs no adapter."""
    return "torch_xla_alias" in (path or "").replace("\\", "/").split("/")


class Outputs(NamedTuple):
    """Where PyTorch/XLA writes what the adapter reads: its analysis blocks, and (XLADEV_ATTACH_GRAPHS) its graph
    dumps; None for what cannot be read."""

    debug_file: str | None
    graph_dump: str | None


def prepare_environment() -> Outputs:
    """Turns on PyTorch/XLA's outputs the adapter reads, before torch_xla reads its settings.

    The user's own settings win: their PT_XLA_DEBUG_FILE is read where they chose one; where they send the
    analysis to stderr, the log has no per-graph hashes or frames (and says so); their XLA_SAVE_TENSORS_FILE is
    read when it is in text format.

    Returns:
      The files.
    """
    env = os.environ
    env[ATTACH_ENV] = "1"
    log = env.get("XLADEV_EVENT_LOG")
    user_level = env.get("PT_XLA_DEBUG_LEVEL") or env.get("PT_XLA_DEBUG")
    if user_level and not env.get(_OWN_DEBUG_FILE_ENV):
        debug = env.get("PT_XLA_DEBUG_FILE") or None
    elif log:
        debug = f"{log}.pt_xla_debug.{os.getpid()}.txt"
        env.update({"PT_XLA_DEBUG_LEVEL": "2", "PT_XLA_DEBUG_FILE": debug, _OWN_DEBUG_FILE_ENV: debug})
    else:
        debug = None
    from xladev._flags import config

    dump = None
    if env.get("XLA_SAVE_TENSORS_FILE") and not env.get(_OWN_DUMP_ENV):
        if env.get("XLA_SAVE_TENSORS_FMT", "text").strip().lower() == "text":
            dump = env["XLA_SAVE_TENSORS_FILE"]
    elif config.attach_graphs and log:
        from xladev.attach._graphs import dump_path

        dump = dump_path(log)
        env.update({"XLA_SAVE_TENSORS_FILE": dump, "XLA_SAVE_TENSORS_FMT": "text", _OWN_DUMP_ENV: dump})
    return Outputs(debug, dump)


_attached = None


def attach(torch_xla, outputs: Outputs) -> bool:
    """Starts observing the imported torch_xla: wraps its barriers, starts the event log.

    Args:
      torch_xla: the real torch_xla module, just imported.
      outputs: where its analysis blocks and graph dumps go (`prepare_environment`).

    Returns:
      True when attached; False (after one line on stderr) for a version the adapter does not know, or when
      no event log is asked for.
    """
    global _attached
    if _attached is not None or is_alias(getattr(torch_xla, "__file__", None)):
        return _attached is not None
    version = getattr(torch_xla, "__version__", "?")
    if not known_version(version):
        return False
    from xladev.attach import _start

    _attached = _start.start(torch_xla, version, outputs)
    return _attached is not None


def install() -> None:
    """Attaches now if a real torch_xla is imported, else when it is; xladev's runtime stays off."""
    import xladev

    xladev._StartWithTorch.remove()
    module = sys.modules.get("torch_xla")
    if module is not None:
        if not is_alias(getattr(module, "__file__", None)):
            attach(module, prepare_environment())
        return
    from xladev.attach._hook import TorchXlaHook

    TorchXlaHook.install()


if __name__ != "__main__":
    install()
