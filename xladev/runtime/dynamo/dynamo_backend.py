"""`torch.compile(model, backend="xladev")`: TorchDynamo captures, AOTAutograd splits, xladev compiles once.

TorchDynamo captures the FX graph of the user's code, AOTAutograd turns it into a forward and a backward
graph of aten ops (one inference graph under `no_grad`), and each graph becomes an `FxProgram`: traced once
through the lazy runtime's op table, compiled by XLA, then run as one cached executable per call.

What TorchDynamo decides is published for the debug tools, as the lazy path's compiles are:
- a graph break (the code TorchDynamo could not capture runs outside the graphs, recorded lazily) is a
  `GraphBreak` with TorchDynamo's reason and the user's line;
- a recompilation (a guard failed: a new shape, a new Python value) is a `DynamoRecompile` naming the guard.
The two breaks around every compiled optimizer step cost nothing and are not said (`_costs_nothing`).

Three adjustments make TorchDynamo accept xla tensors (`install()`, at device registration):
- it treats `XlaTensor` as a tensor: a tensor subclass with its own `__torch_dispatch__` would otherwise be an
  opaque object to it (every op on it a graph break). Only its metadata is read while tracing, through fake
  tensors on the `xla` device; the real tensors reach the compiled graphs;
- it never traces xladev's own code: ops recorded lazily between graphs must run as Python, not be captured;
  but the collectives (`all_reduce`, `all_gather`, `reduce_scatter`) become ops of its graphs
  (traced_collectives.py);
- its fake mode builds tensor constants on the host, as on a machine without an accelerator.
"""

from __future__ import annotations

import inspect
import logging
import os
import re
import threading
import time

import torch

from xladev.events import GraphBreak, DynamoRecompile, Frame, PropagatingError, bus
from xladev.runtime.graph import stack, steps
from xladev.runtime.distributed import traced_collectives
from xladev.runtime.dynamo.fx_program import FxProgram
from xladev.runtime.graph.op_ledger import after_optimizer_step
from xladev.runtime.record.tensor import XlaTensor

_lock = threading.Lock()
_installed = False
_compiles: dict[tuple[str, str], int] = {}  # (file, function) -> times TorchDynamo compiled it
_graph_ids: dict[tuple[str, str], int] = {}


def install() -> None:
    """Lets TorchDynamo trace code on xla tensors. Idempotent.

    Called when this module is first imported: by torch itself, looking the backend up by name through xladev's
    `torch_dynamo_backends` entry point (`xladev.compile_backend`) before it traces, so neither `import xladev`
    nor the device's start-up imports TorchDynamo (about a second).
    """
    global _installed
    with _lock:
        if _installed:
            return
        import torch._dynamo
        from torch._dynamo.variables.builder import VariableBuilder

        # Frames TorchDynamo must not trace: xladev's, and those of the libraries it runs on. An op that runs
        # outside a graph (after a graph break: a CPU fallback, a host read) calls into jax from user code; traced,
        # jax's Python frames were compiled as graphs of their own, and one of them then called jax wrongly.
        for package in ("xladev", "jax", "jaxlib", "ml_dtypes", "opt_einsum"):
            torch._dynamo.trace_rules.add(package)
        wrap = VariableBuilder._wrap

        def _wrap(self, value):
            if isinstance(value, XlaTensor):
                return self.wrap_tensor(value)
            return wrap(self, value)

        VariableBuilder._wrap = _wrap
        _as_plain_tensors()
        _keep_constants_on_the_host()
        _listen_to_graph_breaks()
        traced_collectives.install()  # xladev's collectives as ops of the graphs it captures
        _installed = True


def xladev_backend(gm: torch.fx.GraphModule, example_inputs: list, **kwargs):
    """The `xladev` backend of `torch.compile`: forward and backward (or inference) graphs as XLA programs.

    Args:
      gm: the graph TorchDynamo captured.
      example_inputs: its inputs (fake tensors).
      **kwargs: options of `torch.compile(options=...)`; none are used.

    Returns:
      The compiled callable TorchDynamo calls in place of the captured code.
    """
    install()
    from torch._dynamo.backends.common import aot_autograd

    function, file, line = function_of(gm)
    with _lock:
        compiles = _compiles[(file, function)] = _compiles.get((file, function), 0) + 1
        index = _graph_ids[(file, function)] = _graph_ids.get((file, function), -1) + 1
    reason = _recompile_reason()
    verdict = None
    if reason is not None and bus.active:
        try:
            bus.emit(DynamoRecompile(time.perf_counter_ns(), steps.current(), function, reason, compiles,
                                      stack.capture_frames()))
        except PropagatingError as error:
            # A subscriber's verdict (assert_no_recompiles) reaches the user from the call, as itself: raised
            # here, TorchDynamo would wrap it in a BackendCompilerFailed.
            verdict = error
    label = f"{function}#{index}"

    def compiler(kind: str):
        def compile_graph(graph: torch.fx.GraphModule, inputs: list):
            return FxProgram(graph, f"{label} {kind}")

        return compile_graph

    # keep_inference_input_mutations: an optimizer step's writes into its parameters and state stay in its
    # program (FxProgram writes the outputs into the tensors) instead of AOTAutograd's epilogue of one copy_
    # per tensor, each recorded op by op (about 10 us each, 112 per step of the zoo's GPT-2).
    compiled = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                            inference_compiler=compiler("inference"),
                            keep_inference_input_mutations=True)(gm, example_inputs)
    return compiled if verdict is None else _raising_once(verdict, compiled)


def use_for(name: str) -> None:
    """Makes `torch.compile(backend=name)` the `xladev` backend too (the alias's "openxla").

    Args:
      name: a backend name; one torch registered before (its own "openxla") is replaced.
    """
    install()
    from torch._dynamo.backends import registry

    registry._lazy_import()  # torch's own backends register first, so that none is registered after this one
    registry._BACKENDS[name] = None
    registry._COMPILER_FNS[name] = xladev_backend


def extract_compiled_graph(gm: torch.fx.GraphModule, args) -> "callable":
    """One FX graph of aten ops as a callable `fn(*args)` running it as one XLA program (PyTorch/XLA's bridge).

    Args:
      gm: the graph (from AOTAutograd, or any FX graph of aten ops).
      args: example arguments (unused: the graph is traced on its first call).

    Returns:
      The callable; it returns the graph's outputs as the graph does (a tensor, a tuple, a list, nested...),
      as PyTorch/XLA's does.
    """
    function, _, _ = function_of(gm)
    program = FxProgram(gm, f"{function} (dynamo bridge)")
    return lambda *call_args: program.structured(program(list(call_args)))


def _as_plain_tensors() -> None:
    """Makes TorchDynamo model an xla tensor as a plain tensor, not as a subclass with `__torch_function__`.

    XlaTensor disables `__torch_function__` (it works below autograd, in `__torch_dispatch__`), so at the Python
    level it behaves as torch.Tensor. Modelled as a subclass, the results of ops before a graph break were
    stashed as "subclass torch.Tensor" under one global name and read back under another: `t[t > 0]`, whose
    data-dependent shape breaks the graph, failed with a NameError.
    """
    from torch._dynamo.variables import builder

    infer = builder.infer_subclass_type

    def infer_subclass_type(value):
        return None if type(value) is XlaTensor else infer(value)

    builder.infer_subclass_type = infer_subclass_type


def _keep_constants_on_the_host() -> None:
    """Makes the tracing fake mode build `torch.tensor(data, device="xla")` on the host, then move it as an op.

    A fake mode does that when no accelerator is available; here one is (the `xla` device), so it would copy
    the data to the device for real in the middle of a trace, and that real device tensor would then meet the
    trace's fake tensors ("Expected all tensors to be on the same device, ... xla:0 and xla:0"). So every fake
    mode behaves as on a machine without devices, on a machine with a GPU too: a CUDA constant in another
    backend's trace is then also made on the host and moved by an op, as when tracing CUDA code on a CPU host.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    FakeTensorMode.avoid_device_init = property(lambda self: True)


def _raising_once(error: BaseException, compiled):
    """`compiled`, whose first call raises `error` instead (later calls run: TorchDynamo keeps this function)."""
    pending = [error]

    def call(*args, **kwargs):
        if pending:
            raise pending.pop()
        return compiled(*args, **kwargs)

    return call


def function_of(gm: torch.fx.GraphModule) -> tuple[str, str, int]:
    """(name, file, line) of the user's function a captured graph comes from, read from its nodes.

    A compiled module is named by its class (`GPT2LMHeadModel.forward`); a function by its name. The file and
    line are those of the outermost frame of the graph's first op.
    """
    name = module = None
    for node in gm.graph.nodes:
        if module is None and node.meta.get("nn_module_stack"):
            path, cls = next(iter(node.meta["nn_module_stack"].values()))
            module = f"{getattr(cls, '__name__', cls)}.forward" if path in _ROOT_MODULE_PATHS else ""
        trace = node.meta.get("stack_trace")
        if name is None and trace:
            match = _FRAME.search(trace)
            if match:
                name = (match.group(3), match.group(1), int(match.group(2)))
        if name is not None and module is not None:
            break
    if name is None:
        return module or gm.__class__.__name__, "<unknown>", 0
    return (module or name[0]), name[1], name[2]


# How TorchDynamo names the module passed to torch.compile in a graph's module stack.
_ROOT_MODULE_PATHS = frozenset(("L['fn']", "L['self']"))


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_GUARD_ID = re.compile(r"^\d+/\d+: ")


def _recompile_reason() -> str | None:
    """The guard whose failure made TorchDynamo compile again, while it compiles; None for a first compile.

    TorchDynamo records it in the metrics of the compile in progress (torch 2.13's `metrics_context`).
    """
    try:
        from torch._dynamo.utils import get_metrics_context

        reason = get_metrics_context()._metrics.get("recompile_reason")
    except Exception:  # another torch: no reason, the compile goes on
        return None
    return _GUARD_ID.sub("", reason) if reason else None


# ---- graph breaks -----------------------------------------------------------------------------------
# The function of each graph break's line, from the messages that listed the user's stack.
_break_functions: dict[tuple[str, int], str] = {}
_BREAK_AT = re.compile(r"Graph break (?:\(user stack suppressed due to duplicate graph break\) )?in user code at "
                       r"(.+):(\d+)\s*\nGraph Break Reason: (.*)", re.S)


class _GraphBreakHandler(logging.Handler):
    """Turns TorchDynamo's graph-break log records into `GraphBreak` events (nothing is printed)."""

    def emit(self, record: logging.LogRecord) -> None:
        if not bus.active:
            return
        try:
            event = graph_break_event(record.getMessage())
        except Exception:  # a message in another shape: never fail the user's compile over it
            return
        if event is not None:
            bus.emit(event)


def graph_break_event(message: str) -> GraphBreak | None:
    """The event of one TorchDynamo graph-break message, or None when it is not one.

    Args:
      message: the text TorchDynamo logs under its `graph_breaks` artifact.

    Returns:
      The event: the reason (its first line and TorchDynamo's explanation), and the user frames the message
      lists (innermost first), the break's own line first.
    """
    match = _BREAK_AT.search(message)
    if match is None:
        return None
    file, line, rest = match.group(1), int(match.group(2)), match.group(3)
    lines = [s.strip() for s in rest.splitlines()]
    reason = lines[0] if lines else ""
    explanation = next((s[len("Explanation:"):].strip() for s in lines if s.startswith("Explanation:")), "")
    if explanation:
        reason = f"{reason.rstrip(':')}: {explanation}"
    stack_part = rest.split("User code traceback:", 1)
    listed = [Frame(m.group(3), m.group(1), int(m.group(2))) for m in _FRAME.finditer(stack_part[1])] \
        if len(stack_part) == 2 else []
    frames = tuple(reversed(listed))
    if _costs_nothing(message, file, frames):
        return None
    if frames and (frames[0].file, frames[0].line) == (file, line):
        _break_functions[(file, line)] = frames[0].name
    else:  # TorchDynamo leaves the stack out of a break it logged before: name the function as it did then
        frames = (Frame(_break_functions.get((file, line), "<graph break>"), file, line),) + frames
    return GraphBreak(time.perf_counter_ns(), steps.current(), "dynamo", reason, frames)


# The breaks every compiled optimizer step meets, whose graphs lose nothing: torch.optim's own break before the
# step (it ends a graph holding no op, so that the step's graph is traced without autograd), and xladev's optimizer
# step hook after it (the step's program has run; the hook counts the step for the debug tools, in Python). Said
# as breaks, they would send the user looking for a cause in their code that is not there.
_OPTIMIZER_FILE = os.path.join("torch", "optim", "optimizer.py")
_OWN_HOOK = (f"function `{after_optimizer_step.__qualname__}` in file "
             f"`{inspect.getsourcefile(after_optimizer_step)}`")


def _costs_nothing(message: str, file: str, frames: tuple) -> bool:
    if _OWN_HOOK in message:
        return True
    where = frames[0] if frames else None
    return (file.endswith(_OPTIMIZER_FILE) and where is not None and where.name == "_use_grad"
            and "torch._dynamo.graph_break()" in message)


def _listen_to_graph_breaks() -> None:
    # The artifact logger TorchDynamo writes each graph break to; enabling it here (and not through
    # TORCH_LOGS) keeps torch from printing them, and costs nothing until a graph breaks.
    logger = logging.getLogger("torch._dynamo.symbolic_convert.__graph_breaks")
    logger.addHandler(_GraphBreakHandler())
    logger.setLevel(logging.DEBUG)
    logger.propagate = False


install()
