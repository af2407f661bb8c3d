"""Timing and checking helpers every benchmark shares: steps timed in alternating blocks, and the first-loss check
that two columns compute the same thing. Imports nothing from xladev, so a benchmark's reference process could too."""

from __future__ import annotations

import dataclasses
import gc
import statistics
import time
from typing import Callable


@dataclasses.dataclass
class Timing:
    median_ms: float
    p10_ms: float
    p90_ms: float
    samples: int
    # The mean of the blocks (equal-sized: the time of all timed steps over their number), which the median
    # leaves out a periodic pause from: a full garbage collection or a census every few blocks.
    mean_ms: float = 0.0

    @classmethod
    def of(cls, seconds: list[float], steps: int | None = None) -> "Timing":
        ms = sorted(s * 1e3 for s in seconds)
        q = lambda f: ms[min(len(ms) - 1, int(f * len(ms)))]  # noqa: E731
        return cls(statistics.median(ms), q(0.1), q(0.9), steps or len(ms), statistics.fmean(ms))


def time_interleaved(steps: dict[str, tuple[Callable[[], None], Callable[[], None]]], warmup: int, total: int,
                     block: int = 5, settle: float = 0.3) -> dict[str, list[float]]:
    """Seconds per step of each implementation: the mean of each block of `block` steps, blocks alternating.

    `steps` maps a name to (step, wait): `wait` returns once every dispatched step has finished, so a
    runtime that returns from a step before the device is done is still charged in full. See time_rounds.
    """
    for step, wait in steps.values():
        for _ in range(warmup):
            step()
        wait()
    blocks = {name: block_timer(step, wait) for name, (step, wait) in steps.items()}
    return time_rounds(blocks, max(1, total // block), block, settle)


def block_timer(step: Callable[[], None], wait: Callable[[], None]) -> Callable[[int], float]:
    """A column of time_rounds from a step and its wait: runs n steps, waits, returns the seconds per step."""

    def run(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            step()
        wait()
        return (time.perf_counter() - start) / n

    return run


def time_rounds(blocks: dict[str, Callable[[int], float]], rounds: int, block: int = 5,
                settle: float = 0.3) -> dict[str, list[float]]:
    """Seconds per step of each column in each round: every round runs one block of `block` steps per column, in turn.

    Alternating blocks spread any drift in machine load (other processes, frequency scaling) over all columns
    alike, instead of charging it to whichever ran during the disturbance. A pause of `settle` seconds before
    each block lets the previous column's worker threads (XLA's pool, torch's OpenMP team) stop spinning; on a
    small machine they otherwise slow the next column down severalfold.

    Args:
      blocks: column name -> a function that runs n warm steps, waits for them, and returns seconds per step
        (a column in another process times its own block, so the pipe's latency is not charged to it).
      rounds: how many blocks each column runs.
      block: steps per block.
      settle: seconds of pause before each block.

    Returns:
      column name -> its seconds per step, one figure per round, in round order.
    """
    samples: dict[str, list[float]] = {name: [] for name in blocks}
    gc.collect()
    for _ in range(rounds):
        for name, run in blocks.items():
            time.sleep(settle)
            samples[name].append(run(block))
    return samples


FIRST_LOSS_RTOL = 1e-4


def first_loss_mismatches(first_loss: dict[str, float], reference: str = "eager") -> dict[str, float]:
    """The columns whose first loss (same weights, same batch) differs from the reference column's by more than
    float32 rounding allows, with their values: a column that computes something else has no meaningful time.

    Args:
      first_loss: column name -> its first loss.
      reference: the column compared against.

    Returns:
      column name -> loss, for each column outside FIRST_LOSS_RTOL * max(1, |reference|) of the reference.
    """
    ref = first_loss[reference]
    return {k: v for k, v in first_loss.items() if not abs(v - ref) <= FIRST_LOSS_RTOL * max(1.0, abs(ref))}
