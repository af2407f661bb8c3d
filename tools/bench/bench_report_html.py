"""Benchmark: `xladev report -f html` of a long event log (target: 100,000 steps in < 10 s, a page < 5 MB).

Writes the tests' synthetic event log (`tests/report/event_logs.py`: a compile in step 0, an `.item()` read every
10 steps, a CPU fallback every 70) with `--steps` steps, then runs `xladev report LOG -f html -o PAGE` in a fresh
process, as a user does, and prints its wall time (reading the log included), the page's size, the bars and marks
drawn, and, in this process, the time of drawing alone (`report_document` and `render_html` of the read report).

usage: python tools/bench/bench_report_html.py [--steps 100000] [--json PATH]
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

TARGET_S, TARGET_MB = 10.0, 5.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()

    from tests.report.event_logs import synthetic_log
    from xladev.report import document, markup
    from xladev.report.inputs import read_source
    from xladev.report.loader import report_from_sources

    with tempfile.TemporaryDirectory() as folder:
        log = os.path.join(folder, "long.events.jsonl")
        page = os.path.join(folder, "long.html")
        with open(log, "w") as handle:
            handle.write(synthetic_log(args.steps, marks_every=10))
        started = time.perf_counter()
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([sys.executable, "-m", "xladev.cli.main", "report", log, "-f", "html", "-o", page],
                              cwd=REPO, capture_output=True, text=True)
        wall_s = time.perf_counter() - started
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # CPU time too: on a shared machine the wall time also counts the time others held the CPU.
        cpu_s = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
        if proc.returncode not in (0, 1):
            print(proc.stderr, file=sys.stderr)
            return 1
        text = open(page, encoding="utf-8").read()
        report = report_from_sources([read_source(log)])
        started = time.perf_counter()
        markup.render_html(document.report_document(report))
        draw_s = time.perf_counter() - started
        figures = {"steps": args.steps, "log_mb": os.path.getsize(log) / 1e6, "wall_s": wall_s, "cpu_s": cpu_s,
                   "draw_s": draw_s,
                   "page_mb": len(text.encode()) / 1e6, "bars": text.count('class="bar"'),
                   "marks": text.count('class="mark '), "target_s": TARGET_S, "target_mb": TARGET_MB}
    print(f"{args.steps:,} steps ({figures['log_mb']:.0f} MB event log): xladev report -f html in "
          f"{wall_s:.2f} s wall, {cpu_s:.2f} s CPU (target < {TARGET_S:.0f} s; drawing alone {draw_s:.2f} s), "
          f"page {figures['page_mb']:.2f} MB "
          f"(target < {TARGET_MB:.0f} MB), {figures['bars']} bars, {figures['marks']} marks")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(figures, handle, indent=2)
    return 0 if wall_s < TARGET_S and figures["page_mb"] < TARGET_MB else 1


if __name__ == "__main__":
    sys.exit(main())
