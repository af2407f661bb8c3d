"""Entry point of the `xladev` command.

It marks the import as light before importing the package, so commands that only read files
(`report`, `diff`, `tui`) never import torch or jax: they start fast, and work even where the runtime
would not (a malformed PT_XLA_DEBUG_LEVEL, no GPU for PJRT_DEVICE=CUDA). Commands that need the
runtime load it themselves. The mark is a module, not an environment variable, so child processes
(the training that `xladev tui` starts) import xladev normally.
"""

from __future__ import annotations

import sys
import types


def main() -> int:
    sys.modules.setdefault("_xladev_light_import", types.ModuleType("_xladev_light_import"))
    from xladev.cli.main import main as run

    return run()


if __name__ == "__main__":
    sys.exit(main())
