"""Shared pieces of the profiler: the error type, log directories, finding and reading `.xplane.pb` files.

Nothing here imports torch or the runtime, so `xladev capture` and `xladev doctor` can use it.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import json
import os
import socket
import tempfile

from xladev.errors import XladevError
from xladev.schema.record_wording import tensorboard_command# noqa: F401  (re-exported: one definition, the report's too)

PROFILE_SUBDIR = os.path.join("plugins", "profile")

NO_EVENTS_HELP = (
    "What to check:\n"
    "  1. the training process called xp.start_server(PORT) (or jax.profiler.start_server) and is still running;\n"
    "  2. the port in the address is that PORT, and the host is the machine running it ('localhost' if it is this one);\n"
    "  3. the process was doing work during the capture window: a process that is idle, blocked on input or\n"
    "     between epochs records nothing; capture longer (duration_ms) or start the capture while it trains\n"
    "     (trace_detached from the training script, or xp.profile_steps for exact steps);\n"
    "  4. the versions of jax, tensorboard-plugin-profile and xprof fit together: run `xladev doctor`."
)


class ProfilerError(XladevError, RuntimeError):
    """A profile could not be started, captured, written or read. The message says what to check."""


@dataclasses.dataclass(frozen=True)
class ProfileSummary:
    """What a captured `.xplane.pb` holds, read back through xprof's trace viewer converter.

    Attributes:
      path: the `.xplane.pb` file.
      size_bytes: its size.
      num_events: complete (timed) trace events in it.
      names: how many events carry each name (`xladev.execute`, `train 5`, `xladev.sync .item()`).
    """

    path: str
    size_bytes: int
    num_events: int
    names: collections.Counter

    def has(self, text: str) -> bool:
        """True when some event name contains `text`."""
        return any(text in name for name in self.names)


def prepare_logdir(logdir) -> str:
    """Creates `<logdir>/plugins/profile` and proves it is writable; returns the absolute logdir.

    Raises:
      ProfilerError: naming the directory and the operating system's reason.
    """
    if logdir is None or str(logdir) == "":
        raise ProfilerError("a profile needs a log directory (logdir), got an empty one")
    logdir = os.path.abspath(os.fspath(logdir))
    target = os.path.join(logdir, PROFILE_SUBDIR)
    try:
        os.makedirs(target, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".xladev_write_check_", dir=target)
        os.close(fd)
        os.remove(probe)
    except OSError as exc:
        raise ProfilerError(
            f"cannot write profiles under log directory {logdir!r}: {exc.strerror or exc} "
            f"({target!r}). Choose a directory you can write to, or fix its permissions.") from None
    return logdir


def xplane_files(logdir: str) -> dict[str, tuple[int, int]]:
    """Every `.xplane.pb` under `<logdir>/plugins/profile`, with (mtime_ns, size)."""
    root = os.path.join(logdir, PROFILE_SUBDIR)
    found = {}
    try:
        runs = os.listdir(root)
    except OSError:
        return found
    for run in runs:
        run_dir = os.path.join(root, run)
        try:
            names = os.listdir(run_dir)
        except OSError:
            continue
        for name in names:
            if name.endswith(".xplane.pb"):
                path = os.path.join(run_dir, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                found[path] = (st.st_mtime_ns, st.st_size)
    return found


def new_xplane_files(logdir: str, before: dict[str, tuple[int, int]]) -> list[str]:
    """Files written since the `before` snapshot (new, or rewritten in the same second's run folder), newest last."""
    after = xplane_files(logdir)
    changed = [p for p, stamp in after.items() if before.get(p) != stamp]
    return sorted(changed, key=lambda p: after[p][0])


@contextlib.contextmanager
def quiet_native_stderr(enabled: bool = True):
    """Silences file descriptor 2 for the block: xprof's converter logs warnings there that are not errors.

    Only for command-line tools: while it is active, other threads' stderr output is dropped too.
    """
    if not enabled:
        yield
        return
    import sys

    try:
        sys.stderr.flush()
    except Exception:
        pass
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def load_trace(path: str, quiet: bool = False) -> dict:
    """The trace viewer's JSON of one `.xplane.pb` (what TensorBoard's Profile tab shows), as a dict.

    Raises:
      ProfilerError: the file is missing or empty, xprof is not installed, or xprof cannot convert it.
    """
    if not os.path.isfile(path):
        raise ProfilerError(f"profile file {path!r} does not exist")
    if os.path.getsize(path) == 0:
        raise ProfilerError(f"profile file {path!r} is empty (0 bytes): the capture wrote nothing")
    try:
        from xprof.convert import raw_to_tool_data
    except ImportError as exc:
        raise ProfilerError(
            f"cannot read profiles: xprof is not importable ({exc}). Install tensorboard-plugin-profile "
            "(it pulls xprof), then run `xladev doctor`.") from None
    try:
        with quiet_native_stderr(quiet):
            data, _content_type = raw_to_tool_data.xspace_to_tool_data([path], "trace_viewer", {})
    except Exception as exc:
        raise ProfilerError(f"xprof could not read {path!r}: {type(exc).__name__}: {exc}. "
                            "Run `xladev doctor` to look for version skew.") from None
    if data is None:
        raise ProfilerError(f"xprof could not convert {path!r} to a trace (it returned nothing). "
                            "Run `xladev doctor` to look for version skew.")
    if isinstance(data, bytes):
        data = data.decode("utf-8", "replace")
    try:
        return json.loads(data)
    except ValueError as exc:
        raise ProfilerError(f"xprof's trace of {path!r} is not valid JSON: {exc}") from None


def trace_events(trace: dict) -> list[dict]:
    """The complete (timed, `ph == "X"`) events of a trace viewer JSON."""
    return [e for e in trace.get("traceEvents", ()) if isinstance(e, dict) and e.get("ph") == "X"]


def summarize(path: str, quiet: bool = False) -> ProfileSummary:
    """Reads a profile back and counts its events (no check that there are any)."""
    events = trace_events(load_trace(path, quiet=quiet))
    return ProfileSummary(path, os.path.getsize(path), len(events),
                          collections.Counter(e.get("name", "") for e in events))


def check_profile(path: str, quiet: bool = False) -> ProfileSummary:
    """Reads a profile back and checks it is non-empty and holds trace events.

    Raises:
      ProfilerError: missing, empty, unreadable, or without any event.
    """
    summary = summarize(path, quiet=quiet)
    if summary.num_events == 0:
        raise ProfilerError(f"profile {path!r} ({summary.size_bytes} bytes) holds no trace event: "
                            "nothing ran in the traced process during the capture.\n" + NO_EVENTS_HELP)
    return summary


def hlo_modules(path: str, quiet: bool = False) -> list[str]:
    """The HLO modules a profile holds, as xprof's graph and memory viewers name them (`jit_xladev_<hash>(<id>)`).

    xprof extracts them from the profile into `<module>.hlo_proto.pb` files beside it (what TensorBoard does
    when it first lists the run's tools); this asks it to, then lists those files.

    Raises:
      ProfilerError: xprof is not installed.
    """
    try:
        from xprof.convert import raw_to_tool_data
    except ImportError as exc:
        raise ProfilerError(f"cannot read profiles: xprof is not importable ({exc})") from None
    with quiet_native_stderr(quiet):
        raw_to_tool_data.xspace_to_tool_names([path])
    suffix = ".hlo_proto.pb"
    names = os.listdir(os.path.dirname(os.path.abspath(path)))
    return sorted(n[:-len(suffix)] for n in names if n.endswith(suffix) and not n.startswith("NO_MODULE"))


def parse_service_addr(service_addr: str) -> tuple[str, int]:
    """`host:port` (also `grpc://host:port`, `[::1]:port`) as (host, port).

    Raises:
      ProfilerError: not of that form.
    """
    text = str(service_addr or "").strip()
    if text.startswith("grpc://"):
        text = text[len("grpc://"):]
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ProfilerError(f"service address {service_addr!r} is not HOST:PORT (e.g. 'localhost:9012'): "
                            "give the host running xp.start_server(PORT) and that port")
    return host, int(port_text)


def probe_server(host: str, port: int, timeout_s: float = 2.0) -> None:
    """Fails fast when nothing listens at host:port.

    Raises:
      ProfilerError: connection refused, host unknown, or no answer within `timeout_s`.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return
    except socket.gaierror as exc:
        reason = f"the host name {host!r} does not resolve ({exc})"
    except ConnectionRefusedError:
        reason = f"nothing listens on port {port} of {host} (connection refused)"
    except TimeoutError:
        reason = f"{host}:{port} did not answer within {timeout_s:g} s (a firewall, or the wrong host)"
    except OSError as exc:
        reason = f"cannot connect to {host}:{port}: {exc.strerror or exc}"
    raise ProfilerError(
        f"No trace event is collected: there is no profiler server at {host}:{port}: {reason}.\n" + NO_EVENTS_HELP)
