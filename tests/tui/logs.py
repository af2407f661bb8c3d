"""Event logs for the TUI tests, written with the schema's own record types (`xladev.schema.records`).

`long_run()` is a fixed, deterministic 24-step run with long paths and names (to check that the
screen stays readable at 80 and 120 columns), recompilations at one site, a compile failure, a
`.item()` every step and a CPU fallback op. `LogBuilder` makes other runs (a compile that never
ends, for instance).
"""

from __future__ import annotations

from xladev.schema import records as rec

SITE = "/home/user/projects/speech_recognition_experiments/src/models/conformer_encoder.py:214 (forward_with_cache)"
FRAME = {"file": "/home/user/projects/speech_recognition_experiments/src/models/conformer_encoder.py", "line": 214,
         "name": "forward_with_cache"}
ITEM_SITE = "/home/user/projects/speech_recognition_experiments/src/training/train_loop.py:88 (log_metrics)"
FALLBACK_SITE = "/home/user/projects/speech_recognition_experiments/src/data/augment.py:41 (mask_spectrogram)"
CAUSE = {"kind": "USER_MARK_STEP", "text": "user torch_xla.sync", "detail": ""}
FAILED_HASH = "deadbeef" * 4


def graph_hash(index: int) -> str:
    return f"{index:02x}" * 16


def ir_text(rows: int) -> str:
    return ("IR {\n"
            f"  %0 = f32[{rows},80]{{1,0}} xla::device_data(), xla_shape=f32[{rows},80]{{1,0}}\n"
            "  %1 = f32[80,256]{1,0} xla::device_data(), xla_shape=f32[80,256]{1,0}\n"
            f"  %2 = f32[{rows},256]{{1,0}} aten::mm(%0, %1), xla_shape=f32[{rows},256]{{1,0}}, ROOT=0\n"
            "}\n")


class LogBuilder:
    """Appends records with a running clock (`t` in ns since the log started).

    Args:
      command: the header's command.
      pid: the header's pid (None: no writer to watch).
    """

    def __init__(self, command: str = "python train.py", pid: int | None = None):
        self.t = 0
        self.last_step_t = 0
        self.records: list[rec.Record] = [rec.Header(command=command, argv=command.split()[1:], pid=pid, host=None,
                                                     device="CPU (test)", start_unix=1_700_000_000.0)]

    def add(self, record: rec.Record, after_ns: int = 0) -> rec.Record:
        self.t += after_ns
        if hasattr(record, "t"):
            record.t = self.t
        self.records.append(record)
        return record

    def lines(self) -> list[str]:
        return [rec.dumps(record) for record in self.records]

    def write(self, path) -> str:
        with open(path, "w") as fh:
            fh.write("\n".join(self.lines()) + "\n")
        return str(path)

    # ---- a step of a training loop
    def compile(self, step: int, graph: str, nodes: int, rows: int, compile_ns: int, recompile: dict | None = None,
                site: str = SITE, frame: dict | None = FRAME) -> None:
        self.add(rec.GraphText(step=step, hash=graph, nodes=nodes, inputs=4, outputs=2, ir=ir_text(rows)), 10_000)
        self.add(rec.CompileStart(step=step, hash=graph, nodes=nodes, site=site, frame=frame), 10_000)
        memory = {"argument": rows * 80 * 4 + 81_920, "output": rows * 1024, "alias": 0, "temp": 1_048_576,
                  "generated_code": 0}
        self.add(rec.Compile(step=step, hash=graph, nodes=nodes, inputs=4, outputs=2, compile_ns=compile_ns,
                             memory=memory, cause=CAUSE, site=site, frame=frame, recompile=recompile), compile_ns)

    def step(self, step: int, graph: str, nodes: int, input_ns: int = 5_000_000) -> None:
        """One step: `input_ns` of input pipeline, an upload, the traced ops, the execution, the
        barrier (its interval: the time since the previous one), then a `.item()`."""
        self.add(rec.Transfer(step=step, dir="to_device", bytes=3_276_800, ns=1_200_000, count=2),
                 input_ns + 1_200_000)
        self.add(rec.Ops(step=step, counts={"aten::mm": 12, "aten::add": 30, "aten::layer_norm": 6,
                                            "aten::scaled_dot_product_attention": 4}, tracing_ns=3_000_000,
                         tracing_count=52), 3_000_000)
        self.add(rec.Execute(step=step, hash=graph, execute_ns=25_000_000, cached=True, nodes=nodes, inputs=4,
                             outputs=2, cause=CAUSE, site=SITE, frame=FRAME), 25_000_000)
        self.t += 1_000_000
        self.add(rec.Step(step=step, duration_ns=26_000_000, interval_ns=self.t - self.last_step_t, cause=CAUSE,
                          site=SITE, frame=FRAME))
        self.last_step_t = self.t
        self.add(rec.Transfer(step=step + 1, dir="from_device", bytes=4, ns=40_000, kind=".item()", site=ITEM_SITE),
                 40_000)


def long_run(steps: int = 24, end: bool = True) -> LogBuilder:
    """The fixed run: the batch's length changes at steps 2, 4, 7, 12 and 18 (five recompiles at one
    site), a graph fails to compile at step 16, `aten::_unique2` falls back to the CPU every 4 steps."""
    log = LogBuilder("python src/training/train_loop.py --config configs/conformer_large.yaml", pid=None)
    lengths = {0: 128, 2: 160, 4: 192, 7: 224, 12: 256, 18: 288}
    index = 0
    graph = graph_hash(0)
    previous = None
    for step in range(steps):
        if step in lengths:
            graph = graph_hash(index)
            recompile = None
            if previous is not None:
                old = lengths[max(s for s in lengths if s < step)]
                recompile = {"previous": previous, "changes": [
                    f"input 0, created at collate_batch@data/loader.py:57: shape f32[{old},80] -> "
                    f"f32[{lengths[step]},80] (dim 0: {old} -> {lengths[step]})"],
                    "graphs_at_site": index + 1, "compile_ns_at_site": 0}
            log.compile(step, graph, 1_480 + index, lengths[step], 2_400_000_000 + index * 100_000_000, recompile)
            previous = graph
            index += 1
        if step == 16:
            log.add(rec.CompileStart(step=step, hash=FAILED_HASH, nodes=2_048, site=SITE, frame=FRAME), 10_000)
            log.add(rec.CompileFailed(step=step, hash=FAILED_HASH, message="RESOURCE_EXHAUSTED: out of memory "
                                      "while allocating 12.5GiB\nmore lines", hlo_path="/tmp/xladev_failed/deadbeef.hlo",
                                      cause=CAUSE, site=SITE, frame=FRAME), 900_000_000)
        if step % 4 == 1:
            log.add(rec.Fallback(step=step, op="aten::_unique2", site=FALLBACK_SITE, cpu_ns=4_000_000), 4_000_000)
        log.step(step, graph, 1_480 + index - 1, 5_000_000 + (step % 5) * 1_000_000)
    if end:
        log.add(rec.End(reason="exit", steps=steps), 10_000)
    return log
