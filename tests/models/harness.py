"""Runs one zoo case three ways (float32 on `xla`, float32 eager CPU, float64 eager CPU) from the same
weights and batches, and records what the parity checks in `tolerances` compare.

A case is a model builder, a batch per step and a loss. Every run deep-copies the same CPU model
(so ties between parameters survive, and all runs start from identical weights), converts it to the
run's device and dtype, and takes `steps` optimizer steps on batches built from seeded generators on
the CPU. On `xla` each step ends with `xladev.mark_step()` and waits for its graph, so a step's wall
time includes its execution, and the metrics counters are read between steps (compiles from
`CompileTime`, graph runs from `ExecuteGraph`, CPU fallbacks and host reads from the `aten::*`
counters, as in PyTorch/XLA's reports).
"""

from __future__ import annotations

import copy
import dataclasses
import statistics
import time
from typing import Callable, Mapping

import torch
import torch.nn as nn

import xladev
import xladev.debug.metrics as met

Batch = dict[str, torch.Tensor]

# torch.optim defaults except the learning rates, which are large enough that a few steps move the loss.
ADAMW = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
SGD = {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.0}


@dataclasses.dataclass(frozen=True)
class Case:
    """One model of the zoo.

    Attributes:
      name: the id shown in test names and tables.
      model: builds the float32 CPU model; it seeds its own initialisation.
      batch: step index → the CPU batch (keyword arguments of `loss`), from a seeded generator.
      loss: (model, batch) → scalar loss tensor.
      output: (model, batch) → the output compared in evaluation mode, or None to skip that check.
      optimizer: "adamw" or "sgd" (settings in ADAMW and SGD).
      steps: optimizer steps per run.
      warmup: steps that may compile (the optimizer creates its state in step 0, so step 1 has new inputs).
      fallbacks: `aten::` counters allowed inside a step (CPU fallbacks, host reads), each with the reason.
      graphs: graphs per step (more than one only where a named host read splits the step).
    """

    name: str
    model: Callable[[], nn.Module]
    batch: Callable[[int], Batch]
    loss: Callable[[nn.Module, Batch], torch.Tensor]
    output: Callable[[nn.Module, Batch], torch.Tensor] | None = None
    optimizer: str = "adamw"
    steps: int = 4
    warmup: int = 2
    fallbacks: Mapping[str, str] = dataclasses.field(default_factory=dict)
    graphs: int = 1

    @property
    def settings(self) -> dict:
        return dict(ADAMW if self.optimizer == "adamw" else SGD)

    def make_optimizer(self, params) -> torch.optim.Optimizer:
        kind = torch.optim.AdamW if self.optimizer == "adamw" else torch.optim.SGD
        return kind(params, **self.settings)


@dataclasses.dataclass
class Run:
    """What some training steps produced; tensors are float64 CPU copies, keyed by name.

    Attributes:
      losses: the loss of each step.
      grads: the gradients of each step, by parameter name (the xla run keeps its first step's only:
        keeping more would add outputs to the graphs it checks).
      first_state: the state_dict (parameters and buffers) after the first step.
      moments: the optimizer's state per parameter after the first step (CPU runs only).
      state: the state_dict after the last step.
      output: the evaluation-mode output of the final model on batch 0 (None when the case has none).
      compiles, executions: graphs compiled and run per step (xla only).
      host_ops: `aten::*` counters per step: CPU fallbacks and host reads (xla only).
      step_seconds: wall time per step, the barrier and the graph's execution included.
      compile_seconds: compile time per step (xla only).
    """

    losses: list[float] = dataclasses.field(default_factory=list)
    grads: list[dict[str, torch.Tensor]] = dataclasses.field(default_factory=list)
    first_state: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    moments: dict[str, dict[str, torch.Tensor]] = dataclasses.field(default_factory=dict)
    state: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    output: torch.Tensor | None = None
    compiles: list[int] = dataclasses.field(default_factory=list)
    executions: list[int] = dataclasses.field(default_factory=list)
    host_ops: list[dict[str, int]] = dataclasses.field(default_factory=list)
    step_seconds: list[float] = dataclasses.field(default_factory=list)
    compile_seconds: list[float] = dataclasses.field(default_factory=list)

    @property
    def steady_seconds(self) -> float:
        """Median wall time of the steps after the warm-up (the last step when all compile)."""
        return statistics.median(self.step_seconds[2:] or self.step_seconds[-1:])


def to_device(batch: Batch, device, dtype: torch.dtype) -> Batch:
    """The batch on `device`, floating tensors in `dtype` (integer ids and labels unchanged)."""
    return {k: v.to(device=device, dtype=dtype if v.is_floating_point() else v.dtype) for k, v in batch.items()}


def convert(model: nn.Module, device, dtype: torch.dtype) -> nn.Module:
    """A deep copy of `model` on `device` in `dtype`: the user's `model.to(...)` path, ties kept."""
    return copy.deepcopy(model).to(device=device, dtype=dtype)


def _host(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to("cpu", torch.float64) if t.is_floating_point() else t.detach().to("cpu").clone()


# Counted like a host op: a torch.compile graph break inside a step is a part of it that is not compiled.
GRAPH_BREAKS = "DynamoGraphBreak"


def _counts() -> tuple[int, int, dict[str, int]]:
    snap = met.snapshot()
    compile_samples = snap.metrics.get("CompileTime", {}).get("total_samples", 0)
    host = {k: v for k, v in snap.counters.items() if k.startswith("aten::") or k == GRAPH_BREAKS}
    return compile_samples, snap.counters.get("ExecuteGraph", 0), host


def _compile_seconds_since(samples_before: int) -> float:
    data = met.metric_data("CompileTime")
    if data is None or data[0] <= samples_before:
        return 0.0
    fresh = data[2][-(data[0] - samples_before):]
    return sum(value for _, value in fresh) / 1e9


class Trainer:
    """A copy of the base model on one device and dtype with its optimizer, trained step by step.

    Args:
      case: the zoo case.
      base: the float32 CPU model every run starts from.
      device: `xladev.device()` or "cpu".
      dtype: torch.float32 or torch.float64.
      resume: (model state_dict, optimizer state_dict) to start from instead of `base`'s weights.
      compiled: run the model's forward (and its backward) through `torch.compile(backend="xladev")`; the loss
        around it and the optimizer step are recorded lazily, as a user's code around a compiled model is.
    """

    def __init__(self, case: Case, base: nn.Module, device, dtype: torch.dtype, resume: tuple | None = None,
                 compiled: bool = False):
        self.case, self.device, self.dtype = case, device, dtype
        self.on_xla = torch.device(device).type == "xla"
        if self.on_xla:
            xladev.mark_step(wait=True)  # nothing pending from earlier tests may land in this run's graphs
        self.model = convert(base, device, dtype)
        self.optimizer = case.make_optimizer(self.model.parameters())
        if resume is not None:
            # A copy per trainer: load_state_dict keeps the optimizer's `step` tensors, and stepping
            # would then advance them for every trainer resumed from the same snapshot.
            model_state, opt_state = copy.deepcopy(resume)
            self.model.load_state_dict(model_state)
            self.optimizer.load_state_dict(opt_state)  # casts the moments to the parameters' device and dtype
        self.model.train()
        self.named = dict(self.model.named_parameters())  # one name per tensor: tied parameters appear once
        # The compiled module shares the model's parameters and buffers; evaluation and state use the model.
        self.forward = torch.compile(self.model, backend="xladev") if compiled else self.model

    def train(self, steps: int, start: int = 0, record_first: bool = True) -> Run:
        """Takes `steps` steps on batches `start`, `start + 1`, ...

        Args:
          steps: how many optimizer steps.
          start: the index of the first batch.
          record_first: keep the first step's gradients and state; on xla they are lazy copies that
            become outputs of that step's graph (no value is read inside a step).

        Returns:
          The Run of these steps.
        """
        run, losses = Run(), []
        for i in range(steps):
            batch = to_device(self.case.batch(start + i), self.device, self.dtype)
            before = _counts() if self.on_xla else None
            began = time.perf_counter()
            self.optimizer.zero_grad(set_to_none=True)
            loss = self.case.loss(self.forward, batch)
            loss.backward()
            first = record_first and i == 0
            if first or not self.on_xla:
                run.grads.append({n: p.grad.detach().clone() for n, p in self.named.items() if p.grad is not None})
            self.optimizer.step()
            if first:
                run.first_state = {n: t.detach().clone() for n, t in self.model.state_dict().items()}
                if not self.on_xla:
                    run.moments = {n: {k: v.detach().clone() for k, v in self.optimizer.state[p].items()}
                                   for n, p in self.named.items() if p in self.optimizer.state}
            losses.append(loss.detach())
            if self.on_xla:
                xladev.mark_step(wait=True)
            run.step_seconds.append(time.perf_counter() - began)
            if self.on_xla:
                after = _counts()
                run.compiles.append(after[0] - before[0])
                run.executions.append(after[1] - before[1])
                run.host_ops.append({k: v - before[2].get(k, 0) for k, v in after[2].items()
                                     if v != before[2].get(k, 0)})
                run.compile_seconds.append(_compile_seconds_since(before[0]))
        run.losses = [float(v) for v in losses]
        run.grads = [{n: _host(g) for n, g in step.items()} for step in run.grads]
        run.first_state = {n: _host(t) for n, t in run.first_state.items()}
        run.moments = {n: {k: _host(v) for k, v in m.items()} for n, m in run.moments.items()}
        run.state = {n: _host(t) for n, t in self.model.state_dict().items()}
        return run

    def snapshot(self) -> tuple[dict, dict]:
        """(model state_dict, optimizer state_dict) as CPU copies, to resume another Trainer from."""
        model_state = {n: t.detach().cpu().clone() for n, t in self.model.state_dict().items()}
        opt_state = self.optimizer.state_dict()
        opt_state["state"] = {k: {n: v.detach().cpu().clone() if isinstance(v, torch.Tensor) else v
                                  for n, v in st.items()} for k, st in opt_state["state"].items()}
        return model_state, opt_state

    def evaluate(self) -> torch.Tensor:
        """The evaluation-mode output on batch 0 (a float64 CPU tensor); leaves the model in training mode."""
        out = evaluate(self.case, self.model, self.device, self.dtype)
        self.model.train()
        return out


def evaluate(case: Case, model: nn.Module, device, dtype: torch.dtype) -> torch.Tensor:
    """The evaluation-mode output of `model` on batch 0, as a float64 CPU tensor."""
    model.eval()
    with torch.no_grad():
        out = case.output(model, to_device(case.batch(0), device, dtype))
    return _host(out)


def parameter_names(model: nn.Module) -> dict[str, str]:
    """State-dict name → the name `named_parameters()` gives that tensor (tied names map to one)."""
    canonical = {id(p): n for n, p in model.named_parameters()}
    return {n: canonical[id(p)] for n, p in model.named_parameters(remove_duplicate=False)}


def build(case: Case) -> nn.Module:
    """The case's float32 CPU model, built under a fixed seed (also the device RNG's)."""
    torch.manual_seed(0)
    xladev.manual_seed(0)
    return case.model()
