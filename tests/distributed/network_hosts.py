"""Two hosts made on this machine, for jobs that span hosts: each a Linux network namespace with its own
address, host name and /etc/hosts, joined by a veth pair (one link between the two).

A process started on a host (`NetworkHosts.argv`) sees only that host's network: it reaches the other host
at its address, as over a real network, and the name `socket.gethostname()` gives it is the host's. Making
namespaces needs root (CAP_NET_ADMIN) and iproute2; where they are missing, `NetworkHosts.make` raises
`Unavailable` with the reason, and the tests skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

_PREFIX = "xldev"  # namespace names: xldev<pid>h<i>, so that a run's leftovers are found by their creator
_NETNS_ETC = Path("/etc/netns")


class Unavailable(Exception):
    """Namespaces cannot be made here (not root, no iproute2, or the kernel refuses)."""


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise Unavailable(f"ip {' '.join(args)}: {(done.stderr or done.stdout).strip()}")


def _remove_leftovers() -> None:
    """Deletes the namespaces of earlier runs whose process is gone (a run killed before its cleanup)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(_PREFIX) or "h" not in name[len(_PREFIX):]:
            continue
        pid = name[len(_PREFIX):].split("h", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)
            shutil.rmtree(_NETNS_ETC / name, ignore_errors=True)


class NetworkHosts:
    """Two hosts, `host0` at `addresses[0]` and `host1` at `addresses[1]`; `close()` removes them.

    Attributes:
      names: the hosts' names (their `hostname`).
      addresses: their addresses, one /24 network.
    """

    def __init__(self, namespaces: list[str], names: list[str], addresses: list[str]) -> None:
        self.namespaces = namespaces
        self.names = names
        self.addresses = addresses

    @classmethod
    def make(cls) -> "NetworkHosts":
        """Makes the two hosts.

        Raises:
          Unavailable: namespaces cannot be made here (the reason is the message).
        """
        if os.name != "posix" or not hasattr(os, "geteuid") or os.geteuid() != 0:
            raise Unavailable("making network namespaces needs root")
        if shutil.which("ip") is None or shutil.which("unshare") is None:
            raise Unavailable("iproute2's `ip` or util-linux's `unshare` is not installed")
        _remove_leftovers()
        pid = os.getpid()
        namespaces = [f"{_PREFIX}{pid}h{i}" for i in (0, 1)]
        links = [f"xv{pid % 10**8}{side}" for side in "ab"]  # interface names: at most 15 characters
        subnet = f"10.{200 + pid % 50}.{pid // 50 % 250}"
        addresses = [f"{subnet}.1", f"{subnet}.2"]
        names = [f"xlhost{i}" for i in (0, 1)]
        hosts = cls(namespaces, names, addresses)
        try:
            for ns in namespaces:
                _ip("netns", "add", ns)
            _ip("link", "add", links[0], "type", "veth", "peer", "name", links[1])
            for ns, link, address in zip(namespaces, links, addresses):
                _ip("link", "set", link, "netns", ns)
                _ip("-n", ns, "addr", "add", f"{address}/24", "dev", link)
                _ip("-n", ns, "link", "set", link, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                # `ip netns exec` mounts /etc/netns/NS/hosts over /etc/hosts: each host resolves both names.
                etc = _NETNS_ETC / ns
                etc.mkdir(parents=True, exist_ok=True)
                (etc / "hosts").write_text("127.0.0.1 localhost\n"
                                           + "".join(f"{a} {n}\n" for a, n in zip(addresses, names)))
            hosts._probe()
        except (Unavailable, OSError, subprocess.SubprocessError) as exc:
            hosts.close()
            raise Unavailable(str(exc)) from None
        return hosts

    def _probe(self) -> None:
        """Checks that a process on host 1 runs under its name and reaches host 0 (a refused connection is a
        reached host), so that a machine where namespaces are made but do not work skips instead of failing.

        Raises:
          Unavailable: what the probe saw instead.
        """
        code = ("import socket\n"
                "print(socket.gethostname())\n"
                "s = socket.socket(); s.settimeout(5)\n"
                "try:\n"
                f"    s.connect(({self.addresses[0]!r}, 9)); print('reached')\n"
                "except ConnectionRefusedError:\n"
                "    print('reached')\n"
                "except OSError as exc:\n"
                "    print(exc)\n")
        done = subprocess.run(self.argv(1, [sys.executable, "-c", code]), capture_output=True, text=True, timeout=60)
        seen = done.stdout.split()
        if done.returncode != 0 or seen != [self.names[1], "reached"]:
            raise Unavailable(f"a process on host 1 saw {done.stdout.strip()!r} {done.stderr.strip()[-300:]!r}")

    def argv(self, index: int, argv: list[str], name: str | None = None) -> list[str]:
        """`argv` run on host `index`: in its network namespace, under its own host name (or `name`)."""
        return ["ip", "netns", "exec", self.namespaces[index], "unshare", "--uts", "--", "sh", "-c",
                'hostname "$0" && exec "$@"', name or self.names[index], *argv]

    def close(self) -> None:
        """Removes the namespaces (their veth ends go with them) and their /etc files."""
        for ns in self.namespaces:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
            shutil.rmtree(_NETNS_ETC / ns, ignore_errors=True)
