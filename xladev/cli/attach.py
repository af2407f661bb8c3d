"""`xladev attach`: write xladev's event log for a job that runs on a real torch_xla (a TPU VM's, say).

    xladev attach -- python train.py --epochs 2        # writes run.events.jsonl
    xladev attach --log /tmp/a.jsonl -- python train.py
    xladev report run.events.jsonl

The job runs as it is, on its own Python and torch_xla (2.5 to 2.9). xladev attaches when it imports
torch_xla: it wraps the step barriers and, at each, writes what PyTorch/XLA exposes (its metrics, and the
PT_XLA_DEBUG analysis it turns on into a file beside the log) as xladev's records. A job on xladev's own
runtime writes the same log itself. `xladev tui -- python train.py` does the same, live.

Exit status: the job's; 2 when the command line is wrong or the command cannot start.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

DEFAULT_LOG = "run.events.jsonl"


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Registers the `attach` command."""
    parser = subparsers.add_parser("attach", help="write xladev's event log for a job on a real torch_xla",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--log", metavar="PATH", default=DEFAULT_LOG,
                        help=f"where the event log goes (default {DEFAULT_LOG})")
    parser.add_argument("--graphs", action="store_true",
                        help="have torch_xla dump each graph's IR, to say what changed at each recompilation "
                             "(XLADEV_ATTACH_GRAPHS=1; it costs IR text per sync)")
    parser.add_argument("target", nargs=argparse.REMAINDER, metavar="-- COMMAND ...", help="the job to run")
    parser.set_defaults(command="attach")
    return parser


def run(args: argparse.Namespace) -> int:
    """Runs the job with the adapter; returns its exit status."""
    from xladev.attach.job_environment import child_environment

    command = list(args.target)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("xladev attach: give the command to run after --, e.g. xladev attach -- python train.py",
              file=sys.stderr)
        return 2
    log = os.path.abspath(args.log)
    env = dict(os.environ)
    env.update(child_environment(env))
    env["XLADEV_EVENT_LOG"] = log
    if args.graphs:
        env["XLADEV_ATTACH_GRAPHS"] = "1"
    if command[0] in ("python", "python3"):  # as `xladev tui` does: this Python, the one xladev is installed in
        command[0] = sys.executable
    try:
        os.unlink(log)  # never an older run's records
    except OSError:
        pass
    try:
        status = subprocess.call(command, env=env)
    except OSError as exc:
        print(f"xladev attach: cannot start {command[0]}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        status = 130
    if os.path.exists(log):
        print(f"xladev attach: event log {log}; read it with: xladev report {log}", file=sys.stderr)
    else:
        print("xladev attach: no event log was written: the job imported no torch_xla (nor xladev)",
              file=sys.stderr)
    return status
