"""The `sparse=True` embedding cases of test_sparse_gradients.py, run on one device.

The test runs them in-process on the CPU (the oracle) and, as `python sparse_gradient_cases.py OUT`, on
the xla device in a child process: a backward op that fails on the device can abort the whole process,
which must not take pytest with it. The child saves its results, the fallback ops it ran and the
warnings it gave to OUT (torch.save).
"""

from __future__ import annotations

import sys
import warnings

import torch
import torch.nn.functional as F
from torch import nn

WEIGHT = torch.randn(10, 3, generator=torch.Generator().manual_seed(0))
INDICES = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 0])
OFFSETS = torch.tensor([0, 4, 4, 7])  # an empty bag in the middle
PER_SAMPLE = torch.linspace(-1, 1, len(INDICES))
INDICES_2D = torch.tensor([[1, 2, 4], [5, 4, 3], [2, 2, 0]])


def _loss(out: torch.Tensor) -> torch.Tensor:
    """A weighted sum, so every output element has its own gradient."""
    return (out * torch.linspace(-1, 2, out.numel()).reshape(out.shape).to(out.device)).sum()


# The layout of every gradient `run` met, as it was on its device.
LAYOUTS: set[torch.layout] = set()


def _on_cpu(grad: torch.Tensor) -> torch.Tensor:
    LAYOUTS.add(grad.layout)
    return grad.to_dense().cpu() if grad.is_sparse else grad.cpu()


def _grads(device, forward) -> list[torch.Tensor]:
    """forward(weight, per-sample weights) → output; the CPU gradients of both leaves (dense)."""
    weight = WEIGHT.clone().to(device).requires_grad_()
    per_sample = PER_SAMPLE.clone().to(device).requires_grad_()
    _loss(forward(weight, per_sample)).backward()
    return [_on_cpu(g) for g in (weight.grad, per_sample.grad) if g is not None]


def run(device) -> dict[str, list[torch.Tensor]]:
    """Every case on `device`: name → [gradients...] on the CPU, sparse gradients densified."""
    idx, off, idx2 = INDICES.to(device), OFFSETS.to(device), INDICES_2D.to(device)
    # Eager refuses scale_grad_by_freq with a sparse gradient; the device, as PyTorch/XLA, gives the dense
    # one, so eager's dense gradient is the oracle there. For embedding_bag that is `embedding` summed over
    # each bag: CPU embedding_bag's own scaled backward is wrong (pytorch/pytorch#190063, and
    # test_embedding_ctc.py).
    on_device = torch.device(device).type == "xla"
    cases = {
        "embedding_bag sum": lambda w, p: F.embedding_bag(idx, w, off, mode="sum", sparse=True),
        "embedding_bag mean, padding_idx": lambda w, p: F.embedding_bag(idx, w, off, mode="mean", sparse=True,
                                                                        padding_idx=2),
        "embedding_bag per_sample_weights, last offset": lambda w, p: F.embedding_bag(
            idx, w, torch.cat([off, torch.tensor([len(INDICES)], device=device)]), mode="sum", sparse=True,
            per_sample_weights=p, include_last_offset=True),
        "embedding_bag 2-D input, no offsets": lambda w, p: F.embedding_bag(idx2, w, mode="mean", sparse=True),
        "embedding": lambda w, p: F.embedding(idx2, w, sparse=True),
        "embedding padding_idx": lambda w, p: F.embedding(idx2, w, padding_idx=4, sparse=True),
        "embedding scale_grad_by_freq": lambda w, p: F.embedding(idx2, w, scale_grad_by_freq=True,
                                                                 sparse=on_device),
        "embedding_bag 2-D input, scale_grad_by_freq": lambda w, p: (
            F.embedding_bag(idx2, w, mode="sum", scale_grad_by_freq=True, sparse=True) if on_device
            else F.embedding(idx2, w, scale_grad_by_freq=True).sum(1)),
    }
    results = {name: _grads(device, forward) for name, forward in cases.items()}

    # The modules, and an SGD step (eager SGD takes the sparse gradient, the device's is dense).
    for name, module, call in [("nn.Embedding", nn.Embedding(10, 3, sparse=True), lambda m: m(idx2)),
                               ("nn.EmbeddingBag", nn.EmbeddingBag(10, 3, mode="mean", sparse=True),
                                lambda m: m(idx, off))]:
        with torch.no_grad():
            module.weight.copy_(WEIGHT)
        module = module.to(device)
        optimizer = torch.optim.SGD(module.parameters(), lr=0.5)
        _loss(call(module)).backward()
        results[name] = [_on_cpu(module.weight.grad)]
        optimizer.step()
        results[name + " after an SGD step"] = [module.weight.detach().cpu()]
    return results


def main(out_path: str) -> None:
    import xladev
    from xladev.events import Fallback, bus

    fallbacks = []
    sub = bus.subscribe(lambda e: fallbacks.append(e.name) if isinstance(e, Fallback) else None)
    with warnings.catch_warnings(record=True) as caught:
        if not sys.warnoptions:  # with -W on the command line, its filters decide (the test's error run)
            warnings.simplefilter("always")  # every call's warning, not once per line
        results = run(xladev.device())
    sub.close()
    torch.save({"results": results, "fallbacks": fallbacks, "layouts": sorted(str(x) for x in LAYOUTS),
                "warnings": [(str(w.message), w.filename) for w in caught if "sparse" in str(w.message)]}, out_path)


if __name__ == "__main__":
    main(sys.argv[1])
