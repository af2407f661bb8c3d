"""The runtime's mutable state, one handle on it: what tests and debug tools read, and what `reset()` clears.

Each job lives in the module that does it, each layer importing only those below it:

    steps.py        the step counter (read by everything that stamps an event)
    compilation.py  the compile cache, persistent-cache hits, each site's history (recompilations)
    execution.py    running graphs: the scalar upload cache, graphs dispatched but not yet announced
    barrier.py      the step barrier, and the step closures waiting for it

`executor` gathers them for readers (`executor.step`, `executor.by_hash`, `executor.in_flight`), and
`executor.reset()` starts the runtime afresh without reimporting anything.
"""

from __future__ import annotations

from xladev.events import Cause
from xladev.runtime.execute import closures as async_closures
from xladev.runtime.graph import steps
from xladev.runtime.execute.barrier import Barrier, barrier
from xladev.runtime.compile.compilation import CompileCache, compile_cache
from xladev.runtime.execute.execution import Execution, execution, lock
from xladev.runtime.execute.step_memory import step_memory
from xladev.runtime.api import host_memory_growth, memory_growth


class Executor:
    """The compile cache, the execution state and the barrier, read and reset together.

    Attributes:
      compiler: the compile cache (compilation.py).
      runner: graph runs, scalar cache and in-flight work (execution.py).
      barrier: the step barrier and its closures (barrier.py).
    """

    def __init__(self, compiler: CompileCache, runner: Execution, step_barrier: Barrier) -> None:
        self.compiler = compiler
        self.runner = runner
        self.barrier = step_barrier

    @property
    def step(self) -> int:
        """The step being recorded."""
        return steps.current()

    @property
    def cache(self) -> dict:
        """Compiled graphs by structural key."""
        return self.compiler.cache

    @property
    def by_hash(self) -> dict:
        """Compiled graphs by hash."""
        return self.compiler.by_hash

    @property
    def site_history(self):
        """The graphs compiled at each trigger site (recompilation.SiteHistory)."""
        return self.compiler.site_history

    @property
    def scalars(self):
        """The scalar upload cache."""
        return self.runner.scalars

    @property
    def in_flight(self):
        """The dispatched graphs not yet announced (inflight.InFlight)."""
        return self.runner.in_flight

    @property
    def closures(self) -> list:
        """The step closures waiting for the next barrier."""
        return self.barrier.closures

    def settle(self) -> None:
        """Waits for the dispatched graphs and announces their executions (see Execution.settle)."""
        self.runner.settle()

    def mark_step(self, cause: Cause) -> None:
        """The step barrier (see Barrier.mark_step)."""
        self.barrier.mark_step(cause)

    def reset(self) -> None:
        """Starts the runtime afresh: no compiled graph, cached scalar, step closure, site history or
        in-flight work, and step 0. The next barrier compiles again.

        Graphs still running are waited for and announced first, as any barrier would. Device tensors
        stay valid: pending ones are computed by the next barrier, as before.

        Raises:
          XlaExecutionError: a graph dispatched before the reset failed while running (the reset is
            done all the same).
        """
        with lock:
            try:
                self.runner.settle()
            finally:
                self.runner.clear()
                self.compiler.clear()
                self.barrier.clear()
                step_memory.reset()
                memory_growth.watch.reset()
                host_memory_growth.watch.reset()
                async_closures.discard_error()
                steps.reset()


executor = Executor(compile_cache, execution, barrier)
