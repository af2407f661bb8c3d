"""`rendezvous(tag, payload, replicas=[...])` among a subgroup of the replicas: only its members call it.

An XLA collective runs on every replica of the job at once, so a rendezvous that the other replicas never
reach cannot be one. The members meet through jax's coordination service instead (the same key-value store
the ranks compare their graphs through, replica_guard.py): each member writes its payload under

    xladev/rendezvous/<tag>/<members, sorted>/<n>/<rank>      (the n-th rendezvous of these members under tag)

and reads every other member's. Nothing runs on the device, and nothing pending is synced. A member that is
gone, or that does not arrive within XLADEV_DIST_TIMEOUT, fails the others with a `DistributedError` naming it.
"""

from __future__ import annotations

import threading
from typing import Sequence

from xladev.runtime.execute.replica_guard import _wait_for
from xladev.runtime.graph.world import DistributedError, job, placement

_lock = threading.Lock()
# (tag, sorted members) -> rendezvous of those members under that tag this process has joined.
_counts: dict[tuple[str, tuple[int, ...]], int] = {}


def members(replicas: Sequence[int] | None, world: int, rank: int) -> tuple[int, ...] | None:
    """The replicas taking part, checked, in the caller's order; None for every replica (None or []).

    Raises:
      ValueError: a replica outside 0..world-1, one named twice, or a list without this replica.
      TypeError: `replicas` is not a sequence of integers.
    """
    if replicas is None or (hasattr(replicas, "__len__") and len(replicas) == 0):
        return None
    try:
        found = tuple(int(r) for r in replicas)
    except (TypeError, ValueError):
        raise TypeError(f"rendezvous: replicas must be a list of replica numbers, not {replicas!r}") from None
    bad = [r for r in found if not 0 <= r < world]
    if bad:
        raise ValueError(f"rendezvous: replicas={list(found)} names {bad}, not replicas of this job (0..{world - 1})")
    if len(set(found)) < len(found):
        raise ValueError(f"rendezvous: replicas={list(found)} names a replica twice")
    if rank not in found:
        raise ValueError(f"rendezvous: replicas={list(found)} does not include this replica ({rank}); only the "
                         "members of a subgroup call its rendezvous")
    return found


def exchange(tag: str, payload: bytes, replicas: tuple[int, ...]) -> list[bytes]:
    """Shares `payload` with the other members of `replicas` and returns every member's, in `replicas`' order.

    Args:
      tag: the rendezvous's name: members meet under the same tag.
      payload: this replica's bytes.
      replicas: the members (checked by `members`), this replica among them.

    Returns:
      The payload of `replicas[i]` at position i.

    Raises:
      DistributedError: a member is gone, left the job, or did not arrive within XLADEV_DIST_TIMEOUT.
    """
    rank = placement().rank
    if len(replicas) == 1:
        return [payload]
    client = job.client()
    if client is None:
        raise DistributedError(f"rendezvous {tag!r} among replicas {list(replicas)}: this process has not joined a "
                               "job of several processes")
    group = tuple(sorted(replicas))
    with _lock:
        n = _counts.get((tag, group), 0)
        _counts[(tag, group)] = n + 1
    prefix = f"xladev/rendezvous/{tag}/{','.join(map(str, group))}"
    client.key_value_set_bytes(f"{prefix}/{n}/{rank}", payload)
    what = f"rendezvous {tag!r} among replicas {list(replicas)}"
    found = {rank: payload}
    for other in replicas:
        if other != rank:
            found[other] = bytes(_wait_for(client, f"{prefix}/{n}/{other}", other, what, as_bytes=True))
    if n:
        # Every member has read this replica's previous payload: each wrote its n-th only after reading it.
        client.key_value_delete(f"{prefix}/{n - 1}/{rank}")
    return [found[r] for r in replicas]
