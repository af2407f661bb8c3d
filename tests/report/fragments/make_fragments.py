"""Writes the real-world fragments of this folder (see README.md): `python tests/report/fragments/make_fragments.py`.

Each is PyTorch/XLA's own output grammar (its metrics report, XLA_METRICS_FILE records, its PT_XLA_DEBUG blocks,
its old unlowered-op summary), with numbers of the kind users paste into issues. Values are formatted by
xladev's formatter of PyTorch/XLA's grammar (`xladev.schema.units`), so each number parses back exactly.
"""

from __future__ import annotations

from pathlib import Path

from xladev.schema import units

HERE = Path(__file__).resolve().parent
PCT = ("1%", "5%", "10%", "20%", "50%", "80%", "90%", "95%", "99%")


def _metric(name: str, samples: list[float], kind: str = units.TIME, seconds: float = 10.0) -> str:
    """A 2.x `Metric:` block of these samples (all kept), over `seconds` of the run."""
    ordered = sorted(samples)
    total = sum(samples)
    fmt = lambda v: units.format_kind(kind, v)  # noqa: E731
    lines = [f"Metric: {name}", f"  TotalSamples: {len(samples)}", f"  Accumulator: {fmt(total)}"]
    if len(samples) > 1:
        lines += [f"  ValueRate: {fmt(total / seconds)} / second", f"  Rate: {len(samples) / seconds:g} / second"]
    picks = [ordered[min(int(float(p[:-1]) / 100 * len(ordered)), len(ordered) - 1)] for p in PCT]
    lines.append("  Percentiles: " + "; ".join(f"{p}={fmt(v)}" for p, v in zip(PCT, picks)))
    return "\n".join(lines) + "\n"


def _counter(name: str, value: int) -> str:
    return f"Counter: {name}\n  Value: {value}\n"


def _report(*, steps: int, compile_ms: list[float], executions: int, transfers: int, items: int = 0,
            graph_nodes: int = 180, extra: dict | None = None, seconds: float = 10.0) -> str:
    """A PyTorch/XLA 2.x metrics report after `steps` steps (its three groups: lazy metrics, counters, runtime)."""
    text = _metric("DeviceLockWait", [12e3] * executions, seconds=seconds)
    text += _metric("LazyTracing", [9e3] * (graph_nodes * steps), seconds=seconds)
    text += _metric("TensorsGraphSize", [float(graph_nodes)] * executions, units.VALUE, seconds)
    text += _counter("CreateXlaTensor", 420 * steps) + _counter("DestroyXlaTensor", 410 * steps)
    text += _counter("DeviceDataCacheMiss", 3)
    text += _counter("UncachedCompile", len(compile_ms))
    text += _counter("CachedCompile", executions - len(compile_ms)) if executions > len(compile_ms) else ""
    if items:
        text += _counter("aten::_local_scalar_dense", items)
    for name, value in (extra or {}).items():
        text += _counter(name, value)
    text += _counter("xla::add", 12 * steps) + _counter("xla::mm", 9 * steps)
    text += _metric("CompileTime", [ms * 1e6 for ms in compile_ms], seconds=seconds)
    text += _metric("ExecuteTime", [4.2e6] * executions, seconds=seconds)
    if transfers:
        text += _metric("TransferFromDeviceTime", [0.4e6] * transfers, seconds=seconds)
        text += _metric("InboundData", [4.0] * transfers, units.BYTES, seconds)
    text += _metric("TransferToDeviceTime", [0.2e6] * (2 * steps), seconds=seconds)
    text += _counter("CreateCompileHandles", len(compile_ms)) + _counter("CreateDataHandles", 40 * steps)
    text += _counter("MarkStep", steps)
    return text


def compile_burst() -> str:
    """XLA_METRICS_FILE records of steps 4 and 5: 4 compiles by step 4, 500 by step 5; the paste ends mid-line."""
    before = _report(steps=5, compile_ms=[850.0, 910.0, 120.0, 95.0], executions=6, transfers=0, seconds=6.0)
    burst = [850.0, 910.0, 120.0, 95.0] + [60.0 + (i % 7) for i in range(496)]
    after = _report(steps=6, compile_ms=burst, executions=502, transfers=0, seconds=38.0)
    text = f"[MetricsData; step=4]\n{before}[MetricsData; step=5]\n{after}"
    cut = text.index("  Percentiles: ", text.rindex("Metric: ExecuteTime")) + len("  Percentiles: 1%=004ms2")
    return text[:cut]


def growing_compiles() -> str:
    """Three reports printed at the end of steps 4, 5 and 6 (inside PyTorch/XLA's 10 warm-up steps), with the
    script's own lines between them."""
    out = []
    compiles = [92, 108, 144]
    for index, count in enumerate(compiles):
        step = 4 + index
        times = [700.0] * 6 + [310.0 + (i % 11) for i in range(count - 6)]
        out.append(f"epoch 1 step {step} loss {2.31 - index * 0.01:.4f}\n")
        out.append(_report(steps=step + 1, compile_ms=times, executions=step + 1 + count, transfers=step + 1,
                           items=step + 1, seconds=40.0 + 12 * index))
    return "".join(out)


def unlowered_summary() -> str:
    """PyTorch/XLA's old end-of-run summary of CPU-fallback ops (PT_XLA_DEBUG=1 before 2.0), as its logger wrote it."""
    frames = {
        ("_ctc_loss", 1200): ["ctc_loss (/usr/local/lib/python3.8/dist-packages/torch/nn/functional.py:2460)",
                               "forward (/usr/local/lib/python3.8/dist-packages/torch/nn/modules/loss.py:1743)",
                               "_call_impl (/usr/local/lib/python3.8/dist-packages/torch/nn/modules/module.py:1102)",
                               "train_loop_fn (/home/user/asr/train_tpu.py:188)",
                               "_mp_fn (/home/user/asr/train_tpu.py:241)"],
        ("masked_select", 600): ["decode_greedy (/home/user/asr/decoder.py:57)",
                                  "train_loop_fn (/home/user/asr/train_tpu.py:201)",
                                  "_mp_fn (/home/user/asr/train_tpu.py:241)"],
        ("_local_scalar_dense", 600): ["train_loop_fn (/home/user/asr/train_tpu.py:205)",
                                        "_mp_fn (/home/user/asr/train_tpu.py:241)"],
    }
    lines = ["=" * 80, "Unlowered Op usage summary (more of these ops, lower performance)",
             "Note: _local_scalar_dense typically indicates CPU context access", "-" * 80]
    for (op, count), stack in frames.items():
        lines.append(f"FRAME (count={count}):")
        lines.append(f'Unlowered Op: "{op}"')
        lines.append("Python Frames:")
        lines += [f"  {frame}" for frame in stack]
        lines += ["", ""]
    lines.append("=" * 80)
    return "".join(f"pt-xla-profiler: {line}\n" for line in lines)


def read_before_barrier() -> str:
    """One Compilation Analysis block of PyTorch/XLA 2.x: a tensor read before mark_step compiled a graph."""
    p = "Compilation Analysis: "
    rows = ["=" * 80, "Compilation Cause",
            "  most likely user code trying to access tensor value before mark_step",
            "Graph Info: ", "  Graph Hash: 5b2d1e4a0f9c7d3e8a6b1c2d3e4f5a6b", "  Number of Graph Inputs: 212",
            "  Number of Graph Outputs: 1", "Python Frame Triggered Execution: ",
            "  _local_scalar_dense (/usr/local/lib/python3.10/site-packages/torch_xla/core/xla_model.py:1021)",
            "  train_step (/home/user/project/train.py:94)",
            "  train (/home/user/project/train.py:131)",
            "  <module> (/home/user/project/train.py:160)",
            "-" * 80, "=" * 80]
    post = "Post Compilation Analysis: "
    sizes = ["=" * 80, "Graph input size: 1.273420 GB", "Graph output size: 0.000000 GB",
             "Aliased Input size: 0.000000 GB", "Intermediate tensor size: 3.118404 GB",
             "Compiled program size: 0.010624 GB", "-" * 80, "=" * 80]
    return ("".join(f"{p}{row}\n" for row in rows) + "\n" + "".join(f"{post}{row}\n" for row in sizes))


def out_of_memory() -> str:
    """A PT_XLA_DEBUG_LEVEL=1 log of PyTorch/XLA 2.x on a TPU: a step graph compiles (its Post Compilation Analysis
    shows 12 GB of intermediates), then the next, larger graph runs out of HBM at compile time and the script dies with
    XLA's RESOURCE_EXHAUSTED, as PyTorch/XLA raises it and its C++ logger repeats it."""
    block = read_before_barrier().replace("most likely user code trying to access tensor value before mark_step",
                                          "user mark_step")
    sizes = block.replace("1.273420 GB", "1.548000 GB").replace("0.000000 GB\nPost Compilation Analysis: Aliased",
                                                                 "7.922460 GB\nPost Compilation Analysis: Aliased")
    sizes = sizes.replace("Aliased Input size: 0.000000 GB", "Aliased Input size: 1.547871 GB")
    sizes = sizes.replace("3.118404 GB", "12.124478 GB").replace("0.010624 GB", "0.028210 GB")
    status = ("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 29.80G "
              "of 15.48G hbm. Exceeded hbm capacity by 14.32G.")
    return (sizes + "epoch 0 step 48 loss 2.3187\n"
            + f"2024-05-02 10:41:07.118220: E torch_xla/csrc/runtime/pjrt_computation_client.cc:620] {status}\n"
            + "Traceback (most recent call last):\n"
            + "  File \"/home/user/project/train.py\", line 160, in <module>\n"
            + "    xm.mark_step()\n"
            + f"RuntimeError: Bad StatusOr access: {status}\n")


FRAGMENTS = {"compile_burst.metrics.txt": compile_burst, "growing_compiles.stdout.txt": growing_compiles,
             "unlowered_summary.debug.txt": unlowered_summary, "read_before_barrier.debug.txt": read_before_barrier,
             "out_of_memory.debug.txt": out_of_memory}

if __name__ == "__main__":
    for name, make in FRAGMENTS.items():
        (HERE / name).write_text(make())
        print("wrote", HERE / name)
