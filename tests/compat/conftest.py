"""The torch_xla alias, importable in-process for one test module at a time (as `xladev run` makes it)."""

from __future__ import annotations

import importlib.util
import sys
from types import SimpleNamespace

import pytest

from xladev.cli.run import ALIAS_DIR


@pytest.fixture(scope="module")
def tx():
    if importlib.util.find_spec("torch_xla") is not None:
        pytest.skip("a real torch_xla is importable here; the alias is tested where it is not")
    from xladev.events import bus

    api = bus.api  # importing the alias marks the process as a torch_xla script: restored after
    sys.path.insert(0, ALIAS_DIR)
    try:
        import torch_xla
        import torch_xla.amp as amp
        import torch_xla.core.xla_model as xm
        import torch_xla.debug.metrics as met
        import torch_xla.debug.profiler as xp
        import torch_xla.distributed.parallel_loader as pl
        import torch_xla.distributed.xla_multiprocessing as xmp
        import torch_xla.runtime as xr
        from torch_xla import _xladev

        yield SimpleNamespace(torch_xla=torch_xla, amp=amp, xm=xm, met=met, xp=xp, pl=pl, xmp=xmp, xr=xr,
                              private=_xladev)
    finally:
        sys.path.remove(ALIAS_DIR)
        for name in [m for m in sys.modules if m == "torch_xla" or m.startswith("torch_xla.")]:
            del sys.modules[name]
        sys.meta_path[:] = [f for f in sys.meta_path if type(f).__module__ != "torch_xla._xladev"]
        bus.api = api
