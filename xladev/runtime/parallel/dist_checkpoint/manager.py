"""`CheckpointManager`: checkpoints by step over torch.distributed.checkpoint (PyTorch/XLA's
`torch_xla.experimental.distributed_checkpoint.CheckpointManager`).

    mgr = CheckpointManager("/ckpt/run1", save_interval=10, max_to_keep=3)
    if mgr.all_steps():
        state = {"model": model.state_dict(), "optim": optim.state_dict()}
        mgr.restore(max(mgr.all_steps()), state)
        model.load_state_dict(state["model"])
    for step, batch in enumerate(loader):
        ...
        mgr.save_async(step, {"model": model.state_dict(), "optim": optim.state_dict()})

Each checkpoint is a torch.distributed.checkpoint directory `PATH/STEP` written with `SPMDSavePlanner`, committed
atomically (commit.py): a process killed mid-save loses no earlier checkpoint, and a half-written one is
never listed or restored. On SIGTERM (preemption.py) the step every process reaches next is checkpointed,
then the process ends. What differs from PyTorch/XLA: the path is a local (or mounted) directory, not an
fsspec URL; a lone process needs no process group; a failed asynchronous save is reported, not dropped.
"""

from __future__ import annotations

import collections
import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

import torch.distributed as dist
import torch.distributed.checkpoint as dist_cp
from torch.distributed.checkpoint.api import CheckpointException

from xladev.events import ending
from xladev.runtime.api import training
from xladev.runtime.graph import world
from xladev.runtime.parallel.dist_checkpoint import commit, preemption
from xladev.runtime.parallel.dist_checkpoint.planners import SPMDLoadPlanner, SPMDSavePlanner, check_fits, check_world_size
from xladev.runtime.parallel.dist_checkpoint.state import CheckpointError, flatten, sharded_cpu_state_dict
from xladev.errors import XladevError


class CheckpointManager:
    """Takes, lists, prunes and restores checkpoints by training step.

    Attributes (PyTorch/XLA's):
      base_path: the directory holding one checkpoint directory per step (ends with a separator).
      save_interval: a checkpoint is taken at each step divisible by it.
      max_to_keep: how many checkpoints are kept, the oldest (by time taken) deleted first; 0 keeps all.
      chkpt_on_preemption: whether a checkpoint is taken at the step agreed after a SIGTERM.
    """

    def __init__(self, path: str, save_interval: int, max_to_keep: int = 0, max_pending_async: int = 1,
                 num_of_threads: int = 1, process_group=None, chkpt_on_preemption: bool = True) -> None:
        """Opens (or creates) the checkpoint directory `path`.

        Args:
          path: a local directory (or `file://` URL); other fsspec URLs are refused.
          save_interval: steps between checkpoints (`save` at a step divisible by it takes one).
          max_to_keep: checkpoints kept; 0 keeps all.
          max_pending_async: asynchronous checkpoints that may be in flight before `save_async` waits.
          num_of_threads: threads writing each process's files.
          process_group: the group that checkpoints together; default: a new gloo group of every process
            when torch.distributed is initialized, none otherwise (a lone process).
          chkpt_on_preemption: take a checkpoint at the step agreed after a SIGTERM, then end the process.

        Raises:
          CheckpointError: a bad argument, or a job of several processes without torch.distributed.
          PreemptionError: preemption detection cannot start here (not the main thread).
        """
        for name, value, least in (("save_interval", save_interval, 1), ("max_to_keep", max_to_keep, 0),
                                   ("max_pending_async", max_pending_async, 1), ("num_of_threads", num_of_threads, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise CheckpointError(f"CheckpointManager: {name} must be an integer >= {least}, got {value!r}")
        self._base = _local_dir(path)
        self.base_path = str(self._base) + "/"
        self.save_interval = save_interval
        self.max_to_keep = max_to_keep
        self.num_of_threads = num_of_threads
        self.chkpt_on_preemption = chkpt_on_preemption
        self.pg = _group(process_group)
        self._async_worker_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="xladev-checkpoint")
        self._async_sem = threading.Semaphore(max_pending_async)
        self._async_futures: list[Future] = []
        self._save_mutex = threading.Lock()
        self._tracked_chkpts = self._load_tracked_chkpts()
        if chkpt_on_preemption:
            preemption.activate()

    # ------------------------------------------------------------------ what is there
    def all_steps(self) -> list[int]:
        """The steps of the committed checkpoints, in increasing order."""
        return sorted(c.step for c in self._tracked_chkpts)

    def should_save(self, step: int) -> bool:
        """Whether `step` gets a checkpoint: it is divisible by `save_interval`, or it is the step agreed after
        a preemption notice (SIGTERM), when `chkpt_on_preemption` is on."""
        preempted = self.chkpt_on_preemption and self.reached_preemption(step)
        return step % self.save_interval == 0 or preempted

    def reached_preemption(self, step: int) -> bool:
        """Whether `step` is the step every process checkpoints at after a preemption notice (SIGTERM).

        Raises:
          CheckpointError: the manager was made with `chkpt_on_preemption=False`.
        """
        if not self.chkpt_on_preemption:
            raise CheckpointError("reached_preemption: preemption detection is off; create the CheckpointManager "
                                  "with chkpt_on_preemption=True")
        return preemption.reached_sync_point(step)

    # ------------------------------------------------------------------ saving
    def save(self, step: int, state_dict: dict, force: bool = False) -> bool:
        """Takes a checkpoint of `state_dict` now if `should_save(step)` (or `force`).

        Args:
          step: the training step (the same on every process).
          state_dict: what to save (nested dicts and lists of tensors, sharded or not, and Python values).
          force: take it whatever `should_save` says.

        Returns:
          True when a checkpoint was taken. At the step agreed after this process's SIGTERM the process ends
          once it is written, and this does not return.

        Raises:
          CheckpointError: the processes do not share the directory, or a value cannot be saved.
        """
        if not (self.should_save(step) or force):
            return False
        training.sync()
        training.wait_device_ops()
        self._save(step, state_dict)
        self._end_if_preempted(step)
        return True

    def save_async(self, step: int, state_dict: dict, force: bool = False) -> bool:
        """Copies `state_dict` to the CPU now and writes it on a background thread if `should_save(step)`
        (or `force`). Waits first while `max_pending_async` checkpoints are in flight.

        Args:
          step: the training step (the same on every process).
          state_dict: what to save; its device values are copied before this returns, so training may go on.
          force: take it whatever `should_save` says.

        Returns:
          True when a checkpoint was started. At the step agreed after this process's SIGTERM it is written
          before this returns, and then the process ends.
        """
        if not (self.should_save(step) or force):
            return False
        training.sync()
        training.wait_device_ops()
        cpu_state = sharded_cpu_state_dict(state_dict)
        self._async_sem.acquire()
        future = self._async_worker_pool.submit(self._save, step, cpu_state)
        future.add_done_callback(lambda done, step=step: self._async_done(done, step))
        self._async_futures.append(future)
        self._end_if_preempted(step)  # the preemption's checkpoint is written before the process ends
        return True

    def join(self) -> None:
        """Waits for the asynchronous checkpoints in flight.

        Raises:
          CheckpointError: one of them failed (the first failure; each was also told on stderr).
        """
        futures, self._async_futures = self._async_futures, []
        wait(futures)
        for future in futures:
            exc = future.exception()
            if exc is not None:
                raise CheckpointError(f"an asynchronous checkpoint failed: {_describe(exc)}") from exc

    def _async_done(self, future: Future, step: int) -> None:
        self._async_sem.release()
        exc = future.exception()
        if exc is not None:  # never silent: join() raises it too
            ending.say(f"CheckpointManager: the asynchronous checkpoint of step {step} failed and was not "
                       f"committed: {_describe(exc)}")

    def _save(self, step: int, state_dict: dict) -> None:
        """Writes the checkpoint of `step` into its temporary directory, then commits it (process 0)."""
        with self._save_mutex:
            first = self._rank() == 0
            if first:
                commit.prepare(self._base, step)
            self._barrier()  # nobody writes before the directory is clean
            try:
                dist_cp.save(state_dict=state_dict, planner=SPMDSavePlanner(), process_group=self.pg,
                             no_dist=self.pg is None,
                             storage_writer=dist_cp.FileSystemWriter(commit.staging(self._base, step),
                                                                     thread_count=self.num_of_threads))
            except CheckpointException as exc:
                raise _unwrapped(exc) from None
            if first:
                done = commit.commit(self._base, step, self._world_size())
            self._barrier()  # every process returns once the checkpoint is committed
            if not first:
                done = next((c for c in commit.scan(self._base)[0] if c.step == step), None)
                if done is None:
                    raise CheckpointError(
                        f"process {self._rank()} does not see the checkpoint of step {step} that process 0 "
                        f"committed in {self._base}: the directory must be shared by every process of the job "
                        "(one host, or a shared mount)")
            self._tracked_chkpts = collections.deque(c for c in self._tracked_chkpts if c.step != step)
            self._tracked_chkpts.append(done)
            if self.max_to_keep:
                while len(self._tracked_chkpts) > self.max_to_keep:
                    oldest = self._tracked_chkpts.popleft()
                    if first:
                        commit.delete(self._base, oldest.step)

    def _end_if_preempted(self, step: int) -> None:
        """At the step agreed after this process's SIGTERM: waits for the checkpoints in flight, then ends the
        process (a failed one raises instead, and the SIGTERM stays held back until XLADEV_PREEMPTION_GRACE)."""
        if self.chkpt_on_preemption and preemption.heard() and preemption.reached_sync_point(step):
            self.join()
            preemption.finish(step)

    # ------------------------------------------------------------------ restoring
    def restore(self, step: int, state_dict: dict) -> None:
        """Loads the checkpoint of `step` into `state_dict` in place (its tensors keep their devices and
        shardings; Python objects are replaced). Call `model.load_state_dict` after, as with PyTorch/XLA.

        Args:
          step: one of `all_steps()`.
          state_dict: the values to load into, on the device with the shardings wanted.

        Raises:
          CheckpointError: no committed checkpoint of `step`, or it does not fit `state_dict` (a value missing
            or of another shape, another world size), naming each difference.
        """
        if step not in {c.step for c in self._tracked_chkpts}:
            steps = self.all_steps()
            half = commit.staging(self._base, step).exists()
            raise CheckpointError(
                f"restore({step}): {self._base} holds no complete checkpoint of step {step}"
                + (" (only a half-written one, never loaded)" if half else "")
                + f"; the complete ones are of steps {steps if steps else '(none)'}")
        path = commit.final(self._base, step)
        metadata = dist_cp.FileSystemReader(path).read_metadata()
        try:
            check_world_size(metadata, self._world_size())
            check_fits(flatten(state_dict)[0], metadata)
        except CheckpointError as exc:
            raise CheckpointError(f"restore({step}) from {path}: {exc}") from None
        try:
            dist_cp.load(state_dict=state_dict, storage_reader=dist_cp.FileSystemReader(path),
                         planner=SPMDLoadPlanner(), process_group=self.pg, no_dist=self.pg is None)
        except CheckpointException as exc:
            raise _unwrapped(exc) from None

    # ------------------------------------------------------------------ the directory and the group
    def _load_tracked_chkpts(self) -> collections.deque:
        """The committed checkpoints, oldest first, once process 0 has cleaned what killed saves left."""
        if self._rank() == 0:
            self._base.mkdir(parents=True, exist_ok=True)
            commit.recover(self._base)
        self._barrier()
        committed, ignored = commit.scan(self._base)
        if ignored and self._rank() == 0:
            ending.say("CheckpointManager: ignoring invalid checkpoints: " + "; ".join(ignored))
        return collections.deque(committed)

    def _rank(self) -> int:
        return dist.get_rank(self.pg) if self.pg is not None else 0

    def _world_size(self) -> int:
        return dist.get_world_size(self.pg) if self.pg is not None else 1

    def _barrier(self) -> None:
        if self.pg is not None:
            dist.barrier(group=self.pg)


def _local_dir(path) -> Path:
    text = str(path)
    if text.startswith("file://"):
        text = text[len("file://"):]
    elif "://" in text:
        raise CheckpointError(f"CheckpointManager: {text!r} is not a local path. xladev's CheckpointManager writes "
                              "to a local (or mounted) directory, where a checkpoint is committed by an atomic "
                              "rename; mount the bucket (gcsfuse...) and give its path")
    return Path(text).expanduser().absolute()


def _group(process_group):
    """The process group the manager checkpoints with; None for a lone process.

    torch.distributed.checkpoint exchanges plans and results as Python objects, which gloo carries: with the
    `xla` backend as the default, the manager makes a gloo group of every process (PyTorch/XLA makes a new
    group too, so that its background saves do not share the training's).
    """
    if process_group is not None:
        return process_group
    if dist.is_available() and dist.is_initialized():
        return dist.new_group(backend="gloo")
    size = world.placement().world_size
    if size > 1:
        raise CheckpointError(f"CheckpointManager in a job of {size} processes needs torch.distributed, to "
                              "checkpoint together: call dist.init_process_group('gloo', init_method='xla://') "
                              "(or with the 'xla' backend) first, on every process")
    return None


def _unwrapped(exc: CheckpointException) -> BaseException:
    """An xladev error that torch.distributed.checkpoint wrapped (with every rank's traceback) as itself."""
    for failure, _ in exc.failures.values():
        if isinstance(failure, XladevError):
            return failure
    return exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, CheckpointException):
        exc = _unwrapped(exc)
        if isinstance(exc, CheckpointException):
            first = next(iter(exc.failures.values()))[0]
            return f"{type(first).__name__}: {first}"
    return f"{type(exc).__name__}: {exc}"

