"""The lazy `xla` device runtime. Private: use the `xladev` package's public names."""
