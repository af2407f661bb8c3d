"""The model zoo through `torch.compile(model, backend="xladev")` trains as eager PyTorch on the CPU does.

The same cases, batches, bounds and checks as the lazy path (tests/models/parity.py): TorchDynamo captures the
model's forward, AOTAutograd gives its forward and backward graphs, each runs as one XLA program; the loss
around the model and the optimizer step are recorded lazily, as a user's code around a compiled model is. No
case may break its graph or run an op on the CPU inside a step, and none may compile after its warm-up.
"""

from __future__ import annotations

import contextlib

import pytest

from tests.models import zoo
from tests.models.conftest import assert_parity

# One case by default (an nn.TransformerEncoder LM: attention, LayerNorm, dropout off, AdamW), as each case
# compiles its forward, backward and optimizer graphs (about 20 s on two cores); every case with `-m slow`.
DEFAULT = frozenset({"transformer_encoder"})


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n in DEFAULT else pytest.mark.slow) for n in zoo.ALL])
def test_trains_like_eager_cpu_through_torch_compile(name, parity):
    assert_parity(parity(name, compiled=True))



@pytest.mark.slow
def test_gpt2_s_logging_break_is_said_with_a_remedy_that_removes_it(events):
    # transformers' loss_function logs a warning (model.loss_type is None): TorchDynamo cannot trace the logging
    # call, and every step runs the model's and the loss's graphs apart. The advice names the fix; with it, a
    # step is the model's forward and backward programs.
    import torch

    import xladev
    from xladev.events import CauseKind, GraphBreak, Execute
    from xladev.analysis.compile_rules import break_advice

    dev = xladev.device()
    assert len(zoo.BREAK_REMEDIES["gpt2"]) == 2  # set model.loss_type; let TorchDynamo skip the logging call
    for remedy in (None, *zoo.BREAK_REMEDIES["gpt2"]):
        torch._dynamo.reset()  # each model traced afresh, as in a new process
        model = zoo.gpt2().to(dev)
        context = remedy[1](model) if remedy else contextlib.nullcontext()
        compiled = torch.compile(model, backend="xladev")
        events.clear()
        with context:
            for step in range(3):
                if step == 2:
                    breaks = [e.reason for e in events.of(GraphBreak)]
                    events.clear()
                batch = {k: v.to(dev) for k, v in zoo._causal_batch(step).items()}
                compiled(**batch).loss.backward()
                xladev.mark_step()
        programs = [e.graph_name for e in events.of(Execute) if e.cause.kind is CauseKind.DYNAMO_EXECUTE]
        if remedy:
            assert not breaks and len(programs) == 2, (remedy, breaks, programs)
        else:
            advice = [break_advice(r) or "" for r in breaks]
            assert breaks and all("model.loss_type" in a and "ignore_logging_functions" in a for a in advice), breaks
            assert len(programs) > 2, programs
