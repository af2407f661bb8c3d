"""Starting the adapter on an imported torch_xla: its barriers wrapped, the event log on, the run described."""

from __future__ import annotations

import os
import sys

from xladev.events import bus, ending
from xladev.attach._barriers import Steps
from xladev.attach._graphs import GraphDumps
from xladev.attach._debug_tail import DebugFileTail
from xladev.attach._harvest import Harvester, MetricsSource


def describe(version: str, outputs) -> dict:
    """What the event log's header says of a torch_xla run. Reads no device: on a TPU, asking for one now
    would start PyTorch/XLA's runtime before the script chose its mode (`xr.use_spmd()`)."""
    from xladev.attach import ABSENT, ABSENT_WITHOUT_GRAPHS

    import torch

    absent = list(ABSENT) + ([] if outputs.graph_dump else list(ABSENT_WITHOUT_GRAPHS))
    if not outputs.debug_file:
        absent.insert(0, "graph hashes, causes and frames (PT_XLA_DEBUG's analysis goes to stderr, not to a file)")
    return {"device": f"{os.environ.get('PJRT_DEVICE', 'unknown')} (torch_xla {version}, attached)",
            "versions": {"torch": torch.__version__.split("+")[0], "torch_xla": version},
            "runtime": "torch_xla", "absent": absent}


def start(torch_xla, version: str, outputs) -> Steps | None:
    """Wraps torch_xla's barriers and starts the event log (XLADEV_EVENT_LOG).

    Returns:
      The step counter, or None when no event log is asked for (nothing to observe into).
    """
    from xladev._flags import config

    if not config.event_log:
        return None
    import torch_xla.core.xla_model as xm
    import torch_xla.debug.metrics as met

    graphs = GraphDumps(outputs.graph_dump) if outputs.graph_dump else None
    source = MetricsSource(met, getattr(torch_xla, "_XLAC", None))
    steps = Steps(Harvester(source, DebugFileTail(outputs.debug_file), graphs, config.metrics_samples))
    bus.api = "torch_xla"
    bus.describe_runtime = lambda: describe(version, outputs)
    wrapped = steps.wrap(xm.mark_step)
    xm.mark_step = wrapped
    inner = sys.modules.get("torch_xla.torch_xla")
    if hasattr(torch_xla, "sync"):
        sync = steps.wrap(torch_xla.sync)
        torch_xla.sync = sync
        if inner is not None and hasattr(inner, "sync"):
            inner.sync = sync  # torch_xla.compile calls it by this module's global
    from xladev.sinks import eventlog_writer

    log = eventlog_writer.start_from_flags()
    if log is None:
        return None
    ending.at_end(steps.finish, early=True)
    return steps
