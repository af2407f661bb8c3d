"""Which process of a multi-process job this is (torchrun's environment), and how its output files are named.

One rule for every output: the sinks' files, failed-graph HLO, profiles. Standard library only.
"""

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


RANK_FIELD = "{rank}"


def per_rank_path(path: str) -> str:
    """The file this rank writes for `path`: `{rank}` in it replaced by the rank (`run.rank{rank}.events.jsonl`),
    else `path.<rank>` when WORLD_SIZE > 1 (as PyTorch/XLA names its per-process metrics files), else `path`."""
    rank, world = rank_and_world()
    if RANK_FIELD in path:
        return path.replace(RANK_FIELD, str(rank))
    return f"{path}.{rank}" if world > 1 else path


def ordinal_path(path: str) -> str:
    """`path.<ordinal>` always, as PyTorch/XLA names its per-device debug files (XLA_SAVE_TENSORS_FILE); a
    `{rank}` in `path` is replaced by the ordinal instead."""
    rank = rank_and_world()[0]
    return path.replace(RANK_FIELD, str(rank)) if RANK_FIELD in path else f"{path}.{rank}"


def rank_label() -> str | None:
    """`rank R of W` in a job of several processes (from torchrun's environment), else None."""
    rank, world = rank_and_world()
    return f"rank {rank} of {world}" if world > 1 else None


def sibling_paths(path: str, rank: int, world: int) -> list[str]:
    """The files the other ranks of a job wrote beside `path` (rank `rank`'s), named by `per_rank_path`'s rule:
    `run.rank0.events.jsonl` -> `run.rank1.events.jsonl`..., `run.events.jsonl.0` -> `run.events.jsonl.1`...;
    only those that exist."""
    import os

    folder, name = os.path.split(path)
    found = []
    for other in range(world):
        if other == rank:
            continue
        if name.endswith(f".{rank}"):
            candidate = name[:-len(str(rank))] + str(other)
        elif f"rank{rank}" in name:
            head, _, tail = name.rpartition(f"rank{rank}")
            candidate = f"{head}rank{other}{tail}"
        else:
            continue
        full = os.path.join(folder, candidate)
        if os.path.isfile(full):
            found.append(full)
    return found
