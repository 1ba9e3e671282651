"""A network path a test can cut: a PostgreSQL cluster behind a veth pair, in a network
namespace of its own.

:class:`NetPath` makes the namespace and the pair (``ip netns``, ``ip link ... type
veth``; root only), :meth:`NetPath.cluster` starts a cluster inside the namespace that
listens on the namespace's end only, so every connection a test or pgferry opens to it
crosses the pair.  :meth:`NetPath.stall` sets the namespace's end down: the near end loses
its carrier and the kernel drops what is sent to it, without a reset or an ICMP error, as a
dead switch or a silent firewall would; the route stays, so nothing is refused either.
:meth:`NetPath.heal` sets it up again.  A userspace proxy that stops forwarding could not
do this: its kernel would go on acknowledging, and TCP keepalives would never fire.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from pgferry.errors import PgferryError
from pgferry.testing.cluster import LocalCluster, find_pg_bin, free_port


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def available() -> str | None:
    """Why a :class:`NetPath` cannot be made here (None when it can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no ip command (iproute2)"
    probe = f"pgfprobe{os.getpid()}"
    made = _ip("netns", "add", probe)
    if made.returncode != 0:
        return f"ip netns add failed: {made.stderr.strip()}"
    _ip("netns", "del", probe)
    return None


@dataclass
class NsCluster(LocalCluster):
    """A :class:`LocalCluster` run inside namespace ``netns``, listening on ``host``."""

    netns: str = ""
    host: str = ""

    def _run(self, *args: str, check: bool = True, timeout: float = 120):
        cmd = [str(self.bindir / args[0]), *args[1:]]
        cmd = ["ip", "netns", "exec", self.netns, "runuser", "-u", "postgres", "--", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            detail = (proc.stderr or proc.stdout).strip().splitlines()
            raise PgferryError(f"{args[0]} failed: {detail[-1] if detail else proc.returncode}")
        return proc

    def connstr(self, dbname: str = "postgres", **extra: str) -> str:
        return super().connstr(dbname, **extra).replace("host=127.0.0.1", f"host={self.host}", 1)


@dataclass
class NetPath:
    """A namespace and a veth pair between it and this one (see the module docstring)."""

    name: str = field(default_factory=lambda: f"pgf{os.getpid() % 100000}{random.randint(0, 99)}")
    near: str = ""
    far: str = ""
    near_addr: str = ""
    far_addr: str = ""

    def __post_init__(self) -> None:
        self.near, self.far = f"{self.name}a", f"{self.name}b"
        net = f"10.{random.randint(64, 250)}.{random.randint(0, 255)}"
        base = random.randrange(0, 256, 4)
        self.near_addr, self.far_addr = f"{net}.{base + 1}", f"{net}.{base + 2}"

    def create(self) -> NetPath:
        steps = [
            ("netns", "add", self.name),
            ("link", "add", self.near, "type", "veth", "peer", "name", self.far),
            ("link", "set", self.far, "netns", self.name),
            ("addr", "add", f"{self.near_addr}/30", "dev", self.near),
            ("link", "set", self.near, "up"),
            ("-n", self.name, "addr", "add", f"{self.far_addr}/30", "dev", self.far),
            ("-n", self.name, "link", "set", self.far, "up"),
            ("-n", self.name, "link", "set", "lo", "up"),
        ]
        for step in steps:
            proc = _ip(*step)
            if proc.returncode != 0:
                self.destroy()
                raise PgferryError(f"ip {' '.join(step)}: {proc.stderr.strip()}")
        return self

    def cluster(self, **settings: str) -> NsCluster:
        """A started cluster in the namespace, listening on :attr:`far_addr` only (in a
        temporary folder the server's OS user can reach; :meth:`NsCluster.destroy` it)."""
        base_dir = Path(tempfile.mkdtemp(prefix="pgferry-netns-"))
        os.chmod(base_dir, 0o755)
        cluster = NsCluster(
            base_dir=base_dir,
            port=free_port(),
            bindir=find_pg_bin(),
            netns=self.name,
            host=self.far_addr,
        )
        cluster.settings.update(listen_addresses=self.far_addr, **settings)
        cluster.init()
        with (cluster.datadir / "pg_hba.conf").open("a") as hba:
            hba.write(f"host all all {self.near_addr}/32 trust\n")  # this side of the pair
        cluster.start()
        return cluster

    def stall(self) -> None:
        """Packets to the namespace are dropped from now on (see the module docstring)."""
        _ip("-n", self.name, "link", "set", self.far, "down")

    def heal(self) -> None:
        _ip("-n", self.name, "link", "set", self.far, "up")

    def destroy(self) -> None:
        _ip("link", "del", self.near)  # takes its peer with it
        _ip("netns", "del", self.name)
