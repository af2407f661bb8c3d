"""One example per pitfall of PyTorch/XLA's troubleshooting guide, each with a `--fixed` variant."""
