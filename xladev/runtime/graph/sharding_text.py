"""Sharding text as PyTorch/XLA prints it (`{devices=[2,1]0,1}`, `{replicated}`): written from a jax sharding,
read back into its parts.
"""

from __future__ import annotations

import re

from xladev.runtime.graph import backend

REPLICATED = "{replicated}"


def sharding_text(sharding, ndim: int) -> str:
    """PyTorch/XLA's text of a sharding: `{devices=[2,1]0,1}`, `{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}`,
    `{replicated}`; device numbers are `xla:N`'s N."""
    hlo = sharding._to_xla_hlo_sharding(ndim)
    if hlo.is_replicated():
        return REPLICATED
    index = {d.id: i for i, d in enumerate(backend.jax_devices())}
    # The HLO sharding numbers devices by their place in the sharding's device assignment (the mesh's
    # order), not by device id: a mesh of reordered devices must print its own order.
    assignment = sharding._device_assignment
    dims = ",".join(str(d) for d in hlo.tile_assignment_dimensions())
    devices = ",".join(str(index[assignment[d].id]) for d in hlo.tile_assignment_devices())
    last = " last_tile_dim_replicate" if hlo.replicate_on_last_tile_dim() else ""
    return f"{{devices=[{dims}]{devices}{last}}}"


_TEXT = re.compile(r"^\{devices=\[([\d,]+)\]([\d,]+)( last_tile_dim_replicate)?\}$")


def parse_sharding_text(text: str) -> tuple[list[int], list[int], bool] | None:
    """(tile dimensions, devices, last dimension replicates) of a sharding text; None for `{replicated}`.

    Raises:
      ValueError: not a sharding text this module writes.
    """
    text = text.strip()
    if text == REPLICATED:
        return None
    match = _TEXT.match(text)
    if match is None:
        raise ValueError(f"not a sharding text ({{devices=[...]...}} or {{replicated}}): {text!r}")
    return [int(d) for d in match.group(1).split(",")], [int(d) for d in match.group(2).split(",")], bool(match.group(3))
