"""The inputs of each rank of tests/distributed/collectives_job.py, on the CPU (the job and its test's oracle)."""

import torch

LIST_LEN = 5


def inputs(rank: int) -> dict:
    """Rank `rank`'s inputs: the same on every call."""
    g = torch.Generator().manual_seed(100 + rank)
    return {"list": [torch.randn(3, 4, 2, generator=g) for _ in range(LIST_LEN)],
            "x": torch.randn(4, 3, generator=g), "y": torch.randn(6, generator=g)}
