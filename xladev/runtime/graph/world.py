"""Which process of a job this is, and the job's processes joined through jax's distributed runtime.

A job is started by `xladev.launch` or by `torchrun`; both give every process torchrun's environment
(`RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`). With a world size
above 1, the first use of the device joins the job (or `dist.init_process_group("xla", ...)` does, for a
process started otherwise): `jax.distributed.initialize` with this process as process `RANK` (gloo carries
the collectives between CPU processes), before jax starts its backend. Each
process is one replica, on its `xla:0`; the replicas form a one-axis mesh over which graphs holding
collectives run (compilation.py).

The jax coordinator (run by rank 0) listens at `XLADEV_COORDINATOR_ADDRESS` when that is set
(`xladev.launch` sets it); otherwise rank 0 picks a free port on `MASTER_ADDR` and hands the address to
the others through torch.distributed's TCPStore at `MASTER_ADDR:MASTER_PORT`, the store the `xla://`
rendezvous uses too.
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime
import functools
import os
import socket
import sys
import threading
import time

from xladev._flags import ConfigError, config
from xladev.errors import XladevError
from xladev.events import RankLost, bus
from xladev.runtime.graph import ir, steps

# The mesh axis of the replicas: collectives reduce, gather and scatter over it.
REPLICA_AXIS = "replica"
_STORE_KEY = "xladev/jax_coordinator"
_HOST_KEY = "xladev/host/"
# A process that stops sending heartbeats this long (frozen, or cut off) counts as gone. A process that
# exits is seen at once (its connection closes); this only bounds the wait for one that hangs.
_HEARTBEAT_TIMEOUT_S = 10
# At exit, how long rank 0 waits for the other ranks to disconnect before stopping the coordinator.
_LEAVE_WAIT_S = 10.0
_REPLY_S = 0.3
# Once a rank is gone, how long this rank may stay stuck where no error reaches it before it stops.
_STOP_GRACE_S = 10.0
# How often each rank's watchdog joins the others to see who is still there.
_WATCH_INTERVAL_S = 0.5


class DistributedError(XladevError, RuntimeError):
    """The job's processes could not be joined, or a collective cannot run (a rank is gone, a bad group)."""


@dataclasses.dataclass(frozen=True)
class Placement:
    """This process's place in the job.

    Attributes:
      rank: global rank (PyTorch/XLA's global ordinal), 0 for a single process.
      world_size: processes in the job.
      local_rank: rank on this host (PyTorch/XLA's local ordinal).
      local_world_size: processes on this host.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def _env_int(name: str, default: int | None = None) -> int | None:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not valid: expected an integer (set by torchrun or xladev.launch)") from None


@functools.cache
def placement() -> Placement:
    """This process's place, from torchrun's (and `xladev.launch`'s) environment; one process when unset.

    Raises:
      ConfigError: the variables are malformed or contradict each other.
    """
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", None)
    local_rank = _env_int("LOCAL_RANK", None)
    if rank is None:
        rank = local_rank or 0
    local_world = _env_int("LOCAL_WORLD_SIZE", world)
    if local_rank is None:
        local_rank = rank % max(local_world, 1)
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"RANK={rank} and WORLD_SIZE={world} do not describe a process of the job: "
                          "RANK must be in 0..WORLD_SIZE-1")
    if not 0 <= local_rank < max(local_world, 1):
        raise ConfigError(f"LOCAL_RANK={local_rank} is not below LOCAL_WORLD_SIZE={local_world}")
    return Placement(rank, world, local_rank, local_world)


class _Job:
    """The joined job: jax's distributed runtime started once, the coordination client, the store."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.started = False
        self.store = None
        self.coordinator: str | None = None
        # Ranks seen gone (the watchdog), by rank: what was seen.
        self.lost: dict[int, str] = {}
        self.hosts: dict[int, str] = {}  # each rank's host (`host_label`), learnt at the join
        self.leaving = threading.Event()
        self.watchdog: _Watchdog | None = None
        self.reported = False  # a DistributedError about a gone rank was raised to the user's code
        self.at_exit_barrier = False  # leaving, and waiting there for the others
        # Asked to join (`dist.init_process_group("xla")`); torchrun and xladev.launch join without asking.
        self.wanted = False

    def tcp_store(self):
        """torch.distributed's TCPStore at MASTER_ADDR:MASTER_PORT, made once (rank 0 hosts it, as the
        `xla://` rendezvous of PyTorch/XLA does; under torchrun's agent store every rank is a client)."""
        with self.lock:
            if self.store is None:
                import torch.distributed as dist

                where = placement()
                host = os.environ.get("MASTER_ADDR", "").strip() or "localhost"
                port = _env_int("MASTER_PORT", 12355)
                agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "") == "True"
                timeout = datetime.timedelta(seconds=config.dist_timeout)
                try:
                    self.store = dist.TCPStore(host, port, where.world_size,
                                               is_master=not agent and where.rank == 0, timeout=timeout)
                except Exception as exc:
                    raise DistributedError(
                        f"rank {where.rank} could not reach the job's store at {host}:{port} (MASTER_ADDR:"
                        f"MASTER_PORT) within {config.dist_timeout:g} s: {exc}") from None
            return self.store

    def coordinator_address(self) -> str:
        """Where rank 0 runs jax's coordination service: XLADEV_COORDINATOR_ADDRESS, or exchanged through the store.

        Raises:
          DistributedError: the store could not be reached, or rank 0 never published the address.
        """
        given = config.coordinator_address
        if given:
            return given
        where = placement()
        store = self.tcp_store()
        if where.rank == 0:
            host = os.environ.get("MASTER_ADDR", "").strip() or "localhost"
            address = f"{host}:{free_port()}"
            store.set(_STORE_KEY, address)
            return address
        try:
            return store.get(_STORE_KEY).decode()
        except Exception as exc:
            raise DistributedError(
                f"rank {where.rank} did not get the jax coordinator's address from rank 0 within "
                f"{config.dist_timeout:g} s (is rank 0 running?): {exc}") from None

    def start(self, jax) -> None:
        """Joins the job through `jax.distributed.initialize`, once, before jax's backend starts.

        Args:
          jax: the jax module (configured by backend.jax_module).

        Raises:
          DistributedError: the other processes did not join in time, or jax's backend already started.
        """
        where = placement()
        if not where.distributed or not (self.wanted or _launched()):
            return
        with self.lock:
            if self.started:
                return
            from jax._src import xla_bridge

            if getattr(xla_bridge, "_backends", None):
                raise DistributedError(
                    f"rank {where.rank}: jax's backend started before this process joined the job "
                    f"(WORLD_SIZE={where.world_size}); use the xla device (or jax) only after the job starts, "
                    "e.g. inside the function given to xladev.launch")
            if config.pjrt_device == "CPU":
                jax.config.update("jax_cpu_collectives_implementation", "gloo")
            # A dead process must not abort the others from inside XLA: the watchdog says which rank it
            # was, and the next collective fails with that in its message.
            jax.config.update("jax_enable_recoverability", True)
            # jax's preemption service catches SIGTERM (to checkpoint before a preemption): a launcher's or
            # torchrun's SIGTERM would then not stop the process. xladev has no preemption handling.
            jax.config.update("jax_enable_preemption_service", False)
            self.coordinator = self.coordinator_address()
            kwargs = {}
            if config.pjrt_device != "CPU":
                kwargs["local_device_ids"] = [where.local_rank]
            try:
                jax.distributed.initialize(
                    coordinator_address=self.coordinator, num_processes=where.world_size, process_id=where.rank,
                    initialization_timeout=max(1, int(config.dist_timeout)),
                    heartbeat_timeout_seconds=_HEARTBEAT_TIMEOUT_S, **kwargs)
            except Exception as exc:
                raise DistributedError(
                    f"rank {where.rank} of {where.world_size} could not join the job at {self.coordinator} "
                    f"within {config.dist_timeout:g} s: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                ) from None
            self.started = True
            # A graph holding collectives must be the same program on every rank (replica_guard.py), also
            # when Python numbers differ by rank (a rank-dependent offset): 0, 1 and -1 become graph inputs
            # like any number, and each use of a number is an input of its own (equal values on one rank
            # only would otherwise be one input there and two elsewhere).
            if "XLA_NO_SPECIAL_SCALARS" not in os.environ:
                config.update("no_special_scalars", True)
            ir.share_scalars(False)
            atexit.register(self.leave)
            self.hosts = self._learn_hosts()
            self.watchdog = _Watchdog(self)
            self.watchdog.start()

    def _learn_hosts(self) -> dict[int, str]:
        """Each rank's host (`host_label`), exchanged through the coordinator once, at the join: a rank that
        dies later is named with its host, also when the coordinator went with it. Empty when the exchange
        fails: the names are a help, and the job goes on without them."""
        client = self.client()
        where = placement()
        try:
            client.key_value_set(f"{_HOST_KEY}{where.rank}", host_label(self.coordinator))
            client.wait_at_barrier("xladev/hosts", int(config.dist_timeout * 1000))
            hosts = {int(key.rsplit("/", 1)[1]): label for key, label in client.key_value_dir_get(_HOST_KEY)}
        except Exception:  # noqa: BLE001 - a rank that fails here fails its first collective, with the reason
            return {}
        if len(set(hosts.values())) > 1 and config.pjrt_device == "CPU":
            _warn_if_name_is_loopback(where.rank)
        return hosts

    def host_of(self, rank: int) -> str | None:
        """`rank`'s host when the job spans several hosts (on one, naming it tells nothing); else None."""
        if len(set(self.hosts.values())) < 2:
            return None
        return self.hosts.get(rank)

    def leave(self) -> None:
        """Leaves the job at exit, every rank together, so that no rank outlives the coordinator (rank 0).

        jax's runtime stops rank 0's coordination service when rank 0 exits, and a rank still connected then
        is aborted. So each rank says it is leaving (the watchdogs then know it did not die), waits at an exit
        barrier for the others (skipped when a rank is gone), and disconnects; rank 0 stops the service last,
        once the others have disconnected.
        """
        client = self.client()
        if client is None or self.leaving.is_set():
            return
        import jax

        where = placement()
        self.leaving.set()
        try:
            client.key_value_set(_left_key(where.rank), "1")
            if not self.lost:
                self.at_exit_barrier = True
                client.wait_at_barrier("xladev/exit", int(config.dist_timeout * 1000))
        except Exception:  # a rank is gone or late: nothing more to wait for
            pass
        if self.lost:
            _end_now()
        if where.rank == 0 and where.world_size > 1:
            # The watchdog's rendezvous returns once every other rank has disconnected (or died).
            if self.watchdog.others_gone.wait(_LEAVE_WAIT_S):
                time.sleep(_REPLY_S)  # a rank's disconnect reply must reach it before the service stops
        try:
            jax.distributed.shutdown()
        except Exception:
            pass
        # Shutting the client down ends the watchdog's pending call; it must have returned before the
        # interpreter finalizes, or its thread dies inside jaxlib and aborts the process.
        if self.watchdog is not None:
            self.watchdog.join(_LEAVE_WAIT_S)

    def client(self):
        """jax's coordination client of this process (None for a single process)."""
        from jax._src import distributed

        return distributed.global_state.client

    def gone(self, rank: int, reason: str) -> None:
        """Records that `rank` is gone (seen by the watchdog, or told by `xladev.launch`).

        This rank's next collective (or the one it waits in) then fails naming `rank`. If this rank is
        stuck where no error can reach it (inside XLA, or still joining the job), it stops by itself after
        `_STOP_GRACE_S`, its outputs closed, rather than wait for ever.
        """
        host = self.host_of(rank)
        if host is not None:
            reason = f"{reason}; it ran on host {host}"
        with self.lock:
            if rank in self.lost:
                return
            self.lost[rank] = reason
            # The host is gone when every rank on it is (a machine down, cut off, or its launcher killed).
            host_gone = host is not None and all(r in self.lost for r, h in self.hosts.items() if h == host)
        where = placement()
        sys.stderr.write(f"xladev: rank {where.rank}: rank {rank} of {where.world_size} is gone ({reason}); "
                         "collectives with it cannot run, so this rank's next collective fails\n")
        if host_gone:
            ranks = ", ".join(str(r) for r, h in sorted(self.hosts.items()) if h == host)
            sys.stderr.write(f"xladev: rank {where.rank}: host {host} is gone: every rank on it ({ranks}) ended or "
                             "stopped answering\n")
        sys.stderr.flush()
        if bus.active:
            bus.emit(RankLost(time.perf_counter_ns(), steps.current(), rank, reason))
        threading.Thread(target=self._stop_if_stuck, args=(rank,), name="xladev-stop-if-stuck", daemon=True).start()

    def _stop_if_stuck(self, rank: int) -> None:
        time.sleep(_STOP_GRACE_S)
        # A rank that went while this one waits at the exit barrier never arrives there (one preempted after
        # its checkpoint, while this one ends normally): that wait would last XLADEV_DIST_TIMEOUT.
        if self.reported or (self.leaving.is_set() and not self.at_exit_barrier):
            return  # the error reached the user's code (or the process is already ending)
        where = placement()
        sys.stderr.write(f"xladev: rank {where.rank}: stopping: rank {rank} is gone ({self.lost[rank]}) and this rank "
                         f"has been waiting {_STOP_GRACE_S:g} s where no error can reach it (inside a collective, "
                         "at the exit barrier, or joining the job)\n")
        sys.stderr.flush()
        self.leaving.set()
        _end_now()

    def wait_for_lost(self, seconds: float) -> bool:
        """Whether a rank is (or within `seconds` turns out) gone: a failed collective asks before saying why."""
        deadline = time.monotonic() + seconds
        while not self.lost and self.watchdog is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        return bool(self.lost)

    def lost_error(self, what: str) -> "DistributedError":
        """The error of a collective that cannot run because a rank is gone; names the rank and why."""
        self.reported = True
        where = placement()
        rank, reason = next(iter(self.lost.items()))
        return DistributedError(f"rank {where.rank}: {what} cannot run: rank {rank} of {where.world_size} is gone "
                                f"({reason}). Its own output says why it stopped.")


def _launched() -> bool:
    """Whether torchrun or `xladev.launch` (or a user naming the coordinator) started this process as part
    of a job, which it then joins on its first use of the device. A bare RANK/WORLD_SIZE does not join (as
    in PyTorch/XLA, those alone replicate nothing): `dist.init_process_group("xla", ...)` does."""
    return bool(os.environ.get("TORCHELASTIC_RUN_ID") or config.coordinator_address)


def joined() -> bool:
    """Whether this process is part of a job of several processes (it joined through jax's runtime)."""
    return job.started


def _end_now() -> None:
    """Ends the process (status 1) after the exit handlers but jax's own and this module's.

    With a rank gone, a collective of this rank may wait in XLA for ever, and jax's teardown (its exit
    handler stops the distributed runtime and the backends) would wait for it too. The other handlers run:
    the sinks close their files, so every record written stays readable.
    """
    sys.stderr.flush()
    try:
        from jax._src import api

        atexit.unregister(api.clean_up)
        atexit.unregister(job.leave)
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def host_label(coordinator: str) -> str:
    """This host as the other ranks name it: its name, and the address it reaches the coordinator from (two hosts
    may share a name: containers, network namespaces).

    Args:
      coordinator: the coordinator's `host:port`.

    Returns:
      `name at address`, or the name alone when no address can be found.
    """
    name = socket.gethostname()
    host = coordinator.rsplit(":", 1)[0].strip("[]")
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, 1, type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, kind) as probe:
            probe.connect(address)  # a datagram socket's connect sends nothing: it picks the route's address
            own = probe.getsockname()[0]
    except OSError:
        return name
    return f"{name} at {own}"


def _warn_if_name_is_loopback(rank: int) -> None:
    """gloo (jax's collectives between CPU processes) gives the other ranks the address this host's name resolves
    to: a loopback one (`127.0.1.1 name` in /etc/hosts, common) fails the first collective across hosts with
    "Gloo context initialization failed ... Connection refused". Said at the join, with the way out."""
    name = socket.gethostname()
    try:
        address = socket.gethostbyname(name)
    except OSError:
        return
    if address.startswith("127."):
        sys.stderr.write(f"xladev: rank {rank}: this job spans several hosts, but this host's name {name!r} "
                         f"resolves to {address}: gloo tells the other hosts to reach this one there, and collectives "
                         f"across hosts fail; make {name!r} resolve to the address the other hosts reach (/etc/hosts "
                         "or DNS)\n")
        sys.stderr.flush()


def _left_key(rank: int) -> str:
    return f"xladev/left/{rank}"


class _Watchdog(threading.Thread):
    """Sees a rank leave the job without saying so (its process died, or stopped answering).

    jax's coordination client's `get_live_nodes` returns once every live rank has asked too, leaving out the
    ranks that disconnected: each rank's watchdog asks in a loop, so a rank that dies is seen at once by the
    others. A rank missing without having said it was leaving (`leave`) is gone (`_Job.gone`).
    """

    def __init__(self, owner: _Job) -> None:
        super().__init__(name="xladev-watchdog", daemon=True)
        self.owner = owner
        self.others_gone = threading.Event()

    def run(self) -> None:
        client = self.owner.client()
        where = placement()
        everyone = list(range(where.world_size))
        while True:
            try:
                live = set(client.get_live_nodes(everyone))
            except Exception as exc:
                if self.owner.leaving.is_set():
                    self.others_gone.set()
                    return
                if where.rank != 0:
                    self.owner.gone(0, f"the job's coordinator stopped answering: {str(exc).splitlines()[0]}")
                return
            if self.owner.leaving.is_set() and where.rank != 0:
                return  # this rank's client is shutting down: what it sees now says nothing of the others
            for rank in everyone:
                if rank in live or rank in self.owner.lost:
                    continue
                try:
                    said = client.key_value_try_get(_left_key(rank))
                except Exception:
                    said = None
                if said is None:
                    self.owner.gone(rank, "its process ended or stopped answering without leaving the job")
            if live <= {where.rank}:
                self.others_gone.set()
                return
            time.sleep(_WATCH_INTERVAL_S)


job = _Job()


def free_port() -> int:
    """A TCP port free on this host now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def local_devices(jax, platform: str) -> list:
    """This process's devices of `platform`, by id: `xla:0..N-1`. With several processes, jax's device list
    holds every process's devices; a process computes on its own."""
    return sorted(jax.local_devices(backend=platform), key=lambda d: d.id)

