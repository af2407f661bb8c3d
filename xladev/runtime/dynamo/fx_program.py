"""One FX graph (from TorchDynamo and AOTAutograd) run as one compiled XLA program, traced once.

On its first call with real device tensors, the FX graph is run once through the lazy runtime: each aten
op is recorded exactly as the lazy path records it (the same handlers, lowerings and decompositions, one
op table for both), and the recorded graph is compiled through the compile cache. Every later call feeds
the inputs' device buffers to that executable and wraps its outputs as device tensors: no op is recorded
again, nothing is hashed.

What the trace finds decides the plan for the graph's input signature:
- the FX graph's tensors become the program's inputs; Python numbers and constants it makes become
  constant inputs; an output that is an input is handed back as that tensor;
- a random op threads the device RNG key through the program (the key is an input and an output);
- an op that would need to run on the host (a CPU fallback, a value read) cannot be in one program: the
  graph then runs lazily on every call (correct, slower), and a `GraphBreak` says which op and why.

Graphs with symbolic sizes (dynamo's dynamic shapes) get one program per concrete input signature.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import torch
from torch.utils import _pytree as pytree

from xladev._flags import config
from xladev.events import Cause, CauseKind, GraphBreak, bus
from xladev.runtime.graph import graph_names, ir, stack, steps
from xladev.runtime.record import rng
from xladev.runtime.compile.compilation import compile_cache
from xladev.runtime.execute.execution import execution
from xladev.runtime.execute.admission import ExecutionNotAllowedError, refusing_because
from xladev.runtime.execute.donation import copy_buffer
from xladev.runtime.dynamo.fx_arguments import AliasedInputsError  # noqa: F401  (xladev.AliasedInputsError is found here)
from xladev.runtime.dynamo.fx_arguments import (INPUTS, check_written_aliases, concrete_strides, constants_of,
                                         has_symbolic_shape, input_arrays, is_folded, signature, view_key)
from xladev.runtime.graph.ir import SLOT, DataNode, Graph, Meta, Node, OpDef, ScalarNode
from xladev.runtime.graph.storage import Storage, write_data
from xladev.runtime.record.tensor import XlaTensor, wrap, wrap_view
from xladev.runtime.execute.transfers import arrays_of
from xladev.schema.records import DYNAMO_NEW_SHAPES

_COMPILE = Cause(CauseKind.DYNAMO_COMPILE)
_COMPILE_NEW_SHAPES = Cause(CauseKind.DYNAMO_COMPILE, DYNAMO_NEW_SHAPES)
_EXECUTE = Cause(CauseKind.DYNAMO_EXECUTE)

# Input and output sources of a plan: an argument (its buffer), a view argument's base buffer, a constant, the
# RNG key, an argument the program writes (its old buffer, donated); a program output, a view of an argument's
# storage, a Python value.
_ARG, _BASE, _CONST, _KEY, _ROOT, _VIEW, _VALUE, _DONATED = range(8)


class _Lazy:
    """The plan of a graph that cannot be one program: it is run op by op through the lazy runtime."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Plan:
    """How one input signature of an FX graph runs as a compiled program.

    Attributes:
      graph: the recorded IR graph (its input buffers released; a description only).
      entry: the compile-cache entry of its executable.
      inputs: per program input, (source, value): an FX argument's index (its buffer, or for a view of device
        data its base's buffer: the program applies the view), a constant array, or the RNG key.
      outputs: per FX output, (source, value): a program output's index (with meta and strides), an FX
        argument handed back, a view of an argument's storage (what the graph returns as a view of its input,
        such as a weight's transpose saved for the backward, is that view: not computed, not copied), or a
        constant value.
      device_index: the device the program runs on.
      rng_out: the program output holding the next RNG key, or None when the graph draws no random numbers.
      writes: per FX argument the graph writes into (an optimizer's parameters and state), (argument index,
        program output index, meta): its new value, written into the argument after each call.
      donated: the positions in `inputs` of the buffers the executable takes over (the old values of the
        arguments it writes; each such input is (_DONATED, (argument index, the output index of its new value
        when the old value's node may hold it, else None))).
      watch: the program output the execution watcher waits on (all of one execution's outputs are ready
        together): the first, or, when the program donates, one only the watcher holds, since a written
        argument's new value may be donated to the next call before this one is announced; None: no outputs.
    """

    __slots__ = ("graph", "entry", "inputs", "outputs", "device_index", "rng_out", "writes", "donated", "watch")

    def __init__(self, graph, entry, inputs, outputs, device_index, rng_out, writes=(), donated=(),
                 watch=None) -> None:
        self.graph = graph
        self.entry = entry
        self.inputs = inputs
        self.outputs = outputs
        self.device_index = device_index
        self.rng_out = rng_out
        self.writes = writes
        self.donated = donated
        self.watch = watch


class FxProgram:
    """A boxed callable (`fn(args_list)`) running an FX graph as one compiled program per input signature.

    Args:
      gm: the FX graph (aten ops, as AOTAutograd gives them).
      name: the graph name shown in the debug analysis, the event log and the TUI.
    """

    def __init__(self, gm: torch.fx.GraphModule, name: str) -> None:
        # AOTAutograd passes the arguments as one list. On the instance: the wrappers TorchDynamo puts around a
        # backward graph copy the instance's attributes, not its class's.
        self._boxed_call = True
        self.gm = _without_effect_tokens(gm)
        self.name = name
        self.plans: dict[Any, _Plan | _Lazy] = {}
        placeholders = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
        self._symbolic = any(isinstance(v, (torch.SymInt, torch.SymFloat)) or has_symbolic_shape(v)
                             for v in placeholders)
        # The strides the graph was traced with, per input: the stand-ins take them, so every view in the
        # graph sees the layout it was traced for, whatever layout the call's tensors have (values are logical).
        self._strides = [concrete_strides(v) for v in placeholders]
        # The graph returns one value, or any nesting of tuples, lists and dicts of values and None (an
        # AOTAutograd graph: a flat tuple). The program works on its leaves, in pytree order; `structured`
        # puts them back in the graph's own structure.
        leaves, self._out_spec = pytree.tree_flatten(_as_built(next(n for n in gm.graph.nodes
                                                                    if n.op == "output").args[0]))
        # Likewise the outputs: they get the strides the graph promised AOTAutograd (which views them so).
        self._out_strides = [concrete_strides(r.meta.get("val")) if isinstance(r, torch.fx.Node) else None
                             for r in leaves]

    def __call__(self, args: list) -> list:
        """Runs the graph on `args` (AOTAutograd's boxed calling convention).

        Args:
          args: the graph's arguments, in placeholder order.

        Returns:
          The graph's outputs, flattened: the leaves of what it returns, in pytree order (for an AOTAutograd
          graph, which returns a flat tuple, its outputs as a list).
        """
        args = list(args)
        key = signature(args) if self._symbolic else None
        # A comprehension: one pass over the arguments (up to a few hundred, an optimizer step's) per call.
        views = [i for i, a in enumerate(args) if type(a) is XlaTensor and a._chain is not None]
        if views:
            key = (key, tuple((i, view_key(args[i])) for i in views))
        plan = self.plans.get(key)
        if plan is None:
            plan = self.plans[key] = self._trace(args)
        if type(plan) is _Lazy:
            with graph_names.naming(self.name):
                return pytree.tree_leaves(self.gm(*args))
        return self._run(plan, args)

    def structured(self, outputs: list):
        """The flat `outputs` of a call in the structure the graph returns: a tensor, a tuple, a list..."""
        return pytree.tree_unflatten(outputs, self._out_spec)

    # ---- every call -------------------------------------------------------------------------------
    def _run(self, plan: _Plan, args: list) -> list:
        if plan.writes:
            check_written_aliases(self.name, plan.writes, args)
        arrays = []
        waiting = None
        # Per written argument whose old value's node nothing else holds: (that node, its storage, the output
        # index of the new value), the node to hold the new buffer.
        reused = {} if plan.donated else None
        for source, value in plan.inputs:
            if source is _ARG:
                t = args[value]
                node = t._st.value
                if t._chain is None and type(node) is DataNode:
                    arrays.append(node.array)
                    continue
                arrays.append(None)  # pending or a view: computed below, all in one graph
                waiting = waiting or []
                waiting.append((len(arrays) - 1, t))
            elif source is _DONATED:  # the old value of an argument the program writes: its buffer is consumed
                i, k = value
                t = args[i]
                st = t._st
                node = st.value
                if t._chain is None and type(node) is DataNode:
                    array = node.array
                    if getrefcount(array) == _ARRAY_REFS and getrefcount(node) == _NODE_REFS:
                        if k is not None:
                            reused[i] = (node, st, k)
                    else:  # something else still reads it: the program consumes a copy (and keeps its donation)
                        array = copy_buffer(array)
                    arrays.append(array)
                    continue
                arrays.append(None)
                waiting = waiting or []
                waiting.append((len(arrays) - 1, t))
            elif source is _BASE:  # a view of device data (the plan's key says so): the program applies it
                arrays.append(args[value]._st.value.array)
            elif source is _CONST:
                arrays.append(value)
            else:
                arrays.append(_current_key(plan.device_index))
        if waiting:
            waiting = constants_of(waiting, arrays, plan.device_index)
        if waiting:
            computed = arrays_of([t for _, t in waiting], INPUTS)
            donated = plan.donated
            for (position, t), array in zip(waiting, computed):
                if position in donated and not _consumable(t, array):
                    array = copy_buffer(array)
                arrays[position] = array
        frames = stack.capture_frames() if bus.wants_frames else None
        outputs = execution.run_program(plan.graph, plan.entry, arrays, _EXECUTE, frames, plan.watch, self.name)
        if plan.rng_out is not None:
            rng.set_key(outputs[plan.rng_out], plan.device_index)
        index = plan.device_index
        if plan.writes:  # the graph's writes into its arguments (AOTAutograd keeps them in it)
            writes = plan.writes
            if reused:
                # The old value's node, which nothing else holds, takes the new buffer: the storage keeps its
                # node (no view caches a value derived from it, or the node would have another reference).
                for node, st, k in reused.values():
                    node.array = outputs[k]
                    st.version += 1
                writes = [w for w in writes if w[0] not in reused] if len(reused) < len(writes) else ()
            bases = []
            for i, k, meta in writes:
                t = args[i]
                if t._chain is not None:
                    t._assign(DataNode(outputs[k], meta))  # a view's is written through into its base, lazily
                else:
                    bases.append((t._st, DataNode(outputs[k], meta)))
            if bases:
                write_data(bases)
        results = []
        for source, value in plan.outputs:
            if source is _ROOT:
                k, meta, strides, offset = value
                results.append(wrap_view(Storage(DataNode(outputs[k], meta), index), meta, None, strides, offset))
            elif source is _ARG:
                results.append(args[value])
            elif source is _VIEW:
                i, meta, chain, strides, offset = value
                results.append(wrap_view(args[i]._st, meta, chain, strides, offset))
            elif source is _CONST:  # device data the graph made from constants: a new tensor each call
                results.append(wrap(Storage(value, index), value.meta))
            else:
                results.append(value)
        return results

    # ---- the first call of a signature ---------------------------------------------------------
    def _trace(self, args: list) -> _Plan | _Lazy:
        host = next((i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and not isinstance(a, XlaTensor)),
                    None)
        if host is not None and not any(isinstance(a, XlaTensor) for a in args):
            return _Lazy("all its inputs are on the host")  # no xla work in it: eager CPU code, not a graph break
        if host is not None:
            # A CPU tensor's value (Adam's step count, a whole CPU function's input) changes between calls, and a
            # program would hold the value it had when traced; ops on it, and writes into it, run on the host.
            # Decided before tracing: a trace would run those ops on the real tensor once more.
            return self._lazy(f"its input {host} is a {args[host].device.type} tensor (a value that changes between "
                              "calls, used on the host); an optimizer's step count is one unless it is built with "
                              "capturable=True", stack.capture_frames())
        device_index = next((a._st.device_index for a in args if isinstance(a, XlaTensor)), 0)
        tensors = [a for a in args if isinstance(a, XlaTensor) and not is_folded(a)]
        if type(rng.key_node(device_index)) is not DataNode:  # random ops recorded lazily before this call
            tensors.append(rng.key_tensor(device_index))  # its key is computed with the inputs, in one graph
        arrays = iter(input_arrays(tensors, device_index))
        placeholders, stand_ins, folded = [], [], set()
        for i, a in enumerate(args):
            if isinstance(a, XlaTensor) and is_folded(a):
                # A view of device data (a weight's transpose the forward saved): its base is the input, and the
                # program applies the view, rather than a graph before it materializing the view each call.
                base = a._st.value
                data = DataNode(base.array, base.meta)
                placeholders.append(data)
                folded.add(i)
                stand_ins.append(XlaTensor(Storage(data, a._st.device_index), Meta(tuple(a.shape), a.dtype), a._chain,
                                           a.stride(), a.storage_offset()))
            elif isinstance(a, XlaTensor):
                meta = Meta(tuple(a.shape), a.dtype)
                data = DataNode(next(arrays), meta)
                placeholders.append(data)
                strides = self._strides[i] if i < len(self._strides) and self._strides[i] is not None else a.stride()
                stand_ins.append(XlaTensor(Storage(data, a._st.device_index), meta, None, strides))
            else:
                placeholders.append(None)
                stand_ins.append(a)
        state = rng.state_of(device_index)
        key_before = rng.key_node(device_index)
        frames = stack.capture_frames()
        reason = None
        outs = ()
        try:
            # Nothing may run while the graph is recorded: an op that needs the host makes it a lazy graph.
            with torch.no_grad(), graph_names.naming(self.name), config.override(allow_execution=False), \
                    refusing_because(f"the torch.compile graph {self.name!r} being traced"):
                outs = self.gm(*stand_ins)
        except ExecutionNotAllowedError as exc:
            reason = _refusal_reason(str(exc))
        finally:
            key_after = state.value
            state.set(key_before)  # tracing draws no numbers: the program does, at each call
        # A folded view's write is its new view value, written through the view as any view's (two views of one
        # base, both written, each scatter into the base in turn).
        writes = [(i, s._node() if i in folded else s._st.value) for i, (p, s) in enumerate(zip(placeholders, stand_ins))
                  if p is not None and s._st.value is not p]
        if reason is None:
            # A write of an argument's own or another argument's buffer (a plain copy) has nothing to compute.
            reason = next((f"it writes device data into its input {i}" for i, value in writes
                           if type(value) is DataNode), None)
        if reason is not None:
            return self._lazy(reason, frames)
        # The storages an output may be a view of: an argument's own (a base argument's, a folded view's base's).
        storages = {id(s._st): i for i, (a, s) in enumerate(zip(args, stand_ins)) if isinstance(a, XlaTensor)
                    and (a._chain is None or i in folded) and s._st.value is placeholders[i]}
        plan = self._compile(pytree.tree_leaves(outs), placeholders, key_before, key_after, device_index, frames,
                             writes, folded, storages)
        for data in placeholders:  # the first call's buffers must not live as long as the program
            if data is not None:
                data.array = None
        return plan

    def _compile(self, outs: list, placeholders: list, key_before: DataNode, key_after, device_index: int,
                 frames, writes: list, folded: set, storages: dict) -> _Plan:
        position = {id(p): i for i, p in enumerate(placeholders) if p is not None}
        roots, outputs, root_index = [], [], {}
        for slot, out in enumerate(outs):
            if not isinstance(out, XlaTensor):
                outputs.append((_VALUE, out))
                continue
            if out._chain is not None and id(out._st) in storages:
                strides = self._out_strides[slot] if slot < len(self._out_strides) else None
                outputs.append((_VIEW, (storages[id(out._st)], Meta(tuple(out.shape), out.dtype), out._chain,
                                        strides or out.stride(), out.storage_offset())))
                continue
            node = out._node()
            if id(node) in position:
                outputs.append((_ARG, position[id(node)]))
            elif type(node) is DataNode:
                outputs.append((_CONST, node))
            else:
                k = root_index.get(id(node))
                if k is None:
                    k = root_index[id(node)] = len(roots)
                    roots.append(node)
                strides = self._out_strides[slot] if slot < len(self._out_strides) else None
                shape = tuple(out.shape)
                strides = tuple(strides or out.stride())
                # None for the layout a new tensor has anyway: a tensor made without strides costs a fifth less.
                offset = 0
                if strides == _contiguous(shape):
                    strides = offset = None
                outputs.append((_ROOT, (k, Meta(shape, out.dtype), strides, offset)))
        written = []
        for i, value in writes:
            k = root_index.get(id(value))
            if k is None:
                k = root_index[id(value)] = len(roots)
                roots.append(value)
            written.append((i, k, value.meta))
        user_roots = len(roots)
        rng_out = None
        if key_after is not key_before:
            rng_out = len(roots)
            roots.append(key_after)
        written_args = {i for i, _, _ in written}
        donating = bool(written_args) and config.param_aliasing
        # One output says the execution finished: a program's outputs are ready together (they share the
        # execution's completion event), and waiting on one costs the watcher less than waiting on each.
        watch = 0 if roots else None
        if donating and user_roots:
            # The watcher must not hold an output that the next call may take over (a written argument's new
            # value): it waits on one more output, a scalar computed last from the program's first output.
            watch = len(roots)
            roots.append(Node(_EXECUTION_DONE, (roots[0],), ((SLOT,), ()), Meta((), roots[0].meta.dtype)))
        graph = Graph(roots, device_index)
        graph.user_outputs = user_roots
        inputs = []
        for node in graph.inputs:
            if id(node) in position:
                i = position[id(node)]
                inputs.append((_BASE if i in folded else _ARG, i))
            elif node is key_before:
                inputs.append((_KEY, None))
            elif type(node) is ScalarNode:
                inputs.append((_CONST, execution.scalar_array(node, device_index)))
            else:
                inputs.append((_CONST, node.array))
        donated = ()
        if donating and not compile_cache.holds_collectives(graph):
            # The old values of the arguments it writes (an optimizer's parameters and state) are dead once it
            # ran: the executable writes the new values into their buffers, as the step barrier donates.
            donated = tuple(k for k, (source, value) in enumerate(inputs)
                            if source is _ARG and value in written_args and type(graph.inputs[k]) is DataNode)
            graph.donate(donated)
            # The node of a donated argument's old value takes the new value's buffer when both have one
            # shape and dtype, and no SPMD sharding (which the output might not share).
            new_value = {i: (k, meta) for i, k, meta in written}
            whole = ir.sharding_of is None
            for j in donated:
                i = inputs[j][1]
                k, meta = new_value[i]
                inputs[j] = (_DONATED, (i, k if whole and meta == graph.inputs[j].meta else None))
            donated = frozenset(donated)
        with graph_names.naming(self.name):
            # self.plans holds the signatures traced before this one (its own entry is set once traced)
            cause = _COMPILE_NEW_SHAPES if self.plans else _COMPILE
            entry, _ = compile_cache.get_or_compile(graph, device_index, cause, frames)
        return _Plan(graph, entry, tuple(inputs), tuple(outputs), device_index, rng_out, tuple(written), donated,
                     watch)

    def _lazy(self, reason: str, frames) -> _Lazy:
        if bus.active:
            bus.emit(GraphBreak(time.perf_counter_ns(), steps.current(), "xladev",
                                      f"graph {self.name!r} runs lazily, op by op: {reason}", frames))
        return _Lazy(reason)


def _contiguous(shape: tuple) -> tuple:
    """The strides of a contiguous tensor of `shape`, as PyTorch gives a tensor made without strides."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _as_built(value):
    """An output node's structure as the graph's code builds it: FX keeps the lists and dicts of its nodes'
    arguments immutable, the generated code returns plain ones."""
    if isinstance(value, dict):
        return {k: _as_built(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_as_built(v) for v in value]
    if isinstance(value, tuple):
        items = [_as_built(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # a named tuple keeps its type
    return value


def _lower_execution_done(ctx, value):
    return value.reshape(-1)[0] if value.size else value.reshape(-1).sum()


# The output the execution watcher waits on when the others may be donated (see _Plan.watch).
_EXECUTION_DONE = OpDef("xla::execution_done", _lower_execution_done)


# References to a donated input's buffer when the argument alone holds it (see `_run`): its DataNode's, the
# local variable's and getrefcount's own; to its DataNode: the storage's, the local variable's and
# getrefcount's. Any other (an alias of the data, a pending op, a graph in flight) adds one.
_ARRAY_REFS = 3
_NODE_REFS = 3
# To a pending donated input's buffer just computed for the call: `_run`'s list and loop variable, `_consumable`'s
# parameter and getrefcount's (one more when the tensor's data node holds it).
_COMPUTED_REFS = 4
getrefcount = sys.getrefcount


def _consumable(t: XlaTensor, array) -> bool:
    """Whether the buffer just computed for a pending donated input is read by nothing but this call: its
    references are `_run`'s list and loop variable, this parameter and getrefcount's, plus, when the tensor's
    data is that buffer now, its node's (and that node's are its storage's, the local's and getrefcount's)."""
    node = t._st.value
    held = t._chain is None and type(node) is DataNode and node.array is array
    return getrefcount(array) == _COMPUTED_REFS + held and (not held or getrefcount(node) == _NODE_REFS)


def _with_effects(token, op, *args, **kwargs):
    """`higher_order.with_effects` as a plain call: the op, then the token handed on (its order is the graph's)."""
    out = op(*args, **kwargs)
    if isinstance(out, (tuple, list)):
        return (token, *out)
    return (token,) if out is None else (token, out)


def _without_effect_tokens(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The graph with AOTAutograd's effect-token calls (ops with side effects, such as a linalg op's error check)
    made plain calls: the lazy runtime records ops in the graph's order anyway."""
    effects = getattr(torch.ops.higher_order, "with_effects", None)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function" and effects is not None and n.target is effects]
    for node in nodes:
        node.target = _with_effects
    if nodes:
        gm.recompile()
    return gm


def _refusal_reason(message: str) -> str:
    """The cause and line of a refused execution, from ExecutionNotAllowedError's message."""
    head = message.split(" while executions are disallowed", 1)[0]
    return head.replace("a graph was about to run at ", "an op needs the host at ", 1)


def _current_key(device_index: int):
    """The device RNG key's buffer, computing it first when lazy random ops left it pending."""
    node = rng.key_node(device_index)
    if type(node) is DataNode:
        return node.array
    return rng.materialized_key(device_index, INPUTS)
