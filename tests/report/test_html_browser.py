"""The HTML report in a real browser: Debian's Chromium, headless, loads the page from a file (offline) for a fixed
event log and a fixed PyTorch/XLA metrics file, and the tests check that it renders without console errors, that
its SVG elements exist in the right numbers, that its table sorts and its print view holds, and that the
1280×800 view of its pictures matches a snapshot.

Where Chromium is not installed (`make browser` installs it on Debian), every test here skips and says so.

Snapshots: `tests/report/snapshots/*.png`; `XLADEV_UPDATE_SNAPSHOTS=1` rewrites them (look at them before
committing). The page's fonts are pinned to DejaVu (Debian's fonts-dejavu-core, which Chromium's package pulls
in), so the text is drawn with the same glyphs wherever the test runs; what may still differ between Chromium
or FreeType versions is the anti-aliasing of edges, which `_differs` tolerates (see there).
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from xladev.cli.main import main

from tests.report import event_logs
from tests.report.chromium import VIEWPORT, Chromium, chromium_path
from tests.report.helpers import fixture_path

# Pillow comes with tensorboard, a dependency of xladev's; without it the PNGs cannot be read.
Image = pytest.importorskip("PIL.Image", reason="Pillow (installed with tensorboard) reads the screenshots")
SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
PIN_FONTS = ('*{font-family:"DejaVu Sans",sans-serif!important}'
             'code,pre,.mono,.mono *{font-family:"DejaVu Sans Mono",monospace!important}')
# A pixel differs when its grey level moves by more than this (of 255): less is anti-aliasing of the same edge.
PIXEL_LEVELS = 64
# The share of pixels that may differ so: a glyph edge rasterised one pixel over, across a page of text,
# stays well under it (measured: 0 on one machine, run after run); a chart, a bar or a row that moved does not.
MAX_DIFFERING = 0.005


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    binary = chromium_path()
    if binary is None:
        pytest.skip("Chromium is not installed (on Debian: `make browser`, i.e. apt-get install -y chromium); "
                    "the browser tests need it")
    with Chromium(binary, str(tmp_path_factory.mktemp("chromium-profile"))) as chromium:
        yield chromium


@pytest.fixture(scope="module")
def pages(tmp_path_factory) -> dict[str, Path]:
    """The two pages, written from inputs with fixed names (a page names its inputs)."""
    folder = tmp_path_factory.mktemp("pages")
    (folder / "run.events.jsonl").write_text(event_logs.synthetic_log(20))
    shutil.copy(fixture_path("dynamic_shape.metrics.txt"), folder / "dynamic_shape.metrics.txt")
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        for name in ("run.events.jsonl", "dynamic_shape.metrics.txt"):
            assert main(["report", name, "--format", "html", "-o", f"{name}.html"]) in (0, 1)
    finally:
        os.chdir(cwd)
    return {"event-log": folder / "run.events.jsonl.html", "metrics": folder / "dynamic_shape.metrics.txt.html"}


def _count(browser, selector: str) -> int:
    return browser.evaluate(f"document.querySelectorAll({selector!r}).length")


@pytest.mark.parametrize("page", ["event-log", "metrics"])
def test_page_renders_without_console_errors(browser, pages, page):
    browser.load(str(pages[page]))
    assert browser.console_errors() == []
    # Every chart was laid out with a size, and no resource was asked for (offline: a file page loads nothing).
    sizes = browser.evaluate("Array.from(document.querySelectorAll('svg.chart')).map("
                             "s => [s.getBoundingClientRect().width, s.getBoundingClientRect().height])")
    assert sizes and all(w > 500 and h > 30 for w, h in sizes)
    assert browser.evaluate("performance.getEntriesByType('resource').length") == 0


def test_console_errors_are_caught(browser, pages):
    # The check above is not vacuous: an error the page logs is reported.
    browser.load(str(pages["event-log"]))
    browser.evaluate("setTimeout(() => { throw new Error('thrown by the test') }, 0); 0")
    browser.evaluate("new Promise(r => setTimeout(r, 50))")
    assert any("thrown by the test" in error for error in browser.console_errors())


def test_svg_elements_in_the_browser(browser, pages):
    browser.load(str(pages["event-log"]))
    assert _count(browser, "svg.chart") == 3
    assert _count(browser, "#timeline g.bar") == 20
    # A memory point per sampled step, each laid out in its step's slot under the timeline's bar.
    assert _count(browser, "#memory g.mem") == 20
    slots = browser.evaluate("[5, 19].map(s => [document.querySelector('#step-' + s + ' rect').getBoundingClientRect()"
                             ".x, document.querySelector('#mem-' + s + ' rect').getBoundingClientRect().x])")
    assert all(abs(bar - point - 0.5) < 1.0 for bar, point in slots)
    assert {kind: _count(browser, f"#timeline a.mark.{kind}") for kind in ("compile", "transfer", "fallback",
                                                                           "graph-break")} == {
        "compile": 3, "transfer": 3, "fallback": 1, "graph-break": 1}
    # tracing, compile, execution, device→host transfers, CPU fallback and the rest (no host→device copies).
    assert _count(browser, "#run-bar g.part") == 6
    browser.load(str(pages["metrics"]))
    assert _count(browser, "#timeline g.bar") == 23 and _count(browser, "#timeline a.mark.compile") == 24


def test_graph_table_sorts_on_click(browser, pages):
    browser.load(str(pages["event-log"]))
    column = "Array.from(document.querySelectorAll('table.sortable tbody tr')).map(r => Number(r.cells[5].dataset.v))"
    browser.evaluate("document.querySelectorAll('table.sortable th')[5].click()")
    executions = browser.evaluate(column)
    assert executions == sorted(executions, reverse=True) and len(executions) == 3
    browser.evaluate("document.querySelectorAll('table.sortable th')[5].click()")
    assert browser.evaluate(column) == sorted(executions)


def test_print_view_keeps_the_pictures_and_unfolds_the_graphs_ir(browser, pages):
    browser.load(str(pages["event-log"]))
    folded = "document.querySelector('details:not([open]) pre').checkVisibility()"
    assert browser.evaluate(folded) is False  # on screen a graph's IR opens on a click
    browser.emulate_media("print")
    try:
        assert browser.evaluate(folded) is True  # on paper nobody can click
        assert browser.evaluate("getComputedStyle(document.body).maxWidth") == "none"
        assert browser.evaluate("getComputedStyle(document.querySelector('svg.chart')).display") == "block"
        assert browser.evaluate("getComputedStyle(document.querySelector('table.sortable th'), '::after')"
                                ".content") in ('""', "none")
    finally:
        browser.emulate_media("")


def _grey(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.int16)


def _differs(shot: np.ndarray, snapshot: np.ndarray) -> float:
    """The share of pixels whose grey level moved by more than `PIXEL_LEVELS`; 1.0 when the sizes differ."""
    if shot.shape != snapshot.shape:
        return 1.0
    return float((np.abs(shot - snapshot) > PIXEL_LEVELS).mean())


def _fonts_pinned() -> bool:
    try:
        found = subprocess.run(["fc-list", ":family=DejaVu Sans"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return bool(found.stdout.strip())


def _shot(browser, page: Path) -> np.ndarray:
    browser.load(str(page))
    browser.evaluate(f"document.head.insertAdjacentHTML('beforeend', '<style>{PIN_FONTS}</style>'); "
                     "document.fonts.ready.then(() => 0)")
    png = browser.screenshot("glance")
    image = _grey(png)
    assert image.shape == (VIEWPORT[1], VIEWPORT[0])
    return image


@pytest.mark.parametrize("page", ["event-log", "metrics"])
def test_screenshot_matches_snapshot(browser, pages, page, tmp_path):
    if not _fonts_pinned():
        pytest.skip("the DejaVu fonts the snapshots are drawn with are not installed (fonts-dejavu-core)")
    shot = _shot(browser, pages[page])
    path = SNAPSHOTS / f"{page}.png"
    if os.environ.get("XLADEV_UPDATE_SNAPSHOTS") == "1":
        Image.fromarray(shot.astype(np.uint8)).save(path, optimize=True)
    assert path.exists(), f"no snapshot {path}: run with XLADEV_UPDATE_SNAPSHOTS=1 and look at it"
    snapshot = np.asarray(Image.open(path).convert("L"), dtype=np.int16)
    share = _differs(shot, snapshot)
    if share > MAX_DIFFERING:
        Image.fromarray(shot.astype(np.uint8)).save(tmp_path / f"{page}.png")
    assert share <= MAX_DIFFERING, f"{share:.2%} of pixels differ from {path}; this run's: {tmp_path / page}.png"
    # The same page drawn twice is the same picture (nothing in it varies from run to run).
    assert _differs(_shot(browser, pages[page]), shot) == 0.0


def test_snapshot_comparison_sees_a_changed_picture(browser, pages):
    if not _fonts_pinned():
        pytest.skip("the DejaVu fonts the snapshots are drawn with are not installed (fonts-dejavu-core)")
    # Not vacuous: the other input's picture, or this one with one bar taller, is a difference.
    event_log, metrics = _shot(browser, pages["event-log"]), _shot(browser, pages["metrics"])
    assert _differs(event_log, metrics) > MAX_DIFFERING
    browser.evaluate("document.querySelectorAll('#timeline g.bar')[3].querySelectorAll('rect').forEach("
                     "r => { r.setAttribute('y', 20); r.setAttribute('height', 150) })")
    assert _differs(_grey(browser.screenshot()), event_log) > MAX_DIFFERING
