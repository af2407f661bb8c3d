"""The device memory budget (XLADEV_DEVICE_MEMORY_LIMIT) and the out-of-memory explainer.

On a GPU a graph that does not fit fails with XLA's RESOURCE_EXHAUSTED, and nothing says what used the memory.
So that the same path runs on every machine, the runtime can enforce a budget: before a graph runs, what XLA's
memory analysis says it needs (arguments + outputs - aliased + temporaries + generated code) and what else is live
on the device are checked against it. A graph over it fails as XLA's error would, with the explainer: the graph,
need against limit, the biggest values it computes with their user lines, what else is live, and the largest
batch that would fit. Unset, nothing here runs.

The batch estimate takes the graph's batch as the leading dimension of its inputs that leads most bytes of the
values the graph holds and computes (activations outweigh parameters) and scales linearly what carries it: the inputs
of that leading dimension, the outputs with that dimension, and the share of XLA's temporaries that the graph's
intermediate values with that dimension hold. It is an estimate, and says so; where nothing carries a batch it says that.
"""

from __future__ import annotations

import gc
import math

from xladev._flags import config
from xladev.errors import XladevError
from xladev.runtime.execute import device_memory
from xladev.runtime.compile.graph_info import node_location
from xladev.runtime.graph.ir import DATA_OP, SCALAR_OP, Graph, Meta
from xladev.runtime.graph.irtext import shape_text
from xladev.schema.memory import SIZES, need_bytes
from xladev.schema.sites import short_site, site_of
from xladev.schema.units import format_bytes

# PyTorch/XLA's status word for an allocation that cannot be made: the first word of the explainer, so what reads
# XLA's own errors (the report, a user's grep) reads this one too.
RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"
_SHOWN = 5  # biggest values and inputs listed


class MemoryBudgetExceeded(XladevError, RuntimeError):
    """A graph needs more device memory than XLADEV_DEVICE_MEMORY_LIMIT allows; the message is the explainer.

    The runtime raises it as its `XlaExecutionError`, as it raises XLA's own RESOURCE_EXHAUSTED.
    """


def check(graph: Graph, memory: dict[str, int], arrays: list, device, frames, name: str | None) -> None:
    """Checks a graph against the budget before it runs; does nothing when XLADEV_DEVICE_MEMORY_LIMIT is unset.

    Args:
      graph: the graph about to run.
      memory: XLA's memory analysis of its executable (`compilation.CacheEntry.memory`); empty when XLA gave none
        (then only what is live is checked).
      arrays: its input arrays (their buffers are counted in the analysis' arguments, not again as live).
      device: the jax device it runs on.
      frames: the user's stack, when captured.
      name: the graph's name, if any.

    Raises:
      MemoryBudgetExceeded: the graph and what else is live need more than the budget.
    """
    limit = config.device_memory_limit
    if limit is None:
        return
    inputs = {device_memory.buffer_key(a) for a in arrays}
    # A size XLA did not give counts as 0 here (the explainer says it is unknown); no analysis at all: only what
    # is live is checked.
    need = need_bytes({key: memory.get(key, 0) for key in SIZES})
    if need + _others(device, inputs)[0] <= limit:
        return
    # Buffers that only garbage in reference cycles still holds are not the program's: the collector frees them late
    # (collector_threshold.py keeps it out of lazy steps), so it runs now, before the graph is refused.
    gc.collect()
    others, buffers = _others(device, inputs)
    if need + others <= limit:
        return
    raise MemoryBudgetExceeded(explain(graph, memory, need, others, buffers, limit,
                                       frames, name))


def _others(device, inputs: set) -> tuple[int, int]:
    """The bytes and the number of the device's live buffers that are not the graph's inputs."""
    others = [n for key, n in device_memory.live_buffers(device).items() if key not in inputs]
    return sum(others), len(others)


def _nbytes(meta) -> int:
    return math.prod(meta.shape) * meta.dtype.itemsize


def _leading(meta) -> int | None:
    return meta.shape[0] if len(meta.shape) >= 1 else None


def _carries(meta, batch: int) -> bool:
    # A value the graph computes carries the batch in any dimension: the transposed activations of the backward
    # pass (a weight gradient's operand) hold it second.
    return batch in meta.shape


def explain(graph: Graph, memory: dict[str, int], need: int, others: int, other_buffers: int, limit: int,
            frames, name: str | None) -> str:
    """The explainer of a graph over the budget (see the module's docstring).

    Args:
      graph: the graph that does not fit.
      memory: XLA's memory analysis of it (empty when XLA gave none).
      need: what the analysis says it needs while it runs, in bytes.
      others: the bytes of the other live buffers on its device; `other_buffers` how many they are.
      limit: the budget in bytes.
      frames: the user's stack, for the line that ran the graph.
      name: the graph's name, if any.

    Returns:
      The text: a headline starting with RESOURCE_EXHAUSTED, then one indented line or list per part.
    """
    label = f"graph {name} ({graph.hash})" if name else f"graph {graph.hash}"
    site = short_site(site_of(frames))
    lines = [f"{RESOURCE_EXHAUSTED}: {label} needs {format_bytes(need + others)} of device memory, over the "
             f"device memory limit of {format_bytes(limit)} (XLADEV_DEVICE_MEMORY_LIMIT); it runs at {site}"]
    if memory:
        size = lambda key: format_bytes(memory[key]) if key in memory else "unknown"  # noqa: E731
        lines.append(f"  needs: arguments {size('argument')} + outputs {size('output')} - aliased {size('alias')} + "
                     f"temporaries {size('temp')} + generated code {size('generated_code')} = {format_bytes(need)} "
                     "(XLA's memory analysis)")
    else:
        lines.append("  needs: XLA gave no memory analysis for this graph; only what else is live is counted")
    lines.append(f"  else live on the device: {format_bytes(others)} in {other_buffers} buffer(s) "
                 "(tensors kept from earlier steps, the parameters and optimizer state the graph does not read)")
    values = sorted(((_nbytes(n.meta), n) for n in graph.nodes
                     if n.op is not DATA_OP and n.op is not SCALAR_OP and isinstance(n.meta, Meta)),
                    key=lambda pair: -pair[0])
    if values:
        lines.append("  biggest values it computes (its temporaries and outputs are made of these):")
        lines += [f"    {format_bytes(size)} {shape_text(node.meta)} {node.op.name} at "
                  f"{node_location(node) or 'an unknown line (XLA_IR_DEBUG=1 records each op line)'}"
                  for size, node in values[:_SHOWN]]
    data = sorted(((_nbytes(n.meta), n) for n in graph.inputs if n.op is DATA_OP), key=lambda pair: -pair[0])
    if data:
        lines.append("  biggest inputs:")
        lines += [f"    {format_bytes(size)} {shape_text(node.meta)}"
                  + (f" created at {node.created_at}" if getattr(node, "created_at", None) else "")
                  for size, node in data[:_SHOWN]]
    lines.append("  " + batch_estimate(graph, memory, need, others, limit))
    return "\n".join(lines)


def batch_dimension(graph: Graph) -> int | None:
    """The graph's batch size, as the module's docstring says how it is found.

    Args:
      graph: the graph.

    Returns:
      Of the leading dimensions (above 1) of its data inputs of two dimensions or more, the one that leads most bytes
      of the graph's values (inputs and the values it computes: the activations); None when no input has one.
    """
    candidates = {n.meta.shape[0] for n in graph.inputs
                  if n.op is DATA_OP and len(n.meta.shape) >= 2 and n.meta.shape[0] > 1}
    if not candidates:
        return None
    shares = dict.fromkeys(candidates, 0)
    for node in graph.nodes:
        if node.op is not SCALAR_OP and isinstance(node.meta, Meta) and _leading(node.meta) in shares:
            shares[node.meta.shape[0]] += _nbytes(node.meta)
    return max(shares, key=lambda size: (shares[size], -size))


def batch_estimate(graph: Graph, memory: dict[str, int], need: int, others: int, limit: int) -> str:
    """The largest batch estimated to fit, by scaling linearly what carries the batch (the module's docstring).

    Args:
      graph: the graph that does not fit.
      memory: XLA's memory analysis of it.
      need: what the analysis says it needs, in bytes; `others` the other live buffers' bytes.
      limit: the budget in bytes.

    Returns:
      One line: about how large a batch fits and the batch to try (a multiple of 8 from 16 on), with what scales
      and what does not; or why no batch can be estimated, or that none fits.
    """
    batch = batch_dimension(graph)
    if batch is None or not memory:
        return ("largest batch that fits: cannot be estimated (no input of two dimensions or more carries a batch)"
                if memory else "largest batch that fits: cannot be estimated without XLA's memory analysis")
    inputs = [n for n in graph.inputs if n.op is DATA_OP]
    donated = {id(graph.inputs[i]) for i in graph.donated}
    scaled_args = sum(_nbytes(n.meta) for n in inputs if _leading(n.meta) == batch)
    scaled_alias = sum(_nbytes(n.meta) for n in inputs if _leading(n.meta) == batch and id(n) in donated)
    roots = {id(r): r for r in graph.roots if isinstance(r.meta, Meta)}.values()
    scaled_out = sum(_nbytes(r.meta) for r in roots if _carries(r.meta, batch))
    inner = [n for n in graph.nodes if n.op is not DATA_OP and n.op is not SCALAR_OP and isinstance(n.meta, Meta)]
    inner_total = sum(_nbytes(n.meta) for n in inner)
    share = (sum(_nbytes(n.meta) for n in inner if _carries(n.meta, batch)) / inner_total) if inner_total else 0.0
    scaled = (min(scaled_args, memory.get("argument", 0)) + min(scaled_out, memory.get("output", 0))
              - min(scaled_alias, memory.get("alias", 0)) + memory.get("temp", 0) * share)
    fixed = need + others - scaled
    what = (f"batch = the inputs' leading dimension {batch}; {format_bytes(scaled)} of the need scales with it, "
            f"{format_bytes(fixed)} does not")
    if scaled <= 0:
        return f"largest batch that fits: cannot be estimated: nothing the graph needs scales with its {what}"
    fits = math.floor((limit - fixed) * batch / scaled)
    if fits < 1:
        return (f"largest batch that fits: none: what does not scale with the batch alone needs {format_bytes(fixed)}, "
                f"over the limit ({what})")
    fits = min(fits, batch - 1)
    proposed = fits - fits % 8 if fits >= 16 else fits  # a multiple of 8, as batches usually are
    return f"largest batch that fits: about {fits}; try a batch of {proposed} (estimated: {what})"
