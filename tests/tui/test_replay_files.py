"""Replaying log files as they are kept: rewritten by another JSON writer, gzip-compressed (whole or
damaged), or not a log at all. The app runs headless (App.run_test) on real files."""

from __future__ import annotations

import gzip
import json
import socket
import zlib

import pytest
from textual.widgets import Static

from tests.tui.helpers import async_test, dead_pid, fixture_lines, plain, wait_for
from tests.tui.logs import long_run
from xladev.cli.main import main
from xladev.schema.log_header import read_header
from xladev_tui import run_model as m
from xladev_tui.app import XladevTUI
from xladev_tui.sources import FileTailSource


class CountingTail(FileTailSource):
    """The real follower, counting its reads that found nothing new: after one, it has checked the
    writer (`idle_before_check=0`), so how the log ended is settled."""

    def __init__(self, path: str) -> None:
        super().__init__(path, idle_before_check=0.0)
        self.empty_reads = 0

    def read(self, timeout: float) -> list[tuple]:
        items = super().read(timeout)
        self.empty_reads += not items
        return items


def _finished_log() -> list[str]:
    """The fixture log, written here by a writer that is gone: a log without its end record would be
    'killed or crashed'."""
    lines = fixture_lines()
    header = json.loads(lines[0])
    header.update(pid=dead_pid(), host=socket.gethostname())
    return [json.dumps(header, separators=(",", ":"))] + lines[1:]


def _notice(app) -> str:
    return plain(app.query_one("#notice", Static).content, width=1000).strip()


async def _replay(path: str, size=(100, 30)):
    """The app on `path` until the source has read everything and found nothing new twice, and the
    screen shows all of it, diagnosed."""
    source = CountingTail(path)
    app = XladevTUI(source, clock=lambda: 0.0)
    async with app.run_test(size=size) as pilot:
        await wait_for(pilot, lambda: source.empty_reads >= 2 and app.shown.version == app.model.version
                       and app.shown.diagnosis.records >= app.shown.records)
        return app.shown, _notice(app)


RESERIALISED = {
    "json.dumps": lambda data: json.dumps(data),
    "sorted keys": lambda data: json.dumps(data, sort_keys=True),
    "type last, wide separators": lambda data: json.dumps(dict(sorted(data.items(), key=lambda kv: kv[0] == "type")),
                                                          separators=(" , ", " : ")),
    "ascii escapes": lambda data: json.dumps(data).replace('"end"', '"\\u0065nd"'),
}


@pytest.mark.parametrize("how", list(RESERIALISED))
@async_test
async def test_a_finished_log_rewritten_by_another_json_writer_is_finished(tmp_path, how):
    lines = [RESERIALISED[how](json.loads(line)) for line in _finished_log()]
    assert not lines[-1].startswith('{"type":"end",')  # not as xladev's writer writes it
    path = tmp_path / "run.events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    snap, notice = await _replay(str(path))
    assert snap.records == len(lines) and snap.steps == 12
    assert snap.state == m.FINISHED, (snap.state, notice)
    assert "killed or crashed" not in notice and not any("killed or crashed" in line for line in snap.log)


@async_test
async def test_a_log_without_its_end_record_is_still_killed_or_crashed(tmp_path):
    lines = [json.dumps(json.loads(line)) for line in _finished_log()[:-1]]
    path = tmp_path / "run.events.jsonl"
    path.write_text("\n".join(lines) + "\n")
    snap, notice = await _replay(str(path))
    assert snap.records == len(lines)
    assert snap.state == m.DISCONNECTED and "killed or crashed" in notice


@async_test
async def test_a_gzip_log_replays_as_the_plain_one(tmp_path):
    plain_log = tmp_path / "run.events.jsonl"
    plain_log.write_text("\n".join(_finished_log()) + "\n")
    packed = tmp_path / "run.events.jsonl.gz"
    packed.write_bytes(gzip.compress(plain_log.read_bytes()))
    assert read_header(str(packed)).command == read_header(str(plain_log)).command  # `xladev tui` checks it
    expected, _ = await _replay(str(plain_log))
    snap, notice = await _replay(str(packed))
    assert snap.state == m.FINISHED and notice == ""
    assert (snap.records, snap.steps, snap.compiles, snap.counters) == \
        (expected.records, expected.steps, expected.compiles, expected.counters)
    assert snap.diagnosis.verdict == expected.diagnosis.verdict
    assert [(f.rule, f.title, f.cost) for f in snap.diagnosis.findings] == \
        [(f.rule, f.title, f.cost) for f in expected.diagnosis.findings]


def _complete_lines(data: bytes) -> int:
    """The complete lines (records) in what zlib can decompress of a damaged gzip stream."""
    return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data).count(b"\n")


@async_test
async def test_a_truncated_gzip_log_keeps_every_complete_record_and_says_it_is_damaged(tmp_path):
    text = "\n".join(long_run().lines()) + "\n"
    data = gzip.compress(text.encode(), compresslevel=1)
    cut = data[:len(data) * 2 // 3]
    complete = _complete_lines(cut)
    assert 10 < complete < text.count("\n")
    path = tmp_path / "run.events.jsonl.gz"
    path.write_bytes(cut)
    snap, notice = await _replay(str(path))
    assert snap.records == complete and snap.bad_lines == 0
    assert snap.state == m.ERROR and snap.truncated
    assert f"{path} is damaged: the gzip data ends early" in notice
    assert "the complete records before it were read" in notice


BINARY = {
    "ELF with newlines": b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 40,
    "no newline": bytes(range(11, 256)) * 20,
}


@pytest.mark.parametrize("kind", list(BINARY))
@async_test
async def test_a_file_neither_text_nor_gzip_is_named_binary_without_its_bytes(tmp_path, kind, capsys):
    path = tmp_path / "run.events.jsonl"
    path.write_bytes(BINARY[kind])
    message = f"{path} is not an xladev event log: it holds binary data (neither text nor gzip-compressed text)"
    snap, notice = await _replay(str(path))
    assert snap.state == m.ERROR and notice == f"Error: {message}"
    assert snap.records == 0
    if b"\n" in BINARY[kind]:  # `xladev tui` refuses it before the UI starts
        assert main(["tui", str(path)]) == 2
        assert capsys.readouterr().err == f"xladev tui: error: {message}\n"
