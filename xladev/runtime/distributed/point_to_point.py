"""`dist.send` / `dist.recv` on the `xla` backend: each a collective permute of one (source, target) pair.

As in PyTorch/XLA, a send from rank S to rank T is `collective_permute(t, [[S, T]])` on S, and the matching
receive is the same permute on T, with its buffer as the input and the result written into it. Every rank
runs the same program, so S's send and T's receive meet: their tensors must have one shape and dtype, and the
ranks must send and receive in the same order (a send meets the other rank's receive of the same pair; two
sends wait for ever, which the ranks' comparison of their graphs turns into an error, replica_guard.py).

Each runs at once, in a graph of its own: its input is computed first (a local graph), then the permute alone,
so that the graph holding the collective is the same on both ranks whatever each computed before.

XLA's own Send/Recv (PyTorch/XLA's `xm.send(value, channel_id)`) are not used: jax runs them (`lax.psend`,
`lax.precv`) on GPUs only, and a channel id names no peer to pair a permute with.
"""

from __future__ import annotations

from typing import Sequence

import torch

from xladev.events import Cause, CauseKind
from xladev.runtime.distributed import collectives
from xladev.runtime.distributed.collective_args import device_tensors
from xladev.runtime.execute.transfers import arrays_of


def _peer(rank: int, what: str, role: str) -> int:
    world = collectives.world_size()
    me = collectives.global_ordinal()
    rank = int(rank)
    if world == 1:
        raise ValueError(f"{what}: the job has one replica, so there is no rank to {role}")
    if not 0 <= rank < world:
        raise ValueError(f"{what}: rank {rank} is not a rank of the job (0..{world - 1})")
    if rank == me:
        raise ValueError(f"{what}: rank {rank} is this rank; a rank cannot {role} itself")
    return rank


def _permute(t: torch.Tensor, source: int, target: int, what: str) -> torch.Tensor:
    """The permute of `t` from `source` to `target`, run now (its input computed first, in a graph of its own)."""
    cause = Cause(CauseKind.COLLECTIVE, what)
    arrays_of([t], cause)
    result = collectives.collective_permute(t, [[source, target]])
    arrays_of([result], cause)
    return result


def send(tensors: Sequence[torch.Tensor], dst: int) -> None:
    """Sends each tensor to rank `dst`, whose `recv` of this rank must meet it (one permute per tensor).

    Args:
      tensors: xla tensors.
      dst: the receiving rank (of the job).

    Raises:
      ValueError: `dst` is not another rank of the job. TypeError: not xla tensors.
    """
    device_tensors(list(tensors), "send")
    me = collectives.global_ordinal()
    dst = _peer(dst, "send", "send to")
    for t in tensors:
        _permute(t, me, dst, f"send to rank {dst}")


def recv(tensors: Sequence[torch.Tensor], src: int) -> None:
    """Receives each tensor from rank `src` (its matching `send`), written into the tensor in place.

    Args:
      tensors: xla tensors, each of the shape and dtype of what `src` sends.
      src: the sending rank (of the job).

    Raises:
      ValueError: `src` is not another rank of the job. TypeError: not xla tensors.
    """
    device_tensors(list(tensors), "recv")
    me = collectives.global_ordinal()
    src = _peer(src, "recv", "receive from")
    for t in tensors:
        received = _permute(t, src, me, f"recv from rank {src}")
        with torch.no_grad():
            t.copy_(received)
