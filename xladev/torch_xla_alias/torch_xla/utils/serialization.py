"""`torch_xla.utils.serialization` on xladev: `save` and `load` with each device tensor in its own file.

`save(data, path)` writes `data` to `path` with every xla tensor replaced by a reference, and each tensor's
CPU copy to `path + '.tensors/tensor_N.pt'`; `load(path)` puts them back (as CPU tensors, like `torch.load`
of `xm.save`'s output). This is PyTorch/XLA's layout, so a checkpoint written by either loads with the other.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import torch

from torch_xla import _xladev
from torch_xla.core import xla_model
from torch_xla.utils import utils as xu

__all__ = ["TensorReference", "load", "save"]


class TensorReference:
    """Stands for the saved tensor file number `tid` in the pickled data."""

    def __init__(self, tid: int) -> None:
        self.tid = tid


def _tensors_folder(path: str) -> str:
    return path + ".tensors"


def _tensor_file(folder: str, tid: int) -> str:
    return os.path.join(folder, f"tensor_{tid}.pt")


def _is_device_tensor(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "xla"


def save(data: Any, path: str, master_only: bool = True, global_master: bool = False) -> None:
    """Saves `data` (any nesting of containers and objects holding tensors) to `path` and its tensors beside it.

    Args:
      data: what to save.
      path: the file; the tensors go to the folder `path + '.tensors'`, emptied first.
      master_only: only the master replica writes (of the host, or of the job with `global_master`).
      global_master: with `master_only`, the job's master rather than each host's.
    """
    writes = not master_only or xla_model.is_master_ordinal(local=not global_master)
    folder = _tensors_folder(path)
    if writes:
        shutil.rmtree(folder, ignore_errors=True)
        os.mkdir(folder)
    count = 0

    def to_reference(tensor: torch.Tensor) -> TensorReference:
        nonlocal count
        tid, count = count, count + 1
        if writes:
            torch.save(tensor.detach().cpu(), _tensor_file(folder, tid))
        return TensorReference(tid)

    references = xu.for_each_instance_rewrite(data, _is_device_tensor, to_reference)
    if writes:
        torch.save(references, path)
    xla_model.rendezvous("torch_xla.utils.serialization.save")


def load(path: str) -> Any:
    """The data `save` wrote to `path`, its tensors loaded back on the CPU.

    Args:
      path: the path given to `save`.

    Raises:
      FileNotFoundError: `path` or one of its tensor files is missing.
    """
    folder = _tensors_folder(path)
    references = torch.load(path, weights_only=False)
    return xu.for_each_instance_rewrite(references, lambda v: isinstance(v, TensorReference),
                                        lambda ref: torch.load(_tensor_file(folder, ref.tid)))


__getattr__ = _xladev.module_getattr(__name__)
