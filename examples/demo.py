"""`make demo`: what xladev is for, in one short run.

1. Train the example transformer with two deliberate problems (a new sequence length every step, and
   `loss.item()` every step) under PT_XLA_DEBUG_LEVEL=1, with XLA_METRICS_FILE on.
2. Show what the analysis said (the recompilation cause, the transfer hot spot) and run
   `xladev report` on the run's metrics file and debug log.
3. Train again with both problems fixed, and report it: healthy.

Outputs are kept in ./demo-out/.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "demo-out")


def banner(text: str) -> None:
    print(f"\n\033[1m=== {text} ===\033[0m", flush=True)


def train(mode: str) -> tuple[str, str]:
    """Runs one training, printing each of its lines as it comes with the seconds since it started."""
    metrics = os.path.join(OUT, f"{mode}.metrics.txt")
    debug = os.path.join(OUT, f"{mode}.debug.txt")
    for path in (metrics, debug):
        if os.path.exists(path):
            os.remove(path)
    env = dict(os.environ, PT_XLA_DEBUG_LEVEL="1", PT_XLA_DEBUG_FILE=debug, XLA_METRICS_FILE=metrics,
               PYTHONUNBUFFERED="1")
    start = time.monotonic()
    print(f"  [  0.0 s] starting: importing torch and jax, building the model", flush=True)
    child = subprocess.Popen([sys.executable, os.path.join(ROOT, "examples", "demo_train.py"), f"--{mode}"],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in child.stdout:  # as it happens: the first steps compile, later ones should not
        print(f"  [{time.monotonic() - start:5.1f} s] {line.rstrip()}", flush=True)
    stderr = child.stderr.read()
    if child.wait() != 0:
        print(stderr, file=sys.stderr)
        sys.exit(child.returncode)
    return metrics, debug


def excerpt(debug: str) -> None:
    """The lines of the analysis that answer "why": one recompilation cause, the warnings, the summary."""
    with open(debug) as fh:
        lines = fh.read().splitlines()
    cause = [i for i, line in enumerate(lines) if line.endswith("Recompilation Cause")]
    if cause:
        start = cause[-1]
        block = [lines[start]]
        for line in lines[start + 1:]:
            if not line.startswith("Compilation Analysis:   "):
                break
            block.append(line)
        print("  PT_XLA_DEBUG_LEVEL=1, the last recompilation:")
        print("\n".join("    " + line for line in block))
    warnings = [line for line in lines if line.startswith("pt-xla-profiler: ")]
    if warnings:
        print("  auto-analysis (stated once, with the cause):")
        print("\n".join("    " + line for line in warnings))
    summary = [line for line in lines if line.startswith("xladev summary: ") and "=====" not in line]
    if summary:
        print("  end-of-run summary:")
        print("\n".join("    " + line[len("xladev summary: "):] for line in summary[:12]))


def report(*paths: str) -> int:
    command = [sys.executable, "-m", "xladev_cli", "report", "--single-run", "--width", "100", *paths]
    sys.stdout.flush()
    return subprocess.run(command).returncode


# Measured on a 2-core x86-64 machine: the broken training about 2 minutes (each of its 20 steps compiles
# new graphs, 3-6 s each), the fixed one about 20 s (it compiles twice), each report about 3 s.
EXPECTED = "2 to 3 minutes on 2 CPU cores: the broken training compiles every step, the fixed one twice"


def main() -> int:
    os.makedirs(OUT, exist_ok=True)
    print(f"xladev demo: takes {EXPECTED}; each step is printed as it runs.", flush=True)
    banner("1/4  The transformer with two labelled problems: variable sequence length, loss.item() every step "
           "(about 2 minutes: each step compiles)")
    metrics, debug = train("broken")
    banner("2/4  What PT_XLA_DEBUG_LEVEL=1 said about it")
    excerpt(debug)
    banner(f"3/4  xladev report {os.path.relpath(metrics)} {os.path.relpath(debug)}")
    report(metrics, debug)
    banner("4/4  The same training with both problems fixed (padding, add_step_closure; about 20 s)")
    metrics, debug = train("fixed")
    report(metrics, debug)
    print(f"\nAll outputs are in {os.path.relpath(OUT)}/ (metrics files and debug logs for both runs).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
