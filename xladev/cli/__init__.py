"""Command-line entry points. Each command is its own module with `add_parser` and `run`."""
