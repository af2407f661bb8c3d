"""xladev's PT_XLA_DEBUG blocks carry sections PyTorch/XLA's do not (`Process:`, `Collectives:`, `Sharding:`): the
reader keeps each section's lines out of the others'.

The block below is one xladev wrote for rank 1 of a two-process DistributedDataParallel job (DDP's constructor
reading the parameter shapes of every rank), with the paths made neutral.
"""

from __future__ import annotations

from xladev.report import load
from xladev.report.inputs import read_source

PREFIX = "Execution Analysis: "
BLOCK = """
================================================================================
Execution Cause
  most likely user code trying to access tensor value before torch_xla.sync
  xladev: user code trying to access tensor value before torch_xla.sync: .item()
Process: 
  rank 1 of 2 (pid 11098, vm)
Collectives: 
  xla::all_gather of 8.00B from this rank, at ddp.py:7 (<module>)
  the graph runs on every rank at once: each waits for the others to reach it
Graph Info: 
  Graph Hash: 761dee9004455b5fd38a67b84d3fb327
  Number of Graph Inputs: 1
  Number of Graph Outputs: 1
Python Frame Triggered Execution: 
  torch_dispatch (/opt/venv/lib/python3.11/site-packages/xladev/runtime/record/dispatch.py:249)
  _verify_param_shape_across_processes (/opt/venv/lib/python3.11/site-packages/torch/distributed/utils.py:286)
  __init__ (/opt/venv/lib/python3.11/site-packages/torch/nn/parallel/distributed.py:1064)
> <module> (/home/user/run/ddp.py:7)
--------------------------------------------------------------------------------
================================================================================
"""


def test_the_cause_of_a_block_is_its_cause_lines_only(tmp_path):
    path = tmp_path / "debug.txt"
    path.write_text("".join(f"{PREFIX}{line}\n" for line in BLOCK.strip("\n").splitlines()))
    debug = read_source(str(path)).debug
    assert debug.run.executions == 1
    [(site, cause, graph)] = debug.run.causes.by_key
    assert cause == "user code trying to access tensor value before torch_xla.sync: .item()"
    assert (site, graph) == ("/home/user/run/ddp.py:7", "761dee9004455b5fd38a67b84d3fb327")


COMPILE_PREFIX = "Compilation Analysis: "
RECOMPILED = """
================================================================================
Compilation Cause
  user torch_xla.sync
Recompilation Cause
  compared with graph 2eb12d115cefec474adc1d5b1f32d8f9 from the same site, in step 15:
  - constant size baked into aten::expand at <module>@train.py:12 (backward) changed: (3,) -> (2,)
  /home/user/run/train.py:12 (<module>) has compiled 2 graphs so far, 220ms630.297us compile time in total
Graph Info: 
  Graph Hash: c4de9671d3351244a44d4b8a8178dfef
  Number of Graph Inputs: 0
  Number of Graph Outputs: 1
Python Frame Triggered Execution: 
  backward (/opt/venv/lib/python3.11/site-packages/torch/_tensor.py:623)
> <module> (/home/user/run/train.py:12)
--------------------------------------------------------------------------------
================================================================================
"""


def test_a_size_that_changed_in_the_backward_gets_the_fix_for_a_size(tmp_path):
    """A constant of the backward (its sizes follow the forward's) has no line of its own, but its op still says
    it is a size: the fix is a fixed or padded length, never a device tensor, which cannot set a shape."""
    from xladev.report.run_facts import repeated_recompiles

    path = tmp_path / "debug.txt"
    path.write_text("".join(f"{COMPILE_PREFIX}{line}\n" for line in RECOMPILED.strip("\n").splitlines())
                    + "xladev summary: 16 steps, 2 compiles, 0 device->host transfers\n")
    report = load(str(path))
    repeated = repeated_recompiles(report.sources, 16)
    assert (repeated.op, repeated.kind, repeated.triggers) == ("aten::expand", "constant", ())
    finding = next(f for f in report.findings if f.rule == "recompilation")
    assert "cannot be a device tensor" in finding.fix and "device=device" not in finding.fix, finding.fix
