"""A fixed, synthetic xladev event log of a small training loop with every kind of mark, written record by
record with the schema's own classes (`xladev.schema.records`), so it is byte-for-byte the same on every
machine (no clock): the HTML report's tests and its benchmark read it.

The run (0-based steps): graph A compiles in step 0; new input shapes recompile the step's site in steps 5
and 13; `.item()` reads the loss in steps 7–9; `aten::nonzero` falls back to the CPU in step 11; torch.compile
breaks its graph in step 15. Each step runs one graph, traces its ops and ends 1 ms after its last event.
Each step's end samples device memory (`live_bytes`, and a peak `PEAK_EXTRA` above it), and each compile carries
XLA's memory analysis (`COMPILE_MEMORY`).
"""

from __future__ import annotations

from xladev.schema import records as rec

STEP_SITE = "train.py:12 (step)"
READ_SITE = "train.py:20 (train)"
FALLBACK_SITE = "train.py:18 (step)"
BREAK_SITE = "model.py:40 (forward)"
RECOMPILE_STEPS = (5, 13)
READ_STEPS = (7, 8, 9)
FALLBACK_STEP = 11
BREAK_STEP = 15
TRACING_NS, EXECUTE_NS, OTHER_NS = 2_000_000, 5_000_000, 1_000_000
MIB = 1 << 20
# XLA's memory analysis of every graph: it holds 8 + 4 - 4 + 2 MiB and 64 KiB of program while it runs.
COMPILE_MEMORY = {"argument": 8 * MIB, "output": 4 * MIB, "alias": 4 * MIB, "temp": 2 * MIB,
                  "generated_code": 64 * 1024}
# The most a step holds above what is live at its end (its graph's outputs and temporaries).
PEAK_EXTRA = 6 * MIB


def live_bytes(step: int) -> int:
    """Live at step `step`'s end: 1 MiB more each step over the first 8 (the optimizer's state appearing), then flat."""
    return (40 + min(step, 8)) * MIB


def _graph(step: int, recompile_steps: tuple[int, ...] = RECOMPILE_STEPS) -> str:
    """The hash of the graph the step runs: A until the first recompile, then B, then C ..."""
    return "ab12" + "abcdefgh"[sum(step >= s for s in recompile_steps)] * 12


def synthetic_log(steps: int = 20, *, rank: int = 0, world_size: int = 1, slow_ns: int = 0, wait_ns: int = 0,
                  marks_every: int = 0, recompile_steps: tuple[int, ...] = RECOMPILE_STEPS) -> str:
    """The log's text.

    Args:
      steps: steps the run completes.
      rank: the rank that writes it.
      world_size: ranks in the job (1: a single process).
      slow_ns: extra ns of input pipeline per step (a straggler's).
      wait_ns: ns per step this rank waits at its collective for the others (a straggler's peers').
      recompile_steps: the steps whose new input shapes recompile the step's graph.
      marks_every: 0 for the marks described above; N > 0 for a long run: a compile in step 0, then an
        `.item()` read every N steps and a CPU fallback every 7N steps.

    Returns:
      The JSON lines, each ending in a newline.
    """
    lines = [rec.Header(command="train.py", pid=4242 + rank, host="node0", rank=rank, world_size=world_size,
                        start_unix=1_700_000_000.0, device="xla:0", api="xladev")]
    t = 0
    compiled: set[str] = set()
    for step in range(steps):
        start = t
        graph = _graph(step, recompile_steps) if not marks_every else "ab12" + "a" * 12
        t += TRACING_NS
        lines.append(rec.Ops(t=t, step=step, counts={"xla::add": 4, "xla::mm": 2}, tracing_ns=TRACING_NS,
                             tracing_count=6))
        if graph not in compiled:
            compiled.add(graph)
            compile_ns = 2_000_000_000 if not compiled - {graph} else 800_000_000
            if graph not in {l.hash for l in lines if isinstance(l, rec.GraphText)}:
                lines.append(rec.GraphText(t=t, step=step, hash=graph, nodes=40, inputs=3, outputs=2,
                                           ir=f"IR {{\n  %0 = f32[{8 + step}] xla::device_data()\n}}"))
            recompile = ({"previous": _graph(step - 1, recompile_steps), "changes": ["input 0: f32[8] -> f32[16]"],
                          "graphs_at_site": len(compiled), "compile_ns_at_site": 0} if len(compiled) > 1 else None)
            t += compile_ns
            lines.append(rec.Compile(t=t, step=step, hash=graph, nodes=40, inputs=3, outputs=2, compile_ns=compile_ns,
                                     memory=dict(COMPILE_MEMORY),
                                     cause={"kind": "USER_MARK_STEP", "text": "user mark_step"}, site=STEP_SITE,
                                     recompile=recompile))
        if not marks_every and step == FALLBACK_STEP or marks_every and step % (7 * marks_every) == 3:
            t += 300_000
            lines.append(rec.Fallback(t=t, step=step, op="aten::nonzero", site=FALLBACK_SITE, cpu_ns=300_000))
        if not marks_every and step == BREAK_STEP:
            lines.append(rec.GraphBreak(t=t, step=step, by="dynamo", reason="data-dependent branch",
                                        site=BREAK_SITE))
        t += EXECUTE_NS
        lines.append(rec.Execute(t=t, step=step, hash=graph, execute_ns=EXECUTE_NS, nodes=40, inputs=3, outputs=2,
                                 cause={"kind": "USER_MARK_STEP", "text": "user mark_step"}, site=STEP_SITE))
        if not marks_every and step in READ_STEPS or marks_every and step % marks_every == marks_every - 1:
            t += 400_000
            lines.append(rec.Transfer(t=t, step=step, dir="from_device", bytes=4, ns=400_000, kind=".item()",
                                      site=READ_SITE))
        if world_size > 1:
            t += wait_ns + 100_000
            lines.append(rec.Collective(t=t, step=step, hash=graph, count=1, bytes=4096, wait_ns=wait_ns, ns=100_000,
                                        sites=[STEP_SITE]))
        t += OTHER_NS + slow_ns
        lines.append(rec.Step(t=t, step=step, duration_ns=100_000, interval_ns=t - start, site=STEP_SITE,
                              device_bytes=live_bytes(step), peak_device_bytes=live_bytes(step) + PEAK_EXTRA))
    lines.append(rec.End(t=t + 1000, reason="exit", steps=steps))
    return "".join(rec.dumps(line) + "\n" for line in lines)
