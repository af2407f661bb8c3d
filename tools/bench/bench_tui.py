"""Does `xladev tui` keep up with 5 000 events/s? Lag between the last event written and the last shown.

A writer process appends a synthetic training log (8 records a step: transfers, op counts, an
execution, the step, a `.item()`, plus a recompilation every 500 steps) at `--rate` records a
second, in 10 ms batches, and notes when each batch was written (CLOCK_MONOTONIC is shared by
processes). The app follows the file headless (`App.run_test`) exactly as `xladev tui FILE` does.
Every 20 ms the benchmark samples the newest record on screen; the lag of a sample is how long
the oldest record written but not yet shown has waited (0 when the screen is up to date).

Prints the lag (median, p99, max), the catch-up time after the writer stops, the redraws per
second, and the model's raw throughput (records/s applied without a screen).

    python tools/bench/bench_tui.py [--rate 5000] [--seconds 10] [--size 120x40] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))

from xladev_tui.app import XladevTUI  # noqa: E402
from xladev_tui.run_model import RunModel  # noqa: E402
from xladev_tui.sources import FileTailSource  # noqa: E402

WRITER = textwrap.dedent("""
    import json, sys, time
    from xladev.schema import records as rec
    path, rate, seconds, times_path = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
    site = "/home/user/train.py:30 (train)"
    frame = {"file": "/home/user/train.py", "line": 30, "name": "train"}
    cause = {"kind": "USER_MARK_STEP", "text": "user mark_step", "detail": ""}
    ops = {f"aten::op{i}": i % 5 + 1 for i in range(40)}
    memory = {"argument": 1024, "output": 64, "alias": 0, "temp": 128, "generated_code": 0}
    def step_records(step, t):
        rows = 8 + (step // 500)
        h = f"{step // 500:032x}"
        out = [rec.Transfer(t, step, "to_device", rows * 64, 20000, 1),
               rec.Transfer(t, step, "to_device", rows * 8, 9000, 1),
               rec.Ops(t, step, ops, 500000, 40)]
        if step % 500 == 0:
            ir = "IR {\\n" + "".join(f"  %{i} = f32[{rows},16]{{1,0}} aten::add(%0, %0)\\n" for i in range(300)) + "}\\n"
            out.append(rec.GraphText(t, step, h, 3, 2, 1, ir))
            recompile = None
            if step:
                recompile = {"previous": f"{step // 500 - 1:032x}", "changes": [
                    f"input 3, created at train@train.py:24: shape f32[{rows - 1},16] -> f32[{rows},16] (dim 0)"],
                    "graphs_at_site": step // 500 + 1, "compile_ns_at_site": 1}
            out.append(rec.Compile(t, step, h, 300, 2, 1, 300000000, memory, cause, site, frame, None, recompile))
        out += [rec.Execute(t, step, h, 2000000, step % 500 != 0, 300, 2, 1, cause, site, frame),
                rec.CacheMiss(t, step, 1.0, "torch.float32"),
                rec.Step(t, step, 2100000, 5000000 + step % 7 * 100000, cause, site, frame),
                rec.Transfer(t, step + 1, "from_device", 4, 30000, 1, ".item()", "/home/user/train.py:31 (train)", frame)]
        return out
    header = rec.Header(command="python train.py (bench)", argv=["train.py"], pid=0, host=None, device="CPU (bench)",
                        start_unix=time.time())
    fh = open(path, "w")
    fh.write(rec.dumps(header) + "\\n"); fh.flush()
    written = 1
    times = [(time.monotonic(), written)]
    batch_s = 0.01
    per_batch = rate * batch_s
    pending = []
    step = 0
    start = time.monotonic()
    owed = 0.0
    next_at = start
    while next_at - start < seconds:
        owed += per_batch
        lines = []
        while len(lines) < int(owed):
            if not pending:
                pending = [rec.dumps(r) for r in step_records(step, int((time.monotonic() - start) * 1e9))]
                step += 1
            lines.append(pending.pop(0))
        owed -= len(lines)
        fh.write("\\n".join(lines) + "\\n"); fh.flush()
        written += len(lines)
        times.append((time.monotonic(), written))
        next_at += batch_s
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
    fh.write(rec.dumps(rec.End(0, "exit", step)) + "\\n"); fh.flush()
    written += 1
    times.append((time.monotonic(), written))
    json.dump({"times": times, "steps": step}, open(times_path, "w"))
""")


def model_throughput(path: str) -> float:
    with open(path) as fh:
        lines = fh.read().splitlines()
    model = RunModel()
    start = time.perf_counter()
    for line in lines:
        model.feed_line(line)
    model.snapshot()
    return len(lines) / (time.perf_counter() - start)


async def follow(path: str, size: tuple[int, int], seconds: float, writer: subprocess.Popen) -> tuple[list, float, int]:
    app = XladevTUI(FileTailSource(path))
    samples: list[tuple[float, int]] = []
    async with app.run_test(size=size) as pilot:
        while writer.poll() is None:
            samples.append((time.monotonic(), app.shown.records))
            await pilot.pause(0.02)
        writer_done = time.monotonic()
        total = sum(1 for _ in open(path))
        while app.shown.records < total and time.monotonic() - writer_done < 30:
            samples.append((time.monotonic(), app.shown.records))
            await pilot.pause(0.005)
        samples.append((time.monotonic(), app.shown.records))
        renders = app.renders
        state = app.shown.state
        await pilot.press("q")
    return samples, writer_done, renders, total, state


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=5000, help="records written per second (default 5000)")
    parser.add_argument("--seconds", type=float, default=10, help="how long the writer writes (default 10)")
    parser.add_argument("--size", default="120x40", help="terminal size WxH (default 120x40)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    width, height = (int(v) for v in args.size.split("x"))

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.events.jsonl")
        times_path = os.path.join(tmp, "times.json")
        open(path, "w").close()
        writer = subprocess.Popen([sys.executable, "-c", WRITER, path, str(args.rate), str(args.seconds), times_path])
        samples, writer_done, renders, total, state = asyncio.run(follow(path, (width, height), args.seconds, writer))
        written = json.load(open(times_path))
        throughput = model_throughput(path)
    times = written["times"]
    write_at = [t for t, _ in times]
    counts = [n for _, n in times]
    lags = []
    for now, shown in samples:
        if now > writer_done:
            break
        # The first batch holding a record not shown yet; lag is how long it has waited.
        index = bisect.bisect_right(counts, shown)
        if index >= len(counts) or write_at[index] > now:
            lags.append(0.0)
        else:
            lags.append(now - write_at[index])
    final_write = write_at[-1]
    shown_all = next((now for now, shown in samples if shown >= total), None)
    catch_up = (shown_all - final_write) if shown_all is not None else float("inf")
    duration = write_at[-1] - write_at[0]
    rate = (counts[-1] - counts[0]) / duration if duration > 0 else 0.0
    lags.sort()
    p = lambda q: lags[min(len(lags) - 1, int(q * len(lags)))] * 1e3 if lags else float("nan")  # noqa: E731
    print(f"writer: {counts[-1]:,} records ({written['steps']:,} steps) in {duration:.1f} s = {rate:,.0f} records/s")
    print(f"app ({width}x{height}, headless): {renders} redraws = {renders / duration:.1f} per second; "
          f"final state {state}, {samples[-1][1]:,}/{total:,} records shown")
    print(f"lag (written -> shown), sampled every 20 ms: median {p(0.5):.0f} ms, p99 {p(0.99):.0f} ms, "
          f"max {lags[-1] * 1e3 if lags else float('nan'):.0f} ms")
    print(f"catch-up after the last write: {catch_up * 1e3:.0f} ms")
    print(f"model alone: {throughput:,.0f} records/s (no screen)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rate": rate, "records": counts[-1], "redraws_per_s": renders / duration,
                       "lag_median_ms": p(0.5), "lag_p99_ms": p(0.99), "lag_max_ms": lags[-1] * 1e3 if lags else None,
                       "catch_up_ms": catch_up * 1e3, "model_records_per_s": throughput}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
