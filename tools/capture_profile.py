"""Capture profiles from a running profiler server (`xp.start_server(PORT)` in the training process).

    python tools/capture_profile.py --service_addr localhost:9012 --logdir logs [--duration_ms 2000]
        [--loop | --interval_s N [--count K]]

The same as `xladev capture`; see `--help` and docs/profiling.md.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from xladev.cli.capture import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
