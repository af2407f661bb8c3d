"""xladev against real PyTorch/XLA 2.9: the same training steps, lazy and compiled, beside torch_xla and eager CPU.

    python tools/bench/bench_torch_xla.py [--torch-xla-python PATH] [--only mlp,transformer,gpt2]
                                          [--rounds R] [--block K] [--warmup W] [--json OUT]

Three workloads, defined once elsewhere: bench_runtime's MLP (SGD momentum) and transformer LM (AdamW), and the
model zoo's GPT-2 (tests/models/zoo.py, AdamW). Each column starts from the same weights (one CPU model built from
the workload's seed, copied) and trains on the same batch:
- xladev lazy: forward, backward, optimizer step, `xladev.mark_step()`;
- xladev compiled: the loss and the optimizer step through `torch.compile(backend="xladev")`, then the barrier;
- torch_xla: the same step on real PyTorch/XLA in a subprocess under its own interpreter (PJRT_DEVICE=CPU), each
  step ending in `torch_xla.sync()` (tools/bench/_torch_xla_worker.py; the weights and batch go to it as a
  torch.save file, so both sides start from the same numbers);
- eager PyTorch on the CPU.
After W untimed steps per column (they compile), R rounds each run one block of K steps per column in turn (the
subprocess times its own block), so machine noise hits every column alike. Prints ms/step per column (median over
rounds) and the ratios xladev / torch_xla with their spread over the rounds. The first loss of every column must
equal eager's within float32 rounding (bench_runtime.first_loss_mismatches), else the run fails.

torch_xla's interpreter: --torch-xla-python, else $XLADEV_TORCH_XLA_PYTHON, else ~/txla/bin/python. Where it is
absent or cannot import torch_xla, the column says "not installed" and the rest still runs (with
--skip-if-absent, nothing else runs).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import transformers  # noqa: E402

import xladev  # noqa: E402
import bench_runtime as br  # noqa: E402
from _timing import Timing, block_timer, time_rounds  # noqa: E402
from bench_compile import compiled_training_step  # noqa: E402
from examples import mlp, transformer  # noqa: E402
from tests.models import zoo  # noqa: E402
from tests.models.harness import build, convert, to_device  # noqa: E402

transformers.logging.set_verbosity_error()

WORKER = Path(__file__).resolve().parent / "_torch_xla_worker.py"
DEFAULT_PYTHON = Path("~/txla/bin/python")
PYTHON_ENV = "XLADEV_TORCH_XLA_PYTHON"
WORKLOADS = ("mlp", "transformer", "gpt2")
REFERENCE = "torch_xla"
COLUMNS = ("xladev lazy", "xladev compiled", REFERENCE, "eager CPU")
TARGET_RATIO = 0.8  # issue 41: xladev <= 0.8x torch_xla's step on every workload


# ---------------------------------------------------------------------------------------------
# The torch_xla subprocess
# ---------------------------------------------------------------------------------------------

class WorkerError(RuntimeError):
    """The torch_xla subprocess failed a request, or stopped."""


def torch_xla_python(cli: str | None) -> Path:
    """The interpreter that has torch_xla: the command line's, else $XLADEV_TORCH_XLA_PYTHON, else ~/txla/bin/python.

    Args:
      cli: --torch-xla-python, or None.

    Returns:
      the path, user-expanded (it may not exist; see TorchXla.start).
    """
    return Path(cli or os.environ.get(PYTHON_ENV) or DEFAULT_PYTHON).expanduser()


class TorchXla:
    """The torch_xla subprocess (_torch_xla_worker.py): one JSON request a line, one JSON answer a line."""

    def __init__(self, process: subprocess.Popen, stderr) -> None:
        self.process, self._stderr = process, stderr
        self.info: dict = {}

    @classmethod
    def start(cls, python: Path) -> tuple["TorchXla | None", str]:
        """Starts the worker under `python` and asks for its versions.

        Returns:
          (the worker, "") or, where `python` is absent or cannot run torch_xla, (None, why: "not installed (...)").
        """
        if not python.is_file():
            return None, f"not installed (no interpreter at {python})"
        stderr = tempfile.TemporaryFile(mode="w+")
        env = dict(os.environ, PJRT_DEVICE="CPU")
        process = subprocess.Popen([str(python), "-u", str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=stderr, text=True, env=env)
        worker = cls(process, stderr)
        try:
            worker.info = worker.request({"cmd": "hello"})
        except WorkerError as exc:
            worker.close()
            return None, f"not installed ({python}: {exc})"
        return worker, ""

    def request(self, message: dict) -> dict:
        """Sends one request and returns the answer.

        Raises:
          WorkerError: the worker answered an error, or exited (its last stderr lines are in the message).
        """
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
            line = self.process.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            self.process.wait(timeout=30)
            raise WorkerError(f"the torch_xla process exited ({self.process.returncode}): {self.stderr_tail()}")
        answer = json.loads(line)
        if "error" in answer:
            raise WorkerError(answer["error"])
        return answer

    def stderr_tail(self, lines: int = 5) -> str:
        self._stderr.seek(0)
        return " | ".join(self._stderr.read().strip().splitlines()[-lines:])

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.process.stdin.flush()
            except BrokenPipeError:
                pass
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._stderr.close()


# ---------------------------------------------------------------------------------------------
# The workloads: built from their one definition (bench_runtime's configurations, the model zoo)
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Workload:
    """One training workload, on the CPU: every column copies `base` and trains on `batch`.

    Attributes:
      name: the row's name.
      sizes: what it trains, in words.
      base: the model, built from its seed.
      batch: an (inputs, targets) pair or a dict of keyword arguments.
      make_optimizer: model -> its optimizer.
      loss: (model, batch) -> the scalar loss.
      builder: how the torch_xla worker builds the same architecture (see _torch_xla_worker.build_model).
    """

    name: str
    sizes: str
    base: torch.nn.Module
    batch: object
    make_optimizer: Callable
    loss: Callable
    builder: dict


def _example(name: str, module, cfg, sizes: str) -> Workload:
    return Workload(name, sizes, module.build(0, cfg), next(iter(module.make_batches(0, 1, cfg))),
                    lambda model: module.make_optimizer(model, cfg), lambda model, b: module.loss_fn(model(b[0]), b[1]),
                    {"builder": "example", "module": module.__name__, "seed": 0, "config": dataclasses.asdict(cfg),
                     "loss": "example"})


def workload(name: str) -> Workload:
    """The named workload (one of WORKLOADS)."""
    if name == "mlp":
        c = br.MLP_CFG
        return _example(name, mlp, c, f"MLP {c.in_features}-{c.hidden}x{c.depth}-{c.classes}, batch {c.batch}, "
                                      f"SGD momentum {c.momentum}")
    if name == "transformer":
        c = br.TLM_CFG
        return _example(name, transformer, c, f"transformer LM {c.layers} layers x {c.d_model}, batch {c.batch}x{c.seq},"
                                              " AdamW")
    case = zoo.ALL["gpt2"]
    base = build(case)
    batch = case.batch(0)
    config = base.config
    return Workload(name, f"transformers' GPT-2, {config.n_layer} layers x {config.n_embd}, batch "
                          f"{'x'.join(map(str, batch['input_ids'].shape))}, AdamW", base, batch,
                    lambda model: case.make_optimizer(model.parameters()), case.loss,
                    {"builder": "transformers", "model_class": type(base).__name__,
                     "config_class": type(config).__name__, "config": config.to_dict(),
                     "attn_implementation": config._attn_implementation, "loss": "transformers"})


def on_device(batch, device):
    """The batch on `device`."""
    if isinstance(batch, dict):
        return to_device(batch, device, torch.float32)
    return tuple(t.to(device) for t in batch)


def worker_spec(w: Workload, path: str) -> None:
    """Writes what the torch_xla worker needs to build `w` from the same weights: plain data and tensors only."""
    optimizer = w.make_optimizer(w.base)
    torch.save(w.builder | {"state_dict": w.base.state_dict(), "batch": w.batch,
                            "optimizer": type(optimizer).__name__, "optimizer_settings": dict(optimizer.defaults)},
               path)


def lazy_step(w: Workload):
    """xladev's lazy path: (step, wait)."""
    dev = xladev.device()
    model = convert(w.base, dev, torch.float32)
    optimizer, batch = w.make_optimizer(model), on_device(w.batch, dev)
    last: list = []

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = w.loss(model, batch)
        loss.backward()
        optimizer.step()
        last[:] = [loss.detach()]
        xladev.mark_step()

    return step, (lambda: last[0].cpu())


def eager_step(w: Workload):
    """Eager PyTorch on the CPU: (step, wait)."""
    model = convert(w.base, "cpu", torch.float32)
    optimizer = w.make_optimizer(model)

    def step():
        optimizer.zero_grad(set_to_none=True)
        w.loss(model, w.batch).backward()
        optimizer.step()

    return step, (lambda: None)


# ---------------------------------------------------------------------------------------------
# One workload, all columns
# ---------------------------------------------------------------------------------------------

def ratio_summary(samples: dict[str, list[float]], reference: str = REFERENCE) -> dict[str, dict[str, float]]:
    """Each column's step time over the reference's, round by round: the median and the spread of the ratio.

    Args:
      samples: column -> seconds per step, one figure per round (time_rounds' result).
      reference: the column divided by.

    Returns:
      column -> {"median", "min", "max"} of column / reference over the rounds, for every other column; {} when
      the reference has no samples.

    Raises:
      ValueError: a column has a different number of rounds than the reference.
    """
    ref = samples.get(reference) or []
    if not ref:
        return {}
    out = {}
    for column, values in samples.items():
        if column == reference:
            continue
        if len(values) != len(ref):
            raise ValueError(f"{column} has {len(values)} rounds, {reference} {len(ref)}")
        ratios = [v / r for v, r in zip(values, ref)]
        out[column] = {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}
    return out


@dataclasses.dataclass
class Result:
    name: str
    sizes: str
    timings: dict[str, Timing]
    samples: dict[str, list[float]]
    ratios: dict[str, dict[str, float]]
    first_loss: dict[str, float]
    mismatches: dict[str, float]
    reference_compiles: int | None  # graphs torch_xla compiled in the timed blocks (None: not installed)
    ignored_settings: dict[str, str]  # optimizer settings torch_xla's torch has no parameter for


def bench_workload(name: str, worker: TorchXla | None, args) -> Result:
    """Times one workload in every column (see the module's docstring).

    Args:
      name: one of WORKLOADS.
      worker: the torch_xla process, or None when it is not installed (no torch_xla column).
      args: the parsed command line (warmup, rounds, block, settle).

    Returns:
      the figures, ratios and first losses.

    Raises:
      WorkerError: the torch_xla process failed.
    """
    w = workload(name)
    columns = {"xladev lazy": lazy_step(w),
               "xladev compiled": compiled_training_step(*_compiled_parts(w))}
    eager = eager_step(w)
    first_loss = {}
    with torch.no_grad():
        first_loss["eager CPU"] = w.loss(convert(w.base, "cpu", torch.float32), w.batch).item()
    blocks, reference_compiles, ignored = {}, [], {}
    for column, (step, wait) in columns.items():
        step()
        first_loss[column] = _last_loss(wait)
        for _ in range(args.warmup - 1):
            step()
        wait()
        blocks[column] = block_timer(step, wait)
    if worker is not None:
        with tempfile.TemporaryDirectory() as tmp:
            spec = os.path.join(tmp, f"{name}.pt")
            worker_spec(w, spec)
            answer = worker.request({"cmd": "setup", "spec": spec, "warmup": args.warmup})
        first_loss[REFERENCE], ignored = answer["first_loss"], answer["ignored_settings"]
        blocks[REFERENCE] = lambda n: _reference_block(worker, n, reference_compiles)
    for _ in range(args.warmup):
        eager[0]()
    blocks["eager CPU"] = block_timer(*eager)
    samples = time_rounds(blocks, args.rounds, args.block, args.settle)
    return Result(name, w.sizes, {k: Timing.of(v, args.rounds * args.block) for k, v in samples.items()}, samples,
                  ratio_summary(samples), first_loss, br.first_loss_mismatches(first_loss, "eager CPU"),
                  sum(reference_compiles) if worker is not None else None, ignored)


def _reference_block(worker: TorchXla, steps: int, compiles: list) -> float:
    """One timed block in the torch_xla process; notes the graphs it compiled meanwhile."""
    answer = worker.request({"cmd": "block", "steps": steps})
    compiles.append(answer["compiles"])
    return answer["seconds"]


def _compiled_parts(w: Workload):
    dev = xladev.device()
    model = convert(w.base, dev, torch.float32)
    return model, w.make_optimizer(model), w.loss, on_device(w.batch, dev)


def _last_loss(wait) -> float:
    """The loss of the step just run (its wait returns it as a CPU tensor): the column's first loss, taken before
    any optimizer step has changed the weights (the first step's loss)."""
    return wait().item()


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------

def heading(args, torch_xla: str) -> str:
    """The report's first lines: versions, the timing scheme, the load, and where each column ran."""
    return (f"xladev against PyTorch/XLA ({platform.python_implementation()} {platform.python_version()}, torch "
            f"{torch.__version__}, {os.cpu_count()} CPUs; {args.warmup} untimed steps per column, then {args.rounds} "
            f"rounds of one {args.block}-step block per column in turn; load average before {args.load_before})\n"
            f"{br.devices_line()}; torch_xla: {torch_xla}")


def print_report(results: list[Result], args, torch_xla: str) -> None:
    """Prints the first losses, the ms/step table and the ratios to stdout."""
    print("\n" + heading(args, torch_xla))
    for r in results:
        print(f"\n{r.name}: {r.sizes}")
        print("  first loss (same weights, same batch): " + ", ".join(f"{k} {v:.6f}" for k, v in r.first_loss.items()))
        if r.ignored_settings:
            print("  note: torch_xla's torch has no optimizer setting " +
                  ", ".join(f"{k}={v}" for k, v in r.ignored_settings.items()) + " (left out there)")
        if r.reference_compiles:
            print(f"  note: torch_xla compiled {r.reference_compiles} graphs during the timed steps")
        for column, value in r.mismatches.items():
            print(f"  MISMATCH: {column}'s first loss {value} is not eager's {r.first_loss['eager CPU']}: "
                  "its times do not compare")
    print(f"\n{'ms/step, median over rounds':<28}" + "".join(f"{c:>17}" for c in COLUMNS)
          + f"{'lazy / torch_xla':>24}{'compiled / torch_xla':>24}")
    for r in results:
        cells = "".join(f"{r.timings[c].median_ms:>17.2f}" if c in r.timings else f"{'not installed':>17}"
                        for c in COLUMNS)
        ratios = "".join(f"{_ratio_cell(r.ratios.get(c)):>24}" for c in ("xladev lazy", "xladev compiled"))
        print(f"{r.name:<28}{cells}{ratios}")
    print(f"\nratio: median over the {args.rounds} rounds [min-max]; issue 41's target: xladev <= {TARGET_RATIO}x "
          "torch_xla's step")
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


def _ratio_cell(ratio: dict | None) -> str:
    if not ratio:
        return "-"
    return f"{ratio['median']:.2f}x [{ratio['min']:.2f}-{ratio['max']:.2f}]"


def to_json(results: list[Result], args, torch_xla: str) -> dict:
    """The figures as JSON data (--json; tools/bench/run_all.py reads "workloads" and "torch_xla")."""
    return {
        "torch_xla": torch_xla,
        "workloads": {r.name: {"sizes": r.sizes, "ms_per_step": {k: dataclasses.asdict(t) for k, t in r.timings.items()},
                               "seconds_per_round": r.samples, "ratio_vs_torch_xla": r.ratios,
                               "first_loss": r.first_loss, "first_loss_mismatches": r.mismatches,
                               "torch_xla_compiles_while_timed": r.reference_compiles,
                               "torch_xla_ignored_optimizer_settings": r.ignored_settings}
                      for r in results},
        "config": {"devices": br.devices_line(), "rounds": args.rounds, "block": args.block, "warmup": args.warmup,
                   "cpus": os.cpu_count(), "torch": torch.__version__, "load_average_before": args.load_before,
                   "load_average_after": " ".join(f"{v:.2f}" for v in os.getloadavg()),
                   "target_ratio": TARGET_RATIO},
    }


def main(argv=None) -> int:
    """Runs the benchmark; returns 0, or 1 when torch_xla failed or a column's first loss differs from eager's."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-xla-python", metavar="PATH",
                        help=f"the interpreter with torch_xla (default ${PYTHON_ENV}, else {DEFAULT_PYTHON})")
    parser.add_argument("--only", help=f"comma-separated workloads (default {','.join(WORKLOADS)})")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--block", type=int, default=10, help="steps per column per round (default 10)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps per column first (compiles; default 5)")
    parser.add_argument("--settle", type=float, default=0.3, help="pause before each block, s (default 0.3)")
    parser.add_argument("--json", metavar="OUT", help="also write the figures as JSON to OUT")
    parser.add_argument("--skip-if-absent", action="store_true",
                        help="without torch_xla, only say so (make bench: the other columns are bench_compile's)")
    args = parser.parse_args(argv)
    names = args.only.split(",") if args.only else list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        parser.error(f"unknown workloads {unknown}; choose from {', '.join(WORKLOADS)}")
    if args.warmup < 3:
        parser.error("--warmup must be at least 3 (the first steps compile)")
    if args.rounds < 1 or args.block < 1:
        parser.error("--rounds and --block must be at least 1")
    args.load_before = " ".join(f"{v:.2f}" for v in os.getloadavg())
    br.match_jax_to_xladev()
    worker, why = TorchXla.start(torch_xla_python(args.torch_xla_python))
    if worker is None:
        print(f"torch_xla column: {why}", file=sys.stderr)
        torch_xla = why
        if args.skip_if_absent:
            if args.json:
                Path(args.json).write_text(json.dumps({"torch_xla": why, "workloads": {}}, indent=2) + "\n")
            return 0
    else:
        torch_xla = f"torch_xla {worker.info['torch_xla']} (torch {worker.info['torch']}), {worker.info['device']}"
    try:
        results = []
        for name in names:
            results.append(bench_workload(name, worker, args))
            print(f"{name}: done", file=sys.stderr, flush=True)
    except WorkerError as exc:
        print(f"error: the torch_xla process failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if worker is not None:
            worker.close()
    print_report(results, args, torch_xla)
    if args.json:
        Path(args.json).write_text(json.dumps(to_json(results, args, torch_xla), indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 1 if any(r.mismatches for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
