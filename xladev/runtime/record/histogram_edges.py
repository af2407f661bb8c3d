"""`histogramdd`'s bin edges: a list output, which the recorder does not take as one node's output.

The histogram lowerings are in `lowering/histograms.py`.
"""

from __future__ import annotations

import torch

from xladev.runtime.record.dispatch import handle
from xladev.runtime.record.special_handlers import special

aten = torch.ops.aten


@special(aten._histogramdd_bin_edges.default)
def _histogramdd_bin_edges(func, args, kwargs):
    """One edge tensor per dimension: a list output, so each is recorded as its 1-D histogram's edges.

    The recorder takes tuple outputs, not lists; `histogram.bin_ct` of one column computes the same
    edges (XLA drops the unused counts).
    """
    x, bins = args[0], list(args[1])
    ranges = kwargs.get("range")
    points = x.reshape(-1, x.shape[-1])
    out = []
    for d, count in enumerate(bins):
        column_range = None if ranges is None else [ranges[2 * d], ranges[2 * d + 1]]
        column = aten.select.int(points, 1, d)
        out.append(handle(aten.histogram.bin_ct, (column, count), {"range": column_range})[1])
    return out
