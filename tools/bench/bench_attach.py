"""What `xladev attach` adds to a real torch_xla step (issue target: at most 2 % with only the event log on).

    python tools/bench/bench_attach.py [--torch-xla-python PATH] [--width 1024] [--batch 256] [--rounds 15]

Two processes of the same MLP training on real torch_xla (PJRT_DEVICE=CPU): one plain, one under the adapter
(its boot hook, XLADEV_EVENT_LOG, and the PT_XLA_DEBUG analysis it turns on). Blocks of steps alternate between
them, round by round; the figure is the median over rounds of (attached / plain) seconds per step, with its
range. The adapter's own time is printed as two parts: at the barriers (the user's thread waits for it), and on
its own thread (the metric samples' reads and the records, 20 times a second while steps wait for them). Its
work is per step, not per op, so its share falls as steps grow: the step time is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
WORKER = Path(__file__).resolve().parent / "_attach_worker.py"


def _worker(python: str, args, env: dict) -> subprocess.Popen:
    proc = subprocess.Popen([python, str(WORKER), str(args.width), str(args.batch), str(args.warmup)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)
    line = proc.stdout.readline()
    if line.strip() != "ready":
        raise SystemExit(f"bench_attach: the worker did not start ({line!r})")
    return proc


def _block(proc: subprocess.Popen, steps: int) -> float:
    proc.stdin.write(f"{steps}\n")
    proc.stdin.flush()
    return float(proc.stdout.readline())


def main(argv: list[str] | None = None) -> int:
    from xladev.attach.job_environment import child_environment

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--torch-xla-python", default=os.environ.get("XLADEV_TORCH_XLA_PYTHON",
                                                                     os.path.expanduser("~/txla/bin/python")))
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="steps per block")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--graphs", action="store_true", help="the adapter with PyTorch/XLA's graph dumps "
                                                               "(xladev attach --graphs)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    if not os.access(args.torch_xla_python, os.X_OK):
        print(f"bench_attach: no torch_xla interpreter at {args.torch_xla_python}: skipped")
        return 0
    base = dict(os.environ, PJRT_DEVICE="CPU")
    with tempfile.TemporaryDirectory(prefix="bench_attach_") as tmp:
        attached = dict(base, **child_environment(base), XLADEV_EVENT_LOG=str(Path(tmp) / "bench.events.jsonl"))
        if args.graphs:
            attached["XLADEV_ATTACH_GRAPHS"] = "1"
        plain, adapted = _worker(args.torch_xla_python, args, base), _worker(args.torch_xla_python, args, attached)
        samples = {"plain": [], "attached": []}
        try:
            for r in range(args.rounds):
                order = [("plain", plain), ("attached", adapted)]
                for name, proc in (order if r % 2 == 0 else order[::-1]):
                    samples[name].append(_block(proc, args.steps))
        finally:
            for proc in (plain, adapted):
                proc.stdin.write("\n")
                proc.stdin.flush()
            own = adapted.stdout.readline().strip()
            for proc in (plain, adapted):
                proc.stdin.close()
                proc.wait(timeout=120)
        lines = sum(1 for _ in open(Path(tmp) / "bench.events.jsonl"))
    ratios = [a / p for a, p in zip(samples["attached"], samples["plain"])]
    result = {"graphs": args.graphs, "width": args.width, "batch": args.batch, "rounds": args.rounds, "steps_per_block": args.steps,
              "plain_ms": statistics.median(samples["plain"]) * 1e3,
              "attached_ms": statistics.median(samples["attached"]) * 1e3,
              "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
              "log_lines": lines, "adapter_ms_per_step": float(own.split()[0]) * 1e3 if own else None,
              "adapter_thread_ms_per_step": float(own.split()[1]) * 1e3 if own else None}
    print(f"plain {result['plain_ms']:.2f} ms/step, attached {result['attached_ms']:.2f} ms/step: "
          f"attached/plain {result['ratio_median']:.4f} (range {result['ratio_min']:.4f}-{result['ratio_max']:.4f},"
          f" {args.rounds} rounds of {args.steps} steps; the log has {lines} lines)")
    if own:
        share = result["adapter_ms_per_step"] / result["plain_ms"]
        thread = result["adapter_thread_ms_per_step"]
        print(f"the adapter's own time at the barriers: {result['adapter_ms_per_step']:.3f} ms per step "
              f"({share:.2%} of a plain step); on its thread (sample reads and records): {thread:.3f} ms per step "
              f"({thread / result['plain_ms']:.2%})")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
