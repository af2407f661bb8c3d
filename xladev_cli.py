"""Entry point of the `xladev` command.

Commands that only read files (`report`, `diff`, `tui`) never import torch or jax: importing the
`xladev` package starts nothing. Commands that need the runtime load it themselves (`cli/main.py`).
"""

from __future__ import annotations

import sys


def main() -> int:
    from xladev.cli.main import main as run

    return run()


if __name__ == "__main__":
    sys.exit(main())
