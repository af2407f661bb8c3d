"""A small classifier and its data, shared by the pitfall examples."""

from __future__ import annotations

import argparse

import torch
import torch.nn as nn

import xladev


def parser(doc: str, steps: int = 12) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fixed", action="store_true", help="run the corrected version")
    p.add_argument("--steps", type=int, default=steps)
    return p


def setup(features: int = 16, classes: int = 4, lr: float = 0.05):
    """Model, optimizer and loss on the xla device, with a fixed seed."""
    torch.manual_seed(0)
    device = xladev.device()
    model = nn.Sequential(nn.Linear(features, 32), nn.ReLU(), nn.Linear(32, classes)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    return device, model, optimizer, nn.CrossEntropyLoss()


def batch(step: int, size: int = 16, features: int = 16, classes: int = 4):
    """A synthetic batch on the CPU, the same for every run."""
    g = torch.Generator().manual_seed(step)
    x = torch.randn(size, features, generator=g)
    y = (x[:, :classes].argmax(1)) % classes
    return x, y


def report_compiles(label: str) -> None:
    import xladev.debug.metrics as met

    print(f"[{label}] compiles: {met.counter_value('UncachedCompile') or 0}, "
          f"steps: {met.counter_value('MarkStep') or 0}, "
          f"device->host transfers: {(met.metric_data('TransferFromDeviceTime') or (0,))[0]}, "
          f"CPU fallbacks: {sum(met.counter_value(n) or 0 for n in met.executed_fallback_ops() if n != 'aten::_local_scalar_dense')}")
