"""What a real capture explains, read back as TensorBoard serves it.

One child process trains with every host-side cost (a mid-step `.item()` and `print`, a CPU fallback op,
uploads, a step closure reading a tensor, a recompilation) under `XLADEV_PROFILE_STEPS` and
`XLADEV_EVENT_LOG`; one real TensorBoard (with xprof's profile plugin) serves the profile. The tests ask
it what its UI asks: the runs and tools, the streaming trace, an event's details when selected, the HLO
modules, the graph viewer. The event log of the same run says which graphs ran, and `xladev report` and
the TUI read it.
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from tests.profiler.conftest import child_env, free_port, stop_process
from tests.source_lines import line_of
from xladev.debug._profiler_common import load_trace, trace_events
from xladev.schema import records as rec

CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_child_slow_step.py")
WINDOW = (2, 5)  # XLADEV_PROFILE_STEPS=2:5: steps 2, 3 and 4; the batch grows at step 3 (a recompilation)


def child_site(marker: str, function: str = "train") -> str:
    return f"_child_slow_step.py:{line_of(CHILD, marker)} ({function})"


def get(url: str, timeout: float = 60.0) -> tuple[int, bytes, dict]:
    """(status, body, headers) of a GET, as a browser would (gzip accepted); HTTP errors are answers too."""
    request = urllib.request.Request(url, headers={"Accept-Encoding": "gzip"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, body, headers = response.status, response.read(), dict(response.headers.items())
    except urllib.error.HTTPError as error:
        status, body, headers = error.code, error.read(), dict(error.headers.items())
    headers = {k.lower(): v for k, v in headers.items()}
    if headers.get("content-encoding") == "gzip":
        body = gzip.decompress(body)
    return status, body, headers


def tensorboard_executable() -> list[str]:
    beside = os.path.join(os.path.dirname(sys.executable), "tensorboard")
    return [beside] if os.path.exists(beside) else [sys.executable, "-m", "tensorboard.main"]


class Served:
    """The run's files, and a TensorBoard serving its profile."""

    def __init__(self, root, port: int) -> None:
        self.root = str(root)
        self.logdir = os.path.join(self.root, "logs")
        self.event_log = os.path.join(self.root, "run.events.jsonl")
        self.base = f"http://127.0.0.1:{port}/data/plugin/profile"
        self.run = self.host = self.path = ""

    def ask(self, route: str, **query) -> tuple[int, bytes, dict]:
        return get(f"{self.base}/{route}?" + urllib.parse.urlencode({"run": self.run, **query}))

    def records(self) -> list:
        with open(self.event_log) as fh:
            return [r for r in map(rec.parse_line, fh) if r is not None]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("slow_step")
    served = Served(root, free_port())
    done = subprocess.run([sys.executable, CHILD], cwd=served.root, capture_output=True, text=True, timeout=240,
                          env=child_env(XLADEV_EVENT_LOG=served.event_log, XLADEV_PROFILE_STEPS=f"{WINDOW[0]}:{WINDOW[1]}",
                                        XLADEV_PROFILE_DIR=served.logdir))
    assert done.returncode == 0 and "DONE" in done.stdout, done.stderr[-3000:]
    [profile] = [r for r in served.records() if isinstance(r, rec.Profile)]
    served.path = profile.path
    served.run = os.path.basename(os.path.dirname(profile.path))
    served.host = os.path.basename(profile.path)[: -len(".xplane.pb")]
    log = open(os.path.join(served.root, "tensorboard.log"), "w")  # a file: a full pipe would block the server
    port = int(served.base.split(":")[2].split("/")[0])
    proc = subprocess.Popen(tensorboard_executable() + ["--logdir", served.logdir, "--host", "127.0.0.1",
                                                        "--port", str(port)], stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, open(log.name).read()[-2000:]
            try:
                status, body, _ = get(f"{served.base}/runs", timeout=5)
                if status == 200 and served.run in json.loads(body):
                    break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            assert time.monotonic() < deadline, "TensorBoard never listed the run"
            time.sleep(0.3)
        yield served
    finally:
        stop_process(proc)
        log.close()


@pytest.fixture(scope="module")
def trace(served) -> list[dict]:
    """The complete events of the profile, through xprof's trace viewer converter (every argument kept)."""
    return trace_events(load_trace(served.path))


def streamed(served) -> list[dict]:
    """The events of TensorBoard's streaming trace viewer (`trace_viewer@`), what the timeline draws."""
    status, body, headers = served.ask("data", tag="trace_viewer@", host=served.host, resolution=8000)
    assert status == 200, body[:300]
    assert headers.get("content-encoding") == "gzip"  # TensorBoard compresses its answers
    return [e for e in json.loads(body)["traceEvents"] if e.get("ph") == "X"]


def selected(served, event: dict) -> dict:
    """The arguments of an event as the trace viewer fetches them when the event is selected."""
    status, body, _ = served.ask("data", tag="trace_viewer@", host=served.host, event_name=event["name"],
                                 start_time_ms=str(event["ts"] / 1e3), duration_ms=str(event["dur"] / 1e3),
                                 unique_id=str(event["args"].get("uid", 0)))
    assert status == 200, body[:300]
    found = [e for e in json.loads(body)["traceEvents"] if e.get("ph") == "X" and e.get("name") == event["name"]]
    assert found, f"selecting {event['name']!r} returned no event"
    return found[0]["args"]


def test_tensorboard_lists_the_run_and_its_tools(served):
    status, body, _ = served.ask("run_tools")
    tools = json.loads(body)
    assert status == 200
    for tool in ("trace_viewer@", "graph_viewer", "memory_viewer", "overview_page", "op_profile", "hlo_stats"):
        assert tool in tools, tools
    status, body, _ = served.ask("hosts", tag="trace_viewer@")
    assert served.host in [h["hostname"] for h in json.loads(body)]


def test_every_host_side_cost_is_a_span_with_its_arguments(served, trace):
    """The timeline's names and, on selection, each span's arguments: kind and line, op, bytes, count, reason."""
    timeline = streamed(served)
    first = {}
    for event in timeline:
        first.setdefault(event["name"], event)
    expected = {
        "xladev.sync .item()": {"kind": ".item()", "site": child_site("# <- item")},
        "xladev.sync print": {"kind": "print", "site": child_site("# <- print")},
        "xladev.fallback aten::nonzero": {"op": "aten::nonzero", "site": child_site("# <- fallback")},
        "xladev.sync .cpu() in a step closure": {"site": child_site("# <- closure", "<lambda>")},
        "xladev.step_closures": {"count": "1"},
    }
    for name, args in expected.items():
        assert name in first, f"{name!r} is not on the timeline"
        shown = selected(served, first[name])
        for key, value in args.items():
            assert str(shown.get(key)) == value, (name, key, shown)
        # The window's steps; a closure of its last step runs after that step's barrier, in the next one.
        assert WINDOW[0] <= int(shown["step"]) <= WINDOW[1]
    # Transfers, both ways, with their bytes: each step uploads its batch (rows x 16 float32).
    uploads = [e for e in trace if e["name"] == "xladev.to_device"]
    assert {int(e["args"]["bytes"]) for e in uploads} >= {8 * 16 * 4, 12 * 16 * 4}
    assert all(e["args"]["site"] == child_site("# <- upload") for e in uploads if int(e["args"]["bytes"]) == 8 * 16 * 4)
    item_reads = [e for e in trace if e["name"] == "xladev.from_device" and e["args"]["kind"] == ".item()"]
    assert item_reads and all(int(e["args"]["bytes"]) == 4 for e in item_reads)
    shown = selected(served, first["xladev.to_device"])
    assert int(shown["bytes"]) > 0 and shown["site"].startswith("_child_slow_step.py:")
    # The recompilation at step 3: the compile names the line, the graph it replaced, and what changed.
    recompiles = [e for e in trace if e["name"] == "xladev.compile" and e["args"].get("recompiled") == "yes"]
    at_item = [e for e in recompiles if e["args"]["site"] == child_site("# <- item")]
    assert at_item, [e["args"] for e in recompiles]
    args = at_item[0]["args"]
    assert int(args["step"]) == 3 and "8 -> 12" in args["reason"] and len(args["previous"]) == 32
    compile_event = next(e for e in timeline if e["name"] == "xladev.compile" and abs(e["ts"] - at_item[0]["ts"]) < 1)
    assert selected(served, compile_event)["reason"] == args["reason"]
    # Why each execution ran.
    causes = {e["args"]["cause"] for e in trace if e["name"] == "xladev.execute"}
    assert {"value access (.item())", "CPU fallback op (aten::nonzero)"} <= causes  # print reads a computed loss


def test_each_graph_execution_appears_once_and_lowering_is_not_shown(served, trace):
    runs = collections.Counter((e["args"]["graph"], int(e["args"]["step"])) for e in trace if e["name"] == "xladev.execute")
    # A step's closures run after its barrier, when the runtime already counts the next step: the window
    # holds steps 2-4 and the closures of steps 2-4 (runtime steps 3-5), not those of step 1.
    logged = collections.Counter(
        (r.hash, r.step) for r in served.records() if isinstance(r, rec.Execute)
        and WINDOW[0] <= r.step - (r.cause.get("kind") == "STEP_CLOSURE") < WINDOW[1])
    assert logged and runs == logged  # every run the event log saw in the window, once each
    names = {e["name"] for e in trace}
    assert not any(n.startswith("PjitFunction(jit(xladev_") for n in names)
    # Inside a compile span, on its thread, nothing of the jax calls the lowering makes.
    compiles = [e for e in trace if e["name"] == "xladev.compile"]
    assert compiles
    for span in compiles:
        inside = [e["name"] for e in trace if e["tid"] == span["tid"] and e is not span
                  and span["ts"] <= e["ts"] and e["ts"] + e["dur"] <= span["ts"] + span["dur"]]
        assert not [n for n in inside if n.startswith("PjitFunction(")], inside


def test_graph_viewer_opens_each_executed_graph(served, trace):
    status, body, _ = served.ask("module_list", tag="graph_viewer")
    modules = body.decode().split(",")
    assert status == 200
    executes = [e for e in trace if e["name"] == "xladev.execute"]
    for graph in {e["args"]["graph"] for e in executes}:
        assert any(m.startswith(f"jit_xladev_{graph[:16]}(") for m in modules), (graph, modules)
    # The link the trace viewer offers on a selected execution: its module and root op, as the UI asks.
    target = next(e for e in executes if e["args"]["cause"] == "value access (.item())")["args"]
    assert target["hlo_module"] in modules
    status, body, headers = served.ask("data", tag="graph_viewer", host=served.host, module_name=target["hlo_module"],
                                       node_name=target["hlo_op"], type="graph", format="html", graph_width="3")
    assert status == 200, body[:300]
    assert headers["content-type"].startswith("text/html") and b"digraph G" in body
    assert f"around {target['hlo_op']}".encode() in body  # the neighbourhood of the root op, drawn in the page
    status, body, _ = served.ask("data", tag="graph_viewer", host=served.host, module_name=target["hlo_module"],
                                 type="short_txt")
    assert status == 200 and body.startswith(b"HloModule jit_xladev_")
    status, body, _ = served.ask("data", tag="memory_viewer", host=served.host, module_name=target["hlo_module"])
    assert status == 200 and json.loads(body)["moduleName"] == target["hlo_module"].split("(")[0]


def test_report_and_tui_point_to_the_profile(served, capsys):
    from xladev.cli.main import main as cli_main

    command = f"tensorboard --logdir {served.logdir}"
    assert cli_main(["report", served.event_log]) == 0  # no --fail-on: findings do not fail it
    out = " ".join(capsys.readouterr().out.split())
    assert f"Profile steps {WINDOW[0]}–{WINDOW[1] - 1} (XLADEV_PROFILE_STEPS={WINDOW[0]}:{WINDOW[1]})" in out
    assert f"`{command}`" in out
    cli_main(["report", "--format", "json", served.event_log])
    [profile] = json.loads(capsys.readouterr().out)["profiles"]
    assert (profile["path"], profile["first_step"], profile["last_step"], profile["open"]) == (
        served.path, WINDOW[0], WINDOW[1] - 1, command)

    import asyncio

    from textual.widgets import Static

    from tests.tui.helpers import plain, wait_for
    from xladev_tui.app import XladevTUI
    from xladev_tui.sources import FileTailSource

    async def look() -> str:
        app = XladevTUI(FileTailSource(served.event_log, check_writer=False), clock=lambda: 0.0)
        async with app.run_test(size=(200, 30)) as pilot:
            await wait_for(pilot, lambda: app.shown.profiles)
            await pilot.pause()
            return plain(app.query_one("#profile-line", Static).content)

    line = asyncio.run(look())
    assert f"steps {WINDOW[0]}–{WINDOW[1] - 1}" in line and command in line and served.path in line
