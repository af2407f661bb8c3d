"""`torch_xla.test.test_utils`, which PyTorch/XLA's example training scripts import for their progress lines and
TensorBoard summaries: the lines in PyTorch/XLA's format, and real event files."""

from __future__ import annotations

import re


def test_progress_lines_and_summaries(tx, capsys, tmp_path):
    import torch_xla.test.test_utils as test_utils

    test_utils.print_training_update("xla:0", 7, 0.123456, 10.0, 20.5, epoch=2)
    test_utils.print_test_update("xla:0", 97.5, epoch=2)
    out = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r"\| Training Device=xla:0/0 Epoch=2 Step=7 Loss=0\.12346 Rate=10\.00 GlobalRate=20\.50 "
                        r"Time=\d\d:\d\d:\d\d", out[0]), out[0]
    assert re.fullmatch(r"\| Test Device=xla:0/0 Epoch=2 Accuracy=97\.50 Time=\d\d:\d\d:\d\d", out[1]), out[1]
    assert test_utils.get_summary_writer(None) is None
    test_utils.write_to_summary(None, 1, {"x": 1.0})  # no writer: nothing to do
    writer = test_utils.get_summary_writer(str(tmp_path))
    test_utils.write_to_summary(writer, 1, {"Accuracy/test": 97.5}, write_xla_metrics=True)
    test_utils.close_summary_writer(writer)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert {"TensorboardStartTimestamp", "Accuracy/test", "aten_ops_sum"} <= set(tags)
    assert events.Scalars("Accuracy/test")[0].value == 97.5
