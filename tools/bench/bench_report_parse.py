"""Benchmark: `xladev report` reading a large XLA_METRICS_FILE (target: >= 50 MB/s, flat memory).

Generates an XLA_METRICS_FILE of realistic per-step reports (the metric and counter set of a small
PyTorch/XLA training run, values growing step by step, a CPU fallback and an ``.item()`` every
step), then reads it in a fresh process at two sizes and prints, for each, the read speed and how
much the peak resident memory grew while reading. Flat memory means the growth is about the same
at both sizes. The files live in a temporary directory that is deleted afterwards.

usage: python tools/bench/bench_report_parse.py [--size 1GB] [--small-size SIZE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)


def _import_report_without_runtime() -> None:
    """Loads `xladev.report` under an empty `xladev` package: the report never needs the runtime, and
    the parent package's ``__init__`` would start it (importing torch and jax) for nothing."""
    import types

    if "xladev" not in sys.modules:
        package = types.ModuleType("xladev")
        package.__path__ = [os.path.join(REPO, "xladev")]
        sys.modules["xladev"] = package

TIME_METRICS = ("DeviceLockWait", "IrValueTensorToXlaData", "LazyTracing", "TensorToData", "UnwrapXlaData",
                "WrapXlaData", "CompileTime", "ExecuteTime", "TransferToDeviceTime", "TransferFromDeviceTime")
COUNTERS = ("CachedCompile", "CreateXlaTensor", "DestroyLtcTensor", "DestroyXlaTensor", "DeviceDataCacheMiss",
            "ExecuteComputation", "RegisterXLAFunctions", "UncachedCompile", "aten::_local_scalar_dense",
            "aten::nonzero", "xla::_copy_from", "xla::_log_softmax", "xla::_log_softmax_backward_data",
            "xla::_propagate_xla_data", "xla::_to_copy", "xla::add", "xla::addmm", "xla::clone", "xla::detach_copy",
            "xla::empty_strided_symint", "xla::empty_symint", "xla::fill_", "xla::mm", "xla::nll_loss_backward",
            "xla::nll_loss_forward", "xla::normal_", "xla::random_", "xla::relu", "xla::sum", "xla::t_copy",
            "xla::threshold_backward", "xla::view_copy_symint", "CreateCompileHandles", "CreateDataHandles",
            "MarkStep")
PERCENTILES = ("1%", "5%", "10%", "20%", "50%", "80%", "90%", "95%", "99%")


def parse_size(text: str) -> int:
    """``1GB`` -> bytes (units B, KB, MB, GB, decimal or binary prefixes treated as binary)."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
    return int(float(text.rstrip("KMG")) * scale)


def _metric(name: str, samples: int, mean_ns: float, format_time) -> str:
    total = samples * mean_ns
    spread = "; ".join(f"{label}={format_time(mean_ns * (0.5 + i / 8))}" for i, label in enumerate(PERCENTILES))
    return (f"Metric: {name}\n  TotalSamples: {samples}\n  Accumulator: {format_time(total)}\n"
            f"  ValueRate: {format_time(total / 7.5)} / second\n  Rate: {samples / 7.5:g} / second\n"
            f"  Percentiles: {spread}\n")


def record(step: int) -> str:
    """One ``[MetricsData; step=N]`` record after ``step + 1`` training steps."""
    _import_report_without_runtime()
    from xladev.schema.units import format_bytes, format_time_ns

    steps = step + 1
    parts = [f"[MetricsData; step={step}]\n"]
    for index, name in enumerate(TIME_METRICS):
        samples = 1 if name == "CompileTime" else steps * (index % 4 + 1)
        parts.append(_metric(name, samples, 1000.0 * (index + 1) + step % 97, format_time_ns))
    parts.append(f"Metric: TensorsGraphSize\n  TotalSamples: {steps}\n  Accumulator: {54.0 * steps:.2f}\n"
                 f"  ValueRate: {54.0 * steps / 7.5:.2f} / second\n  Rate: {steps / 7.5:g} / second\n"
                 "  Percentiles: " + "; ".join(f"{label}=54.00" for label in PERCENTILES) + "\n")
    parts.append(f"Metric: OutboundData\n  TotalSamples: {steps * 2}\n  Accumulator: {format_bytes(steps * 9700.0)}\n"
                 "  Percentiles: " + "; ".join(f"{label}={format_bytes(4.0 * 2 ** i)}"
                                               for i, label in enumerate(PERCENTILES)) + "\n")
    for name in COUNTERS:
        value = 1 if name in ("RegisterXLAFunctions", "UncachedCompile", "CreateCompileHandles") else steps * 3
        if name in ("MarkStep", "aten::_local_scalar_dense", "aten::nonzero", "ExecuteComputation"):
            value = steps
        parts.append(f"Counter: {name}\n  Value: {value}\n")
    return "".join(parts) + "\n"


def generate(path: str, size: int) -> int:
    """Writes records until the file reaches ``size`` bytes; returns the number of records."""
    written = step = 0
    with open(path, "w", encoding="utf-8") as handle:
        while written < size:
            text = record(step)
            handle.write(text)
            written += len(text)
            step += 1
    return step


def child(path: str) -> None:
    """Reads one file (in a fresh process) and prints speed and peak-memory growth as JSON."""
    _import_report_without_runtime()
    from xladev.report import load

    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started, cpu_started = time.perf_counter(), time.process_time()
    report = load(path)
    read_seconds, read_cpu = time.perf_counter() - started, time.process_time() - cpu_started
    findings = report.findings
    total_seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    size = os.path.getsize(path)
    print(json.dumps({"bytes": size, "reports": report.sources[0].snapshots, "read_s": read_seconds,
                      "read_mb_s": size / 1e6 / read_seconds, "read_mb_per_cpu_s": size / 1e6 / read_cpu,
                      "with_diagnosis_mb_s": size / 1e6 / total_seconds,
                      "rss_growth_mb": (peak - baseline) / 1024, "findings": [f.rule for f in findings]}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="1GB", help="size of the large file (default 1GB)")
    parser.add_argument("--small-size", default=None, help="size of the small file (default: a quarter of --size)")
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return 0
    large = parse_size(args.size)
    small = parse_size(args.small_size) if args.small_size else large // 4
    with tempfile.TemporaryDirectory(prefix="xladev-bench-") as directory:
        results = []
        for size in (small, large):
            path = os.path.join(directory, f"metrics-{size}.txt")
            started = time.perf_counter()
            records = generate(path, size)
            generated = time.perf_counter() - started
            output = subprocess.run([sys.executable, __file__, "--child", path], capture_output=True, text=True,
                                    check=True).stdout
            result = json.loads(output)
            results.append(result)
            print(f"{result['bytes'] / 1e6:8.1f} MB, {records:7d} step records (generated in {generated:.1f} s): "
                  f"read {result['read_mb_s']:6.1f} MB/s wall, {result['read_mb_per_cpu_s']:6.1f} MB per CPU-second "
                  f"({result['with_diagnosis_mb_s']:.1f} MB/s wall with the diagnosis), "
                  f"peak RSS growth {result['rss_growth_mb']:.1f} MB, findings {result['findings']}")
            os.remove(path)
    # CPU time, not wall time, decides: on a shared machine other processes stretch wall time.
    speed_ok = all(result["read_mb_per_cpu_s"] >= 50 for result in results)
    flat = results[1]["rss_growth_mb"] <= max(2 * results[0]["rss_growth_mb"], results[0]["rss_growth_mb"] + 32)
    print(f"target >= 50 MB/s (per CPU-second): {'met' if speed_ok else 'NOT met'}; "
          f"memory flat: {'yes' if flat else 'NO'}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"runs": results, "speed_ok": speed_ok, "memory_flat": flat}, fh, indent=2)
    return 0 if speed_ok and flat else 1


if __name__ == "__main__":
    sys.exit(main())
