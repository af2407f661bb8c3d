"""`xladev run`: run an unchanged PyTorch/XLA training script on xladev.

    xladev run train.py --epochs 2          # also: python -m xladev.run train.py --epochs 2

The script runs as `__main__` with `sys.argv = [script, *args]`, as under `python script.py`, and
`import torch_xla` finds xladev's alias package (renames of, and thin adapters onto, xladev's API; see
docs/compat.md). The alias is importable in this process and in the processes it starts (its folder goes
on PYTHONPATH), and nowhere else. A real torch_xla, if installed, is never shadowed silently: the run
is refused unless --shadow-torch-xla is given.

Exit status: the script's (its `sys.exit(n)`; 1 and a traceback when it raises), or 2 when the command
line is wrong, the script is missing, or a real torch_xla would be shadowed.
"""

from __future__ import annotations

import argparse
import builtins
import importlib.machinery
import importlib.util
import os
import sys
import types
from pathlib import Path

from xladev.errors import UsageError

SHADOW_OPTION = "--shadow-torch-xla"

# The alias lives beside the package but outside its import tree: only this command puts it on sys.path.
ALIAS_DIR = str(Path(__file__).resolve().parent.parent / "torch_xla_alias")


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(SHADOW_OPTION, action="store_true",
                        help="use xladev's alias even though a real torch_xla is installed (it is shadowed in this "
                             "run only)")
    parser.add_argument("script", nargs="?", help="the PyTorch/XLA training script")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")


def _one_line_errors(parser: argparse.ArgumentParser, prog: str) -> None:
    # argparse prints its usage block before the message; a wrong command line here gets one line.
    def error(message: str):
        print(f"{prog}: {message} (see {prog} --help)", file=sys.stderr)
        raise SystemExit(2)

    parser.error = error  # type: ignore[method-assign]


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Registers the `run` command."""
    parser = subparsers.add_parser("run", help="run an unchanged PyTorch/XLA script on xladev (torch_xla alias)",
                                   description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(parser)
    _one_line_errors(parser, "xladev run")
    parser.set_defaults(command="run")
    return parser


def run(args: argparse.Namespace, prog: str = "xladev run") -> int:
    """Runs the script of the parsed command line.

    Args:
      args: `script`, `args` and `shadow_torch_xla`.
      prog: how the command is named in messages.

    Returns:
      0 when the script ends normally, 1 when it raises (the traceback is printed), 2 for a usage error.
      The script's `sys.exit(n)` leaves through SystemExit, with its own status.
    """
    try:
        script = _check_script(args.script)
        _script_path_view(script)
        found = _installed_torch_xla()
        if found is not None and not args.shadow_torch_xla:
            raise UsageError(f"a real torch_xla is installed at {found}; xladev will not shadow it silently. "
                              f"Run with {SHADOW_OPTION} to use xladev's torch_xla alias in this run instead.")
    except UsageError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    _add_alias(found)
    _say_api()
    if found is not None:
        print(f"{prog}: shadowing the torch_xla installed at {found} with xladev's alias ({SHADOW_OPTION})",
              file=sys.stderr, flush=True)
        if not _alias_wins():
            print(f"{prog}: cannot shadow the torch_xla at {found}: an import hook of its installation comes "
                  "before sys.path; uninstall it or run in an environment without it", file=sys.stderr)
            return 2
    return _run_as_main(script, [args.script, *args.args])


def main(argv: list[str] | None = None) -> int:
    """`python -m xladev.run SCRIPT [ARGS...]`: the same as `xladev run`.

    Args:
      argv: the arguments after the module name; `sys.argv[1:]` when None.

    Returns:
      The exit status (see `run`).
    """
    prog = "python -m xladev.run"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_arguments(parser)
    _one_line_errors(parser, prog)
    return run(parser.parse_args(sys.argv[1:] if argv is None else argv), prog=prog)


def _check_script(path: str | None) -> str:
    """The script's absolute path.

    Raises:
      UsageError: no script given, or it is not a readable file.
    """
    if not path:
        raise UsageError("give the training script to run: SCRIPT [ARGS...]")
    if not os.path.exists(path):
        raise UsageError(f"no such script: {path}")
    if os.path.isdir(path):
        raise UsageError(f"{path} is a directory; give the training script (a .py file)")
    if not os.access(path, os.R_OK):
        raise UsageError(f"cannot read {path}")
    return os.path.abspath(path)


def _script_path_view(script: str) -> None:
    # As `python script.py` does: the script's own folder (symlinks resolved) first, in place of the entry
    # this process started with (the `xladev` launcher's folder, or the working directory under `-m`).
    sys.path[0] = os.path.dirname(os.path.realpath(script))


def _installed_torch_xla() -> str | None:
    """Where a real torch_xla would be imported from by the script, or None.

    Looked up with the script's sys.path, before the alias is added, through every finder (an editable
    install has its own). The alias itself (inherited through PYTHONPATH by a nested run) is not real, and a
    namespace folder named torch_xla would lose to the alias anyway.
    """
    try:
        spec = importlib.util.find_spec("torch_xla")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin in (None, "namespace"):
        return None
    location = os.path.dirname(spec.origin) if spec.submodule_search_locations else spec.origin
    if os.path.realpath(location).startswith(os.path.realpath(ALIAS_DIR) + os.sep):
        return None
    return location


def _add_alias(shadowed: str | None) -> None:
    """Puts the alias on sys.path and PYTHONPATH.

    Args:
      shadowed: where a real torch_xla is installed, if one is (the alias must come before it).
    """
    # After the script's folder, as the first PYTHONPATH entry would be; before it only when the real
    # torch_xla to shadow sits in that folder.
    in_script_folder = shadowed is not None and os.path.dirname(shadowed) == sys.path[0]
    if ALIAS_DIR not in sys.path:
        sys.path.insert(0 if in_script_folder else 1, ALIAS_DIR)
    # Child processes (subprocess, multiprocessing, DataLoader workers) import torch_xla too.
    inherited = os.environ.get("PYTHONPATH")
    entries = inherited.split(os.pathsep) if inherited else []
    if ALIAS_DIR not in entries:
        os.environ["PYTHONPATH"] = os.pathsep.join([ALIAS_DIR, *entries])


def _say_api() -> None:
    """Marks the run as using PyTorch/XLA's names before anything starts xladev's runtime (the script's `import torch`
    may, before its `import torch_xla`): the event log's header and the PT_XLA_DEBUG summary say so, and a report's
    advice uses torch_xla's names. Processes the script starts say it when they import the alias."""
    from xladev.events import bus
    from xladev.analysis import TORCH_XLA_API

    bus.api = TORCH_XLA_API


def _alias_wins() -> bool:
    """Whether `import torch_xla` now finds the alias."""
    spec = importlib.util.find_spec("torch_xla")
    return spec is not None and bool(spec.origin) and spec.origin.startswith(ALIAS_DIR + os.sep)


def _run_as_main(script: str, argv: list[str]) -> int:
    """Executes the script as the `__main__` module; an exception is printed as Python would print it.

    Returns:
      0, or 1 after printing the traceback of an exception the script raised.
    """
    main_module = types.ModuleType("__main__")
    # Python 3.9+ gives the main script an absolute `__file__`; `sys.argv[0]` stays as typed.
    main_module.__dict__.update(__file__=script, __builtins__=builtins, __spec__=None, __package__=None,
                                __cached__=None, __loader__=importlib.machinery.SourceFileLoader("__main__", script))
    sys.modules["__main__"] = main_module  # pickle and multiprocessing's spawn find the script's classes here
    sys.argv = argv
    try:
        with open(script, "rb") as f:
            source = f.read()
        code = compile(source, script, "exec", dont_inherit=True)
        exec(code, main_module.__dict__)
    except Exception as exc:  # SystemExit and KeyboardInterrupt leave as they would under `python script.py`
        # The default hook prints the exception's own traceback, so the trimmed one goes on the exception.
        exc = exc.with_traceback(_from_script(exc.__traceback__, script))
        sys.excepthook(type(exc), exc, exc.__traceback__)
        return 1
    return 0


def _from_script(tb, script: str):
    """The traceback from the script's first frame on: without this runner's frames, as `python script.py` shows it.

    A SyntaxError has no frame of the script; None then prints just the error, as Python does.
    """
    while tb is not None and tb.tb_frame.f_code.co_filename != script:
        tb = tb.tb_next
    return tb
