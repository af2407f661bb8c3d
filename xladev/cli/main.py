"""`xladev` command dispatcher.

Each command lives in its own module under `xladev.cli` and exposes two functions:
`add_parser(subparsers)` which registers its argparse sub-parser, and `run(args) -> int`.
Modules are imported lazily so `xladev report` never pays for importing torch or jax.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command name -> module under xladev.cli, and its one-line help.
COMMANDS: dict[str, tuple[str, str]] = {
    "report": ("xladev.cli.report", "diagnose metrics files, debug logs and event logs"),
    "coverage": ("xladev.cli.coverage", "print the op coverage table (lowered, fallback, failing)"),
    "tui": ("xladev.cli.tui", "live terminal UI of a run (or a replay of its event log)"),
    "diff": ("xladev.cli.diff", "compare graphs from XLA_SAVE_TENSORS_FILE dumps"),
    "capture": ("xladev.cli.capture", "capture profiles from a profiler server (xp.start_server) for TensorBoard"),
    "doctor": ("xladev.cli.doctor", "check the profiling stack: versions, duplicate plugins, a real capture"),
    "run": ("xladev.cli.run", "run an unchanged PyTorch/XLA script on xladev (torch_xla alias)"),
    "attach": ("xladev.cli.attach", "write xladev's event log for a job on a real torch_xla"),
}


# Commands that run code on the xla device; the others only read files and never import torch or jax.
RUNTIME_COMMANDS = {"coverage", "doctor", "capture"}


def _build_parser(argv: list[str]) -> tuple[argparse.ArgumentParser, dict]:
    parser = argparse.ArgumentParser(prog="xladev", description="xladev: lazy XLA device for PyTorch, and its debug toolkit")
    from xladev import __version__

    parser.add_argument("--version", action="version", version=f"xladev {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = {}
    wanted = argv[0] if argv and argv[0] in COMMANDS else None
    for name, (module_name, help_text) in COMMANDS.items():
        if wanted is not None and name != wanted:
            sub.add_parser(name, help=help_text)
            continue
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        modules[name] = module
        module.add_parser(sub)
    return parser, modules


def main(argv: list[str] | None = None) -> int:
    """Runs the `xladev` command line.

    Args:
      argv: arguments without the program name; `sys.argv[1:]` when None.

    Returns:
      The process exit code.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, modules = _build_parser(argv)
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 2
    module = modules.get(args.command)
    if module is None:
        parser.error(f"command {args.command!r} is not available in this build")
    if args.command in RUNTIME_COMMANDS:
        import xladev

        xladev._load_runtime()
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
