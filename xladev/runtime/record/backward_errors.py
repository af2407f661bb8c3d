"""An op that fails in the backward pass reaches the caller of `backward()` as itself, not as an abort.

torch's autograd engine runs a device's backward nodes under a stream guard of the device. When a device op's
Python error unwinds through that guard, the guard's restore calls back into Python with the error still
pending, and the process aborts ("terminate called without an active exception"; gdb: `std::terminate` in
`torch::acc::PythonDeviceGuard::exchangeStream` from `~InlineStreamGuard` in `Engine::evaluate_function`).

So an op that fails while autograd runs a node does not raise there: `dispatch` keeps the error (`keep`) and
answers that op, and every later op of the pass, with empty placeholders. The engine then refuses the node's
gradient with a C++ error of its own ("invalid gradient"), which unwinds without Python, and the wrapper of the
engine's entry point raises the kept error instead, with its own message and traceback.
"""

from __future__ import annotations

import functools

import torch

# Autograd's graph task id -> the error of the op that failed in that backward pass (its later ops get
# placeholders); another thread's backward pass running meanwhile is not touched. Read by dispatch before every
# op: an empty dict is the cheapest check.
kept: dict[int, BaseException] = {}


def failed() -> bool:
    """Whether an op of the backward pass running on this thread has failed (its later ops get placeholders)."""
    return torch._C._current_graph_task_id() in kept


def keep(error: BaseException) -> bool:
    """Keeps an op's error when autograd is running a node (the caller then returns a placeholder); False
    otherwise (the caller raises it as usual)."""
    task = torch._C._current_graph_task_id()
    if task < 0 or torch._C._current_autograd_node() is None:
        return False
    kept.setdefault(task, error)
    return True


def placeholder(func, args):
    """What a failed op answers while the kept error waits: empty tensors in the op's return structure."""
    out = []
    for ret in func._schema.returns:
        kind = str(ret.type)
        if kind.startswith("Tensor[]") or kind.startswith("List[Tensor]"):
            out.append([])
        elif kind.startswith("Tensor"):
            out.append(args[0] if ret.alias_info is not None and ret.alias_info.is_write else
                       torch.empty(0, device="xla"))
        else:
            out.append(0)
    return out[0] if len(out) == 1 else (tuple(out) if out else None)


def install() -> None:
    """Wraps torch's entry point to the autograd engine so that a kept error is raised. Idempotent."""
    import torch.autograd
    import torch.autograd.graph

    run = torch.autograd.graph._engine_run_backward
    if getattr(run, "_xladev", False):
        return
    wrapped = _raising_kept(run)
    torch.autograd.graph._engine_run_backward = wrapped
    torch.autograd._engine_run_backward = wrapped  # torch.autograd.backward and grad call it by this name


def _raising_kept(run):
    @functools.wraps(run)
    def engine_run_backward(*args, **kwargs):
        try:
            return run(*args, **kwargs)
        except Exception:
            # This pass's task id is not known here; the engine has ended it, so its error is the one left
            # (two passes failing at the same moment on two threads could swap theirs: both fail all the same).
            if not kept:
                raise
            error = kept.pop(next(iter(kept)))
            raise error.with_traceback(error.__traceback__) from None

    engine_run_backward._xladev = True
    return engine_run_backward
