"""The lazy IR: nodes, their metadata, and graph extraction with a deterministic structural hash.

A node is one recorded op. Leaves are `DataNode` (a device buffer), `ScalarNode` (a Python scalar fed
as a graph input, so a changing value does not recompile) and constants baked into an op's template.
Multi-output ops produce a tuple node read through `getitem` nodes, so every tensor holds one node.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Callable, NamedTuple

import torch


class Meta(NamedTuple):
    """Shape and dtype of a node's value."""

    shape: tuple[int, ...]
    dtype: torch.dtype


class Slot:
    """Marks where an operand's value goes back into an op's argument template."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "%"


SLOT = Slot()


class Frozen(tuple):
    """A template value that holds SLOTs of its own (a nested template); rebuild leaves it untouched."""

    __slots__ = ()


def rebuild(template, values) -> tuple[tuple, dict]:
    """Puts operand values back into an op's (args, kwargs) template at its SLOTs."""
    it = iter(values)

    def sub(v):
        if v is SLOT:
            return next(it)
        if type(v) is tuple:
            return tuple(sub(x) for x in v)
        return v

    args = tuple(sub(a) for a in template[0])
    kwargs = {k: sub(v) for k, v in template[1]}
    return args, kwargs


class ScalarType(NamedTuple):
    """Stands for a Python scalar fed as input, in templates and hash keys (the value is not part of the key)."""

    py_type: type


class OpDef:
    """What a node does: a name for IR text and counters, and its jax lowering.

    Attributes:
      name: the IR name, e.g. `aten::add`.
      lower: `fn(ctx, *args, **kwargs)` returning a jax value (or tuple), where tensor args are jax values.
      aten: the aten overload this came from, or None for internal ops.
      collective: a cross-replica op (all-reduce, all-gather...): a graph holding one runs on every
        process of the job at once (graph_lowering.program).
      params: names of the template's arguments, for IR text, when there is no aten schema to name them.
    """

    __slots__ = ("name", "lower", "aten", "multi_output", "collective", "params")

    def __init__(self, name: str, lower: Callable, aten: Any = None, multi_output: bool = False,
                 collective: bool = False, params: tuple[str, ...] = ()):
        self.name = name
        self.lower = lower
        self.aten = aten
        self.multi_output = multi_output
        self.collective = collective
        self.params = params

    def __repr__(self) -> str:
        return f"OpDef({self.name})"


class Node:
    """One IR node.

    Attributes:
      op: the OpDef.
      operands: input nodes, in template order.
      template: the op's (args, kwargs) with SLOT where an operand goes; hashable.
      meta: output Meta (for a tuple node: a tuple of Metas).
      location: `fn@file.py:LINE` of the user's code when XLA_IR_DEBUG=1, else None.
      scope: the profiler `Trace` scope active when recorded, or None.
    """

    __slots__ = ("op", "operands", "template", "meta", "location", "scope", "_sig", "__weakref__")

    def __init__(self, op: OpDef, operands: tuple, template: Any, meta: Any,
                 location: str | None = None, scope: str | None = None):
        self.op = op
        self.operands = operands
        self.template = template
        self.meta = meta
        self.location = location
        self.scope = scope
        self._sig = None

    def signature(self) -> tuple:
        sig = self._sig
        if sig is None:
            sig = self._sig = (self.op.name, self.template, self.meta)
        return sig

    def __repr__(self) -> str:
        return f"Node({self.op.name}, {self.meta})"


class DataNode(Node):
    """A device buffer: a graph input.

    Attributes:
      array: the jax array, or None when it is only described (never the case after a sync).
      created_at: frames summary of where the data was created (when frames are captured).
      origin: where the data comes from, for the live-memory census (`memory_census`): an upload's user line (a
        str), or the `(op name, template, location)` of the op that computed it, so that its line is found when
        asked and not on the hot path; a storage updated in place keeps its first data's (`Storage.set_data`).
        None where unknown.
      sharding: SPMD: the split's sharding text, None when the buffer is not split.
      uneven: SPMD: the jax sharding of a split that does not divide the shape, None otherwise.
      spmd_result: SPMD: made by a graph's run, so that a buffer not split is `{replicated}` as PyTorch/XLA reports
        a synced value's sharding (an upload, or a cleared sharding, has none); False otherwise.
    """

    __slots__ = ("array", "created_at", "sharding", "origin", "uneven", "spmd_result")

    def __init__(self, array: Any, meta: Meta, created_at: str | None = None):
        # Node's fields set here rather than through Node.__init__: every compiled call makes one per output.
        self.op = DATA_OP
        self.operands = ()
        self.template = None
        self.meta = meta
        self.location = None
        self.scope = None
        self._sig = None
        self.array = array
        self.created_at = created_at
        self.origin = None
        # SPMD: how the buffer is split over the devices (`{devices=[2,1]0,1}`), None when it is not split.
        # Part of the signature: a graph compiled for one input sharding is not the graph for another.
        self.sharding = sharding_of(array) if sharding_of is not None and array is not None else None
        # SPMD: a split that does not divide the shape (jax holds no such buffer, so `array` is whole on each
        # device): the jax sharding each graph constrains this input to, so that XLA still splits the work.
        self.uneven = None
        self.spmd_result = False  # not in the signature: the graph key stays the buffer's own sharding

    def signature(self) -> tuple:
        if self.sharding is not None:
            return ("xla::device_data", self.meta, self.sharding)
        return ("xla::device_data", self.meta)



# Ops whose result is another node's data seen differently: the census names the op that made that data.
_SAME_DATA = frozenset(("xla::getitem", "xla::view_scatter", "aten::t", "aten::view", "aten::_unsafe_view",
                        "aten::reshape", "aten::expand", "aten::permute", "aten::transpose", "aten::squeeze",
                        "aten::unsqueeze", "aten::slice", "aten::select", "aten::alias", "aten::clone"))


def origin_of(node: Node) -> tuple:
    """What made a graph output's data, for `DataNode.origin`: the `(op name, template, location)` of the node,
    or of the op whose data it passes on (a multi-output op's item, the value a write through a view stores, a
    view or copy of it), whose user line says more (a gradient's is its backward op's, not a transpose's)."""
    while node.op.name in _SAME_DATA and node.operands:
        node = node.operands[1 if node.op.name == "xla::view_scatter" else 0]
    return (node.op.name, node.template, node.location)

# Set by SPMD mode (spmd.use_spmd): array -> its sharding text, or None for a whole (replicated) buffer.
sharding_of = None


class ScalarNode(Node):
    """A Python scalar fed to the graph as a 0-d input of a fixed dtype."""

    __slots__ = ("value",)

    def __init__(self, value: Any, dtype: torch.dtype):
        super().__init__(SCALAR_OP, (), None, Meta((), dtype))
        self.value = value

    def signature(self) -> tuple:
        return ("xla::device_data", self.meta)


_scalar_nodes: dict = {}
_SCALAR_CACHE_SIZE = 4096
# False in a job of several processes: each use of a Python number is an input of its own (share_scalars).
_share = True


def share_scalars(enabled: bool) -> None:
    """Whether equal Python numbers of one dtype are one graph input (the default), or each use its own.

    In a job of several processes, a graph holding collectives must be the same program on every rank. With
    sharing, two numbers equal on one rank only (a rank-dependent offset equal to the world size...) would be
    one input there and two on the others: different programs, whose collectives never meet.
    """
    global _share
    _share = enabled


def scalar_node(value: Any, dtype: torch.dtype) -> ScalarNode:
    """The graph input for a Python scalar: one node per (value, dtype), as PyTorch/XLA caches device data.

    Reusing the node makes every use of one value in a graph one input (a chain of `x + 1.5` has one
    scalar input, not one per use; XLA's compile time grows with the number of parameters). A graph
    whose scalars happen to be equal is a different graph from one whose scalars differ, as in
    PyTorch/XLA.
    """
    if not _share:
        return ScalarNode(value, dtype)
    # The value's type is in the key: 2 and 2.0 hash alike but are different inputs. -0.0 == 0.0 too,
    # but zeros never get here (special scalars are constants) unless XLA_NO_SPECIAL_SCALARS is set.
    key = (type(value), value, dtype, math.copysign(1.0, value) if type(value) is float else 0)
    node = _scalar_nodes.get(key)
    if node is None:
        if len(_scalar_nodes) >= _SCALAR_CACHE_SIZE:
            _scalar_nodes.clear()  # cheap bound on memory; a cleared value is simply re-created
        node = _scalar_nodes[key] = ScalarNode(value, dtype)
    return node


def _no_lowering(ctx, *args, **kwargs):  # leaves are bound to inputs, never lowered
    raise AssertionError("leaf nodes are graph inputs")


DATA_OP = OpDef("xla::device_data", _no_lowering)
SCALAR_OP = OpDef("xla::device_data", _no_lowering)


def _getitem_lower(ctx, value, index):
    return value[index]


GETITEM_OP = OpDef("xla::getitem", _getitem_lower)
# A jax function or Pallas kernel run inside a graph (record/jax_call.py defines the op; the compile layer
# below it names the calls a graph holds).
CALL_JAX_OP_NAME = "xla::call_jax"
# A manual region's start and end (distributed/manual_sharding.py records them; the lowering runs the ops between
# them as one shard_map).
FULL_TO_SHARD_OP_NAME = "xla::spmd_full_to_shard_shape"
SHARD_TO_FULL_OP_NAME = "xla::spmd_shard_to_full_shape"


def getitem(node: Node, index: int) -> Node:
    """Reads output `index` of a tuple node."""
    return Node(GETITEM_OP, (node,), ((SLOT, index), ()), node.meta[index])


class GraphKey:
    """A graph's structural key: its nested tuple, with the tuple's hash computed once.

    A key holds an entry per node (about 700 for a tiny GPT-2's training step), and Python hashes a tuple anew at
    every dict lookup, then compares an equal one element by element: 67 us and 44 us for that step's key, at
    each of the runtime's lookups (collectives, donation, executable). `CompileCache.canonical` swaps a new key
    for the equal one seen first, so that the lookups after it match by identity.

    Attributes:
      parts: the tuple (its repr is the key's, so graph hashes are those of the tuple).
    """

    __slots__ = ("parts", "_hash")

    def __init__(self, parts: tuple):
        self.parts = parts
        self._hash = None  # computed at the first lookup: a graph built only to be read (IR text) is never hashed

    def __hash__(self) -> int:
        found = self._hash
        if found is None:
            found = self._hash = hash(self.parts)
        return found

    def __eq__(self, other) -> bool:
        return self is other or (type(other) is GraphKey and hash(self) == hash(other) and self.parts == other.parts)

    def __repr__(self) -> str:
        return repr(self.parts)


class Graph:
    """A graph extracted from roots: nodes in post-order, inputs, outputs and the structural hash.

    Attributes:
      nodes: post-order list of nodes reachable from the roots.
      inputs: leaf nodes (DataNode/ScalarNode) in first-use order; their position is the parameter number.
      roots: the output nodes, in the order given.
      key: hashable structural key (ops, templates, metas, operand positions, input aliasing, donated inputs): a
        GraphKey, or `(GraphKey, donated positions)` once inputs are donated.
      hash: 32 hex digits, deterministic across processes.
      donated: positions of the inputs whose buffers the executable may reuse for its outputs (`donate`).
      user_outputs: how many roots are user tensors (the others are the runtime's own state, such as
        the RNG key, which PyTorch/XLA does not count as graph outputs).
      device_index: the `xla:N` the graph runs on. An executable is built for one device, so a device
        other than xla:0 is part of the key and hash (xla:0's graphs hash as they always have).
    """

    __slots__ = ("nodes", "inputs", "roots", "key", "_hash", "index", "donated", "user_outputs", "device_index")

    def __init__(self, roots: list[Node], device_index: int = 0):
        self.roots = roots
        index: dict[int, int] = {}
        nodes: list[Node] = []
        inputs: list[Node] = []
        key_parts: list[tuple] = []
        # Iterative post-order: deep graphs (long unrolled loops) must not hit the recursion limit.
        for root in roots:
            if id(root) in index:
                continue
            stack = [(root, False)]
            while stack:
                node, expanded = stack.pop()
                nid = id(node)
                if nid in index:
                    continue
                if expanded or not node.operands:
                    index[nid] = len(nodes)
                    nodes.append(node)
                    if node.op is DATA_OP or node.op is SCALAR_OP:
                        key_parts.append((node.signature(), len(inputs)))
                        inputs.append(node)
                    else:
                        key_parts.append((node.signature(), tuple(index[id(o)] for o in node.operands)))
                    continue
                stack.append((node, True))
                for operand in reversed(node.operands):
                    if id(operand) not in index:
                        stack.append((operand, False))
        self.nodes = nodes
        self.inputs = inputs
        self.index = index
        parts = (tuple(key_parts), tuple(index[id(r)] for r in roots))
        if device_index:
            parts = (parts, ("device", device_index))
        self.key = GraphKey(parts)
        self.device_index = device_index
        self._hash = None
        self.donated: tuple[int, ...] = ()
        self.user_outputs = len(roots)

    def donate(self, positions: tuple[int, ...]) -> None:
        """Marks inputs as donated: their buffers are given to the executable, which may write outputs into
        them. An executable is compiled for one set of donated inputs, so the set is part of the key and
        hash (as PyTorch/XLA hashes its buffer donors).

        Raises:
          ValueError: donation was already set, or a position is not a device-data input.
        """
        if self.donated:
            raise ValueError("the graph's donated inputs are already set")
        for i in positions:
            if not 0 <= i < len(self.inputs) or self.inputs[i].op is not DATA_OP:
                raise ValueError(f"input {i} is not device data and cannot be donated")
        if positions:
            self.donated = tuple(positions)
            self.key = (self.key, self.donated)
            self._hash = None

    @property
    def collectives(self) -> list[Node]:
        """The graph's cross-replica nodes, in order (a graph with any runs on every process at once)."""
        return [n for n in self.nodes if n.op.collective]

    def known_hash(self, graph_hash: str) -> None:
        """Sets the hash of a graph whose key is a cached executable's, to that executable's (computing it
        again is a repr and an md5 of the whole key, every step).

        Args:
          graph_hash: the executable's graph hash (`CacheEntry.hash`).
        """
        if self._hash is None:
            self._hash = graph_hash

    @property
    def hash(self) -> str:
        if self._hash is None:
            self._hash = hashlib.md5(repr(self.key).encode()).hexdigest()
        return self._hash

    def position(self, node: Node) -> int:
        return self.index[id(node)]
