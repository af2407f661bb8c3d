"""`torchrun --nproc-per-node 2` with `dist.init_process_group("xla", init_method="xla://")`, on localhost.

One job (tests/distributed/torchrun_job.py, two real processes joined through jax's distributed runtime,
gloo between them) runs every phase once; the tests read what each rank saw and the files each rank wrote.
The CPU references are computed here, in eager PyTorch.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from examples import transformer
from examples._common import run_loop
from tests.distributed.harness import REPO, torchrun
from tests.distributed.job_config import TRANSFORMER, TRANSFORMER_STEPS
from tests.parity_bounds import GRAD_REL, PARAM_REL, assert_adam_params_close, loss_rtol
from xladev.schema import log_header, records

JOB = REPO / "tests" / "distributed" / "torchrun_job.py"


def _line_of(text: str) -> int:
    """The line of the job script holding `text` (the report and analysis name user lines)."""
    return next(i for i, line in enumerate(JOB.read_text().splitlines(), 1) if text in line)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("torchrun_job")
    env = {"XLADEV_EVENT_LOG": str(out / "run.rank{rank}.events.jsonl"), "XLA_METRICS_FILE": str(out / "metrics.txt"),
           "PT_XLA_DEBUG_LEVEL": "1", "PT_XLA_DEBUG_FILE": str(out / "debug.txt"),
           "XLA_SAVE_TENSORS_FILE": str(out / "graphs.txt"), "XLADEV_DIST_TIMEOUT": "120"}
    done = torchrun(JOB, [str(out)], env, timeout=420)
    assert done.returncode == 0, done.output[-6000:]
    seen = {rank: json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)}
    return out, seen


def test_each_process_is_a_rank_of_the_job(job):
    _, seen = job
    for rank in (0, 1):
        assert (seen[rank]["rank"], seen[rank]["world"]) == (rank, 2)
        assert seen[rank]["xladev"] == [2, rank, rank]  # world size, global and local ordinal


def test_torch_distributed_collectives_over_the_xla_backend(job):
    # PyTorch/XLA's test/pjrt/test_torchrun.py expectations, plus broadcast, all_gather_into_tensor and MAX.
    _, seen = job
    for rank in (0, 1):
        got = seen[rank]["dist"]
        assert got["all_gather"] == [0.0, 1.0]
        assert got["all_reduce"] == [4, 6]                            # [1, 2] + [3, 4]
        assert got["reduce_scatter"] == [[0, 4], [8, 12]][rank]       # 2 * (2 * arange(4)), split by rank
        assert got["broadcast"] == [8.0] * 3                          # rank 1's value
        assert got["all_gather_into_tensor"] == [0.0, 0.0, 1.0, 1.0]
        assert got["all_reduce_max"] == [-4.0]


def test_xladev_collectives(job):
    _, seen = job
    x = [[10 * r + 0.5 + k for k in range(4)] for r in (0, 1)]
    for rank in (0, 1):
        got = seen[rank]["xladev_collectives"]
        assert got["sum_scaled"] == [(a + b) * 0.5 for a, b in zip(*x)]
        assert got["min"] == x[0] and got["mul"] == [a * b for a, b in zip(*x)]
        assert got["or"] == [True, False]
        assert got["own_group"] == x[rank]                             # groups [[0], [1]]: each alone
        assert got["gather_dim1"] == [x[0][0:2] + x[1][0:2], x[0][2:4] + x[1][2:4]]
        assert got["reduce_scatter"] == [a + b for a, b in zip(*x)][2 * rank:2 * rank + 2]
        assert got["all_to_all"] == x[0][2 * rank:2 * rank + 2] + x[1][2 * rank:2 * rank + 2]
        assert got["permute"] == x[1 - rank]
        assert got["list_in_place"] == [[a + b for a, b in zip(*x)], [int(2 * a) + int(2 * b) for a, b in zip(*x)]]
        assert got["rendezvous"] == ["r0", "r1r1"] and got["mesh_reduce"] == 1.5


def test_collectives_run_inside_the_step_graph(job):
    out, seen = job
    for rank in (0, 1):
        got = seen[rank]["xladev_collectives"]
        assert got["ir_names_all_reduce"] and got["hlo_has_all_reduce"]
        assert got["reads_in_step"] == 0  # the step with the all-reduce copied nothing to the host
        assert got["reduced"] == [3 * (a + b) for a, b in zip(*[[10 * r + 0.5 + k for k in range(4)] for r in (0, 1)])]
    # The graph dump shows the collective among the step's ops.
    assert "xla::all_reduce" in (out / "graphs.txt.0").read_text()


def test_ddp_over_the_xla_backend_matches_the_cpu(job):
    _, seen = job
    for rank in (0, 1):
        ddp = seen[rank]["ddp"]
        for step, ((cpu_loss, _), (_, other)) in enumerate(zip(ddp["losses"], seen[1 - rank]["ddp"]["losses"])):
            mean = (ddp["losses"][step][1] + other) / 2  # the global batch's loss: the mean of the two halves
            assert mean == pytest.approx(cpu_loss, rel=loss_rtol())
        # Plain SGD, 3 steps of lr 0.1: each step's gradient may differ by GRAD_REL of the gradient scale.
        drift = 2 * 3 * 0.1 * GRAD_REL * ddp["grad_scale"]
        for name, want in ddp["cpu_weights"].items():
            torch.testing.assert_close(torch.tensor(ddp["weights"][name]), torch.tensor(want),
                                       rtol=3 * PARAM_REL, atol=drift, msg=name)


def test_transformer_in_two_processes_matches_one_process_on_the_global_batch(job):
    out, seen = job
    cfg = TRANSFORMER
    model = transformer.build(0, cfg)
    optimizer = transformer.make_optimizer(model, cfg)
    cpu = run_loop(model, optimizer, transformer.loss_fn, transformer.make_batches(0, TRANSFORMER_STEPS, cfg),
                   torch.device("cpu"))
    halves = [seen[rank]["transformer"]["losses"] for rank in (0, 1)]
    for step, want in enumerate(cpu.losses):
        assert (halves[0][step] + halves[1][step]) / 2 == pytest.approx(want, rel=loss_rtol()), step
    trained = torch.load(out / "transformer_params.pt")
    names = {id(p): n for n, p in model.named_parameters()}
    assert_adam_params_close({n: trained[n] for n in names.values()}, {n: cpu.params[n] for n in names.values()},
                             optimizer, names, TRANSFORMER_STEPS)


def test_every_output_is_written_per_rank(job):
    out, _ = job
    for rank in (0, 1):
        header = log_header.read_header(str(out / f"run.rank{rank}.events.jsonl"))
        assert (header.rank, header.world_size) == (rank, 2)
        for name in ("metrics.txt", "debug.txt", "graphs.txt"):  # PyTorch/XLA's `path.<ordinal>`
            assert (out / f"{name}.{rank}").stat().st_size > 0, name
        assert list((out / "profile" / f"rank{rank}" / "plugins" / "profile").glob("*/*.xplane.pb"))
    assert not (out / "metrics.txt").exists() and not (out / "debug.txt").exists()


def test_analysis_blocks_say_their_rank_and_their_collectives(job):
    out, _ = job
    all_gather_line = _line_of("dist.all_gather(gathered, value)")
    for rank in (0, 1):
        text = (out / f"debug.txt.{rank}").read_text()
        blocks = text.split("Compilation Analysis: " + "=" * 80 + "\nCompilation Analysis: Compilation Cause")
        assert len(blocks) > 3
        for block in blocks[1:]:
            assert f"Compilation Analysis:   rank {rank} of 2 (pid " in block
        assert (f"Compilation Analysis:   xla::all_gather of 4.00B from this rank, at torchrun_job.py:{all_gather_line}"
                " (torch_distributed_collectives)") in text
        assert "xla::all_reduce" in text and "_common.py" in text  # the gradients' all-reduce: optimizer_step's line


def test_collectives_are_counted_with_bytes_and_time(job):
    out, _ = job
    for rank in (0, 1):
        metrics = (out / f"metrics.txt.{rank}").read_text().split("[MetricsData; step=")[-1]
        for name in ("Counter: CollectiveOps", "Metric: CollectiveBytes", "Metric: CollectiveTime",
                     "Metric: CollectiveWaitTime", "Counter: xla::all_reduce"):
            assert name in metrics, name
        collective = [records.parse_line(line) for line in (out / f"run.rank{rank}.events.jsonl").read_text().splitlines()
                      if line.startswith('{"type":"collective"')]
        assert collective and all(r.count >= 1 and r.bytes > 0 and r.ns > 0 for r in collective)
        assert sum(r.count for r in collective) == int(metrics.split("Counter: CollectiveOps\n  Value: ")[1].split()[0])


def _report(out: Path, capsys, *names: str) -> dict:
    from xladev.cli.main import main

    code = main(["report", *(str(out / name) for name in names), "--format", "json"])
    text = capsys.readouterr().out
    assert code in (0, 1), text
    return json.loads(text)


def test_report_across_ranks_names_the_diverging_graph_its_change_and_line(job, capsys):
    out, _ = job
    report = _report(out, capsys, "run.rank0.events.jsonl", "run.rank1.events.jsonl")
    line = _line_of("stat = (detached.abs()")
    divergence = [f for f in report["findings"] if f["rule"] == "graph-divergence"
                  and f["subject"] == f"torchrun_job.py:{line} (planted)"]
    assert len(divergence) == 1, [f["title"] for f in report["findings"]]
    evidence = "\n".join(divergence[0]["evidence"])
    assert "rank 0: " in evidence and "rank 1: " in evidence
    assert "what changed from rank 0's graph to rank 1's:" in evidence and "aten::max -> aten::abs" in evidence


def test_report_across_ranks_names_the_rank_that_recompiles_alone(job, capsys):
    out, _ = job
    report = _report(out, capsys, "run.rank0.events.jsonl", "run.rank1.events.jsonl")
    line = _line_of("torch.ones(step, device=dev)")
    lone = [f for f in report["findings"] if f["rule"] == "rank-recompiles"]
    assert [f["subject"] for f in lone] == [f"rank 1: torchrun_job.py:{line} (planted)"]
    assert lone[0]["numbers"]["compiles"] == 2 and "rank 0: 0 there" in lone[0]["evidence"]


def test_report_across_ranks_names_the_straggler_by_step_time(job, capsys):
    # Rank 1 sleeps SLOW_S before every planted step; rank 0 waits for it in the gradients' all-reduce.
    from tests.distributed.job_config import PLANTED_STEPS, SLOW_S

    out, _ = job
    report = _report(out, capsys, "run.rank0.events.jsonl", "run.rank1.events.jsonl")
    [straggler] = [f for f in report["findings"] if f["rule"] == "straggler"]
    assert straggler["numbers"]["rank"] == 1 and straggler["numbers"]["steps"] >= PLANTED_STEPS - 2
    assert straggler["numbers"]["lead_ns"] > 0.5 * SLOW_S * 1e9


def test_report_reads_the_per_rank_metrics_files_as_ranks(job, capsys):
    out, _ = job
    report = _report(out, capsys, "metrics.txt")  # finds metrics.txt.0 and metrics.txt.1
    assert [item["rank"] for item in report["inputs"]] == [0, 1]
    [divergence] = [f for f in report["findings"] if f["rule"] == "rank-divergence"]
    assert divergence["numbers"]["rank"] == 1  # rank 1 compiled the graphs rank 0 never did


def test_the_tui_following_one_rank_shows_the_findings_across_ranks(job):
    # The TUI's model, fed rank 0's log as it follows it, reads rank 1's log beside it for the cross-rank rules.
    from xladev_tui.run_model import model_from_lines

    out, _ = job
    path = out / "run.rank0.events.jsonl"
    diagnosis = model_from_lines(path.read_text().splitlines(), str(path)).snapshot().diagnosis
    rules_seen = {f.rule for f in diagnosis.findings}
    assert {"straggler", "graph-divergence", "rank-recompiles"} <= rules_seen, diagnosis.note
    straggler = next(f for f in diagnosis.findings if f.rule == "straggler")
    assert straggler.title.startswith("Rank 1 is a straggler")
