"""`torch_xla.debug.model_comparator` on xladev: save a model's intermediate tensors from two runs (say eager CPU and
xla) and list where they differ.

`save(name, tensor, step=None)` writes `tensor` (copied to the CPU) as `<name>.<n>` (the n-th save of that name)
under the folder `configure(folder)` chose, or `$MODELCMP_SAVEDIR`, in `step-<step>/` when a step is given; with
neither set it does nothing, so the calls can stay in a model. A name of None is the caller's `file.l<line>`.
`compare(folder1, folder2, rtol, atol, max_diffs)` returns a report of the tensors that differ, "" when none does;
run as a script (`python -m torch_xla.debug.model_comparator A B`) it prints the report and exits 1 when there is one.
"""

from __future__ import annotations

import argparse
import os
import re
import sys

import torch

from torch_xla import _xladev

_SAVED = re.compile(r"^(.*)\.(\d+)$")
_folder: str | None = None
_counts: dict[str, int] = {}
_step = None


def configure(save_dir) -> None:
    """Saves go to `save_dir` from now on (None: to `$MODELCMP_SAVEDIR`, or nowhere); the save counts restart."""
    global _folder, _counts, _step
    _folder, _counts, _step = save_dir, {}, None


def _save_folder() -> str | None:
    return _folder if _folder is not None else os.environ.get("MODELCMP_SAVEDIR")


def _caller_name() -> str:
    frame = sys._getframe(2)
    return f"{os.path.basename(frame.f_code.co_filename)}.l{frame.f_lineno}"


def save(name, tensor, step=None):
    """Writes `tensor` under `name` (see the module's docstring) and returns it unchanged."""
    global _counts, _step
    folder = _save_folder()
    if folder is None:
        return tensor
    import torch_xla.core.xla_model as xm

    data = tensor.detach().cpu()
    if not xm.is_master_ordinal():
        return tensor
    name = name if name is not None else _caller_name()
    if step is not None:
        folder = os.path.join(folder, f"step-{step}")
        os.makedirs(folder, exist_ok=True)
        if step != _step:
            _step, _counts = step, {}
    index = _counts.get(name, 0)
    _counts[name] = index + 1
    torch.save(data, os.path.join(folder, f"{name}.{index}"))
    return tensor


def compare_tensors(tensor1, tensor2, rtol=1e-05, atol=1e-08, max_diffs=25) -> str:
    """The elements of two tensors that differ by more than max(atol, rtol·the larger magnitude), largest first.

    Returns:
      One line per element (its index, both values, the error), at most `max_diffs`; "" when none differs.
    """
    if list(tensor1.shape) != list(tensor2.shape):
        return f"Tensors have different shape: {list(tensor1.shape)} vs. {list(tensor2.shape)}\n"
    a, b = tensor1.double().flatten(), tensor2.double().flatten()
    error = (a - b).abs()
    bound = torch.maximum(torch.maximum(a.abs(), b.abs()) * rtol, torch.full_like(a, atol))
    # NaN on one side only is a difference; NaN on both is not.
    differs = (error > bound) | (a.isnan() ^ b.isnan())
    found = differs.nonzero().flatten()
    order = sorted(found.tolist(), key=lambda i: -(error[i].item() if not error[i].isnan() else float("inf")))
    lines = [f"{_index(tensor1.shape, i)}: {a[i].item()} vs. {b[i].item()}\terror={error[i].item()}"
             for i in order[:max_diffs]]
    if len(order) > max_diffs:
        lines.append(f"... aborting after {max_diffs} differences")
    return "".join(line + "\n" for line in lines)


def _index(shape, flat: int) -> list[int]:
    """The index of element `flat` of a row-major tensor of `shape`."""
    index = []
    for size in reversed(shape):
        index.append(flat % size)
        flat //= size
    return index[::-1]


def _saved(folder: str) -> set[str]:
    return {os.path.relpath(os.path.join(root, name), folder) for root, _, names in os.walk(folder)
            for name in names if _SAVED.match(name)}


def compare(save_dir1, save_dir2, rtol=1e-05, atol=1e-08, max_diffs=25) -> str:
    """The differences between two folders of saved tensors: tensors saved in one only, and each pair that differs.

    Returns:
      The report; "" when both folders hold the same tensors, equal within the tolerances.
    """
    first, second = _saved(save_dir1), _saved(save_dir2)
    report = []
    for path in sorted(first | second):
        if path not in second or path not in first:
            missing_from = save_dir2 if path not in second else save_dir1
            report.append(f"Mismatch: {path} not in {missing_from}\n")
            continue
        diffs = compare_tensors(torch.load(os.path.join(save_dir1, path)), torch.load(os.path.join(save_dir2, path)),
                                rtol=rtol, atol=atol, max_diffs=max_diffs)
        if diffs:
            name, index = _SAVED.match(os.path.basename(path)).groups()
            step = re.match(r"^step-(\d+)$", os.path.basename(os.path.dirname(path)))
            report.append(f'Changes in saved tensor "{name}" with id={index}'
                          + (f" at step={step.group(1)}" if step else "") + "\n"
                          + "".join(f"  {line}\n" for line in diffs.splitlines()))
    return "".join(report)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Compare two folders of tensors saved by model_comparator.save")
    parser.add_argument("--rtol", type=float, default=1e-05)
    parser.add_argument("--atol", type=float, default=1e-08)
    parser.add_argument("--max_diffs", type=int, default=25)
    parser.add_argument("savedir1")
    parser.add_argument("savedir2")
    args = parser.parse_args(argv)
    report = compare(args.savedir1, args.savedir2, rtol=args.rtol, atol=args.atol, max_diffs=args.max_diffs)
    if report:
        print(report, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

__getattr__ = _xladev.module_getattr(__name__)
