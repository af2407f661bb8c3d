"""Entry point of `python -m xladev.run`."""

import sys

from xladev.cli.run import main

sys.exit(main())
