"""`xladev capture`: capture profiles from a running profiler server, once, in a loop, or on a schedule.

    xladev capture --service_addr localhost:9012 --logdir logs --duration_ms 2000
    xladev capture --service_addr localhost:9012 --logdir logs --loop              # until Ctrl-C
    xladev capture --service_addr localhost:9012 --logdir logs --interval_s 60 --count 5

The training process must have called `xp.start_server(9012)`. After each capture the file is read
back (non-empty, with trace events) and the `tensorboard --logdir ...` command to view it is printed.
Exit code: 0 when every capture succeeded, 1 when one failed (the message names the cause: nothing
listening, a server busy with another profiling session, a capture that recorded nothing), 2 for bad
arguments (a malformed --service_addr among them).
"""

from __future__ import annotations

import argparse
import sys
import time


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "capture", help="capture profiles from a profiler server (xp.start_server) for TensorBoard",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    return parser


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--service_addr", "--service-addr", required=True,
                        help="HOST:PORT of the process that ran xp.start_server(PORT), e.g. localhost:9012")
    parser.add_argument("--logdir", required=True, help="TensorBoard log directory to write the profiles to")
    parser.add_argument("--duration_ms", "--duration-ms", type=int, default=2000, help="length of each capture (ms)")
    parser.add_argument("--num_tracing_attempts", "--num-tracing-attempts", type=int, default=3,
                        help="tries per capture when no event is collected")
    parser.add_argument("--host_tracer_level", type=int, default=2, choices=(1, 2, 3))
    parser.add_argument("--device_tracer_level", type=int, default=1, choices=(0, 1))
    parser.add_argument("--python_tracer_level", type=int, default=0, choices=(0, 1))
    parser.add_argument("--delay_ms", type=int, default=0, help="wait before each capture starts recording")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--loop", action="store_true", help="capture back to back until interrupted (or --count)")
    mode.add_argument("--interval_s", "--interval-s", type=float,
                      help="start a capture every N seconds (with --count, K captures; else until interrupted)")
    parser.add_argument("--count", type=int, help="number of captures in --loop or --interval_s mode")


def run(args: argparse.Namespace) -> int:
    from xladev.debug import _profiler_capture
    from xladev.debug._profiler_common import ProfilerError, parse_service_addr, tensorboard_command

    try:
        parse_service_addr(args.service_addr)
    except ProfilerError as exc:
        print(f"xladev capture: --service_addr: {exc}", file=sys.stderr)
        return 2
    if args.count is not None and args.count < 1:
        print("xladev capture: --count must be at least 1", file=sys.stderr)
        return 2
    if args.count is not None and not (args.loop or args.interval_s is not None):
        print("xladev capture: --count needs --loop or --interval_s", file=sys.stderr)
        return 2
    if args.interval_s is not None and args.interval_s <= 0:
        print("xladev capture: --interval_s must be positive", file=sys.stderr)
        return 2
    repeat = args.loop or args.interval_s is not None
    total = args.count if args.count is not None else (None if repeat else 1)
    failures = done = finished = 0
    next_start = time.monotonic()
    try:
        while total is None or done < total:
            if args.interval_s is not None:
                wait = next_start - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                next_start = max(next_start + args.interval_s, time.monotonic())
            done += 1
            label = f"[{done}{'' if total is None else '/' + str(total)}] " if repeat else ""
            print(f"{label}capturing {args.duration_ms} ms from {args.service_addr} ...", flush=True)
            try:
                summary = _profiler_capture.capture(
                    args.service_addr, args.logdir, args.duration_ms, args.num_tracing_attempts,
                    args.host_tracer_level, args.device_tracer_level, args.delay_ms,
                    python_tracer_level=args.python_tracer_level, quiet=True)
            except ProfilerError as exc:
                failures += 1
                finished += 1
                print(f"{label}capture failed: {exc}", file=sys.stderr, flush=True)
                continue
            print(f"{label}wrote {summary.path} ({summary.size_bytes} bytes, {summary.num_events} events)")
            print(f"{label}view it with: {tensorboard_command(args.logdir)}", flush=True)
            finished += 1
    except KeyboardInterrupt:
        print(f"\ninterrupted after {finished} capture(s)", file=sys.stderr)
    if repeat:
        print(f"{finished - failures} of {finished} capture(s) succeeded")
    return 1 if failures else 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of `tools/capture_profile.py` (the same options as `xladev capture`)."""
    parser = argparse.ArgumentParser(prog="capture_profile", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    return run(parser.parse_args(argv))
