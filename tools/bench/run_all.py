"""`make bench`: every benchmark, one table, and a JSON copy for tracking.

Each benchmark is its own script (run it alone for details); this runs them in turn with `--json`,
then prints the figures that matter against their targets (DESIGN.md). Ratios are taken within one
run of one script, so machine speed cancels out. Writes bench-results.json (or --json PATH).

    python tools/bench/run_all.py [--quick] [--json bench-results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BENCH = os.path.join(ROOT, "tools", "bench")

# name, script, arguments (quick, full)
SUITE = [
    ("runtime", "bench_runtime.py", ["--steps", "15"], ["--steps", "30"]),
    ("models", "bench_models.py", ["--quick", "--steps", "10"], ["--steps", "20"]),
    ("torch.compile", "bench_compile.py", ["--quick", "--steps", "15"], ["--steps", "30"]),
    # optional: real PyTorch/XLA in its own virtualenv (docs/performance.md); without it, one "not installed" row
    ("torch_xla", "bench_torch_xla.py", ["--skip-if-absent", "--rounds", "3", "--block", "5"],
     ["--skip-if-absent", "--rounds", "3", "--block", "10"]),
    # instrumentation costs are timed inside the sinks; wall-clock differences are printed by each script
    ("instrumentation", "bench_instrumentation.py", ["--rounds", "3", "--steps", "10"], ["--rounds", "5", "--steps", "20"]),
    ("event log", "bench_eventlog_overhead.py", ["--rounds", "3", "--steps", "10"], ["--rounds", "7", "--steps", "30"]),
    ("profiler annotations", "bench_profiler_overhead.py", [], []),
    ("report parse", "bench_report_parse.py", ["--size", "128MB"], ["--size", "512MB"]),
    ("report html", "bench_report_html.py", ["--steps", "20000"], ["--steps", "100000"]),
    ("tui", "bench_tui.py", [], []),
    ("graph build", "bench_graph_build.py", ["--ops", "4000"], ["--ops", "10000"]),
    ("memory tracking", "bench_memory_tracking.py", ["--ops", "5000"], ["--ops", "20000"]),
    ("donation", "bench_donation.py", ["--steps", "6"], ["--steps", "12"]),
    ("distributed", "bench_distributed.py", ["--steps", "8"], ["--steps", "16"]),
]


def _get(data, *path, default=None):
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return default
        data = data[key]
    return data


def rows_for(name: str, data: dict) -> list[tuple[str, str, str]]:
    """(figure, value, target) rows from a benchmark's JSON; unknown shapes are shown raw."""
    rows = []
    if name == "distributed":
        rows.append(("transformer step: 2 processes / 1 (whole batch)", f"{_num(data.get('ratio'))}x", ""))
        rows.append(("ms/step (1 process, 2 processes)",
                     f"{_num(data.get('one_process_ms'))}, {_num(data.get('two_processes_ms'))}", ""))
        diff = data.get("max_weight_diff")
        rows.append(("2 vs 1 process: largest weight difference", f"{diff:.3g}" if isinstance(diff, float) else "?", ""))
    if name == "runtime":
        for model in ("mlp", "transformer"):
            m = _get(data, model) or {}
            if m:
                rows.append((f"{model} step: xladev / jax.jit", f"{_num(m.get('ratio_vs_jax'))}x", "<= 1.3x"))
                rows.append((f"{model} step: xladev / torch eager", f"{_num(m.get('ratio_vs_eager'))}x", ""))
                rows.append((f"{model} ms/step (xladev, jax.jit, eager)",
                             f"{_num(m.get('xladev_ms'))}, {_num(m.get('jax_ms'))}, {_num(m.get('eager_ms'))}", ""))
        rec = _get(data, "recording") or {}
        if rec:
            rows.append(("recording: elementwise op", f"{_num(rec.get('elementwise_us'))} us", "<= 10 us"))
            rows.append(("recording: matmul", f"{_num(rec.get('matmul_us'))} us", ""))
    elif name == "torch_xla":
        rows.extend(torch_xla_rows(data))
    elif name == "torch.compile":
        for model, m in (_get(data, "training") or {}).items():
            rows.append((f"{model} step: torch.compile / jax.jit", f"{_num(m.get('compiled_over_jax'))}x", "<= 1.10x"))
            rows.append((f"{model} step: torch.compile / eager", f"{_num(m.get('compiled_over_eager'))}x", ""))
        inference = _get(data, "inference") or {}
        if inference:
            rows.append(("transformer forward: torch.compile / jax.jit", f"{_num(inference.get('compiled_over_jax'))}x",
                         "<= 1.05x"))
        for graph, ms in (_get(data, "host_call_ms") or {}).items():
            rows.append((f"host time per call: {graph} (thread CPU, wall)",
                         f"{_num(ms.get('cpu_ms'))}, {_num(ms.get('wall_ms'))} ms", "< 1 ms"))
        for model, m in (_get(data, "zoo") or {}).items():
            rows.append((f"{model} step: torch.compile / eager", f"{_num(m.get('ratio'))}x", "<= 1x"))
    elif name == "models":
        for model, m in (_get(data, "cases") or {}).items():
            first = m.get("first_step_s") or {}
            rows.append((f"{model}: first step (compile)",
                         f"{_num(first.get('total'))} s ({_num(first.get('compile'))} s)", ""))
            rows.append((f"{model} step: xladev / torch eager", f"{_num(m.get('ratio_vs_eager'))}x "
                         f"({_num(m.get('xladev_ms'))} / {_num(m.get('eager_ms'))} ms)", ""))
            if m.get("ratio_vs_jax") is not None:
                rows.append((f"{model} step: xladev / jax.jit", f"{_num(m.get('ratio_vs_jax'))}x", ""))
    elif name == "event log" and "sink_us_per_step" in data:
        own = data["sink_us_per_step"] / 1e3 / data["off_ms"] * 100
        rows.append(("event log: own cost per step", f"{own:.2f}% ({data['sink_us_per_step']:.0f} us)", "< 3%"))
        rows.append(("event log: wall diff (noisy)", f"{data.get('overhead_percent', 0):+.1f}%", ""))
    elif name == "profiler annotations":
        direct = _get(data, "direct") or {}
        rows.append(("profiler annotations, no capture", f"{direct.get('overhead_pct', 0):.4f}% "
                     f"({direct.get('ns_per_step', 0):.0f} ns/step)", "< 1%"))
    elif name == "instrumentation":
        for config, figures in data.items():
            if isinstance(figures, dict) and "overhead_pct" in figures and config not in ("bare", "off"):
                target = {"metrics": "< 2%", "debug2": "< 10%"}.get(config, "< 3%")
                rows.append((f"{name}: {config} (own cost)", f"{figures['overhead_pct']:.2f}%", target))
    elif name == "report parse":
        for run in data.get("runs", []):
            rows.append((f"report parse {run['bytes'] / 1e6:.0f} MB",
                         f"{run['read_mb_per_cpu_s']:.1f} MB/CPU-s, +{run['rss_growth_mb']:.1f} MB RSS", ">= 50 MB/s, flat"))
    elif name == "report html" and "wall_s" in data:
        rows.append((f"report -f html, {data['steps']:,}-step event log", f"{data['wall_s']:.2f} s ({data.get('cpu_s', 0):.2f} s CPU), "
                     f"{data['page_mb']:.2f} MB (drawing {data['draw_s']:.2f} s)",
                     f"< {data['target_s']:.0f} s, < {data['target_mb']:.0f} MB"))
    elif name == "graph build" and "ratio_vs_jax" in data:
        rows.append((f"graph build: {data['ops']}-op chain, xladev / jax.jit", f"{_num(data['ratio_vs_jax'])}x "
                     f"({_num(data['xladev']['total_s'])} s vs {_num(data['jax']['total_s'])} s)", "<= 3x"))
    elif name == "memory tracking" and "origin_us" in data:
        rows.append(("memory census tracking per op (a graph output's origin)", f"{_num(data['origin_us'])} us "
                     f"(recording the op: {_num(data['record_op_us'])} us)", "<= 1 us"))
        rows.append(("memory census tracking: an upload's line, a view write", f"{_num(data['user_location_us'])} us, "
                     f"{_num(data['cache_view_us'])} us (an upload: {_num(data['upload_us'])} us)", ""))
    elif name == "donation" and "on" in data:
        on, off = data["on"], data["off"]
        for label, key in (("live device buffers", "live_peak_bytes"), ("XLA plan", "xla_plan_bytes")):
            rows.append((f"transformer step peak, {label}: donation / none",
                         f"{on[key] / off[key]:.2f}x ({on[key] / 2**20:.2f} / {off[key] / 2**20:.2f} MiB)", "< 1x"))
    if not rows:
        flat = {k: v for k, v in data.items() if isinstance(v, (int, float, str))}
        for key, value in list(flat.items())[:6]:
            rows.append((f"{name}: {key}", _num(value) if isinstance(value, float) else str(value), ""))
    return rows


def torch_xla_rows(data: dict) -> list[tuple[str, str, str]]:
    """bench_torch_xla.py's rows: per workload, xladev lazy and compiled over torch_xla (median [min-max] over the
    rounds); one row saying why when torch_xla is not installed."""
    workloads = data.get("workloads") or {}
    if not workloads:
        return [("torch_xla 2.9 column", str(data.get("torch_xla", "?")), "")]
    rows = []
    for model, m in workloads.items():
        for column in ("xladev lazy", "xladev compiled"):
            r = _get(m, "ratio_vs_torch_xla", column) or {}
            rows.append((f"{model} step: {column} / torch_xla",
                         f"{_num(r.get('median'))}x [{_num(r.get('min'))}-{_num(r.get('max'))}]", "<= 0.8x"))
        if m.get("first_loss_mismatches"):
            rows.append((f"{model}: first loss differs from eager", ", ".join(m["first_loss_mismatches"]), "none"))
    return rows


def _num(value) -> str:
    if isinstance(value, (int, float)):
        return f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}"
    return "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller runs (a few minutes)")
    parser.add_argument("--json", default=os.path.join(ROOT, "bench-results.json"))
    args = parser.parse_args()
    results, table = {}, []
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for name, script, quick, full in SUITE:
            path = os.path.join(BENCH, script)
            if not os.path.exists(path):
                table.append((name, "missing", ""))
                continue
            out = os.path.join(tmp, script + ".json")
            t0 = time.time()
            proc = subprocess.run([sys.executable, path, *(quick if args.quick else full), "--json", out],
                                  capture_output=True, text=True, cwd=ROOT)
            seconds = time.time() - t0
            if not os.path.exists(out):
                table.append((name, f"failed (exit {proc.returncode})", ""))
                print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
                continue
            with open(out) as fh:
                data = json.load(fh)
            results[name] = {"figures": data, "seconds": seconds}
            table.extend(rows_for(name, data))
    width = max(len(r[0]) for r in table) + 2
    print(f"\n{'figure':<{width}}{'value':<34}target")
    print("-" * (width + 44))
    for figure, value, target in table:
        print(f"{figure:<{width}}{value:<34}{target}")
    print(f"\n{time.time() - started:.0f} s in all; JSON: {os.path.relpath(args.json, ROOT)}")
    with open(args.json, "w") as fh:
        json.dump({"time": time.time(), "quick": args.quick, "results": results}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
