"""The docs: every block marked runnable runs, and the reference lists every flag, API and command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
_BLOCK = re.compile(r"```(python|bash) runnable\n(.*?)```", re.S)


def _blocks():
    for doc in DOCS:
        for i, match in enumerate(_BLOCK.finditer(doc.read_text())):
            yield pytest.param(match.group(1), match.group(2), id=f"{doc.name}-{i}")


@pytest.mark.parametrize("language,code", list(_blocks()))
def test_runnable_block(language, code, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    if language == "python":
        command = [sys.executable, "-c", code]
    else:
        command = ["bash", "-euo", "pipefail", "-c", code]
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, f"stdout:\n{result.stdout[-2000:]}\nstderr:\n{result.stderr[-3000:]}"


def test_there_are_runnable_blocks():
    assert len(list(_blocks())) >= 4


def test_reference_lists_every_flag_api_and_command():
    import xladev
    import xladev.debug.metrics as met
    from xladev.cli.main import COMMANDS

    reference = (ROOT / "docs" / "reference.md").read_text()
    for flag in xladev.config.flags():
        assert f"`{flag.env}`" in reference, flag.env
    for name in met.__all__:
        assert name in reference, name
    for name in COMMANDS:
        assert f"xladev {name}" in reference, name
    for name in xladev.__all__:
        assert name in reference, name


def test_ops_doc_lists_what_stays_on_the_cpu():
    """docs/ops.md carries the fallback table exactly as xladev/fallback_reasons.py renders it."""
    from xladev import fallback_reasons

    doc = (ROOT / "docs" / "ops.md").read_text()
    assert fallback_reasons.markdown_table() in doc, (
        "docs/ops.md is out of date: paste xladev.fallback_reasons.markdown_table() under its fallback table marker")
    for name, entry in fallback_reasons.STAYS_ON_CPU.items():
        assert entry.reason in fallback_reasons.REASONS, name
