"""The in-process profiler server that `xp.trace`, `xladev capture` and TensorBoard's capture button talk to."""

from __future__ import annotations

import errno
import socket
import threading

from xladev.debug._profiler_common import ProfilerError

_lock = threading.Lock()
_server: "ProfilerServer | None" = None


class ProfilerServer:
    """The running profiler server of this process (one per process).

    Attributes:
      port: the TCP port it listens on (all interfaces).
      address: `localhost:<port>`, what to pass to `xp.trace` from this machine.
    """

    def __init__(self, port: int, native) -> None:
        self.port = port
        self.address = f"localhost:{port}"
        self._native = native

    @property
    def running(self) -> bool:
        return _server is self

    def stop(self) -> None:
        """Stops the server (no-op when already stopped)."""
        stop_server(self)

    def __repr__(self) -> str:
        return f"<xladev ProfilerServer {self.address} {'running' if self.running else 'stopped'}>"


def _port_in_use(port: int) -> OSError | None:
    """The bind error for `port` on all interfaces, or None when it is free (what the server would hit)."""
    families = [(socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")]
    for family, host in families:
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError:
            continue  # no IPv6 on this machine
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                try:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                except OSError:
                    pass
            sock.bind((host, port))
        except OSError as exc:
            if family == socket.AF_INET6 and exc.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                continue
            return exc
        finally:
            sock.close()
    return None


def free_port() -> int:
    """A TCP port that was free a moment ago (bind to port 0, read it, release it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(port: int) -> ProfilerServer:
    """Starts this process's profiler server on `port` (all interfaces). It runs until `stop()` or exit.

    Args:
      port: a TCP port (1-65535); 0 picks a free one (read it from the result's `.port`).

    Returns:
      The server handle (`.port`, `.address`, `.stop()`). Calling again with the same port returns it.

    Raises:
      ProfilerError: the port is not a valid number, is already in use by another program, or a server on
        another port already runs in this process.
    """
    global _server
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ProfilerError(f"profiler server port must be an integer in 0..65535, got {port!r}")
    with _lock:
        if _server is not None:
            if port in (0, _server.port):
                return _server
            raise ProfilerError(f"a profiler server already runs in this process on port {_server.port}; "
                                f"stop it (xp.stop_server()) before starting one on port {port}")
        if port == 0:
            port = free_port()
        busy = _port_in_use(port)
        if busy is not None:
            raise ProfilerError(
                f"cannot start the profiler server: port {port} is already in use ({busy.strerror or busy}). "
                f"Pick another port, or find the program holding it (`ss -ltnp 'sport = :{port}'`).")
        import jax.profiler

        try:
            native = jax.profiler.start_server(port)
        except ValueError as exc:  # a server started directly through jax.profiler.start_server
            raise ProfilerError(f"cannot start the profiler server on port {port}: {exc} "
                                "(one was started with jax.profiler.start_server; use it, or stop it first)") from None
        _server = ProfilerServer(port, native)
        return _server


def stop_server(server: ProfilerServer | None = None) -> None:
    """Stops this process's profiler server (no-op when none runs, or `server` is no longer the running one)."""
    global _server
    with _lock:
        if _server is None or (server is not None and server is not _server):
            return
        import jax.profiler

        try:
            jax.profiler.stop_server()
        except ValueError:
            pass
        _server._native = None
        _server = None


def current_server() -> ProfilerServer | None:
    """The running server of this process, or None."""
    return _server
