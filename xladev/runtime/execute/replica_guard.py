"""Before a replicated graph runs: the ranks agree on its collectives, and a gone rank is an error.

A graph holding collectives runs on every process at once; if one rank runs another graph (a branch on
the rank, a shape that differs by rank, one more `.item()` of an all-reduced value), the collectives no
longer pair up and XLA waits for ever. So before each replicated graph the ranks compare what they are
about to run, through jax's coordination service (a few hundred bytes per rank):

    xladev/graph/<n>/<rank> = "<graph hash> <collectives> <step> <user's line>"   (its n-th replicated graph)

The whole graph must match (XLA pairs the collectives of one program, not of two that look alike). If they
differ, every rank raises `CollectiveMismatchError` naming the ranks, their lines, the collectives that
differ and what differs between their graphs (xladev.graphdiff, the summaries exchanged the same way),
instead of hanging. While a rank waits for the others, a gone rank (the watchdog, world.py) or a rank that never
arrives within XLADEV_DIST_TIMEOUT fails it with a `DistributedError` naming that rank (the results of a
replicated graph are waited for in slices too, inflight.py).
"""

from __future__ import annotations

import json
import time

from xladev._flags import config
from xladev.graphdiff import differences, summary_from_json, summary_to_json
from xladev.runtime.graph import stack
from xladev.runtime.compile.graph_info import RuntimeGraphInfo
from xladev.runtime.graph.ir import Graph
from xladev.runtime.graph.world import DistributedError, job, placement
from xladev.schema.sites import short_site, site_of

# The slice a blocking read of the coordination service waits before checking for gone ranks again.
_SLICE_MS = 500


class CollectiveMismatchError(DistributedError):
    """The ranks were about to run different graphs holding collectives (which would wait for ever).

    Attributes:
      ranks: {rank: (graph hash, number of collectives, step, user's line)} of every rank.
      changes: what differs between this rank's graph and the first differing rank's.
    """

    def __init__(self, message: str, ranks: dict, changes: list[str]):
        super().__init__(message)
        self.ranks = ranks
        self.changes = changes


class _Guard:
    def __init__(self) -> None:
        self.count = 0  # replicated graphs this rank has run

    def before(self, graph: Graph, collectives: tuple[str, ...], step: int, frames) -> None:
        """Checks that every rank is about to run the same collectives; call before dispatching a replicated graph.

        The whole graph must be the same: XLA pairs the collectives of one program across the processes, and
        two different programs' collectives do not meet even when they look alike (gloo waits, then times out).

        Args:
          graph: the graph about to run.
          collectives: its collectives' signature (compilation.collective_signature).
          step: the step it belongs to.
          frames: the user's stack, when captured.

        Raises:
          CollectiveMismatchError: another rank runs different collectives.
          DistributedError: a rank is gone, or did not arrive within XLADEV_DIST_TIMEOUT.
        """
        site = short_site(site_of(frames if frames is not None else stack.capture_frames())) or "?"
        if job.lost:
            raise job.lost_error(f"the collectives of graph {graph.hash} at {site}")
        client = job.client()
        where = placement()
        n = self.count
        self.count += 1
        key = graph.hash
        client.key_value_set(f"xladev/graph/{n}/{where.rank}", f"{key} {len(collectives)} {step} {site}")
        seen = {where.rank: (key, len(collectives), step, site)}
        for rank in range(where.world_size):
            if rank != where.rank:
                text = _wait_for(client, f"xladev/graph/{n}/{rank}", rank, f"graph {graph.hash} at {site}")
                other_key, other_count, other_step, other_site = text.split(" ", 3)
                seen[rank] = (other_key, int(other_count), int(other_step), other_site)
        if n:
            client.key_value_delete(f"xladev/graph/{n - 1}/{where.rank}")  # every rank has read it
        differing = [r for r, (k, _, _, _) in seen.items() if k != key]
        if differing:
            raise self._mismatch(client, graph, collectives, n, seen, differing[0])

    def _mismatch(self, client, graph: Graph, collectives: tuple[str, ...], n: int, seen: dict,
                  other: int) -> CollectiveMismatchError:
        """The error for different collectives than rank `other`'s, with how the collectives and graphs differ."""
        where = placement()
        # Through JSON as the other rank's comes: constants (dtypes, tuples) compare in the same form.
        mine = summary_from_json(summary_to_json(RuntimeGraphInfo(graph).summary()))
        client.key_value_set(f"xladev/graph/{n}/detail/{where.rank}",
                             json.dumps({"collectives": list(collectives), "summary": summary_to_json(mine)}))
        try:
            detail = json.loads(_wait_for(client, f"xladev/graph/{n}/detail/{other}", other, "the graph comparison",
                                          timeout_s=min(config.dist_timeout, 30.0)))
            theirs = list(detail["collectives"])
            changes = differences(summary_from_json(detail["summary"]), mine)
        except (DistributedError, ValueError, KeyError) as exc:
            theirs, changes = None, [f"(rank {other}'s graph could not be compared: {exc})"]
        lines = [f"rank {r}: graph {h} ({c} collective(s)) at step {s}, {site}"
                 for r, (h, c, s, site) in sorted(seen.items())]
        text = (f"rank {where.rank}: the ranks are about to run different graphs holding collectives, which would "
                f"wait for each other for ever (replicated graph #{n} of this rank):\n  " + "\n  ".join(lines))
        if theirs is not None and list(theirs) != list(collectives):
            text += f"\ncollectives of rank {where.rank} | rank {other}:\n  " + "\n  ".join(_side_by_side(collectives, theirs))
        text += (f"\nwhat differs from rank {other}'s graph to rank {where.rank}'s:\n  " + "\n  ".join(changes)
                 + "\nEvery rank must record the same graph around its collectives: look for code that depends on the "
                   "rank (a branch, a shape, a value read on one rank only).")
        return CollectiveMismatchError(text, seen, changes)


def _side_by_side(mine, theirs, limit: int = 6) -> list[str]:
    """`#i: mine | theirs` for the collectives that differ (the first `limit`)."""
    out = []
    for i in range(max(len(mine), len(theirs))):
        a = mine[i] if i < len(mine) else "(none)"
        b = theirs[i] if i < len(theirs) else "(none)"
        if a != b:
            out.append(f"#{i}: {a} | {b}")
    if len(out) > limit:
        out = out[:limit] + [f"... and {len(out) - limit} more"]
    return out


def _wait_for(client, key: str, rank: int, what: str, timeout_s: float | None = None, as_bytes: bool = False):
    """The value of `key` (a str, or bytes with `as_bytes`), written by `rank`, waiting for it in slices (a gone
    rank ends the wait).

    Raises:
      DistributedError: `rank` is gone, left the job, or did not write the key in time.
    """
    where = placement()
    timeout_s = config.dist_timeout if timeout_s is None else timeout_s
    deadline = time.monotonic() + timeout_s
    get = client.blocking_key_value_get_bytes if as_bytes else client.blocking_key_value_get
    while True:
        try:
            return get(key, _SLICE_MS)
        except Exception as exc:  # the slice ended (or the service failed): look around, then wait again
            error = exc
        if job.lost:
            raise job.lost_error(what)
        if _left(client, rank):
            raise DistributedError(f"rank {where.rank}: {what} cannot run: rank {rank} has left the job (its "
                                   "function returned) without running it; every rank must run the same collectives")
        if time.monotonic() > deadline:
            raise DistributedError(
                f"rank {where.rank}: rank {rank} did not reach {what} within {timeout_s:g} s (XLADEV_DIST_TIMEOUT): "
                f"it is busy elsewhere or runs fewer collectives than this rank ({str(error).splitlines()[0]})")


def _left(client, rank: int) -> bool:
    try:
        return client.key_value_try_get(f"xladev/left/{rank}") is not None
    except Exception:
        return False


guard = _Guard()
