"""IR/HLO introspection, graph dumps, `xladev diff`, XLA's own dumps, eager debug mode and compile failures."""

from __future__ import annotations

import glob
import io
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
from xladev import debug
from xladev.cli.main import main as cli
from xladev.events import Execute, bus
from xladev.sinks.save_tensors import DumpSink
from tests.source_lines import line_of

HERE = os.path.abspath(__file__)
_widths = itertools.count(301)


def _model_output(width):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, width), nn.GELU(), nn.LayerNorm(width), nn.Linear(width, 2)).to("xla")
    xladev.mark_step()
    out = model(torch.ones(3, 5).to("xla")).softmax(-1)  # the model's output line
    return out


def test_ir_text_names_ops_shapes_and_roots():
    out = _model_output(next(_widths))
    text = debug.get_tensors_text([out])
    assert text.startswith("IR {\n") and text.endswith("}\n")
    assert re.search(r"%\d+ = f32\[3,2\]\{1,0\} aten::_softmax\(%\d+\), xla_shape=f32\[3,2\]\{1,0\}, dim=-1, half_to_float=False, ROOT=0", text)
    for op in ("aten::addmm", "aten::gelu", "aten::native_layer_norm", "xla::device_data"):
        assert op in text
    # introspection has no side effect: the tensor is still pending and computes the same
    assert out._st.value.op.name == "aten::_softmax"
    hash_before = debug.get_graph_hash([out])
    seen = []
    with bus.subscribe(lambda e: seen.append(e.graph_hash), Execute):
        values = out.cpu()
    assert seen == [hash_before]
    assert torch.allclose(values.sum(-1), torch.ones(3))


def test_hlo_and_stablehlo_come_from_the_same_graph_and_compile():
    from xladev.runtime.api.introspect import graph_of, lowered

    out = _model_output(next(_widths))
    hlo = debug.get_tensors_hlo([out])
    stablehlo = debug.get_stablehlo([out])
    assert hlo.startswith("HloModule jit_xladev_") and "ENTRY" in hlo
    assert "func.func public @main" in stablehlo and "stablehlo.dot_general" in stablehlo
    name = "xladev_" + debug.get_graph_hash([out])[:16]
    assert name in hlo and name in stablehlo
    compiled = lowered(graph_of([out])).compile()
    assert compiled.memory_analysis() is not None
    assert "stablehlo" in debug.get_stablehlo()          # everything pending, when no tensors are given


def test_ir_debug_and_hlo_debug_show_the_user_line():
    width = next(_widths)
    with xladev.config.override(ir_debug=True, hlo_debug=True):
        x = torch.ones(2, width).to("xla")
        y = torch.tanh(x * 3)   # the traced line
        text = debug.get_tensors_text([y])
        hlo = debug.get_tensors_hlo([y])
    line = line_of(HERE, "# the traced line")
    assert re.search(rf"aten::tanh\(%\d+\), xla_shape=f32\[2,{width}\]\{{1,0\}}, "
                     rf"location=test_ir_debug_and_hlo_debug_show_the_user_line@test_dumps.py:{line}", text)
    assert re.search(rf'op_name="[^"]*aten::tanh\[test_ir_debug_and_hlo_debug_show_the_user_line at test_dumps.py:{line}\]', hlo)


def test_dot_output_is_graphviz():
    out = _model_output(next(_widths))
    dot = debug.get_tensors_dot([out])
    lines = dot.strip().splitlines()
    assert lines[0] == "digraph G {" and lines[-1] == "}"
    defined = set()
    for line in lines[1:-1]:
        node = re.fullmatch(r'  (node\d+) \[label="[^"]*"(, style="filled", fillcolor="lightblue")?\]', line)
        edge = re.fullmatch(r"  (node\d+) -> (node\d+)", line)
        assert node or edge, line
        if node:
            defined.add(node.group(1))
        else:
            assert edge.group(1) in defined and edge.group(2) in defined
    assert dot.count("fillcolor") == 1


@pytest.fixture
def dump(tmp_path):
    sinks = []

    def start(fmt="text"):
        xladev.mark_step()
        path = tmp_path / f"dump-{fmt}.txt"
        sink = DumpSink(str(path), fmt)
        sink.start()
        sinks.append(sink)
        return path

    yield start
    for sink in sinks:
        sink.stop()


def test_dump_has_one_record_per_step_with_the_executed_hashes(dump):
    path = dump("text")
    width = next(_widths)
    torch.manual_seed(0)
    model = nn.Linear(4, width).to("xla")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hashes = []
    with bus.subscribe(lambda e: hashes.append(e.graph_hash), Execute):
        for _ in range(3):
            opt.zero_grad()
            model(torch.ones(2, 4).to("xla")).sum().backward()
            opt.step()
            xladev.mark_step()
    from xladev.dumps.dump_file import read_records

    records = read_records(str(path), [])
    assert [r.graph_hash for r in records] == hashes and len(records) == 3
    assert [r.step for r in records] == [0, 1, 2]
    assert records[0].frames[0][0] == "mark_step" and records[0].site.startswith(HERE)
    assert all(r.graph_text.startswith("IR {") and r.root_hashes for r in records)


@pytest.mark.parametrize("fmt,start", [("hlo", "HloModule jit_xladev_"), ("stablehlo", "module @jit_xladev_"),
                                       ("dot", "digraph G {")])
def test_dump_formats(dump, fmt, start):
    path = dump(fmt)
    (torch.ones(3, next(_widths)).to("xla") * 2).sum().cpu()
    text = path.read_text()
    body = text.split("## BEGIN_GRAPH\n", 1)[1]
    assert body.startswith(start)
    assert text.count("## END_GRAPH") == 1


def _scenario(dump_path_fixture, changing):
    path = dump_path_fixture("text")
    width = next(_widths)
    w = torch.randn(4, width).to("xla")
    xladev.mark_step()
    for step in range(4):
        batch = 2 + (step >= 2) if changing == "shape" else 2
        eps = 1e-5 if changing == "shape" or step < 3 else 1e-3
        y = F.layer_norm(torch.ones(batch, 4).to("xla") @ w, (width,), eps=eps).sum()
        xladev.mark_step()
    return path


def _cli(*args):
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = cli(list(args))
    finally:
        sys.stdout, sys.stderr = old
    return code, out.getvalue(), err.getvalue()


def test_diff_file_names_the_changed_dimension_and_step(dump):
    path = _scenario(dump, "shape")
    code, out, err = _cli("diff", "--file", str(path))
    assert code == 0, err
    assert "4 record(s), 2 distinct graph(s)" in out
    assert re.search(r"step 2 \(record 3\): graph \w{12} -> \w{12}\n    - input 0: shape f32\[2,4\] -> f32\[3,4\] \(dim 0: 2 -> 3\)", out)


def test_diff_names_a_changed_constant(dump):
    path = _scenario(dump, "constant")
    code, out, _ = _cli("diff", "--file", str(path))
    assert code == 0
    assert "step 3 (record 4)" in out
    assert "constant eps baked into aten::native_layer_norm changed: 1e-05 -> 0.001" in out
    code, out, _ = _cli("diff", f"{path}:1", f"{path}:4")
    assert code == 0 and "constant eps" in out and out.startswith("A: record 1 (step 0)")
    code, out, _ = _cli("diff", "--file", str(path), "1", "2")
    assert "identical" in out


def test_diff_bad_input_is_a_clear_message(dump, tmp_path):
    path = _scenario(dump, "shape")
    code, _, err = _cli("diff", "--file", str(tmp_path / "missing.txt"))
    assert code == 2 and err.startswith("xladev diff: cannot read") and "Traceback" not in err
    code, _, err = _cli("diff", "--file", str(path), "1", "deadbeef")
    assert code == 2 and "no graph with hash 'deadbeef'" in err
    code, _, err = _cli("diff", "--file", str(path), "1", "99")
    assert code == 2 and "record 99 does not exist" in err
    text = path.read_text()
    cut = tmp_path / "cut.txt"
    cut.write_text(text[: text.rindex("## END_GRAPH")])
    code, out, err = _cli("diff", "--file", str(cut))
    assert code == 0 and "last record is truncated" in err and "3 records" in out
    garbage = tmp_path / "garbage.txt"
    garbage.write_bytes(b"\x00\x01 not a dump")
    code, _, err = _cli("diff", "--file", str(garbage))
    assert code == 2 and "holds no complete graph record" in err


def test_dump_machinery_is_off_when_unset():
    from xladev.sinks import save_tensors as dumps

    assert dumps._sink is None
    assert not any(isinstance(getattr(s.handler, "__self__", None), DumpSink) for s in bus._subs)


def test_eager_debug_mode_matches_lazy_mode():
    def program():
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 2)).to("xla")
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        for _ in range(2):
            opt.zero_grad()
            model(torch.arange(12.0).view(2, 6).to("xla")).pow(2).mean().backward()
            opt.step()
            xladev.mark_step()
        return [p.detach().cpu() for p in model.parameters()]

    lazy = program()
    import xladev.debug.metrics as met

    before = met.counter_value("ExecuteGraph") or 0
    with xladev.config.override(eager_debug_mode=True):
        eager = program()
    assert (met.counter_value("ExecuteGraph") or 0) - before > 20   # op by op
    for a, b in zip(lazy, eager):
        torch.testing.assert_close(a, b)


def test_xla_flags_dump_to_writes_xla_dumps_named_after_the_graph(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("import torch, xladev\nprint(xladev.debug.get_graph_hash([torch.ones(3, device='xla') * 5]))\n"
                      "(torch.ones(3, device='xla') * 5).cpu()\n")
    env = dict(os.environ, XLA_FLAGS=f"--xla_dump_to={tmp_path / 'xla'}")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    graph_hash = result.stdout.strip().splitlines()[-1]
    dumped = glob.glob(str(tmp_path / "xla" / f"*jit_xladev_{graph_hash[:16]}*"))
    assert any("before_optimizations" in f for f in dumped), os.listdir(tmp_path / "xla")[:10]


def test_invalid_dump_format_is_a_clear_error(tmp_path):
    result = subprocess.run([sys.executable, "-c", "import xladev; xladev.device()"], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, XLA_SAVE_TENSORS_FILE=str(tmp_path / "d"), XLA_SAVE_TENSORS_FMT="png"))
    assert result.returncode != 0 and "XLA_SAVE_TENSORS_FMT='png' is not valid" in result.stderr
    assert "text, dot, hlo, stablehlo" in result.stderr


def test_the_dump_file_is_named_per_ordinal_and_found_by_its_plain_name(tmp_path):
    """XLA_SAVE_TENSORS_FILE=PATH writes PATH.0 as PyTorch/XLA does; `xladev diff --file PATH` reads it."""
    code = ("import torch, xladev\n"
            "x = torch.ones(3, device=xladev.device())\n"
            "for i in range(2):\n"
            "    x = x * 2\n"
            "    xladev.mark_step()\n")
    path = tmp_path / "dump.txt"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, XLA_SAVE_TENSORS_FILE=str(path)))
    assert result.returncode == 0, result.stderr[-2000:]
    assert not path.exists() and (tmp_path / "dump.txt.0").exists()
    status, out, err = _cli("diff", "--file", str(path))
    assert status == 0 and "2 records" in out, (out, err)
