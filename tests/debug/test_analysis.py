"""PT_XLA_DEBUG_LEVEL analysis on real training loops: exact block format, causes, recompilation root causes."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import xladev
from xladev.debug import RecompilationError, assert_no_recompiles
from xladev.sinks.pt_xla_debug.sink import AnalysisSink, DebugOutput
from tests.source_lines import line_of

HERE = os.path.abspath(__file__)
_sizes = itertools.count(101)   # every test uses shapes no other test compiled (the compile cache is process-wide)


@pytest.fixture
def analysis(tmp_path):
    """Starts a real AnalysisSink writing to a file; yields a reader of what it wrote."""
    sinks = []

    def start(level=1):
        xladev.mark_step()
        sink = AnalysisSink(level, DebugOutput(str(tmp_path / f"debug{len(sinks)}.txt")))
        sink.start()
        sinks.append(sink)
        return sink

    def path(index=-1):
        return tmp_path / f"debug{index % len(sinks)}.txt"

    start.path = path
    start.text = lambda index=-1: path(index).read_text()
    yield start
    for sink in sinks:
        sink.stop()


def _blocks(text: str, prefix: str) -> list[list[str]]:
    """Blocks of one kind, each as its lines without the prefix."""
    blocks, current = [], None
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        body = line[len(prefix):]
        if body == "=" * 80 and current is None:
            current = []
        elif body == "=" * 80:
            blocks.append(current)
            current = None
        elif current is not None:
            current.append(body)
    return blocks


def _mlp(width):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 2)).to("xla")
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def test_golden_format_of_every_block(analysis):
    sink = analysis(level=2)
    width = next(_sizes)
    model, opt = _mlp(width)
    xladev.mark_step()
    opt.zero_grad()
    model(torch.ones(3, 4).to("xla")).sum().backward()
    opt.step()
    xladev.mark_step()  # golden
    text = analysis.text()
    assert text.startswith("\n"), "each block starts with an empty line"
    compile_blocks = _blocks(text, "Compilation Analysis: ")
    post = _blocks(text, "Post Compilation Analysis: ")
    execs = _blocks(text, "Execution Analysis: ")
    assert len(compile_blocks) == len(post) >= 1 and len(execs) >= 1
    block = compile_blocks[-1]
    assert block[0] == "Compilation Cause"
    assert block[1] == "  user torch_xla.sync"  # PyTorch/XLA 2.9's words
    info = block.index("Graph Info: ")
    assert re.fullmatch(r"  Graph Hash: [0-9a-f]{32}", block[info + 1])
    assert re.fullmatch(r"  Number of Graph Inputs: \d+", block[info + 2])
    assert re.fullmatch(r"  Number of Graph Outputs: \d+", block[info + 3])
    assert block[info + 4] == "Python Frame Triggered Execution: "
    frames = block[info + 5:-1]
    assert frames[0].startswith("  mark_step (") and "xladev/runtime/api/training.py:" in frames[0]
    assert frames[1] == f"> test_golden_format_of_every_block ({HERE}:{line_of(HERE, 'xladev.mark_step()  # golden')})"
    assert all(re.fullmatch(r"[ >] \S.* \(.+:\d+\)|  \.{10}", f) for f in frames)
    assert block[-1] == "-" * 80
    p = post[-1]
    names = ["Graph input size", "Graph output size", "Aliased Input size", "Intermediate tensor size",
             "Compiled program size"]
    assert [l.split(":")[0] for l in p[:5]] == names
    assert all(re.fullmatch(r"[A-Za-z ]+: \d+\.\d{6} GB", l) for l in p[:5])
    assert p[-1] == "-" * 80
    # the hash printed at compile equals the one printed when that graph runs
    compiled_hash = block[info + 1].split(": ")[1]
    exec_hashes = [b[b.index("Graph Info: ") + 1].split(": ")[1] for b in execs]
    assert compiled_hash in exec_hashes
    assert execs[-1][0] == "Execution Cause"


def test_max_frames_and_rule_lines(analysis, monkeypatch):
    monkeypatch.setattr(xladev.config, "_values", dict(xladev.config._values, debug_max_frame=1))
    analysis(level=1)

    def deep(n):
        if n == 0:
            torch.ones(next(_sizes), device="xla").sum().item()  # deep-read
            return
        deep(n - 1)

    deep(3)
    block = _blocks(analysis.text(), "Compilation Analysis: ")[-1]
    frames = block[block.index("Python Frame Triggered Execution: ") + 1:-1]
    # One frame, the dots of the cut, and the user's line past the cut: the one frame the block is for.
    assert len(frames) == 3 and frames[1] == "  " + "." * 10, frames
    assert frames[2].startswith("> deep (") and frames[2].endswith(f"{__file__}:{line_of(__file__, 'deep-read')})")


def test_batch_size_change_names_input_dim_and_line(analysis):
    analysis(level=1)
    width = next(_sizes)
    model, opt = _mlp(width)
    xladev.mark_step()
    for step in range(4):
        x = torch.randn(8 + step, 4).to("xla")   # batch grows each step
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
        xladev.mark_step()  # batch barrier
    text = analysis.text()
    line = line_of(HERE, "# batch grows each step")
    assert "Recompilation Cause" in text
    assert re.search(rf"- input \d+, created at test_batch_size_change_names_input_dim_and_line@test_analysis.py:{line}: "
                     r"shape f32\[9,4\] -> f32\[10,4\] \(dim 0: 9 -> 10\)", text)
    assert re.search(r"has compiled \d+ graphs so far, .*us compile time in total", text)
    # `xladev report` reads those blocks back whole: the Recompilation Cause section must not swallow
    # the graph info and frames after it (every recompiled graph lost its hash and site that way).
    from xladev.report.inputs import read_source

    compiled = read_source(str(analysis.path())).run.compiled  # each block lifted to its compile record
    hashes = re.findall(r"Compilation Analysis:   Graph Hash: (\w+)", text)
    assert [event.graph_hash for event in compiled] == hashes
    recompiled = [event for event in compiled if event.changes]
    assert recompiled and all(event.site == f"{HERE}:{line_of(HERE, 'xladev.mark_step()  # batch barrier')}"
                              for event in recompiled)
    assert all(event.record.recompile["previous"] in hashes and event.step_known for event in recompiled)
    assert all(not any(r.startswith(("Graph Hash", "Graph Info", "Python Frame")) for r in event.changes)
               for event in recompiled)


def test_changed_baked_constant_is_named(analysis):
    analysis(level=1)
    width = next(_sizes)
    h = torch.randn(2, width).to("xla")
    xladev.mark_step()
    for step in range(3):
        eps = 1e-5 * (step + 1)               # a Python float baked into the graph
        y = F.layer_norm(h, (width,), eps=eps).sum()  # layer-norm-eps
        xladev.mark_step()
    text = analysis.text()
    # Named at the line that passed it, without XLA_IR_DEBUG.
    at = f"test_changed_baked_constant_is_named@test_analysis.py:{line_of(HERE, 'layer-norm-eps')}"
    assert f"constant eps baked into aten::native_layer_norm at {at} changed: 1e-05 -> 2e-05" in text


def test_changing_learning_rate_is_an_input_not_a_recompile():
    width = next(_sizes)
    model, opt = _mlp(width)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (step + 1))
    with assert_no_recompiles(after_step=2):
        for step in range(6):
            opt.zero_grad()
            model(torch.ones(3, 4).to("xla")).sum().backward()
            opt.step()
            sched.step()
            xladev.mark_step()


def test_branch_adding_an_op_names_first_differing_op_and_line(analysis):
    analysis(level=1)
    width = next(_sizes)
    x = torch.randn(3, width).to("xla")
    xladev.mark_step()
    with xladev.config.override(ir_debug=True):
        for step in range(3):
            y = x * 2
            if step == 2:
                y = torch.tanh(y)              # the extra op on some steps
            y = y.sum()
            xladev.mark_step()
    text = analysis.text()
    line = line_of(HERE, "# the extra op on some steps")
    # The whole analysis in the message: this failed once in a full-suite run and never alone (see the
    # issue note); the text is what tells which graph the recompilation was compared against.
    assert f"aten::tanh at test_branch_adding_an_op_names_first_differing_op_and_line@test_analysis.py:{line}" in text, text
    assert "op sequence differs at node" in text or "more op(s), starting with aten::tanh" in text


def test_item_every_step_is_a_transfer_hot_spot(analysis):
    sink = analysis(level=1)
    width = next(_sizes)
    model, opt = _mlp(width)
    for step in range(12):
        opt.zero_grad()
        loss = model(torch.ones(3, 4).to("xla")).pow(2).mean()
        loss.backward()
        opt.step()
        xladev.mark_step()
        value = loss.item()                    # read every step
    line = line_of(HERE, "# read every step")
    text = analysis.text()
    warnings = [l for l in text.splitlines() if l.startswith("pt-xla-profiler: TransferFromDeviceTime too frequent")]
    assert len(warnings) == 1, "stated once, not on every step"
    assert f".item() at test_analysis.py:{line}" in warnings[0]
    summary = sink.summary_text()
    assert f".item() at test_analysis.py:{line} (test_item_every_step_is_a_transfer_hot_spot): 12 transfers, 48.00B, 1.00 per step" in summary


def test_print_is_named_as_the_cause(analysis, capsys):
    analysis(level=2)
    t = torch.ones(next(_sizes), device="xla") * 3
    print(t)
    text = analysis.text()
    # PyTorch/XLA's line first (its parsers read the line after "... Cause"), then xladev's exact one.
    for prefix in ("Compilation Analysis: ", "Execution Analysis: "):
        assert (f"{prefix.split()[0]} Cause\n{prefix}  most likely user code trying to access tensor value before "
                f"torch_xla.sync\n{prefix}  xladev: user code trying to access tensor value before torch_xla.sync: print"
                in text)


def test_fallback_is_named_with_the_op_and_its_reason(analysis):
    sink = analysis(level=1)
    x = torch.randn(3, next(_sizes)).to("xla") * 2
    torch.nonzero(x > 0)                       # data-dependent: runs on the CPU
    text = analysis.text()
    assert ("CPU fallback op aten::nonzero needs its inputs on the host (data-dependent output shape)") in text
    line = line_of(HERE, "# data-dependent: runs on the CPU")
    summary = sink.summary_text()
    entry = next(text for text in summary.splitlines() if f"aten::nonzero at test_analysis.py:{line} " in text and "call(s)" in text)
    assert "call(s); data-dependent output shape (one row per nonzero element" in entry


def test_healthy_loop_is_quiet_after_warmup(analysis):
    sink = analysis(level=1)
    width = next(_sizes)
    model, opt = _mlp(width)
    for step in range(15):
        opt.zero_grad()
        model(torch.ones(5, 4).to("xla")).pow(2).mean().backward()
        opt.step()
        xladev.mark_step()
        if step == 2:
            warm = analysis.text()
    assert analysis.text() == warm, "nothing printed after warm-up"
    assert "pt-xla-profiler" not in analysis.text()
    assert sink.findings() == {}


def test_assert_no_recompiles_passes_healthy_and_raises_with_cause():
    width = next(_sizes)
    model, opt = _mlp(width)

    def step(batch):
        opt.zero_grad()
        model(torch.ones(batch, 4).to("xla")).pow(2).mean().backward()
        opt.step()
        xladev.mark_step()

    with assert_no_recompiles(after_step=2):
        for _ in range(5):
            step(4)
    with pytest.raises(RecompilationError, match=r"dim 0: 4 -> 7") as info:
        with assert_no_recompiles(after_step=2):
            for batch in (4, 4, 4, 7):
                step(batch)
    assert "compiled after warm-up" in str(info.value)
    assert isinstance(info.value, AssertionError)


_SCRIPT = textwrap.dedent("""
    import torch, xladev
    w = torch.ones(4, 4, device='xla')
    for step in range(3):
        y = (torch.ones(2 + step, 4).to('xla') @ w).sum()
        xladev.mark_step()
    print('done')
""")


def _run(tmp_path, **env) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, **env))


def test_env_vars_end_to_end(tmp_path):
    on = _run(tmp_path, PT_XLA_DEBUG="true")
    assert on.returncode == 0, on.stderr
    assert "Execution Analysis: Execution Cause" in on.stderr        # PT_XLA_DEBUG turns everything on
    assert "xladev summary: 3 steps, 3 compiles" in on.stderr
    to_file = _run(tmp_path, PT_XLA_DEBUG_LEVEL="1", PT_XLA_DEBUG_FILE=str(tmp_path / "d.txt"))
    assert "Compilation Analysis" not in to_file.stderr
    written = (tmp_path / "d.txt").read_text()
    assert written.count("Compilation Cause") == 3 and "Execution Analysis" not in written
    other_rank = _run(tmp_path, PT_XLA_DEBUG_LEVEL="2", LOCAL_RANK="1")
    assert "Analysis" not in other_rank.stderr


def test_a_bad_debug_level_is_a_clear_error(tmp_path):
    # (A PT_XLA_DEBUG_FILE that cannot be written is no error: one line, and the run goes on; tests/faults.)
    result = _run(tmp_path, PT_XLA_DEBUG_LEVEL="abc")
    assert result.returncode != 0
    assert "PT_XLA_DEBUG_LEVEL='abc' is not valid" in result.stderr
