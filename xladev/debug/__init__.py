"""Debugging APIs: `xladev.debug.metrics` (import as `met`) and friends."""
