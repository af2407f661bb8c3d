"""`xladev.compile`: a step function traced into one named graph, with PyTorch/XLA's causes, the graph name in
every debug output, `full_graph` and `max_different_graphs`."""

from __future__ import annotations

import itertools
import json

import pytest
import torch
import torch.nn as nn

import xladev
import xladev.debug.metrics as met
from tests.source_lines import line_of
from xladev.events import CauseKind, Compile, Execute, Recompile
from xladev.runtime.execute.admission import ExecutionNotAllowedError
from xladev.sinks import eventlog_writer
from xladev.sinks.pt_xla_debug.sink import AnalysisSink, DebugOutput

_sizes = itertools.count(211)  # shapes no other test compiled: the compile cache is process-wide


def _train_step(model, opt, x, y):
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return loss


def test_a_compiled_step_is_one_named_graph_per_call_and_trains_as_the_lazy_step(events):
    n = next(_sizes)
    torch.manual_seed(0)
    cpu = nn.Linear(n, 1)
    dev = xladev.device()
    lazy, comp = nn.Linear(n, 1), nn.Linear(n, 1)
    lazy.load_state_dict(cpu.state_dict()), comp.load_state_dict(cpu.state_dict())
    lazy, comp = lazy.to(dev), comp.to(dev)
    opt_lazy, opt_comp = torch.optim.SGD(lazy.parameters(), lr=0.1), torch.optim.SGD(comp.parameters(), lr=0.1)
    x, y = torch.randn(8, n).to(dev), torch.randn(8, 1).to(dev)
    step = xladev.compile(_train_step)
    for _ in range(3):
        expected = _train_step(lazy, opt_lazy, x, y)
        xladev.mark_step()
        events.clear()
        got = step(comp, opt_comp, x, y)
        executed = events.of(Execute)
        # Nothing was pending before the call: one graph, the whole step, run under the function's name.
        assert [(e.cause.kind, e.graph_name) for e in executed] == [(CauseKind.COMPILE_REGION, "_train_step")]
        assert got.item() == expected.item()  # the same ops in the same order: bit for bit
    assert not events.of(Recompile)


def test_the_pending_graph_is_synced_first_under_its_own_name(events):
    x = torch.ones(next(_sizes), device=xladev.device())
    pending = x * 3
    named = xladev.compile(lambda t: t.sum(), name="toy")
    out = named(x)
    compiled = events.of(Compile)
    assert [(e.cause.kind, e.graph_name) for e in compiled] == [
        (CauseKind.COMPILE_PENDING, "toy_clear_pending"), (CauseKind.COMPILE_REGION, "toy")]
    # The region's two syncs share the caller's line; they are two barriers, not a recompilation.
    assert not events.of(Recompile)
    assert out.item() == x.shape[0] and pending[0].item() == 3


def test_graph_name_in_the_analysis_blocks_and_the_event_log(tmp_path):
    xladev.mark_step()
    sink = AnalysisSink(2, DebugOutput(str(tmp_path / "debug.txt"))).start()
    log = eventlog_writer.start(str(tmp_path / "run.events.jsonl"))
    try:
        x = torch.ones(next(_sizes), device=xladev.device())
        with xladev.compile(name="blockname"):
            y = (x + 2).sum()
        xladev.mark_step()
    finally:
        sink.stop()
        eventlog_writer.stop()
    text = (tmp_path / "debug.txt").read_text()
    lines = text.splitlines()
    for title in ("Compilation Analysis: ", "Execution Analysis: "):
        cause = lines.index(f"{title}  torch_xla.compile")
        # PyTorch/XLA's order: the cause, "Graph Info:", then "Graph Name:" before the hash.
        assert lines[cause + 1:cause + 4] == [f"{title}Graph Info: ", f"{title}  Graph Name: blockname",
                                              lines[cause + 3]] and "Graph Hash" in lines[cause + 3]
    records = [json.loads(line) for line in (tmp_path / "run.events.jsonl").read_text().splitlines()]
    named = [(r["type"], r.get("name")) for r in records if r["type"] in ("compile", "execute")]
    assert ("compile", "blockname") in named and ("execute", "blockname") in named
    unnamed = [r for r in records if r["type"] == "execute" and r["cause"]["kind"] == "USER_MARK_STEP"]
    assert all("name" not in r for r in unnamed)  # written only when there is a name
    assert y.item() == 3 * x.shape[0]


def test_max_different_graphs_raises_before_compiling_and_names_what_changed():
    dev = xladev.device()
    plus = xladev.compile(lambda t: t + 1, name="plus", max_different_graphs=2)
    n = next(_sizes)
    for size in (n, n + 1, n, n + 1):  # two different graphs, each run again: within the limit
        plus(torch.ones(size, device=dev))
    compiles = met.counter_value("UncachedCompile")
    with pytest.raises(xladev.GraphLimitError) as caught:
        plus(torch.ones(n + 2, device=dev))  # third-shape
    message = str(caught.value)
    assert message.startswith("Maximum number of different traces allowed per function exceeded: 2\n")
    assert f"test_compiled_region.py:{line_of(__file__, 'third-shape')}" in message
    assert f"dim 0: {n + 1} -> {n + 2}" in message  # against the closest graph it ran
    # The upload of the new input compiled nothing; the new graph itself was neither compiled nor run.
    assert met.counter_value("UncachedCompile") - compiles == 1  # the ones() of the pending-sync graph
    assert isinstance(plus(torch.ones(n, device=dev)), torch.Tensor)  # a known graph still runs


def test_full_graph_refuses_a_read_inside_the_region_and_names_the_line():
    dev = xladev.device()
    x = torch.ones(next(_sizes), device=dev)

    @xladev.compile(full_graph=True, name="strict")
    def strict(t):
        return (t * 2).sum().item()  # read-inside

    with pytest.raises(ExecutionNotAllowedError) as caught:
        strict(x)
    message = str(caught.value)
    assert f"test_compiled_region.py:{line_of(__file__, 'read-inside')}" in message
    assert message.startswith("Unexpected execution happens inside the compiled function, exiting: ")
    assert "xladev.compile(full_graph=True) of 'strict'" in message and ".item()" in message
    assert xladev.config.allow_execution  # restored once the region is left
    assert (x * 2).sum().item() == 2 * x.shape[0]


def test_bad_limit_is_refused():
    with pytest.raises(ValueError, match="max_different_graphs must be a positive integer"):
        xladev.compile(lambda t: t, max_different_graphs=0)
