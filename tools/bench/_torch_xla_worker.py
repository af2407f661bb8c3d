"""The torch_xla side of bench_torch_xla.py: runs under real PyTorch/XLA's interpreter, never imports xladev or jax.

    PJRT_DEVICE=CPU ~/txla/bin/python tools/bench/_torch_xla_worker.py

It reads one JSON command a line on stdin and answers one JSON line on stdout (torch_xla's own messages go to
stderr):
- {"cmd": "hello"} -> {"torch_xla": version, "torch": version, "device": the xla device's hardware};
- {"cmd": "setup", "spec": PATH, "warmup": W} -> {"first_loss": float, "ignored_settings": {name: repr}}: builds the workload that PATH (a
  torch.save of plain data and tensors, see bench_torch_xla.workload_spec) describes on the xla device, with the
  parent's weights, computes the first loss (before any step), then runs W untimed steps (they compile);
- {"cmd": "block", "steps": K} -> {"seconds": s, "compiles": n}: K steps, each ending in `torch_xla.sync()`,
  then waits for the device; s is the wall time per step, n the graphs torch_xla compiled meanwhile;
- {"cmd": "quit"} -> exits.
A failure answers {"error": message} and the worker keeps reading, so the parent can report it.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: `examples` is importable


@dataclasses.dataclass
class Workload:
    """One workload on the xla device: its model, optimizer, batch and loss."""

    model: object
    optimizer: object
    batch: object
    loss: object  # (model, batch) -> scalar loss tensor

    def step(self):
        """Forward, backward and optimizer step, then the step's barrier; returns the loss tensor."""
        import torch_xla

        self.optimizer.zero_grad(set_to_none=True)
        loss = self.loss(self.model, self.batch)
        loss.backward()
        self.optimizer.step()
        torch_xla.sync()
        return loss


def build_model(spec: dict):
    """The model the spec names, built on the CPU as the parent built it (its weights are loaded afterwards)."""
    kind = spec["builder"]
    if kind == "example":  # examples.mlp / examples.transformer: build(seed, Config(...))
        module = importlib.import_module(spec["module"])
        return module.build(spec["seed"], module.Config(**spec["config"]))
    if kind == "transformers":
        import transformers

        config_class = getattr(transformers, spec["config_class"])
        config = config_class.from_dict(spec["config"], attn_implementation=spec["attn_implementation"])
        return getattr(transformers, spec["model_class"])(config)
    raise ValueError(f"unknown model builder {kind!r}")


def loss_function(spec: dict):
    """(model, batch) -> loss for the spec's loss kind."""
    if spec["loss"] == "example":  # the example's loss_fn(logits, targets), the batch an (inputs, targets) pair
        loss_fn = importlib.import_module(spec["module"]).loss_fn
        return lambda model, batch: loss_fn(model(batch[0]), batch[1])
    if spec["loss"] == "transformers":  # a transformers model given `labels` returns its loss
        return lambda model, batch: model(**batch).loss
    raise ValueError(f"unknown loss kind {spec['loss']!r}")


def make_optimizer(spec: dict, params):
    """torch.optim.<name>(params, **settings), with the settings this torch's optimizer accepts.

    Returns:
      (the optimizer, the settings it has no parameter for): a setting a later torch added (AdamW's
      decoupled_weight_decay=True, which torch 2.9's AdamW always does) is left out, and the parent prints it.
    """
    import torch

    kind = getattr(torch.optim, spec["optimizer"])
    accepted = inspect.signature(kind).parameters
    settings = spec["optimizer_settings"]
    ignored = {k: v for k, v in settings.items() if k not in accepted}
    return kind(params, **{k: v for k, v in settings.items() if k in accepted}), ignored


def setup(spec_path: str, warmup: int) -> tuple[Workload, float, dict]:
    """Builds the workload of a spec file on the xla device, with the parent's weights and batch.

    Args:
      spec_path: the torch.save file (bench_torch_xla.worker_spec).
      warmup: untimed steps to run (they compile).

    Returns:
      the workload, its loss before any step, and the optimizer settings left out (see make_optimizer).
    """
    import torch
    import torch_xla

    spec = torch.load(spec_path, weights_only=True)
    device = torch_xla.device()
    model = build_model(spec)
    model.load_state_dict(spec["state_dict"])
    model = model.to(device)
    batch = spec["batch"]
    batch = ({k: v.to(device) for k, v in batch.items()} if isinstance(batch, dict)
             else tuple(t.to(device) for t in batch))
    optimizer, ignored = make_optimizer(spec, model.parameters())
    workload = Workload(model, optimizer, batch, loss_function(spec))
    torch_xla.sync()
    with torch.no_grad():
        first_loss = workload.loss(model, batch).item()
    for _ in range(warmup):
        workload.step()
    wait()
    return workload, first_loss, ignored


def wait() -> None:
    """Returns once the device has run every graph dispatched so far."""
    import torch_xla.core.xla_model as xm

    xm.wait_device_ops()


def compile_count() -> int:
    """Graphs torch_xla has compiled so far (its CompileTime metric): a steady step compiles none."""
    import torch_xla.debug.metrics as met

    data = met.metric_data("CompileTime")
    return data[0] if data else 0


def serve(lines, out) -> None:
    """Answers each JSON request line of `lines` with one JSON line on `out`, until "quit" or the end of input."""
    workload = None
    for line in lines:
        request = json.loads(line)
        try:
            if request["cmd"] == "quit":
                return
            if request["cmd"] == "hello":
                import torch
                import torch_xla
                import torch_xla.core.xla_model as xm

                answer = {"torch_xla": torch_xla.__version__, "torch": torch.__version__,
                          "device": xm.xla_device_hw(torch_xla.device())}
            elif request["cmd"] == "setup":
                workload, first_loss, ignored = setup(request["spec"], request["warmup"])
                answer = {"first_loss": first_loss, "ignored_settings": {k: repr(v) for k, v in ignored.items()}}
            elif request["cmd"] == "block":
                compiles = compile_count()
                start = time.perf_counter()
                for _ in range(request["steps"]):
                    workload.step()
                wait()
                answer = {"seconds": (time.perf_counter() - start) / request["steps"],
                          "compiles": compile_count() - compiles}
            else:
                answer = {"error": f"unknown command {request['cmd']!r}"}
        except Exception as exc:  # the parent names the failure; the traceback goes to stderr for a developer
            traceback.print_exc(file=sys.stderr)
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    # Answers go to the real stdout; anything else written to file descriptor 1 (torch_xla's C++ side, a print)
    # goes to stderr, so it cannot break a JSON line.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    serve(sys.stdin, answers)
