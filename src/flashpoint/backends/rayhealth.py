"""Ray backend: what went wrong, told truly. Nothing here imports Ray (``ray.py`` passes Ray's answers in), so ruff's
one-module rule for Ray holds.

- **A node that stopped answering.** When a raylet dies (``kill -9``, a crash, the machine gone), Ray lists its node
  alive until it has missed heartbeats for a while (about 12-15 s), and an actor started there meanwhile waits that
  long and then dies. So when a worker's actor is lost and its node's raylet does not answer (its port refuses or
  stays silent: ``raylet_answers``), or Ray says the node died, the backend sets the node aside at once
  (``AwayNodes``): its devices leave the fleet until Ray lists it dead (it left) or its raylet answers again (it is
  back). The plane starts nothing there meanwhile, and the losses are the node's, not failed starts.
- **An actor's death**, in Ray's words (``death_cause``), never as a signal nobody sent.
- **An address where nothing answers** (``check_reachable``), and **a cluster that wants a token** (Ray's token
  authentication: ``token_advice``), each said at once with what to do, instead of Ray's minutes of retries that end
  in "Failed to connect".
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from flashpoint.errors import BackendError, ConfigError

__all__ = [
    "Away",
    "AwayNodes",
    "check_reachable",
    "death_cause",
    "declared_dead",
    "node_died",
    "raylet_answers",
    "token_advice",
]

#: how long a raylet's port may take to accept a connection before the raylet counts as not answering
PROBE_TIMEOUT_S = 2.0
#: the words Ray's ActorDiedError uses when the actor's node died
_NODE_DIED = "node has died"


@dataclass(frozen=True, slots=True)
class Away:
    """A node set aside: how placements name it, why (in words), and its raylet's address (probed for its return)."""

    name: str
    why: str
    host: str
    port: int


class AwayNodes:
    """The nodes set aside, by Ray node id."""

    def __init__(self) -> None:
        self._by_id: dict[str, Away] = {}

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._by_id

    def __len__(self) -> int:
        return len(self._by_id)

    def mark(self, node_id: str, away: Away) -> bool:
        """Set a node aside; False when it already was."""
        if node_id in self._by_id:
            return False
        self._by_id[node_id] = away
        return True

    def get(self, node_id: str) -> Away | None:
        return self._by_id.get(node_id)

    def back(self, node_id: str) -> Away | None:
        """The node is back (its raylet answers again): no longer set aside."""
        return self._by_id.pop(node_id, None)

    def settle(self, alive: Iterable[str]) -> None:
        """Forget the nodes Ray no longer lists alive (ids not in ``alive``): Ray declared them dead, so they leave
        the fleet as any node does."""
        still = set(alive)
        for node_id in [n for n in self._by_id if n not in still]:
            del self._by_id[node_id]

    def items(self) -> list[tuple[str, Away]]:
        return list(self._by_id.items())

    def reasons(self) -> list[tuple[str, str]]:
        """``(node name, why)`` for each node set aside, as ``Fleet.away`` carries them."""
        return [(away.name, away.why) for away in self._by_id.values()]


def raylet_answers(host: str, port: int, timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """True when something accepts a TCP connection at the raylet's node-manager address. Ray's owners (the plane's
    driver among them) connect to raylets there, so a cluster the plane can use lets it; a refused or silent port
    means the raylet is gone."""
    try:
        socket.create_connection((host.strip("[]"), port), timeout=timeout_s).close()
    except OSError:
        return False
    return True


def node_died(text: str) -> bool:
    """True when Ray's error says the actor died because its node died."""
    return _NODE_DIED in text


def death_cause(text: str, limit: int = 300) -> str:
    """Ray's error in one line: its first line, and the line that says why the actor died, if another says it
    (``The actor died unexpectedly ... The actor died because its node has died.``)."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return "no reason given"
    why = next((line for line in lines[1:] if "because" in line or "killed" in line or "terminated" in line), "")
    return " ".join(part for part in (lines[0], why) if part)[:limit]


def declared_dead(node: Mapping[str, object]) -> str:
    """Why a node Ray lists dead is gone, from its ``ray.nodes()`` entry."""
    return f"Ray declared it dead ({node.get('DeathReasonMessage') or 'no reason given'})"


def token_advice(address: str, env: Mapping[str, str]) -> str:
    """What to do when the cluster at ``address`` refuses this process for want of Ray's token (``env``: this
    process's environment, which is where Ray reads the token from)."""
    supply = (
        "the cluster's token in RAY_AUTH_TOKEN (or in a file named by RAY_AUTH_TOKEN_PATH, or in ~/.ray/auth_token); "
        "`ray get-auth-token` on the head node prints it"
    )
    if env.get("RAY_AUTH_MODE", "").strip().lower() != "token":
        return (
            f"the Ray cluster at {address} uses Ray's token authentication and flashpoint sent no token: start "
            f"flashpoint with RAY_AUTH_MODE=token and {supply}"
        )
    if env.get("RAY_AUTH_TOKEN"):
        source = "RAY_AUTH_TOKEN"
    elif env.get("RAY_AUTH_TOKEN_PATH"):
        source = f"the file {env['RAY_AUTH_TOKEN_PATH']} (RAY_AUTH_TOKEN_PATH)"
    else:
        source = "~/.ray/auth_token, or none was found"
    return f"the Ray cluster at {address} refused flashpoint's Ray token (read from {source}): give it {supply}"


def check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast, and say what to do, when nothing listens at a cluster address (Ray itself retries for minutes)."""
    if address == "auto":
        return
    hostport = address.split("://", 1)[-1].rstrip("/")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(
            f"Ray address {address!r} is not HOST:PORT; give the head node's address as `ray start --head` printed it, "
            "e.g. 10.0.0.5:6379, or 'auto' on a node of the cluster"
        )
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise BackendError(
            f"no Ray cluster answers at {address} ({exc}). Start one with `ray start --head` and pass the address it "
            "prints as FLASHPOINT_RAY_ADDRESS (or serve --ray-address); leave it unset to start Ray on this machine"
        ) from None
