"""Drawing shardings with rich: which device holds which tile of a tensor (PyTorch/XLA's
`torch_xla.distributed.spmd.debugging.visualize_sharding` / `visualize_tensor_sharding`).
"""

from __future__ import annotations

import rich.align
import rich.box
import rich.console
import rich.padding
import rich.style
import rich.table

from xladev._flags import config

# Tile backgrounds when color is on (a tile's color follows its devices, so equal tiles look alike).
_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")


def _tiles(sharding: str, device_count: int) -> tuple[int, int, dict[tuple[int, int], list[int]], bool]:
    """(rows, columns, (row, column) -> devices, replicated) of the first two dimensions of a sharding text."""
    from xladev.runtime.distributed.spmd_sharding import parse_sharding_text

    parsed = parse_sharding_text(sharding) if sharding else None
    if parsed is None:  # replicated: one tile, every device
        return 1, 1, {(0, 0): list(range(device_count))}, True
    dims, devices, replicate_last = parsed
    tiled = dims[:-1] if replicate_last else dims
    rows = tiled[0] if tiled else 1
    cols = tiled[1] if len(tiled) > 1 else 1
    per_tile = len(devices) // max(rows * cols, 1)  # later dimensions and replication share a tile's cell
    tiles = {}
    for i in range(rows * cols):
        tiles[(i // cols, i % cols)] = devices[i * per_tile:(i + 1) * per_tile]
    return rows, cols, tiles, False


def visualize_sharding(sharding: str, use_color: bool = True, scale: float = 1.0, min_width: int = 9,
                       max_width: int = 80) -> rich.table.Table:
    """Prints a table of the tiles of a sharding (its first two dimensions) and the devices holding each.

    The table is drawn as PyTorch/XLA draws it: a tile held by one device reads `CPU 3`, one held by several
    (a replicated tiling, or the whole tensor when replicated) `CPU [0, 1]`; without color, each tile is boxed.

    Args:
      sharding: HLO sharding text, e.g. `{devices=[2,2]0,1,2,3}`, `{devices=[2,1,2]0,1,2,3
        last_tile_dim_replicate}` or `{replicated}` (`xladev.spmd.get_sharding_spec(t)`).
      use_color: color the tiles (when the console can).
      scale: the blank margin around each tile's label, in lines and characters (1 by default).
      min_width: accepted as PyTorch/XLA's signature has it; tiles are as wide as their labels and margins.
      max_width: the console's width, in characters.

    Returns:
      The rich table (also printed).

    Raises:
      ValueError: not a sharding text.
    """
    from xladev.runtime.graph import backend

    rows, cols, tiles, replicated = _tiles(sharding, len(backend.jax_devices()))
    console = rich.console.Console(width=max_width)
    use_color = use_color and console.color_system is not None
    print(f"Visualizing {sharding or '{replicated}'} (showing up to the first two dimensions)")
    table = rich.table.Table(show_header=False, show_lines=not use_color, padding=0, highlight=not use_color,
                             pad_edge=False, box=None if use_color else rich.box.SQUARE)
    kind = config.pjrt_device
    margin = max(int(round(scale)), 0)
    for r in range(rows):
        cells = []
        for c in range(cols):
            devices = tiles[(r, c)]
            label = f"{kind} {devices[0]}" if len(devices) == 1 and not replicated else f"{kind} {devices}"
            color = _COLORS[devices[0] % len(_COLORS)] if use_color else None
            cells.append(rich.padding.Padding(rich.align.Align(label, "center", vertical="middle"), (margin,) * 4,
                                              style=rich.style.Style(bgcolor=color, color="white" if color else None)))
        table.add_row(*cells)
    console.print(table, end="\n\n")
    return table


def visualize_tensor_sharding(t, **kwargs) -> rich.table.Table:
    """`visualize_sharding` of a tensor's sharding (`{replicated}` when it has none).

    Args:
      t: an xla tensor.
      **kwargs: `visualize_sharding`'s options.
    """
    from xladev.runtime.distributed.spmd_sharding import get_sharding_spec

    return visualize_sharding(get_sharding_spec(t) or "{replicated}", **kwargs)
