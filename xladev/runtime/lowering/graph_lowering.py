"""A graph as a jax function: each node's lowering, cast to what PyTorch promised, with deep chains cut.

`graph_function(graph)` is what the compile cache compiles; `lowered(graph)` lowers a graph without
compiling it (debug dumps, HLO of a failed graph). The function is named `xladev_<hash>`, so profiles
and XLA dumps show which graph ran.
"""

from __future__ import annotations

import functools

from xladev._flags import config
from xladev.errors import XladevError
from xladev.runtime.graph import backend
from xladev.runtime.graph.ir import DATA_OP, SCALAR_OP, Graph, Meta, rebuild
from xladev.runtime.lowering import manual_regions
from xladev.runtime.lowering.registry import LoweringContext
from xladev.runtime.lowering.hlo_names import opcode_names


class LoweringError(XladevError, RuntimeError):
    """A lowering produced a value whose shape contradicts PyTorch's meta kernel (an xladev bug)."""


def _weak(x):
    from jax._src.lax import lax as _lax

    return _lax._convert_element_type(x, weak_type=True)


def _fit(value, meta, op_name):
    """Casts a lowering's result to the dtype PyTorch promised; checks its shape."""
    import jax.numpy as jnp

    if meta is None:
        return None
    if isinstance(meta, tuple) and not hasattr(meta, "dtype"):
        return tuple(_fit(v, m, op_name) for v, m in zip(value, meta))
    value = jnp.asarray(value)
    target = backend.to_jnp_dtype(meta.dtype)
    if value.dtype != target:
        value = value.astype(target)
    if tuple(value.shape) != tuple(meta.shape):
        try:
            value = jnp.broadcast_to(value, meta.shape)
        except ValueError:
            raise LoweringError(f"lowering of {op_name} gave shape {tuple(value.shape)}, expected {tuple(meta.shape)}") from None
    return value


def graph_function(graph: Graph):
    """A jax-traceable function computing the graph's roots from its inputs."""
    nodes = graph.nodes
    index = graph.index
    plan = []
    input_pos = {id(n): i for i, n in enumerate(graph.inputs)}
    # SPMD inputs split unevenly: held whole, constrained to their split here (`DataNode.uneven`).
    uneven = {}
    for node in nodes:
        if node.op is DATA_OP or node.op is SCALAR_OP:
            plan.append((None, input_pos[id(node)], node.op is SCALAR_OP))
            if getattr(node, "uneven", None) is not None:
                uneven[len(plan) - 1] = node.uneven
        else:
            plan.append((node, tuple(index[id(o)] for o in node.operands), False))
    roots = tuple(index[id(r)] for r in graph.roots)
    # SPMD results split unevenly come back whole on each device (jax holds no uneven buffer; the result keeps
    # its mark, `DataNode.uneven`): said here, or jax cannot name the split XLA gives them when the graph has
    # other outputs.
    whole_roots = {i: split for i, root in enumerate(graph.roots)
                   if (split := getattr(root, "uneven", None)) is not None}
    hlo_debug = config.hlo_debug
    cuts = _fusion_cuts(plan)
    regions, in_regions = manual_regions.regions(plan, roots)

    def lower_node(node, operand_values):
        args, kwargs = rebuild(node.template, operand_values)
        ctx = LoweringContext(node)
        if hlo_debug and node.location:
            import jax

            # jax cuts scope names at '@', so the location reads `fn at file.py:LINE` here.
            with jax.named_scope(f"{node.op.name}[{node.location.replace('@', ' at ')}]"):
                out = node.op.lower(ctx, *args, **kwargs)
        else:
            out = node.op.lower(ctx, *args, **kwargs)
        return _fit(out, node.meta, node.op.name)

    def fn(*inputs):
        import jax

        values = [None] * len(plan)
        # The last collective's result: each collective waits for it (see below).
        token = None
        for i, (node, operands, is_scalar) in enumerate(plan):
            if node is None:
                values[i] = _weak(inputs[operands]) if is_scalar else inputs[operands]
                if i in uneven:
                    values[i] = jax.lax.with_sharding_constraint(values[i], uneven[i])
                continue
            if i in in_regions:
                continue  # lowered per device at its region's end
            if i in regions:
                values[i] = manual_regions.run(regions[i], node, plan, values, lower_node)
                continue
            operand_values = [values[j] for j in operands]
            if node.op.collective:
                # Collectives run in the graph's order on every replica: XLA's CPU runtime runs independent
                # ops concurrently, and two replicas starting two collectives in opposite orders would wait
                # for each other for ever. A data dependence on the previous collective orders them (as
                # PyTorch/XLA threads a token through its collectives).
                if token is not None:
                    operand_values, _ = jax.lax.optimization_barrier((operand_values, token))
            values[i] = lower_node(node, operand_values)
            if node.op.collective:
                token = values[i]
            if i in cuts:
                values[i] = jax.lax.optimization_barrier(values[i])
        if whole_roots:
            return tuple(jax.lax.with_sharding_constraint(
                values[r], jax.sharding.NamedSharding(whole_roots[i].mesh, jax.sharding.PartitionSpec()))
                if i in whole_roots else values[r] for i, r in enumerate(roots))
        return tuple(values[r] for r in roots)

    fn.__name__ = fn.__qualname__ = f"xladev_{graph.hash[:16]}"
    return fn


# XLA's CPU compiler walks a fusion recursively on one of its own threads: a chain some 25,000 ops deep
# feeding a reduction overflows that thread's stack and kills the process (jaxlib 0.10.2). An
# optimization barrier every FUSION_DEPTH_CUT ops of a chain bounds the depth of any fusion; graphs
# shallower than that (every ordinary training step) are lowered exactly as before.
FUSION_DEPTH_CUT = 4_096


def _fusion_cuts(plan) -> frozenset[int]:
    """Positions of the nodes after which a deep chain is cut (none for a graph shallower than the cut)."""
    if len(plan) <= FUSION_DEPTH_CUT:
        return frozenset()
    depth = [0] * len(plan)
    cuts = set()
    for i, (node, operands, _) in enumerate(plan):
        if node is None:
            continue
        d = 1 + max((depth[j] for j in operands), default=0)
        if d >= FUSION_DEPTH_CUT and not node.op.multi_output and type(node.meta) is Meta:
            cuts.add(i)
            d = 0
        depth[i] = d
    return frozenset(cuts)


@functools.cache
def replica_sharding():
    """Every replica holding a whole value of its own, over the job's replica mesh (inputs and outputs of
    replicated graphs)."""
    import jax

    return jax.sharding.NamedSharding(backend.replica_mesh(), jax.sharding.PartitionSpec())


def program(graph: Graph, device=None) -> tuple:
    """What to compile for a graph: its jax function, the avals of its inputs, and whether it is replicated.

    A graph holding collectives is replicated: it runs on every process of the job at once, traced inside
    `jax.shard_map` over the replica mesh (one device per process) with every input and output the
    process's own value (`P()`: each replica holds a whole value, its own). Its collectives then reduce
    and gather across the processes inside the compiled program.

    Args:
      graph: the graph.
      device: the jax device it runs on (None: unplaced, for lowering only).

    Returns:
      (fn, avals, replicated).
    """
    import jax

    fn = graph_function(graph)
    replicated = bool(graph.collectives)
    sharding = None
    if replicated:
        sharding = replica_sharding()
        spec = sharding.spec
        name = fn.__name__
        # check_vma=False: outputs are each replica's own value, not checked to be equal across replicas.
        fn = jax.shard_map(fn, mesh=sharding.mesh, in_specs=spec, out_specs=spec, check_vma=False)
        fn.__name__ = fn.__qualname__ = name  # profiles show jit(xladev_<hash>) for these graphs too
    elif backend.spmd_replicated is not None and graph.device_index == 0:
        # SPMD: each input as it is split over the devices; XLA's partitioner (GSPMD) splits the program.
        whole = _spmd_replicated(graph)
        return fn, [jax.ShapeDtypeStruct(n.meta.shape, backend.to_jnp_dtype(n.meta.dtype),
                                         sharding=spmd_sharding(n, whole)) for n in graph.inputs], False
    elif device is not None:
        sharding = jax.sharding.SingleDeviceSharding(device)
    avals = [jax.ShapeDtypeStruct(n.meta.shape, backend.to_jnp_dtype(n.meta.dtype), sharding=sharding)
             for n in graph.inputs]
    return fn, avals, replicated


def spmd_sharding(node, replicated=None):
    """An input's sharding in SPMD mode: its buffer's, when split; `replicated` (default: on every device over
    SPMD mode's one-axis mesh) otherwise."""
    if getattr(node, "sharding", None) is not None:
        return node.array.sharding
    return replicated if replicated is not None else backend.spmd_replicated


def _spmd_replicated(graph: Graph):
    """The replicated sharding for a graph's unmarked inputs: on the mesh of its first mark (a split input's,
    else a sharding constraint's). jax names the outputs' shardings on the mesh of the inputs; on SPMD mode's
    one-axis mesh a tiling of a 2x2 mesh's (`{devices=[2,1,2]... last_tile_dim_replicate}`) cannot be named,
    and the compile failed."""
    import jax

    for n in graph.inputs:
        if getattr(n, "sharding", None) is not None and hasattr(n.array.sharding, "mesh"):
            return jax.sharding.NamedSharding(n.array.sharding.mesh, jax.sharding.PartitionSpec())
    for n in graph.nodes:
        if n.op.name == "xla::custom_sharding":
            from xladev.runtime.graph.spmd_mesh import jax_mesh_of

            return jax.sharding.NamedSharding(jax_mesh_of(n.template[0][1]), jax.sharding.PartitionSpec())
    return backend.spmd_replicated


# XLA's CPU pipeline removes optimization barriers after its first CSE pass (the `cse_barrier_expander` pass);
# a later CSE then merges a gradient checkpoint's recomputation with the forward it repeats, and the memory the
# checkpoint was to save is spent after all (jax.checkpoint loses its saving on the CPU the same way). A graph
# holding a barrier of the user's or a checkpoint's keeps it to the end, as XLA's GPU and TPU pipelines do.
_KEEP_BARRIERS = {"xla_disable_hlo_passes": "cse_barrier_expander"}


def compiler_options(graph: Graph) -> dict:
    """XLA options for compiling `graph` (`Lowered.compile(compiler_options=...)`): on the CPU backend, a
    graph holding an `xla::optimization_barrier` (in a scan's body too) keeps its barriers to the end."""
    from xladev.runtime.graph.irtext import bodies_of

    if backend.jax_devices()[0].platform != "cpu":
        return {}
    for g in [graph] + [body.graph for body in bodies_of(graph)]:
        if any(node.op.name == "xla::optimization_barrier" for node in g.nodes):
            return dict(_KEEP_BARRIERS)
    return {}


def lowered(graph: Graph):
    """jax's Lowered object of a graph (lowering only; nothing is compiled or run)."""
    import jax

    fn, avals, _ = program(graph)
    return jax.jit(fn, donate_argnums=graph.donated).lower(*avals)


def hlo_module_text(lowering, debug_info: bool = False) -> str:
    """A lowered graph's HLO module as XLA prints it, which is PyTorch/XLA's `_get_xla_tensors_hlo` format: each
    operand with its shape (`convert(bf16[16,10]{1,0} %p0)`), `%` names, and the source lines only with debug_info.

    jax's own `as_text(dialect="hlo")` leaves operand shapes out, so a check such as "a convert from bf16 to f32"
    cannot read one line; jaxlib's printer is used instead, and jax's text where jaxlib lacks it. Instructions are
    named after their opcodes, as PyTorch/XLA's are (`hlo_names.opcode_names`).

    Args:
      lowering: jax's Lowered (`lowered(graph)`).
      debug_info: print each instruction's metadata (op name, source line).

    Returns:
      The module's text.
    """
    try:
        from jaxlib import _hlo

        options = _hlo.HloPrintOptions()
        options.print_operand_shape = True
        options.print_metadata = debug_info
        # Reprinted from jax's own text: its metadata carries xladev's op names with the user's line (XLA_HLO_DEBUG).
        module = _hlo.hlo_module_from_text(lowering.as_text(dialect="hlo", debug_info=debug_info))
        text = module.to_string(options)
    except (ImportError, AttributeError, TypeError, ValueError, RuntimeError):  # no printer, or text it cannot read
        return lowering.as_text(dialect="hlo", debug_info=debug_info)
    renamed = opcode_names(text)
    try:  # names PyTorch/XLA's way, checked by XLA's own parser: a text it rejects is not handed out
        _hlo.hlo_module_from_text(renamed)
    except (TypeError, ValueError, RuntimeError):
        return text
    return renamed
