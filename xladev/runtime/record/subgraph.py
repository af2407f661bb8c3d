"""Sub-graphs: a function traced once, on placeholder tensors, into a graph of its own (a `Body`).

A placeholder is a device tensor whose value is a `ParamNode`: a graph input with no buffer. Running a
function on placeholders records its ops as IR, exactly as on real tensors. `Cut` then takes the part
of the recorded graph that depends on the placeholders; every other value it reads (a closed-over weight, a
constant, a Python number) is a value from outside, passed in as one more parameter. The result is a
`Body`: parameters in, outputs out, lowered to a jax function, hashed structurally.

A `Body` lives in the template of the node that runs it (scan.py's `xla::scan`), so the graph holding that
node hashes, compiles and caches as any other; its IR text prints the body after the graph (irtext.py).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
from typing import Iterable, Iterator

import torch

from xladev._flags import config
from xladev.errors import XladevError
from xladev.runtime.execute import admission
from xladev.runtime.record import rng
from xladev.runtime.lowering.graph_lowering import graph_function
from xladev.runtime.graph.ir import GETITEM_OP, DataNode, Graph, Meta, Node
from xladev.runtime.graph.storage import Storage, _storage_ids, pending
from xladev.runtime.record.tensor import XlaTensor, wrap


class ParamNode(DataNode):
    """A body's parameter: a graph input without a buffer (a placeholder's value while tracing).

    Attributes:
      param_index: its position among the body's parameters (-1 for a placeholder while tracing).
    """

    __slots__ = ("param_index",)

    def __init__(self, meta: Meta, param_index: int = -1):
        super().__init__(None, meta)
        self.param_index = param_index

    def signature(self) -> tuple:
        return ("xla::parameter", self.meta, self.param_index)


def placeholder(meta: Meta, device_index: int, requires_grad: bool = False) -> XlaTensor:
    """A device tensor holding a new `ParamNode` of `meta` (a tensor to trace a function with)."""
    t = wrap(Storage(ParamNode(meta), device_index), meta)
    if requires_grad:
        t.requires_grad_(True)
    return t


class Body:
    """A traced function as a graph: `fn(*params) -> outputs`.

    Attributes:
      graph: the graph of the outputs; its inputs are ParamNodes (each parameter the outputs read).
      num_params: how many parameters the body takes (some may be unused).
      key: the structural key (the graph's, with the parameter count).
      hash: 32 hex digits of the key; a node holding the body hashes it as `body_<hash[:16]>`.
    """

    __slots__ = ("graph", "num_params", "positions", "key", "hash")

    def __init__(self, outputs: list[Node], num_params: int):
        self.graph = Graph(list(outputs))
        self.num_params = num_params
        for node in self.graph.inputs:
            if type(node) is not ParamNode:  # Cut makes every value from outside a parameter
                raise AssertionError(f"a body reads {node!r}, which is not one of its parameters")
        self.positions = tuple(n.param_index for n in self.graph.inputs)
        self.key = (self.graph.key, num_params)
        self.hash = hashlib.md5(repr(self.key).encode()).hexdigest()

    @property
    def name(self) -> str:
        return f"body_{self.hash[:16]}"

    @property
    def output_metas(self) -> tuple[Meta, ...]:
        return tuple(r.meta for r in self.graph.roots)

    def function(self):
        """The body as a jax-traceable function of all its parameters, returning a tuple of its outputs."""
        inner = graph_function(self.graph)
        positions = self.positions

        def fn(*params):
            return inner(*[params[i] for i in positions])

        fn.__name__ = fn.__qualname__ = self.name
        return fn

    # A body sits in a node's template: graph keys compare it, and hash its repr, by structure.
    def __repr__(self) -> str:
        return self.name

    def __eq__(self, other) -> bool:
        return type(other) is Body and other.hash == self.hash

    def __hash__(self) -> int:
        return hash(self.hash)


class Cut:
    """The part of a recorded graph, above `outputs`, that depends on given parameter nodes.

    Attributes:
      used: the parameter nodes the outputs depend on, in the order first met.
      outer: the values from outside the part that it reads (or returns), in the order first met: nodes
        that do not depend on the parameters, and the `stop` nodes.
      stop: the ids of the stop nodes met (those given, and single outputs of stop tuples, which cross instead).
      inside: the ids of the nodes of the part (its parameters included).
    """

    def __init__(self, outputs: Iterable[Node], params: Iterable[Node], stop: Iterable[int] = ()):
        """Args:
          outputs: the nodes the body returns.
          params: nodes standing for the body's parameters (placeholders' ParamNodes).
          stop: ids of nodes taken from outside even though they depend on a parameter (a scan's saved
            activations: the backward reads the forward's values instead of computing them again).
        """
        self.outputs = list(outputs)
        param_ids = {id(p) for p in params}
        stop = set(stop)
        inside: dict[int, bool] = {}
        self.used: list[Node] = []
        self.outer: list[Node] = []
        self._order: list[Node] = []  # the inside nodes, operands first
        seen_outer: set[int] = set()

        def outside(node: Node) -> None:
            if id(node) not in seen_outer:
                seen_outer.add(id(node))
                if type(node.meta) is not Meta:  # only a getitem reads a tuple, and it goes with its source
                    raise AssertionError(f"a tuple value {node!r} crosses a body's boundary")
                self.outer.append(node)

        # Iterative post-order: a body may be thousands of ops deep.
        for root in self.outputs:
            stack = [(root, False)]
            while stack:
                node, expanded = stack.pop()
                nid = id(node)
                if nid in inside:
                    continue
                if nid in param_ids:
                    inside[nid] = True
                    self.used.append(node)
                    continue
                if nid in stop or (node.op is GETITEM_OP and id(node.operands[0]) in stop):
                    # Depends on a parameter, but its value comes from outside. One output of a stop tuple (an
                    # op's statistics nothing but the backward reads) crosses alone: a tuple never does.
                    stop.add(nid)
                    inside[nid] = True
                    continue
                if not node.operands:
                    if type(node) is ParamNode:
                        raise AssertionError(f"a body reads a placeholder {node!r} that is not one of its parameters")
                    inside[nid] = False  # a leaf: device data, a Python number, a constant
                    continue
                if not expanded:
                    stack.append((node, True))
                    stack.extend((o, False) for o in reversed(node.operands) if id(o) not in inside)
                    continue
                inside[nid] = any(inside[id(o)] for o in node.operands)
                if inside[nid]:
                    self._order.append(node)
        self.stop = stop  # the ids given, and the tuple outputs that crossed in their tuple's place
        self.inside = {nid for nid, v in inside.items() if v and nid not in stop}
        for node in self._order:
            for operand in node.operands:
                if id(operand) not in self.inside:
                    outside(operand)
        for root in self.outputs:
            if id(root) not in self.inside:
                outside(root)

    def copy(self, mapping: dict[int, Node]) -> list[Node]:
        """The outputs, over a copy of the inside nodes whose parameters and outside values are replaced.

        Args:
          mapping: id of each used parameter and each outer value -> the node that replaces it (the new
            body's ParamNode).

        Returns:
          The new outputs, in order.
        """
        new: dict[int, Node] = dict(mapping)
        for node in self._order:
            twin = copy.copy(node)
            twin.operands = tuple(new[id(o)] for o in node.operands)
            new[id(node)] = twin
        return [new[id(r)] for r in self.outputs]


def numbered(nodes: Iterable[Node], start: int = 0) -> dict[int, ParamNode]:
    """New ParamNodes for `nodes` (numbered from `start`, in order), keyed by the id of the node each replaces."""
    return {id(n): ParamNode(n.meta, start + i) for i, n in enumerate(nodes)}


class InputWrittenError(XladevError, RuntimeError):
    """A traced function wrote one of its own inputs (placeholders) in place where that is not allowed."""


class Tracing:
    """What a function traced on placeholders did besides its outputs: what the RNG key became, and which
    tensors from outside it wrote in place.

    The device's RNG key is itself a placeholder inside the block (random ops in the function draw from
    it, as a scan draws from each iteration's key); every tensor from outside and the key get their values
    back when the block ends.

    Attributes:
      key: the key placeholder's node. key_out: the RNG key after the function (`key` if it drew nothing).
    """

    def __init__(self, device_index: int, what: str, inputs_writable: bool = False):
        self.device_index = device_index
        self.what = what
        # The function may write its own inputs in place (`acc += x`): each write is a new value of the body,
        # which no gradient needs to see through.
        self.inputs_writable = inputs_writable
        self.key = ParamNode(rng.KEY_META)
        self.key_out: Node = self.key
        self.placeholders: list[XlaTensor] = []
        self.first_sid = next(_storage_ids)  # every tensor of the trace is made after this

    def release(self) -> None:
        """Takes the tensors made while tracing out of the barriers' reach: every live storage made since the
        trace began whose value depends on a placeholder (autograd's reference cycles may keep such tensors alive
        until the garbage collector runs, and a barrier must not try to compute them)."""
        memo: dict[int, bool] = {}
        for sid, ref in list(pending.items()):
            storage = ref()
            if storage is not None and sid >= self.first_sid and _depends_on_placeholder(storage.value, memo):
                pending.pop(sid, None)

    @contextlib.contextmanager
    def active(self, reason: str) -> Iterator["Tracing"]:
        """The block traces: no graph may run in this thread, eager mode is off, the RNG key is a placeholder."""
        before = _pending_values()
        with config.override(allow_execution=False, eager_debug_mode=False), \
                admission.refusing_because(reason, f"{self.what} traces it once, on placeholder tensors: "), \
                rng.keyed(self.device_index, self.key) as state:
            try:
                yield self
                self.key_out = state.value
            finally:
                written = _written_since(before, self.first_sid, state)
        changed = [t for t in self.placeholders if t._st.version != 0]
        if written:
            raise RuntimeError(f"{self.what}: the function wrote in place into {_describe(written)} created outside "
                               f"it; a traced function may only write the tensors it makes itself (pass the value "
                               f"through the carry instead)")
        if changed and not self.inputs_writable:
            raise InputWrittenError(f"{self.what}: the function changed its input {_describe(changed)} in place; "
                                    f"an in-place operation on an input is not supported (clone it first)")

    def placeholder(self, meta: Meta, requires_grad: bool = False) -> XlaTensor:
        """A placeholder of `meta` on the traced device, watched for in-place writes."""
        t = placeholder(meta, self.device_index, requires_grad)
        self.placeholders.append(t)
        return t


def _depends_on_placeholder(root: Node, memo: dict[int, bool]) -> bool:
    """Whether `root` is computed from a ParamNode (`memo`: the answers so far, by node id)."""
    stack = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if id(node) in memo:
            continue
        if not node.operands:
            memo[id(node)] = type(node) is ParamNode
        elif expanded:
            memo[id(node)] = any(memo[id(o)] for o in node.operands)
        else:
            stack.append((node, True))
            stack.extend((o, False) for o in node.operands if id(o) not in memo)
    return memo[id(root)]


def _describe(items: list) -> str:
    metas = []
    for item in items[:3]:
        meta = item.value.meta if isinstance(item, Storage) else item._st.value.meta
        metas.append(f"a {str(meta.dtype).replace('torch.', '')} tensor of shape {list(meta.shape)}")
    more = f" and {len(items) - 3} more" if len(items) > 3 else ""
    return ", ".join(metas) + more


def _pending_values() -> dict[int, tuple]:
    """sid -> (storage, value, version, donor) of every live storage with a pending value."""
    out = {}
    for sid, ref in list(pending.items()):
        storage = ref()
        if storage is not None:
            out[sid] = (storage, storage.value, storage.version, storage.donor)
    return out


def _written_since(before: dict[int, tuple], first_sid: int, key_state: Storage) -> list[Storage]:
    """The storages made before `first_sid` that were written since `before` was taken, each given its value
    back (the RNG key's storage excepted: `rng.keyed` restores it)."""
    written = []
    for sid, ref in list(pending.items()):
        storage = ref()
        if storage is None or sid >= first_sid or storage is key_state:
            continue
        old = before.get(sid)
        if old is not None and old[2] == storage.version:
            continue
        written.append(storage)
        if old is not None:
            storage.put_back(old[1], old[3])
        else:  # it held device data: the buffer it wrote over, when still alive
            data = storage.donor() if storage.donor is not None else None
            if data is not None:
                storage.put_back(data, None)
    return written
