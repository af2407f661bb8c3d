"""`torch_xla.test.test_utils` on xladev: the progress lines and TensorBoard summaries of PyTorch/XLA's example
training scripts (`print_training_update`, `print_test_update`, `get_summary_writer`, `write_to_summary`...), in
PyTorch/XLA's formats. Summaries go through `torch.utils.tensorboard` (PyTorch/XLA uses tensorboardX, which is
not installed with xladev; the files are the same kind)."""

from __future__ import annotations

import datetime
import multiprocessing
import time
import unittest
from typing import Any, Callable

import torch_xla.debug.metrics as met
import torch_xla.debug.metrics_compare_utils as mcu
import torch_xla.runtime as xr
from torch_xla import _xladev


def mp_test(func: Callable) -> Callable:
    """Runs a test method in a process of its own; the test fails unless that process exits with status 0."""

    def wrapper(*args, **kwargs):
        proc = multiprocessing.Process(target=func, args=args, kwargs=kwargs)
        proc.start()
        proc.join()
        if args and isinstance(args[0], unittest.TestCase):
            args[0].assertEqual(proc.exitcode, 0)
        return proc.exitcode

    return wrapper


def _device_spec(device) -> str:
    return f"{device}/{xr.global_ordinal()}"


def now(format: str = "%H:%M:%S") -> str:
    """The wall-clock time as text."""
    return datetime.datetime.now().strftime(format)


def write_to_summary(summary_writer, global_step: int | None = None, dict_to_write: dict | None = None,
                     write_xla_metrics: bool = False) -> None:
    """Adds each `name: value` of `dict_to_write` as a scalar, and with `write_xla_metrics` every number of the
    metrics report (and `aten_ops_sum`, the count of ops that ran on the CPU). Nothing without a writer."""
    if summary_writer is None:
        return
    for name, value in (dict_to_write or {}).items():
        summary_writer.add_scalar(name, value, global_step)
    if write_xla_metrics:
        fallbacks = 0
        for name, value in mcu.parse_metrics_report(met.metrics_report()).items():
            if name.startswith("aten::"):
                fallbacks += value
            summary_writer.add_scalar(name, value, global_step)
        summary_writer.add_scalar("aten_ops_sum", fallbacks, global_step)


def close_summary_writer(summary_writer) -> None:
    """Flushes and closes a writer (None: nothing)."""
    if summary_writer is not None:
        summary_writer.flush()
        summary_writer.close()


def get_summary_writer(logdir: str | None) -> Any:
    """A TensorBoard SummaryWriter writing to `logdir`, or None without one."""
    if not logdir:
        return None
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=logdir)
    write_to_summary(writer, 0, dict_to_write={"TensorboardStartTimestamp": time.time()})
    return writer


def _line(kind: str, fields: list[str | None]) -> None:
    print("|", " ".join([kind] + [f for f in fields if f]), flush=True)


def print_training_update(device, step: int, loss: float, rate: float, global_rate: float, epoch: int | None = None,
                          summary_writer=None) -> None:
    """Prints `| Training Device=... Epoch=... Step=... Loss=... Rate=... GlobalRate=... Time=...`."""
    _line("Training", [f"Device={_device_spec(device)}", f"Epoch={epoch}" if epoch is not None else None,
                       f"Step={step}", f"Loss={loss:.5f}", f"Rate={rate:.2f}", f"GlobalRate={global_rate:.2f}",
                       f"Time={now()}"])
    write_to_summary(summary_writer, dict_to_write={"examples/sec": rate, "average_examples/sec": global_rate})


def print_test_update(device, accuracy: float | None, epoch: int | None = None, step: int | None = None) -> None:
    """Prints `| Test Device=... Step=... Epoch=... Accuracy=... Time=...`."""
    _line("Test", [f"Device={_device_spec(device)}", f"Step={step}" if step is not None else None,
                   f"Epoch={epoch}" if epoch is not None else None,
                   f"Accuracy={accuracy:.2f}" if accuracy is not None else None, f"Time={now()}"])


__getattr__ = _xladev.module_getattr(__name__)
