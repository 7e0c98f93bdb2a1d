"""A Ray cluster of real ``ray start`` processes on loopback addresses, as an operator starts one, for what only those
show: a raylet killed with ``kill -9`` (a ``ray.cluster_utils.Cluster`` node's actors outlive their raylet until Ray
declares the node dead; a ``ray start`` node's actors are lost within seconds, which is what a real node does).

Every process belongs to the cluster's own temporary folder (``--temp-dir``, named on each process's command line),
so ``shutdown`` ends exactly the processes this cluster started, and theirs (the workers its actors started), by pid.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

#: the environment every process of the cluster starts with: no usage reports, and no token unless a test asks for
#: one (Ray 2.60 turns token authentication on for a head started where ~/.ray/auth_token exists, which a local
#: ``ray.init`` writes). Not ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which flashpoint sets in its own process: it
#: turns multi-node clusters off on Linux too (``ray start --address`` then refuses to join).
QUIET = {
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_USAGE_STATS_REPORT_URL": "http://127.0.0.1:9/",
    "RAY_AUTH_MODE": "disabled",
}


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@dataclass
class RayStartCluster:
    """A head (no GPUs) and the GPU nodes added to it, each a ``ray start`` on its own loopback address."""

    temp_dir: str
    head_ip: str
    port: int
    env: dict[str, str]
    #: node address -> the labels it was started with
    nodes: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"{self.head_ip}:{self.port}"

    @classmethod
    def start(cls, head_ip: str = "127.0.0.2", **env: str) -> RayStartCluster:
        temp_dir = tempfile.mkdtemp(prefix="fpray-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
        base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        cluster = cls(temp_dir, head_ip, _free_port(head_ip), {**base, **QUIET, **env})
        cluster._ray_start(
            "--head",
            f"--port={cluster.port}",
            f"--node-ip-address={head_ip}",
            "--num-cpus=1",
            "--num-gpus=0",
            "--include-dashboard=false",
            f"--temp-dir={temp_dir}",
        )
        return cluster

    def add(self, ip: str, label: str, count: int = 1) -> None:
        """A node at ``ip`` with ``count`` simulated GPUs of the model ``label`` names, labelled as ``flashpoint
        ray-flags --simulated-gpus`` would."""
        self._ray_start(
            f"--address={self.address}",
            f"--node-ip-address={ip}",
            "--num-cpus=1",
            f"--num-gpus={count}",
            f"--labels=gpu-model={label},flashpoint-simulated=1",
        )
        self.nodes[ip] = label

    def raylet_pid(self, ip: str) -> int:
        """The pid of the raylet of the node at ``ip``."""
        for pid, argv in _processes():
            if argv and argv[0].endswith("/raylet") and f"--node_ip_address={ip}" in argv and self._ours(argv):
                return pid
        raise AssertionError(f"no raylet of this cluster at {ip}")

    def shutdown(self) -> None:
        """End every process of this cluster, and their children, by pid."""
        ours = {pid for pid, argv in _processes() if self._ours(argv)}
        parents = _parents()
        grown = True
        while grown:  # the workers its actors started, and theirs
            more = {pid for pid, parent in parents.items() if parent in ours} - ours
            grown = bool(more)
            ours |= more
        for pid in ours:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _ours(self, argv: list[str]) -> bool:
        return any(self.temp_dir in arg for arg in argv)

    def _ray_start(self, *args: str) -> None:
        command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--disable-usage-stats", *args]
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise AssertionError(f"`ray start {' '.join(args)}` failed:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")


def _processes() -> list[tuple[int, list[str]]]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:  # it ended meanwhile
            continue
        found.append((int(entry.name), [part.decode(errors="replace") for part in raw.split(b"\0") if part]))
    return found


def _parents() -> dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def wait_gone(pid: int, timeout: float = 10.0) -> None:
    """Return once ``pid`` is gone (or a zombie), bounded by ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state == "Z":
            return
        time.sleep(0.05)  # a bounded poll for a process to end
    raise AssertionError(f"process {pid} did not end within {timeout}s")
