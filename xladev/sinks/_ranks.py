"""Which process of a multi-process job this is, from torchrun's environment: one reader for every sink."""

from __future__ import annotations

import os


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name, "").strip()
        if value.isdigit():
            return int(value)
    return None


def rank_and_world() -> tuple[int, int]:
    """(RANK or LOCAL_RANK, WORLD_SIZE), defaulting to (0, 1) for a single process."""
    return _env_int("RANK", "LOCAL_RANK") or 0, _env_int("WORLD_SIZE") or 1


def per_rank_path(path: str) -> str:
    """`path.<rank>` when WORLD_SIZE > 1 (each rank writes its own file), else `path`."""
    rank, world = rank_and_world()
    return f"{path}.{rank}" if world > 1 else path


def ordinal_path(path: str) -> str:
    """`path.<ordinal>` always, as PyTorch/XLA names its per-device debug files (XLA_SAVE_TENSORS_FILE)."""
    return f"{path}.{rank_and_world()[0]}"


def is_local_rank0() -> bool:
    """True on the process that prints for its machine (LOCAL_RANK, else RANK, is 0 or unset)."""
    local = _env_int("LOCAL_RANK", "RANK")
    return local is None or local == 0
