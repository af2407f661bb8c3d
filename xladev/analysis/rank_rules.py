"""Diagnoses across the ranks of one job: graphs that diverge, a rank that recompiles alone, a straggler, a
rank that is gone. Pure functions of numbers and short texts, like every rule here.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from xladev.analysis.finding_model import ERROR, WARNING, Finding
from xladev.schema.units import compact_time_ns

# A straggler does at least this much more of its own work per step than the median of the others: the
# larger of STRAGGLER_MIN_NS and STRAGGLER_RATIO of the job's step time.
STRAGGLER_MIN_NS = 10_000_000
STRAGGLER_RATIO = 0.10


def graph_divergence_finding(*, site: str, step: int, graphs: Mapping[int, Sequence[str]], changes: Sequence[str],
                             steps_diverging: int, compared: tuple[int, int] | None) -> Finding:
    """The ranks ran different graphs at one user line in the same step.

    Args:
      site: the user's line that ran them (`file:line (function)`).
      step: the first step where they differ.
      graphs: rank -> the graph hashes it ran there in that step (empty: none).
      changes: what differs between the two compared ranks' graphs (xladev.graphdiff), root causes first.
      steps_diverging: in how many steps they differ at this line.
      compared: the (rank, rank) pair `changes` compares, from the first to the second.
    """
    evidence = []
    for rank, hashes in sorted(graphs.items()):
        ran = ", ".join(h[:16] for h in hashes) if hashes else "no graph"
        evidence.append(f"step {step}, rank {rank}: {ran} at {site}")
    if compared is not None:
        evidence.append(f"what changed from rank {compared[0]}'s graph to rank {compared[1]}'s:")
        evidence.extend(f"  {line}" for line in changes)
    if steps_diverging > 1:
        evidence.append(f"the ranks differ at this line in {steps_diverging} steps")
    odd = _odd_ranks(graphs)
    who = f": rank {odd[0]} differs" if len(odd) == 1 else ""
    return Finding(
        "graph-divergence", WARNING, f"Ranks run different graphs at {site} (step {step}){who}",
        "Every rank of a data-parallel job should run the same graphs. A graph that differs on one rank compiles "
        "there alone (the others wait for it at their next collective), and a differing graph that holds "
        "collectives never meets the others' (xladev refuses it with CollectiveMismatchError; PyTorch/XLA hangs).",
        "Make the code at that line the same on every rank: no branch on the rank, no rank-dependent shapes or "
        "constants, the same value reads. Log from one rank with values read after the step, not new graphs.",
        evidence=evidence, numbers={"step": step, "steps": steps_diverging}, subject=site)


def _odd_ranks(graphs: Mapping[int, Sequence[str]]) -> list[int]:
    """The ranks whose graphs differ from the most common ones."""
    counts: dict[tuple, int] = {}
    for hashes in graphs.values():
        counts[tuple(hashes)] = counts.get(tuple(hashes), 0) + 1
    common = max(counts, key=counts.get)
    if counts[common] * 2 <= len(graphs):
        # No majority. Of two ranks, one that ran graphs where the other ran none is the odd one.
        ran = [rank for rank, hashes in graphs.items() if hashes]
        return ran if len(graphs) == 2 and len(ran) == 1 else []
    return [rank for rank, hashes in graphs.items() if tuple(hashes) != common]


def rank_recompile_finding(*, rank: int, site: str, steps: Sequence[int], others: Mapping[int, int]) -> Finding:
    """One rank compiles at a line after warm-up where the other ranks do not.

    Args:
      rank: the rank.
      site: the user's line whose graphs it compiles.
      steps: the steps in which it compiled there (after warm-up).
      others: other rank -> its compiles at that line after warm-up.
    """
    listed = ", ".join(str(s) for s in list(steps)[:8]) + (" ..." if len(steps) > 8 else "")
    evidence = [f"rank {rank}: {len(steps)} compile(s) at {site} after warm-up, in steps {listed}"]
    evidence += [f"rank {other}: {count} there" for other, count in sorted(others.items())]
    return Finding(
        "rank-recompiles", WARNING, f"Rank {rank} recompiles at {site} while the other ranks do not",
        "While one rank compiles, every other rank waits for it at the next collective: the whole job runs at "
        "the speed of the rank that recompiles.",
        "Find what differs on that rank at that line (a shape, a constant, a branch on the rank) and make every "
        "rank record the same graph; PT_XLA_DEBUG_LEVEL=1 on that rank prints what changed at each recompile.",
        evidence=evidence, numbers={"rank": rank, "compiles": len(steps)}, subject=f"rank {rank}: {site}")


def straggler_finding(*, busy_ns: Mapping[int, Sequence[float]], wait_ns: Mapping[int, Sequence[float]]) -> Finding | None:
    """The rank that is the slowest in many steps, while the others wait for it at the collectives.

    Args:
      busy_ns: rank -> its own work per step after warm-up (the step's time less its wait for the others), the
        same steps for every rank.
      wait_ns: rank -> its wait per step for the other ranks to reach its collectives (CollectiveWaitTime).
    """
    ranks = sorted(busy_ns)
    steps = min((len(busy_ns[r]) for r in ranks), default=0)
    if len(ranks) < 2 or steps < 2:
        return None
    slowest: dict[int, list[float]] = {r: [] for r in ranks}  # per rank: its lead in each step it was slowest
    for i in range(steps):
        work = {r: busy_ns[r][i] for r in ranks}
        slow = max(work, key=work.get)
        others = sorted(work[r] for r in ranks if r != slow)
        lead = work[slow] - others[len(others) // 2]
        if lead >= max(STRAGGLER_MIN_NS, STRAGGLER_RATIO * max(work.values())):
            slowest[slow].append(lead)
    rank = max(ranks, key=lambda r: (len(slowest[r]), sum(slowest[r])))
    leads = slowest[rank]
    if len(leads) < 2 or len(leads) * 3 < steps:
        return None
    lead = sum(leads) / len(leads)
    evidence = [f"rank {rank} was the slowest in {len(leads)} of {steps} steps after warm-up, by "
                f"{compact_time_ns(lead)} on average"]
    for r in ranks:
        evidence.append(f"rank {r}: {compact_time_ns(sum(busy_ns[r][:steps]) / steps)} of work and "
                        f"{compact_time_ns(sum(wait_ns[r][:steps]) / steps)} waiting for the others per step")
    finding = Finding(
        "straggler", WARNING, f"Rank {rank} is a straggler: the slowest in {len(leads)} of {steps} steps, by "
                              f"{compact_time_ns(lead)} each",
        "In a data-parallel job every rank waits for the slowest at each collective, so the job's step takes "
        "the straggler's time; the other ranks spend the difference waiting (CollectiveWaitTime).",
        "Find what that rank does more: its input pipeline (a slower disk, more data workers busy), extra work "
        "on that rank (logging, evaluation), compiles the others do not have, or a slower or busier host.",
        evidence=evidence, numbers={"rank": rank, "steps": len(leads), "lead_ns": lead}, subject=f"rank {rank}")
    finding.cost_ns = sum(leads)
    return finding


def rank_lost_finding(*, rank: int, lost: int, reason: str, step: int) -> Finding:
    """A rank saw another rank of the job go (it died, or stopped answering)."""
    return Finding(
        "rank-lost", ERROR, f"Rank {lost} of the job is gone (seen by rank {rank} in step {step})",
        "A data-parallel job cannot go on without every rank: the collectives of the remaining ranks failed "
        "with an error naming the rank that was gone.",
        f"Read rank {lost}'s own output (its traceback, or the signal that killed it) to see why it stopped.",
        evidence=[f"rank {rank}, step {step}: rank {lost} is gone ({reason})"], numbers={"rank": lost},
        subject=f"rank {lost}")


# Findings saying the job stopped: ranked before every other (`xladev.analysis.wall_time.ranked`), as failures are.
STOPPED_RULES = ("unfinished-run", "rank-lost")


def unfinished_run_finding(*, rank: int | None, how: str, killed: bool, steps: int | None, graph: str, site: str,
                           doing: str, others: Sequence[str] = ()) -> Finding:
    """A run (or a rank of a job) that did not finish: its log has no end record, or a signal ended it.

    Args:
      rank: the rank, None for a run of one process.
      how: how it ended, in words (``no end record``, ``terminated by SIGTERM`` ...).
      killed: True when nothing could write an end record (SIGKILL, a crash, the OOM killer), or it still runs.
      steps: steps it completed; the step in progress is this number (0-based).
      graph: the last graph its log names ("" when none), `site` its user's line, `doing` what it did last
        (``compiling`` when its compile never ended, ``compiled``, ``ran``, ``failed``).
      others: one line for each other rank that stopped, and what the ranks saw of each other.
    """
    who = f"Rank {rank}" if rank is not None else "The run"
    if steps is None:
        when = "after its last compile"
    else:
        when = f"in step {steps}" if steps else "before its first step ended"
    if killed:
        title = f"{who} did not finish: its log stops {when} with no end record (killed, or still running)"
        detail = ("Nothing wrote the log's end record: the process was killed at once (SIGKILL, the out-of-memory "
                  "killer, a crash in native code), or it is still running. The report covers what ran before.")
        fix = ("Read the process's own output (stderr, `dmesg` for the out-of-memory killer) for what stopped it; "
               "if the graph it was compiling is huge, sync more often. If it is still running, report again "
               "when it ends.")
    else:
        title = f"{who} did not finish: {how} {when}"
        detail = ("A signal ended the run before its loop did; xladev wrote the end record on the way out. torchrun "
                  "sends SIGTERM to the other ranks when one fails, and schedulers send it at a time limit or to "
                  "preempt.")
        fix = ("If another rank failed first, its report says why; otherwise find what sent the signal (a time "
               "limit, a preemption) and save checkpoints often enough to resume.")
    subject = who.lower() if rank is None else who
    if steps is None:
        evidence = [f"{subject}: {how}; its log counts no step (PT_XLA_DEBUG_LEVEL=1 prints compiles only: level 2 "
                    "adds an execution analysis per graph run)"]
    else:
        evidence = [f"{subject}: {how}, after {steps} completed step{'s' if steps != 1 else ''}"]
    if graph:
        state = {"compiling": "its compile had started and never ended",
                 "compiled": "compiled, not yet run", "ran": "the last graph it ran",
                 "failed": "it failed"}.get(doing, doing)
        evidence.append(f"last graph: {graph[:16]} at {site or '?'} ({state})")
    evidence.extend(others)
    numbers: dict = {"steps": steps} if steps is not None else {}
    if rank is not None:
        numbers["rank"] = rank
    return Finding("unfinished-run", ERROR, title, detail, fix, evidence=evidence, numbers=numbers,
                   subject=f"rank {rank}" if rank is not None else "")
