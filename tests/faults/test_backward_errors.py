"""An op that fails in the backward pass is raised by `backward()` as itself; the process goes on.

Before, the error unwound through torch's device stream guard with the Python error still pending, and the
process aborted ("terminate called without an active exception", exit by SIGABRT): the user saw no message,
and the run's outputs lost their end. The failing op here is planted (a handler that raises while a flag is
set): it stands in for any op the device cannot do in a backward pass.
"""

from __future__ import annotations

import textwrap

from tests.faults import runs

_SCRIPT = textwrap.dedent("""
    import torch, xladev
    from xladev.runtime.record import special_handlers
    from xladev.runtime.record.dispatch import handle_regular

    failing = [True]

    def planted(func, args, kwargs):
        if failing[0]:
            raise RuntimeError("planted failure in threshold_backward")
        return handle_regular(func, args, kwargs)

    special_handlers.SPECIAL_HANDLERS[torch.ops.aten.threshold_backward.default] = planted
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)).to(xladev.device())
    x = torch.randn(3, 4).to(xladev.device())
    try:
        model(x).sum().backward()
    except RuntimeError as exc:
        print("backward raised:", exc, flush=True)
    try:
        y = torch.randn(3, device=xladev.device(), requires_grad=True)
        torch.autograd.grad(torch.relu(y).sum(), y)
    except RuntimeError as exc:
        print("grad raised:", exc, flush=True)
    failing[0] = False
    model.zero_grad()
    model(x).sum().backward()
    xladev.mark_step()
    print("then trains:", all(p.grad is not None and p.grad.abs().sum().item() > 0 for p in model.parameters()),
          flush=True)
""")


def test_an_op_failing_in_backward_is_raised_by_backward_and_the_process_goes_on(tmp_path):
    script = runs.write_script(tmp_path, _SCRIPT, "backward_fails.py")
    done = runs.run([script], runs.environment())
    assert done.returncode == 0, (done.returncode, done.stderr[-3000:])
    assert done.stdout.splitlines() == ["backward raised: planted failure in threshold_backward",
                                        "grad raised: planted failure in threshold_backward",
                                        "then trains: True"]
