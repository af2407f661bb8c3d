"""`torch.compile(backend="xladev")`: each captured graph is one compiled program, run without recording; the
debug tools see its compiles, executions, graph breaks and recompilations as they see the lazy path's.

The oracle for values is the lazy path itself (the same op table lowers both, so the same graph gives the same
bits) and eager CPU; tests/models/test_compiled.py trains the model zoo against eager CPU with derived bounds.
"""

from __future__ import annotations

import itertools
import json
import weakref

import pytest
import torch
import torch.nn as nn

import xladev
import xladev.debug.metrics as met
from examples._common import train_step
from tests import parity_bounds
from tests.source_lines import line_of
from xladev.events import (
    CauseKind, GraphBreak, DynamoRecompile, Compile, Execute, Ops, TransferToDevice,
)
from xladev.runtime.graph.ir import DataNode, ScalarNode
from xladev.sinks import eventlog_writer
from xladev.sinks.pt_xla_debug.sink import AnalysisSink, DebugOutput

_widths = itertools.count(301)  # shapes no other test compiled: the compile cache is process-wide


def _mlp(width: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(width, 16), nn.GELU(), nn.Linear(16, 3))


def test_training_through_the_backend_trains_as_eager_cpu_and_records_nothing_after_warmup(events):
    width = next(_widths)
    dev = xladev.device()
    cpu, compiled = _mlp(width), _mlp(width).to(dev)
    opt_cpu = torch.optim.AdamW(cpu.parameters(), lr=1e-2)
    opt_compiled = torch.optim.AdamW(compiled.parameters(), lr=1e-2)
    model = torch.compile(compiled, backend="xladev")
    torch.manual_seed(1)
    batches = [(torch.randn(8, width), torch.randint(0, 3, (8,))) for _ in range(2)]
    steps = 4
    for step in range(steps):
        x, y = batches[step % 2]
        expected = train_step(cpu, opt_cpu, nn.functional.cross_entropy, x, y)
        events.clear()
        got = train_step(model, opt_compiled, nn.functional.cross_entropy, x.to(dev), y.to(dev))
        xladev.mark_step()
        assert got.item() == pytest.approx(expected.item(), rel=parity_bounds.loss_rtol(), abs=0)
        programs = [e for e in events.of(Execute) if e.cause.kind is CauseKind.DYNAMO_EXECUTE]
        if step == 0:
            # The index counts TorchDynamo's compiles of `Sequential.forward` in this process: another test in the
            # same worker may have compiled one before. Every step runs the graphs of the first.
            label = programs[0].graph_name.rsplit(" ", 1)[0] if programs else ""
            assert label.startswith("Sequential.forward#"), [e.graph_name for e in programs]
        assert [e.graph_name for e in programs] == [f"{label} forward", f"{label} backward"]
        if step >= 2:
            # The batch, and the lazy AdamW's step-dependent numbers (bias corrections): the parameters and the
            # optimizer state stay on the device.
            uploads = sorted(e.nbytes for e in events.of(TransferToDevice))
            assert [n for n in uploads if n > 8] == sorted([8 * width * 4, 8 * 8]), uploads
            assert not events.of(Compile)
            # The compiled forward and backward record no op: only the loss and the optimizer, lazily.
            recorded = {name for e in events.of(Ops) for name in e.counts}
            assert recorded and not recorded & {"aten::addmm", "aten::gelu", "aten::gelu_backward", "aten::mm"}
    names = {id(p): n for n, p in cpu.named_parameters()}
    parity_bounds.assert_adam_params_close({n: p.detach().cpu() for n, p in compiled.named_parameters()},
                                           {n: p.detach() for n, p in cpu.named_parameters()}, opt_cpu, names, steps)


def test_inference_under_no_grad_is_one_program_and_matches_eager_cpu():
    width = next(_widths)
    cpu = _mlp(width).eval()
    model = torch.compile(_mlp(width).to(xladev.device()).eval(), backend="xladev")
    x = torch.randn(5, width)
    with torch.no_grad():
        got = model(x.to(xladev.device())).cpu()
        expected = cpu(x)
        before = met.counter_value("DynamoExtractCompiledGraph") or 0
        model(x.to(xladev.device()))
    assert (met.counter_value("DynamoExtractCompiledGraph") or 0) == before  # the second call compiles nothing
    # float32 rounding of a 2-layer MLP: each output sums `width + 16` products of O(1) terms.
    bound = (width + 16) * torch.finfo(torch.float32).eps * expected.abs().max()
    assert (got - expected).abs().max() <= bound


def test_a_graph_break_names_torchdynamos_reason_and_the_users_line(tmp_path, events):
    dev = xladev.device()
    lin = nn.Linear(4, 2).to(dev)

    @torch.compile(backend="xladev")
    def f(x):
        y = lin(x) * 2
        print("breaks the graph")  # break-line
        return (y + 1).sum()

    log = eventlog_writer.start(str(tmp_path / "run.events.jsonl"))
    try:
        out = f(torch.ones(3, 4, device=dev))
        xladev.mark_step()
    finally:
        eventlog_writer.stop()
    breaks = events.of(GraphBreak)
    assert breaks and breaks[0].by == "dynamo" and "print" in breaks[0].reason
    line = line_of(__file__, "break-line")
    assert (breaks[0].frames[0].file, breaks[0].frames[0].line) == (__file__, line)
    records = [json.loads(r) for r in (tmp_path / "run.events.jsonl").read_text().splitlines()]
    graph_breaks = [r for r in records if r["type"] == "graph_break"]
    assert graph_breaks and graph_breaks[0]["site"].startswith(f"{__file__}:{line}")
    expected = ((torch.ones(3, 4) @ lin.weight.detach().cpu().T + lin.bias.detach().cpu()) * 2 + 1).sum()
    assert out.item() == pytest.approx(expected.item(), rel=8 * torch.finfo(torch.float32).eps)


def test_an_op_that_needs_the_host_makes_its_graph_run_lazily_and_says_which(events):
    dev = xladev.device()

    @torch.compile(backend="xladev")
    def f(a):
        ld, pivots = torch.linalg.ldl_factor(a @ a.mT + 4 * torch.eye(a.shape[0], device=a.device))
        return ld * 2

    a = torch.randn(4, 4)
    got = f(a.to(dev))
    lazy = [e for e in events.of(GraphBreak) if e.by == "xladev"]
    assert lazy and "aten::linalg_ldl_factor" in lazy[0].reason and "runs lazily" in lazy[0].reason
    expected = torch.linalg.ldl_factor(a @ a.mT + 4 * torch.eye(4))[0] * 2
    assert torch.allclose(got.cpu(), expected, rtol=0, atol=64 * torch.finfo(torch.float32).eps * 8)
    again = f(a.to(dev))  # the plan is kept: lazily again, correctly, without a new break
    assert torch.equal(again.cpu(), got.cpu())


def test_a_guard_failure_is_a_dynamo_recompile_in_the_analysis_and_assert_no_recompiles_raises(tmp_path, events):
    dev = xladev.device()
    width = next(_widths)
    lin = nn.Linear(width, 2).to(dev)
    # dynamic=False: each new size is a recompile (by default TorchDynamo makes a size dynamic after two).
    f = torch.compile(lambda x: lin(x).relu().sum(), backend="xladev", dynamic=False)
    ones = {n: torch.ones(n, width).to(dev) for n in (3, 5, 7)}  # uploads: no graph of their own
    sink = AnalysisSink(1, DebugOutput(str(tmp_path / "debug.txt"))).start()
    try:
        f(ones[3])
        f(ones[5])  # guard-line
        xladev.mark_step()
    finally:
        sink.stop()
    recompiled = events.of(DynamoRecompile)
    assert [e.guard for e in recompiled] == ["tensor 'x' size mismatch at index 0. expected 3, actual 5"]
    text = (tmp_path / "debug.txt").read_text()
    line = line_of(__file__, "guard-line")
    assert f"torch.compile recompiled <lambda> (compile 2) called at test_dynamo_backend.py:{line}" in text
    assert "Dynamo Recompilation Cause" in text and "pad inputs to a few fixed sizes" in text
    with pytest.raises(xladev.debug.RecompilationError, match="guard failed: tensor 'x' size mismatch at index 0"):
        with xladev.debug.assert_no_recompiles(after_step=0):
            f(ones[7])
    # Raised once, from the call: the function compiled for that size runs afterwards.
    assert f(ones[7]).item() == pytest.approx(lin(ones[7]).relu().sum().item(), rel=64 * torch.finfo(torch.float32).eps)


@pytest.mark.parametrize("op", ["nonzero", "masked_select", "boolean index", "where", "_foobar"])
def test_an_op_with_a_data_dependent_shape_breaks_the_graph_and_runs_as_eager(op):
    """TorchDynamo breaks the graph at an op with a data-dependent shape (or one it cannot trace) and runs it in
    the user's frame. Two crashes were found there: xladev's CPU fallback calls jax, whose Python frames
    TorchDynamo traced (one then failed in jax's tree flattening); and the tensors computed before the break
    were modelled as a subclass stashed under one global name and read under another (a NameError)."""
    dev = xladev.device()
    ops = {"nonzero": lambda t: torch.nonzero(t * 2) + 1,
           "masked_select": lambda t: torch.masked_select(t * 2, t > 0.5) + 1,
           "boolean index": lambda t: t[t > 0.5] * 2,
           "where": lambda t: torch.where(t > 0.5)[0] + 1,
           "_foobar": lambda t: torch._foobar(t * 2) * 2}
    f = torch.compile(ops[op], backend="xladev")
    for values in ([0., 1., 0., 3.], [2., 0., 5., 0.]):
        t = torch.tensor(values)
        assert torch.equal(f(t.to(dev)).cpu(), ops[op](t))


def test_random_ops_draw_from_the_device_generator_as_the_lazy_path_does():
    dev = xladev.device()
    x = torch.ones(64, 64, device=dev)
    drop = torch.compile(lambda t: nn.functional.dropout(t, p=0.5, training=True), backend="xladev")
    xladev.manual_seed(7)
    first, second = drop(x).cpu(), drop(x).cpu()
    assert not torch.equal(first, second)  # each call draws new numbers: the key is threaded through
    xladev.manual_seed(7)
    lazy = nn.functional.dropout(x, p=0.5, training=True).cpu()
    assert torch.equal(first, lazy)  # one generator for both paths, drawn in the same order
    kept = (first != 0).float().mean().item()
    assert abs(kept - 0.5) < 4 * (0.25 / first.numel()) ** 0.5  # four standard deviations of a Bernoulli mean
    assert torch.equal(first[first != 0], torch.full_like(first[first != 0], 2.0))


def test_pending_inputs_are_computed_first_and_counted():
    dev = xladev.device()
    f = torch.compile(lambda t: t.exp(), backend="xladev")
    x = torch.zeros(next(_widths), device=dev)
    f(x)
    before = met.counter_value("DynamoSyncInputExecuteTime") or 0
    pending = x + 1  # recorded lazily, not computed
    assert torch.allclose(f(pending).cpu(), torch.full((x.shape[0],), torch.e))
    assert met.counter_value("DynamoSyncInputExecuteTime") == before + 1


def test_dynamic_shapes_get_one_program_per_size(tmp_path):
    """As PyTorch/XLA's test_dynamo_dynamic_shape.py counts: a new size compiles a program (CompileTime), but
    TorchDynamo hands over no new graph (DynamoExtractCompiledGraph), in memory and read back from the log."""
    from xladev.schema import counters, records

    dev = xladev.device()
    f = torch.compile(lambda t: (t * t * 0.25).sum(0), backend="xladev", dynamic=True)
    path = tmp_path / "run.events.jsonl"
    eventlog_writer.start(str(path))
    seen = []
    try:
        for n in (3, 4, 6, 4):
            met.clear_all()
            x = torch.arange(n * 2, dtype=torch.float32).reshape(n, 2)
            assert torch.equal(f(x.to(dev)).cpu(), (x * x * 0.25).sum(0))
            seen.append((met.counter_value("DynamoExtractCompiledGraph"), (met.metric_data("CompileTime") or (0,))[0]))
    finally:
        eventlog_writer.stop()
    assert seen == [(1, 1), (None, 1), (None, 1), (None, 0)]
    compiles = [r for r in map(records.parse_line, path.read_text().splitlines()) if isinstance(r, records.Compile)]
    assert [c.cause["detail"] for c in compiles] == ["", records.DYNAMO_NEW_SHAPES, records.DYNAMO_NEW_SHAPES]
    extracted = [u for c in compiles for u in counters.updates(c) if u.name == "DynamoExtractCompiledGraph"]
    assert len(extracted) == 1


def test_the_report_names_graph_breaks_and_recompiles_from_the_event_log_and_the_debug_file(tmp_path):
    from xladev.report import load
    from xladev.report.run_findings import diagnose

    dev = xladev.device()
    width = next(_widths)
    lin = nn.Linear(width, 2).to(dev)

    def body(x):
        y = lin(x).relu()
        print("step")  # report-break
        return y.sum()

    f = torch.compile(body, backend="xladev", dynamic=False)
    log = eventlog_writer.start(str(tmp_path / "run.events.jsonl"))
    sink = AnalysisSink(1, DebugOutput(str(tmp_path / "debug.txt"))).start()
    try:
        for n in (2, 3, 2, 3):
            f(torch.ones(n, width).to(dev))
            xladev.mark_step()
    finally:
        sink.stop()
        eventlog_writer.stop()
    line = line_of(__file__, "report-break")
    for path in ("run.events.jsonl", "debug.txt"):
        findings = {f.rule: f for f in diagnose(load([str(tmp_path / path)]))}
        breaks = findings["graph-breaks"]
        assert breaks.title == "torch.compile breaks the graph at 1 place", path
        assert any(e.startswith(f"test_dynamo_backend.py:{line} (body)") and "print" in e for e in breaks.evidence)
        assert "Print() cannot be traced" in breaks.fix
        recompiles = findings["dynamo-recompiles"]
        assert any("body: guard failed" in e and "size mismatch at index 0. expected 2, actual 3" in e
                   for e in recompiles.evidence), (path, recompiles.evidence)


@pytest.mark.parametrize("capturable", [True, False], ids=["step count on the device", "step count on the cpu"])
def test_a_compiled_optimizer_step_trains_as_eager_cpu(events, capturable):
    # capturable=True: the step counts are device tensors, and the whole step is one program. AOTAutograd keeps
    # its writes into its inputs in the graph (keep_inference_input_mutations): the program computes the new
    # values and xladev writes them into the tensors, with no copy_ recorded per tensor.
    # capturable=False (the default): the step counts are CPU tensors, whose values a program would freeze at
    # their traced value (a bias correction of step 1 for ever, as once happened): that graph runs lazily.
    width = next(_widths)
    dev = xladev.device()
    cpu, lazy = _mlp(width), _mlp(width).to(dev)
    opt_cpu = torch.optim.AdamW(cpu.parameters(), lr=1e-2)
    opt_dev = torch.optim.AdamW(lazy.parameters(), lr=1e-2, capturable=capturable)
    opt_step = torch.compile(opt_dev.step, backend="xladev")
    torch.manual_seed(2)
    batches = [(torch.randn(8, width), torch.randint(0, 3, (8,))) for _ in range(2)]
    steps = 4
    for step in range(steps):
        x, y = batches[step % 2]
        opt_cpu.zero_grad()
        nn.functional.cross_entropy(cpu(x), y).backward()
        opt_cpu.step()
        opt_dev.zero_grad()
        nn.functional.cross_entropy(lazy(x.to(dev)), y.to(dev)).backward()
        xladev.mark_step()  # the gradients are device data: the step's program is all that runs next
        events.clear()
        opt_step()
        programs = [e for e in events.of(Execute) if e.cause.kind is CauseKind.DYNAMO_EXECUTE]
        if capturable:
            assert len(programs) == 1 and programs[0].graph_name.endswith("inference")
        else:
            assert not programs
            if step == 0:  # said once, when traced, with the remedy the report gives
                from xladev.analysis.compile_rules import break_advice

                said = [e.reason for e in events.of(GraphBreak) if "is a cpu tensor" in e.reason]
                assert said and "capturable=True" in break_advice(said[0])
        if step >= 2 and capturable:
            assert not events.of(Compile)
            # Nothing recorded op by op: the writes into 4 parameters, their 8 state tensors and steps are the
            # program's own outputs.
            assert not {name for e in events.of(Ops) for name in e.counts}
        xladev.mark_step()
    names = {id(p): n for n, p in cpu.named_parameters()}
    parity_bounds.assert_adam_params_close({n: p.detach().cpu() for n, p in lazy.named_parameters()},
                                           {n: p.detach() for n, p in cpu.named_parameters()}, opt_cpu, names, steps)
    # The state too, as the next step reads it: exp_avg weighs past gradients by (1 - β1)·β1^k, at most 1 in
    # all, so it is off by no more than one gradient's bound (GRAD_REL of the model's gradient scale).
    bound = parity_bounds.GRAD_REL * parity_bounds.adam_gradient_scale(opt_cpu, steps)
    for p_dev, p_cpu in zip(lazy.parameters(), cpu.parameters()):
        got, want = opt_dev.state[p_dev]["exp_avg"].cpu(), opt_cpu.state[p_cpu]["exp_avg"]
        torch.testing.assert_close(got, want, rtol=0, atol=bound)


def test_a_compiled_function_writing_into_its_inputs_writes_them_as_eager_does():
    dev = xladev.device()

    @torch.compile(backend="xladev")
    def scale_(a, b):
        a.mul_(2).add_(b)
        b.zero_()
        return a.sum()

    plain, base = torch.arange(4.0), torch.arange(12.0).reshape(3, 4)
    plain_dev, base_dev = plain.to(dev), base.to(dev)
    # A plain tensor, then a view of a row (written through to its base); small integers: exact in float32.
    for target, target_dev in ((plain, plain_dev), (base[1], base_dev[1])):
        b, b_dev = torch.ones(4), torch.ones(4).to(dev)
        total = scale_(target_dev, b_dev)
        target.mul_(2).add_(b)
        b.zero_()
        assert torch.equal(plain_dev.cpu(), plain) and torch.equal(base_dev.cpu(), base)
        assert torch.equal(b_dev.cpu(), b) and float(total.cpu()) == float(target.sum())


def test_two_views_of_one_base_written_by_one_program_both_land():
    dev = xladev.device()
    f = torch.compile(lambda a, b: (a.add_(1), b.mul_(3)), backend="xladev")
    base = torch.arange(12.0).reshape(3, 4)
    base_dev = base.to(dev)
    xladev.mark_step()
    f(base_dev[0], base_dev[2])  # views of device data: the program gets the base and applies each view
    base[0].add_(1)
    base[2].mul_(3)
    assert torch.equal(base_dev.cpu(), base)


def test_a_written_input_whose_data_another_input_shares_is_a_clear_error_not_a_wrong_value():
    # TorchDynamo cannot see that b = a.detach() shares a's device data: the captured graph would read b's old
    # value after writing a (3a where eager gives 4a). The call raises instead, naming the inputs; nothing ran.
    dev = xladev.device()
    width = next(_widths)
    f = torch.compile(lambda a, b: a.mul_(2) + b, backend="xladev")
    a = torch.arange(float(width)).to(dev)
    with pytest.raises(xladev.AliasedInputsError, match=r"writes its input \d+, and its input \d+ shares that tensor's data"):
        f(a, a.detach())
    torch.testing.assert_close(a.cpu(), torch.arange(float(width)), rtol=0, atol=0)  # not written
    # Overlapping views are views to TorchDynamo, which hands the graph their base: eager's values, no error.
    base = torch.arange(12.0).reshape(3, 4)
    base_dev = base.to(dev)
    g = torch.compile(lambda a, b: a.add_(1) + b.sum(), backend="xladev")
    got = g(base_dev[0:2], base_dev[1])  # row 1 is in both
    want = base[0:2].add_(1) + base[1].sum()
    assert torch.equal(got.cpu(), want) and torch.equal(base_dev.cpu(), base)  # small integers: exact


def test_a_compiled_function_of_cpu_tensors_computes_each_call_and_is_no_graph_break(events):
    f = torch.compile(lambda t: t * 2, backend="xladev")
    assert torch.equal(f(torch.ones(3)), torch.full((3,), 2.0))
    assert torch.equal(f(torch.full((3,), 5.0)), torch.full((3,), 10.0))  # not the first call's value again
    # As PyTorch/XLA's test_all_cpu_tensor expects: a model wholly on the CPU does no xla work and reports none.
    model = nn.Linear(4, 2)
    x = torch.randn(3, 4)
    assert torch.equal(torch.compile(model, backend="xladev")(x), model(x))
    assert events.of(GraphBreak) == [] and events.of(Compile) == []


def test_a_compiled_copy_between_its_inputs_is_written_by_its_program_and_copies_the_value(events):
    dev = xladev.device()
    f = torch.compile(lambda a, b: a.copy_(b), backend="xladev")
    b = torch.randn(5)
    a_dev, b_dev = torch.zeros(5).to(dev), b.to(dev)
    f(a_dev, b_dev)
    # AOTAutograd makes the copy a value (aten.copy), then the write: one program, nothing lazy.
    assert [e.cause.kind for e in events.of(Execute)] == [CauseKind.DYNAMO_EXECUTE]
    assert not [e for e in events.of(GraphBreak) if e.by == "xladev"]
    assert torch.equal(a_dev.cpu(), b)
    b_dev.add_(1)  # the copy holds the value, not the other tensor's buffer
    xladev.mark_step()
    assert torch.equal(a_dev.cpu(), b) and torch.equal(b_dev.cpu(), b + 1)


def _buffer(t: torch.Tensor) -> int:
    return t._st.value.array.unsafe_buffer_pointer()


def test_a_compiled_write_into_an_input_reuses_its_buffer_unless_aliasing_is_off():
    # The old value of a tensor the program writes (an optimizer's parameter and state) is donated: the
    # program writes the new value into the same buffer, as the step barrier does (XLA_ENABLE_PARAM_ALIASING).
    from xladev._flags import config

    dev = xladev.device()
    width = next(_widths)
    f = torch.compile(lambda a, g: a.sub_(g, alpha=0.5), backend="xladev")
    # 0.5·g is exact, so a - 0.5·g rounds once, fused or not: eager and XLA agree bit for bit (torch.equal).
    a, g = torch.randn(width), torch.randn(width)
    a_dev, g_dev = a.to(dev), g.to(dev)
    # An upload may be the host array's own memory, which XLA never writes into: the first call's output is
    # XLA's, and from then on each call's new value is the next one's donor (no barrier between the calls).
    f(a_dev, g_dev)
    a.sub_(g, alpha=0.5)
    for _ in range(3):
        before, node = _buffer(a_dev), weakref.ref(a_dev._st.value)  # weak: a reference would stop the donation
        f(a_dev, g_dev)
        a.sub_(g, alpha=0.5)
        assert _buffer(a_dev) == before
        # Nothing else held the old value's node: it holds the new buffer (no node made and dropped per write).
        assert a_dev._st.value is node() and type(node()) is DataNode
    assert torch.equal(a_dev.cpu(), a)
    torch._dynamo.reset()
    with config.override(param_aliasing=False):
        f = torch.compile(lambda a, g: a.sub_(g, alpha=0.5), backend="xladev")
        before = _buffer(a_dev)
        f(a_dev, g_dev)
        a.sub_(g, alpha=0.5)
        assert _buffer(a_dev) != before and torch.equal(a_dev.cpu(), a)


def test_a_donated_inputs_old_value_still_read_elsewhere_is_copied_first(events):
    # A pending op on the old value, and an alias of its data made by copy_ of device data: each still reads
    # the buffer, so the program consumes a copy; nothing reads a deleted buffer, every value is eager's.
    dev = xladev.device()
    width = next(_widths)
    f = torch.compile(lambda a, g: a.mul_(g), backend="xladev")
    # Each product and a·3 round once: eager and XLA agree bit for bit (torch.equal).
    a, g = torch.randn(width), torch.randn(width)
    a_dev, g_dev = a.to(dev), g.to(dev)
    f(a_dev, g_dev)  # traced and compiled
    a.mul_(g)
    other = torch.empty(width, device=dev)
    other.copy_(a_dev)  # another tensor holding the same device data
    xladev.mark_step()
    pending = a_dev * 3  # recorded lazily: it reads the value before the next call
    before = _buffer(a_dev)
    events.clear()
    f(a_dev, g_dev)
    f(a_dev, g_dev)  # the second call's old value is the first call's output: donated
    assert [e.cause.kind for e in events.of(Execute)] == [CauseKind.DYNAMO_EXECUTE] * 2
    assert type(pending._st.value) is not DataNode
    want_pending, want_other = a * 3, a.clone()
    a.mul_(g).mul_(g)
    assert torch.equal(pending.cpu(), want_pending) and torch.equal(other.cpu(), want_other)
    assert torch.equal(a_dev.cpu(), a) and _buffer(other) == before
    assert other._st.value is not a_dev._st.value  # the alias's node was not handed the program's output


def test_a_pending_input_the_program_writes_is_computed_then_consumed_unless_still_read():
    # The written argument is pending at the call (updated lazily since the last barrier): its value is computed
    # with the call's inputs and donated. Once plain (the buffer its alone), once still read by a pending op.
    dev = xladev.device()
    width = next(_widths)
    f = torch.compile(lambda a, g: a.mul_(g), backend="xladev")
    a, g = torch.randn(width), torch.randn(width)
    a_dev, g_dev = a.to(dev), g.to(dev)
    f(a_dev, g_dev)
    a.mul_(g)
    a_dev.add_(1.0)  # pending
    a.add_(1.0)
    f(a_dev, g_dev)
    a.mul_(g)
    assert torch.equal(a_dev.cpu(), a)  # each op rounds once, fused or not
    a_dev.add_(1.0)
    a.add_(1.0)
    reader = a_dev * 3  # pending, reads the value computed for the call
    want = a * 3
    f(a_dev, g_dev)
    a.mul_(g)
    assert torch.equal(reader.cpu(), want) and torch.equal(a_dev.cpu(), a)


def test_a_weights_transpose_saved_for_the_backward_is_a_view_the_backward_program_applies(events):
    # nn.Linear's forward saves t(weight) for the backward. Computed by the forward program it would be a copy of
    # every weight each step; it is a view of the weight instead, and the backward program gets the weight's
    # buffer and transposes it itself: no graph runs between the two to materialize it.
    from xladev.runtime.record.tensor import XlaTensor

    width = next(_widths)
    dev = xladev.device()
    cpu, model = _mlp(width), _mlp(width).to(dev)
    compiled = torch.compile(model, backend="xladev")
    x = torch.randn(8, width)
    weights = {id(m.weight._st): name for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    saved = []

    def pack(t):
        if isinstance(t, XlaTensor) and id(t._st) in weights:
            saved.append((weights[id(t._st)], t._chain is not None, tuple(t.shape)))
        return t

    for step in range(2):
        model.zero_grad(set_to_none=True)
        saved.clear()
        events.clear()
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = compiled(x.to(dev))
        out.square().sum().backward()
        xladev.mark_step()
    assert ("2", True, (16, 3)) in saved  # the second Linear's t(weight): a view sharing the weight's storage
    kinds = [e.cause.kind for e in events.of(Execute)]
    assert kinds.count(CauseKind.DYNAMO_EXECUTE) == 2 and CauseKind.DYNAMO_INPUTS in kinds  # the loss's gradient
    inputs_graphs = [e for e in events.of(Execute) if e.cause.kind is CauseKind.DYNAMO_INPUTS]
    assert all(e.num_outputs == 1 for e in inputs_graphs)  # only the loss's gradient, no transpose
    cpu(x).square().sum().backward()
    parity_bounds.assert_gradients_close({n: p.grad.cpu() for n, p in model.named_parameters()},
                                         {n: p.grad for n, p in cpu.named_parameters()})


def test_a_compiled_loss_trains_in_two_programs_a_step_the_gradient_seed_a_constant(events):
    # The loss inside the forward graph: loss.backward()'s seed, ones_like(loss), depends on no value, so it is
    # computed once, at the first call, and handed to the backward program every step, with no graph before it.
    # (Computed at the first call as at later ones: a model TorchDynamo traces again, as transformers' first loss
    # call makes it, does not compute the seed once more in a new graph, and compile that, a step later.)
    width = next(_widths)
    dev = xladev.device()
    cpu, model = _mlp(width), _mlp(width).to(dev)
    loss_of = torch.compile(lambda a, b: nn.functional.cross_entropy(model(a), b), backend="xladev")
    torch.manual_seed(3)
    x, y = torch.randn(8, width), torch.randint(0, 3, (8,))
    for step in range(4):
        model.zero_grad(set_to_none=True)
        events.clear()
        loss = loss_of(x.to(dev), y.to(dev))
        loss.backward()
        xladev.mark_step()
        if step >= 1:  # the first call traces, and computes the seed once for every later call
            assert [e.cause.kind for e in events.of(Execute)] == [CauseKind.DYNAMO_EXECUTE] * 2
    nn.functional.cross_entropy(cpu(x), y).backward()
    assert loss.item() == pytest.approx(nn.functional.cross_entropy(cpu(x), y).item(), rel=parity_bounds.loss_rtol(),
                                        abs=0)
    parity_bounds.assert_gradients_close({n: p.grad.cpu() for n, p in model.named_parameters()},
                                         {n: p.grad for n, p in cpu.named_parameters()})


def test_ones_like_and_full_like_of_a_device_tensor_are_constants_with_its_shape_and_dtype():
    dev = xladev.device()
    x = torch.randn(2, 3).to(dev) * 2  # pending: the constant does not read it
    for got, want in ((torch.ones_like(x), torch.ones(2, 3)), (torch.zeros_like(x, dtype=torch.int32),
                                                               torch.zeros(2, 3, dtype=torch.int32)),
                      (torch.full_like(x, 7.5), torch.full((2, 3), 7.5))):
        # Nothing read from x: no operand, or only the fill value's scalar input.
        assert all(type(o) is ScalarNode for o in got._st.value.operands) and got.dtype == want.dtype
        assert torch.equal(got.cpu(), want)
    t = torch.randn(3, 2).to(dev).t()  # not contiguous: the general path, as before
    assert torch.equal(torch.ones_like(t).cpu(), torch.ones(2, 3))


@pytest.mark.parametrize("machine", ["cpu only", "with a gpu"])
def test_a_constant_made_inside_a_compiled_function_is_computed_on_a_machine_with_or_without_a_gpu(
        machine, monkeypatch):
    # On a machine with CUDA, torch's fake mode makes `torch.tensor(data, device=...)` on that device for real
    # during the trace; the xla constant then met the trace's fake tensors: "found at least two devices, xla:0
    # and xla:0". TorchDynamo saves and restores CUDA's generator when CUDA is available: stood in for here.
    if machine == "with a gpu":
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_rng_state", lambda *a: torch.empty(0, dtype=torch.uint8))
        monkeypatch.setattr(torch.cuda, "set_rng_state", lambda *a: None)
    width = next(_widths)

    @torch.compile(backend="xladev")
    def scaled(t):
        return t * torch.tensor([float(i) for i in range(width)], device=t.device) + torch.ones(width, device=t.device)

    got = scaled(torch.ones(2, width).to(xladev.device())).cpu()
    assert torch.equal(got, torch.arange(float(width)).expand(2, width) + 1)


def test_a_graph_traced_with_eagers_strides_views_an_elementwise_result_as_eager_does():
    # AOTAutograd records `view` where eager's strides allow it; xla's elementwise outputs are contiguous where
    # eager's keep a transposed layout. Mamba's compiled forward failed at its first call.
    a, b = torch.randn(2, 4, 6), torch.randn(2, 4, 6)

    def f(x, y):
        return (x.transpose(1, 2) * y.transpose(1, 2)).transpose(1, 2).reshape(8, 6) * 2

    dev = xladev.device()
    got = torch.compile(f, backend="xladev")(a.to(dev), b.to(dev))
    # One rounded product and an exact doubling per element, on either side: the same bits.
    assert torch.equal(got.cpu(), f(a, b))
