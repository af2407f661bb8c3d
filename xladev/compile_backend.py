"""`torch.compile(model, backend="xladev")`: the backend torch finds by name, through xladev's entry point.

torch loads `backend` from here when a `torch.compile(..., backend="xladev")` is first set up, before TorchDynamo
traces anything: importing this starts xladev's runtime (the `xla` device) and lets TorchDynamo trace code on
xla tensors (`xladev.runtime.dynamo.dynamo_backend`). `docs/compile.md` tells the whole story.
"""

from __future__ import annotations

import xladev

xladev._load_runtime()

from xladev.runtime.dynamo.dynamo_backend import xladev_backend as backend  # noqa: E402

__all__ = ["backend"]
