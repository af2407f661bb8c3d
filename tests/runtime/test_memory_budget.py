"""The device memory budget (XLADEV_DEVICE_MEMORY_LIMIT) and its out-of-memory explainer, in real processes.

A model's batch doubles until a graph no longer fits the budget. The explainer names the activation's line and a
batch, and that batch then runs (against PyTorch eager on the CPU). The sizes the run records (event log, the Post
Compilation Analysis) are XLA's own: the same as jax's `memory_analysis()` of the same computation.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests.source_lines import line_of
from xladev.report import load
from xladev.report.document import Table, report_document

LIMIT = 12 * 1024 ** 2  # 12MiB: batch 2048 needs ~9MiB (its [2048,1024] activation is 8MiB), batch 4096 ~17MiB
GB = 1024 ** 3

_SCRIPT = textwrap.dedent("""
    import json, re, sys
    import jax, jax.numpy as jnp, torch, xladev
    from xladev.runtime.execute.execution import XlaExecutionError

    torch.manual_seed(0)
    w1, w2 = torch.randn(64, 1024), torch.randn(1024, 8)
    dw1, dw2 = w1.to("xla"), w2.to("xla")

    def forward(x, a, b):
        h = torch.tanh(x @ a)  # the activation
        return h @ b

    def check(x, y):
        # float32 rounding bound of the two dot products (K=64, then K=1024) and tanh, against float64 eager
        eps = torch.finfo(torch.float32).eps
        x64, a64, b64 = x.double(), w1.double(), w2.double()
        h64 = torch.tanh(x64 @ a64)
        bound = eps * (1024 * (h64.abs() @ b64.abs())
                       + ((1 - h64 ** 2) * 64 * (x64.abs() @ a64.abs()) + 4 * h64.abs()) @ b64.abs())
        err = (y.double() - h64 @ b64).abs()
        assert bool((err <= bound).all()), float((err - bound).max())

    out = {"ran": []}
    batch = 64
    largest = int(sys.argv[1]) if len(sys.argv) > 1 else 8192  # bounded, should the budget never stop it
    while batch <= largest:
        x = torch.randn(batch, 64)
        try:
            y = forward(x.to("xla"), dw1, dw2)
            xladev.sync()
            check(x, y.cpu())
        except XlaExecutionError as exc:
            out["error"], out["failed"] = str(exc), batch
            break
        out["ran"].append(batch)
        batch *= 2
    if "error" not in out:
        print(json.dumps(out))
        sys.exit(0)
    proposed = int(re.search(r"try a batch of (\\d+)", out["error"]).group(1))
    x = torch.randn(proposed, 64)
    y = forward(x.to("xla"), dw1, dw2)
    xladev.sync()
    check(x, y.cpu())
    out["proposed"] = proposed
    sds = jax.ShapeDtypeStruct
    m = jax.jit(lambda x, a, b: jnp.tanh(x @ a) @ b).lower(
        sds((out["failed"], 64), jnp.float32), sds((64, 1024), jnp.float32), sds((1024, 8), jnp.float32),
    ).compile().memory_analysis()
    out["jax"] = {"argument": m.argument_size_in_bytes, "output": m.output_size_in_bytes,
                  "alias": m.alias_size_in_bytes, "temp": m.temp_size_in_bytes}
    print(json.dumps(out))
""")


def _run(tmp_path, *args, **env) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **env), cwd=tmp_path)


@pytest.fixture(scope="module")
def budget_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("budget")
    done = _run(tmp, XLADEV_DEVICE_MEMORY_LIMIT=str(LIMIT), XLADEV_EVENT_LOG=str(tmp / "run.jsonl"),
                PT_XLA_DEBUG_LEVEL="1", PT_XLA_DEBUG_FILE=str(tmp / "debug.txt"))
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp, json.loads(done.stdout.splitlines()[-1])


def test_the_batch_doubles_until_the_budget_and_the_explainer_says_why(budget_run):
    tmp, out = budget_run
    assert out["ran"] == [64, 128, 256, 512, 1024, 2048] and out["failed"] == 4096
    error = out["error"]
    assert error.startswith("graph ") and "failed while running: RESOURCE_EXHAUSTED: graph " in error
    assert f"over the device memory limit of {12:.2f}MB (XLADEV_DEVICE_MEMORY_LIMIT)" in error
    activation = line_of(tmp / "train.py", "h = torch.tanh(x @ a)")
    biggest = error.split("biggest values it computes", 1)[1].split("biggest inputs", 1)[0]
    assert f"16.00MB f32[4096,1024]{{1,0}} aten::tanh at forward@train.py:{activation}" in biggest
    assert "it runs at train.py:" in error.splitlines()[0]  # the user line that ran the graph


def test_the_batch_it_proposes_runs(budget_run):
    _, out = budget_run
    assert 2048 < out["proposed"] < 4096 and out["proposed"] % 8 == 0  # ran under the same budget, checked eager


def test_the_sizes_are_xlas_own(budget_run):
    tmp, out = budget_run
    records = [json.loads(line) for line in (tmp / "run.jsonl").read_text().splitlines()]
    failed = next(r for r in records if r["type"] == "execute_failed")
    compiled = next(r for r in records if r["type"] == "compile" and r["hash"] == failed["hash"])
    memory = compiled["memory"]
    assert {k: memory[k] for k in out["jax"]} == out["jax"]  # jax's memory_analysis of the same computation
    assert memory["argument"] == 4 * (4096 * 64 + 64 * 1024 + 1024 * 8) and memory["output"] == 4 * 4096 * 8
    assert failed["message"].startswith("RESOURCE_EXHAUSTED: ")
    need = memory["argument"] + memory["output"] - memory["alias"] + memory["temp"] + memory["generated_code"]
    assert f"= {need / 1024 ** 2:.2f}MB (XLA's memory analysis)" in failed["message"]
    # PyTorch/XLA's Post Compilation Analysis block of that graph, in its words and GB with 6 decimals.
    text = (tmp / "debug.txt").read_text()
    block = text.split(f"Graph Hash: {failed['hash']}", 1)[1].split("Post Compilation Analysis: ====", 2)[1]
    for name, key in (("Graph input", "argument"), ("Graph output", "output"), ("Aliased Input", "alias"),
                      ("Intermediate tensor", "temp"), ("Compiled program", "generated_code")):
        assert f"Post Compilation Analysis: {name} size: {memory[key] / GB:.6f} GB\n" in block


def test_the_report_explains_the_out_of_memory_from_the_event_log_and_the_debug_log(budget_run):
    tmp, out = budget_run
    for name in ("run.jsonl", "debug.txt"):
        report = load(str(tmp / name))
        first = report.findings[0]
        assert first.rule == "out-of-memory" and first.severity == "error", name
        assert first.numbers["limit_bytes"] == LIMIT and first.numbers["batch_that_fits"] == out["proposed"]
        assert not any(f.rule == "execute-failure" for f in report.findings), name  # said once, as out of memory
        activation = line_of(tmp / "train.py", "h = torch.tanh(x @ a)")
        assert any(f"aten::tanh at forward@train.py:{activation}" in line for line in first.evidence), name
        assert f"Lower the batch to {out['proposed']}" in first.fix
    # The report's per-graph table: the failing graph first, with XLA's sizes and what it needs.
    table = next(t for section in report_document(load(str(tmp / "run.jsonl"))).sections for t in section.items
                 if isinstance(t, Table) and t.title.startswith("Graphs: device memory"))
    failed = next(json.loads(line) for line in (tmp / "run.jsonl").read_text().splitlines()
                  if '"execute_failed"' in line)
    assert table.rows[0][:2] == [failed["hash"][:12], "train.py:" + table.rows[0][1].split(":")[1]]
    assert table.rows[0][5] == "16MB"  # its [4096,1024] f32 activation in temporaries
    # The 5 graphs that need most; the others are counted, and --format json lists them all.
    assert len(table.rows) == 5 and "graphs that need less not shown (all in --format json)" in table.note


# A training step (forward, backward, SGD with the parameters donated at the barrier) at batch sys.argv[1], doubled
# until the budget stops it (or only that batch, with a second argument): the activation and its gradient scale.
_TRAIN = textwrap.dedent("""
    import json, sys, torch, xladev
    from torch import nn
    from xladev.runtime.execute.execution import XlaExecutionError

    torch.manual_seed(0)
    cpu = nn.Sequential(nn.Linear(64, 1024), nn.Tanh(), nn.Linear(1024, 8))
    model = nn.Sequential(nn.Linear(64, 1024), nn.Tanh(), nn.Linear(1024, 8))
    model.load_state_dict(cpu.state_dict())
    model = model.to("xla")
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(x, y):
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)  # the activation
        loss.backward()
        opt.step()
        xladev.mark_step()
        return loss

    out, batch = {"ran": []}, int(sys.argv[1])
    while batch <= 16384:
        x, y = torch.randn(batch, 64), torch.randn(batch, 8)
        try:
            loss = step(x.to("xla"), y.to("xla"))
        except XlaExecutionError as exc:
            out["error"] = str(exc)
            break
        out["ran"].append(batch)
        out["loss"], out["eager"] = loss.item(), nn.functional.mse_loss(cpu(x), y).item()
        if len(sys.argv) > 2:
            break
        batch *= 2
    print(json.dumps(out))
""")


def test_a_training_step_out_of_budget_proposes_a_batch_that_trains(tmp_path):
    script = tmp_path / "train_step.py"
    script.write_text(_TRAIN)
    env = dict(os.environ, XLADEV_DEVICE_MEMORY_LIMIT="24MB")
    run = lambda *args: subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True,  # noqa
                                       timeout=300, env=env, cwd=tmp_path)
    doubled = run("1024")
    assert doubled.returncode == 0, doubled.stderr[-3000:]
    out = json.loads(doubled.stdout.splitlines()[-1])
    assert out["ran"] == [1024, 2048] and "error" in out
    error = out["error"]
    line = line_of(script, "# the activation")
    biggest = error.split("biggest values it computes", 1)[1].split("biggest inputs", 1)[0]
    assert f"16.00MB f32[4096,1024]{{1,0}} aten::tanh at step@train_step.py:{line}" in biggest
    assert f"aten::tanh_backward at step@train_step.py:{line + 1} (backward)" in biggest  # loss.backward()
    proposed = int(re.search(r"try a batch of (\d+)", error).group(1))
    assert 2048 < proposed < 4096
    # A new process at that batch trains under the same budget (the failed step's parameters are not reused).
    fresh = run(str(proposed), "once")
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    trained = json.loads(fresh.stdout.splitlines()[-1])
    assert trained["ran"] == [proposed] and "error" not in trained
    # ... and it is about the largest that does: 5% more does not fit (the activation's transpose and gradients
    # count as scaling with the batch, though their batch dimension is not the first).
    larger = json.loads(run(str(proposed * 105 // 100), "once").stdout.splitlines()[-1])
    assert larger["ran"] == [] and "RESOURCE_EXHAUSTED" in larger["error"]
    # The first step's loss against eager on the CPU, within float32's first-order rounding bound for it: two dot
    # products (K=64, then 1024) squared, then a mean of proposed*8 non-negative terms.
    eps = 2.0 ** -23
    assert abs(trained["loss"] - trained["eager"]) <= (2 * (64 + 1024) + proposed * 8) * eps * trained["eager"]


def test_without_a_budget_nothing_changes(tmp_path):
    done = _run(tmp_path, "4096")  # no XLADEV_DEVICE_MEMORY_LIMIT: the batch that failed runs
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"ran": [64, 128, 256, 512, 1024, 2048, 4096]}


@pytest.mark.parametrize("value", ["2 gigs", "-5MB", "0", "1.5XB"])
def test_a_malformed_budget_names_the_variable_and_the_forms(tmp_path, value):
    done = subprocess.run([sys.executable, "-c", "import torch, xladev; torch.ones(2, device='xla')"],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, XLADEV_DEVICE_MEMORY_LIMIT=value))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"XLADEV_DEVICE_MEMORY_LIMIT={value!r} is not valid" in done.stderr
    assert "2GB, 512MiB" in done.stderr


def test_memory_info_gives_the_budget_as_the_limit():
    import xladev
    import xladev.debug

    host = xladev.debug.memory_info()["bytes_limit"]
    with xladev.config.override(device_memory_limit=LIMIT):
        assert xladev.debug.memory_info()["bytes_limit"] == LIMIT  # what graphs are held to
    with xladev.config.override(device_memory_limit=host * 2):
        assert xladev.debug.memory_info()["bytes_limit"] == host  # a budget above the device's changes nothing
    assert LIMIT < host


def test_a_graph_without_a_batch_says_its_batch_cannot_be_estimated_and_the_process_goes_on():
    import torch
    import xladev
    from xladev.runtime.execute.execution import XlaExecutionError

    with xladev.config.override(device_memory_limit=1024 ** 2):
        vector = torch.arange(2 ** 20, dtype=torch.float32, device="xla")  # 4MiB, one dimension: no batch
        with pytest.raises(XlaExecutionError, match="RESOURCE_EXHAUSTED") as failed:
            (vector * 2 + 1).sum().item()
        small = (torch.arange(8, dtype=torch.float32, device="xla") * 2).cpu()  # a graph that fits still runs
    assert "largest batch that fits: cannot be estimated (no input of two dimensions or more" in str(failed.value)
    assert small.tolist() == [2.0 * i for i in range(8)]


_CYCLE = textwrap.dedent("""
    import gc, json, sys, torch, xladev
    from xladev.runtime.execute.execution import XlaExecutionError

    # The same ops once first: the first `mul` imports torch._dynamo from its meta kernel, and torch.fx keeps a
    # frame of that import in a reference cycle, which holds the temporary `torch.ones` (only the cycle below
    # should hold anything).
    warm = torch.ones(1024, 1024, device="xla") * 3
    xladev.sync()
    del warm
    gc.collect()
    gc.disable()  # the cycle below stays until something collects it
    x = torch.ones(1024, 1024, device="xla")  # 4MiB
    held = torch.ones(1024, 1024, device="xla") * 3  # 4MiB more on the device
    xladev.sync()
    cycle = [held]
    cycle.append(cycle)
    if sys.argv[1] == "garbage":
        del held, cycle  # only garbage in a reference cycle holds it now
    out = {}
    # x * 2 needs 8MiB (its argument and output); with `held` it is over 10MiB.
    with xladev.config.override(device_memory_limit=10 * 1024 ** 2):
        try:
            y = x * 2
            xladev.sync()
            out["sum"] = float(y.sum().cpu())
        except XlaExecutionError as exc:
            out["error"] = str(exc)
    print(json.dumps(out))
""")


@pytest.mark.parametrize("holder", ["garbage", "kept"])
def test_buffers_only_garbage_holds_are_collected_before_a_graph_is_refused(tmp_path, holder):
    done = subprocess.run([sys.executable, "-c", _CYCLE, holder], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout.splitlines()[-1])
    if holder == "garbage":
        assert out == {"sum": 2.0 * 1024 * 1024}
    else:  # a tensor the script still holds is its memory: the graph is refused, as before
        assert "RESOURCE_EXHAUSTED" in out["error"] and "over the device memory limit of 10.00MB" in out["error"]
