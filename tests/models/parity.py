"""The zoo's parity checks: a case trained on `xla` against float32 and float64 eager CPU.

`check_case` runs the three trainings (see `harness`) and checks, with the bounds derived in
`tolerances`:
  a. the loss of every step;
  b. the first step's gradients, per parameter, relative to the model's gradient scale;
  c. the state after the first step, per element (parameters and buffers: BatchNorm's running
     statistics, counters such as num_batches_tracked exactly); the parameters after the last step, per
     element against the optimizer's reach and per tensor RMS against the drift bound; the state after
     one more step that every side resumes from xla's mid-training state (weights, buffers, optimizer
     moments), per element; and the evaluation-mode output of xla's final state;
  d. compiles only in the warm-up steps, one graph execution per step;
  e. no CPU fallback or host read inside a step, except the ops the case names with a reason.
Every failed comparison is collected, so one run shows them all.
"""

from __future__ import annotations

import dataclasses

import torch

import xladev
from tests.models import tolerances as tol
from tests.models.harness import Case, Run, Trainer, build, convert, parameter_names


@dataclasses.dataclass
class Comparison:
    """The worst element of one check: its error and what the bound allowed there."""

    check: str
    what: str
    observed: float
    allowed: float

    @property
    def ratio(self) -> float:
        return self.observed / self.allowed if self.allowed > 0 else (0.0 if self.observed == 0 else float("inf"))


@dataclasses.dataclass
class Summary:
    """A case's result, for the assertions and the zoo's table.

    Attributes:
      name: the case.
      comparisons: the worst element of each check (check name → Comparison).
      failures: one line per failed check.
      xla, cpu32, cpu64: the runs.
      profile: the measured reduction lengths.
    """

    name: str
    comparisons: dict[str, Comparison]
    failures: list[str]
    xla: Run
    cpu32: Run
    cpu64: Run
    profile: tol.Profile

    @property
    def worst(self) -> Comparison:
        return max(self.comparisons.values(), key=lambda c: c.ratio)


class _Checker:
    def __init__(self) -> None:
        self.comparisons: dict[str, Comparison] = {}
        self.failures: list[str] = []

    def bound(self, check: str, what: str, observed: torch.Tensor, allowed: torch.Tensor) -> None:
        """Records `observed <= allowed` elementwise; the worst ratio is kept per check."""
        observed, allowed = observed.double().reshape(-1), allowed.double().expand_as(observed).reshape(-1)
        excess = observed - allowed
        i = int(torch.argmax(excess)) if excess.numel() else 0
        worst = Comparison(check, what, float(observed[i]) if observed.numel() else 0.0,
                           float(allowed[i]) if observed.numel() else 1.0)
        j = int(torch.argmax(observed / allowed.clamp_min(1e-300))) if observed.numel() else 0
        ratio_worst = Comparison(check, what, float(observed[j]) if observed.numel() else 0.0,
                                 float(allowed[j]) if observed.numel() else 1.0)
        kept = self.comparisons.get(check)
        if kept is None or ratio_worst.ratio > kept.ratio:
            self.comparisons[check] = ratio_worst
        if worst.observed > worst.allowed:
            bad = int((excess > 0).sum())
            self.failures.append(f"{check} {what}: error {worst.observed:.3g} > allowed {worst.allowed:.3g} "
                                 f"(element {i}; {bad} of {observed.numel()} over)")

    def oracle(self, check: str, what: str, x, x32, x64, floor) -> None:
        """|x − x64| <= ORACLE·|x32 − x64| + floor, elementwise (the oracle rule of `tolerances`)."""
        x, x32, x64 = (torch.as_tensor(v, dtype=torch.float64) for v in (x, x32, x64))
        self.bound(check, what, (x - x64).abs(), tol.ORACLE * (x32 - x64).abs() + floor)

    def fail(self, message: str) -> None:
        self.failures.append(message)


def _grad_bounds(grads32: dict, grads64: dict, eps_backward: float) -> dict[str, torch.Tensor]:
    """b per element: how far xla's gradient may be from float64's (the oracle rule, rule 2 as the floor)."""
    scale = max(tol.maxabs(g) for g in grads64.values())
    return {n: tol.ORACLE * (grads32[n] - g64).abs() + eps_backward * scale for n, g64 in grads64.items()}


def _check_graphs(out: _Checker, case: Case, run: Run, warmup: int, label: str, compiled: bool = False) -> None:
    """d and e: compiles only in the first `warmup` steps, one graph per step, nothing on the CPU.

    Through torch.compile a step runs several programs (forward, backward, the lazy loss and optimizer): their
    number is checked to stay the same from step to step instead, and a graph break counts as a host op.
    """
    most = warmup * case.graphs
    if compiled:
        if any(run.compiles[warmup:]) or (warmup and not sum(run.compiles)):
            out.fail(f"{label}: compiles per step {run.compiles}; expected some in the first {warmup} steps, then none")
        steady = run.executions[warmup:] if warmup else run.executions
        if len(set(steady)) > 1:
            out.fail(f"{label}: graph executions per step {run.executions}; expected the same number each step")
    else:
        if sum(run.compiles[:warmup]) > most or any(run.compiles[warmup:]) or (warmup and not sum(run.compiles)):
            out.fail(f"{label}: compiles per step {run.compiles}; expected 1..{most} in the first {warmup} steps, "
                     f"then none")
        if run.executions != [case.graphs] * len(run.executions):
            out.fail(f"{label}: graph executions per step {run.executions}; expected {case.graphs} per step")
    for step, ops in enumerate(run.host_ops):
        unexpected = {op: n for op, n in ops.items() if op not in case.fallbacks}
        if unexpected:
            out.fail(f"{label} step {step} ran on the CPU: {unexpected} (name the op and why in Case.fallbacks)")


def _buffer_floors(model: torch.nn.Module, before: dict, after64: dict, eps_forward: float) -> dict:
    """Per-element floors of the buffers after one step: BatchNorm's by rule 5, others by rule 1."""
    floors = {}
    for prefix, module in model.named_modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.track_running_stats:
            key = f"{prefix}." if prefix else ""
            mean, var = key + "running_mean", key + "running_var"
            if module.momentum is not None:
                floors[mean], floors[var] = tol.running_stat_floors(
                    module.momentum, (before[mean].double(), after64[mean]), (before[var].double(), after64[var]),
                    eps_forward)
    return {name: floors.get(name, eps_forward * value.abs().max()) for name, value in after64.items()}


def _check_step(out: _Checker, case: Case, base: torch.nn.Module, profile: tol.Profile, label: str,
                before: dict, xla: dict, cpu32: Run, cpu64: Run, allowance) -> None:
    """c for one step from a common state `before`: every parameter (allowance) and buffer afterwards."""
    params = parameter_names(base)
    bounds = _grad_bounds(cpu32.grads[0], cpu64.grads[0], profile.eps_backward)
    state32 = cpu32.first_state or cpu32.state
    state64 = cpu64.first_state or cpu64.state
    buffer_floors = _buffer_floors(base, before, state64, profile.eps_forward)
    for name, value64 in state64.items():
        x, x32 = xla[name], state32[name]
        if not value64.is_floating_point():
            if not torch.equal(x, x32):
                out.fail(f"{label} {name}: xla {x.tolist()} != cpu {x32.tolist()}")
        elif params.get(name) in bounds:
            p = params[name]
            floor = allowance(value64, cpu64.grads[0][p], bounds[p], cpu64.moments.get(p, {}))
            out.oracle(label, name, x, x32, value64, floor)
        elif name not in params:
            out.oracle(label, name, x, x32, value64, buffer_floors[name])


def _shared(names: dict[str, str]) -> list[list[str]]:
    groups: dict[str, list[str]] = {}
    for name, canonical in names.items():
        groups.setdefault(canonical, []).append(name)
    return [g for g in groups.values() if len(g) > 1]


def check_case(case: Case, compiled: bool = False) -> Summary:
    """Trains `case` on xla, float32 CPU and float64 CPU and checks a–e (module docstring).

    Args:
      case: the zoo case.
      compiled: train on xla through `torch.compile(model, backend="xladev")` (the same checks and bounds).

    Returns:
      The Summary; `failures` is empty when every check passed.
    """
    base = build(case)
    probe = convert(base, "cpu", torch.float32)
    profile = tol.profile(probe, lambda: case.loss(probe, case.batch(0)))
    params = parameter_names(base)
    settings = case.settings
    trainer = Trainer(case, base, xladev.device(), torch.float32, compiled=compiled)
    xla = trainer.train(case.steps)
    cpu32 = Trainer(case, base, "cpu", torch.float32).train(case.steps)
    cpu64 = Trainer(case, base, "cpu", torch.float64).train(case.steps)
    out = _Checker()

    # a. the loss of every step (rule 1; later steps differ by rounding's second-order effects only).
    for step, (x, a, b) in enumerate(zip(xla.losses, cpu32.losses, cpu64.losses)):
        out.oracle("loss", f"step {step} (xla {x:.7g}, cpu {a:.7g}, float64 {b:.7g})", x, a, b,
                   profile.eps_forward * abs(b))
    # b. the first step's gradients (rule 2).
    if set(xla.grads[0]) != set(cpu64.grads[0]):
        out.fail(f"gradients: only one side has {sorted(set(xla.grads[0]) ^ set(cpu64.grads[0]))}")
    bounds = [_grad_bounds(g32, g64, profile.eps_backward) for g32, g64 in zip(cpu32.grads, cpu64.grads)]
    for name, g64 in cpu64.grads[0].items():
        if name in xla.grads[0]:
            out.bound("grad", name, (xla.grads[0][name] - g64).abs(), bounds[0][name])
    # c. the state after the first step (rule 4's sign argument) and after the last (reach, RMS drift).
    _check_step(out, case, base, profile, "state after step 1", base.state_dict(), xla.first_state, cpu32, cpu64,
                lambda theta, g, b, _: tol.first_step_allowance(case.optimizer, settings, theta, g, b))
    for name, p in params.items():
        if p not in cpu64.grads[0]:
            continue
        floor, reach = tol.drift_floor(case.optimizer, settings, cpu64.state[p], [g[p] for g in cpu64.grads],
                                       [b[p] for b in bounds])
        x, x32, x64 = xla.state[name], cpu32.state[name], cpu64.state[name]
        if reach != float("inf"):
            out.bound("final reach", name, (x - x32).abs(),
                      reach + 2 * tol.update_rounding(x32, settings["lr"], case.steps))
        out.bound("final rms", name, torch.tensor(tol.rms(x - x64)),
                  torch.tensor(tol.ORACLE * tol.rms(x32 - x64) + floor))
    for name in cpu64.state:
        if not cpu64.state[name].is_floating_point() and not torch.equal(xla.state[name], cpu32.state[name]):
            out.fail(f"final {name}: xla {xla.state[name].tolist()} != cpu {cpu32.state[name].tolist()}")

    # Tied parameters (HF's output projection and input embedding) must still be one tensor on xla;
    # if they are not, xla's state cannot be resumed on the CPU model.
    if parameter_names(trainer.model) != params:
        out.fail(f"ties: the CPU model shares {_shared(params)}, the trained xla model "
                 f"{_shared(parameter_names(trainer.model))}")
        return Summary(case.name, out.comparisons, out.failures, xla, cpu32, cpu64, profile)

    # One more step from xla's own mid-training state (weights, buffers, moments) on every side: the
    # later-step optimizer and BatchNorm statistics, checked without the drift of the steps before.
    resume = trainer.snapshot()
    xla_next = trainer.train(1, start=case.steps, record_first=False)
    next32 = Trainer(case, base, "cpu", torch.float32, resume).train(1, start=case.steps)
    next64 = Trainer(case, base, "cpu", torch.float64, resume).train(1, start=case.steps)
    out.oracle("loss", f"resumed step (xla {xla_next.losses[0]:.7g}, float64 {next64.losses[0]:.7g})",
               xla_next.losses[0], next32.losses[0], next64.losses[0], profile.eps_forward * abs(next64.losses[0]))
    _check_step(out, case, base, profile, "state after a resumed step", resume[0], xla_next.state, next32, next64,
                lambda theta, g, b, moments: tol.resumed_step_allowance(case.optimizer, settings, theta, g, b,
                                                                        moments))

    if case.output is not None:
        # The eval-mode output is xla's function of its own final weights and running statistics:
        # eager evaluates the same state, so training drift does not enter.
        xla.output = trainer.evaluate()
        final = trainer.snapshot()
        outputs = []
        for dtype in (torch.float32, torch.float64):
            same = Trainer(case, base, "cpu", dtype, final)
            outputs.append(same.evaluate())
        out.oracle("eval output", "on batch 0", xla.output, *outputs, profile.eps_forward * tol.maxabs(outputs[1]))

    # d, e.
    _check_graphs(out, case, xla, case.warmup, "training", compiled)
    _check_graphs(out, case, xla_next, 0, "resumed step", compiled)
    return Summary(case.name, out.comparisons, out.failures, xla, cpu32, cpu64, profile)
