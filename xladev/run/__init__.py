"""`python -m xladev.run SCRIPT [ARGS...]`: `xladev run` without the launcher (see `xladev.cli.run`)."""
