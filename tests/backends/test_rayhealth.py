"""The Ray backend's health rules without a cluster: a node whose raylet stopped answering is set aside at once and
comes back when it answers (or leaves when Ray lists it dead); Ray's death causes and token refusals in true words.

No Ray cluster needed: the backend's reading of ``ray.nodes()`` and its node-loss rule are fed ``ray.nodes()``-shaped
entries whose raylet addresses are real loopback sockets (one listening, one refusing). The cluster tests, with real
``ray start`` processes and a raylet killed with ``kill -9``, are in ``tests/ray/test_node_away.py``.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from flashpoint.backends import rayhealth
from flashpoint.backends.ray import RayBackend
from flashpoint.backends.rayhealth import Away, AwayNodes, death_cause, node_died, raylet_answers, token_advice
from flashpoint.fleet.inventory import Fleet

#: texts Ray 2.60 raised, as seen on a local cluster whose raylet was killed
DIED = (
    "The actor died unexpectedly before finishing this task.\n\tclass_name: WorkerHost\n\tactor_id: 5cacb7\n"
    "\tpid: 7306\n\tnamespace: flashpoint\n\tip: 127.0.0.2\nThe actor died because its node has died. Node Id: b64342\n"
    "\tthe actor's node was terminated unexpectedly: health check failed due to missing too many heartbeats"
)
UNAVAILABLE = (
    "The actor f9fbc4 is unavailable: The actor is temporarily unavailable: RpcError: RPC error: Socket closed "
    "rpc_code: 14. The task may or may not have been executed on the actor."
)


@pytest.fixture
def listening() -> Iterator[int]:
    """A port on 127.0.0.1 where something listens (a raylet that answers)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.fixture
def refusing() -> Iterator[int]:
    """A port on 127.0.0.1 bound by nobody listening: connections are refused (a raylet killed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def entry(node_id: str, port: int, *, alive: bool = True, gpus: int = 1, model: str = "NVIDIA-H200") -> dict[str, Any]:
    """A node as ``ray.nodes()`` reports it, its raylet at 127.0.0.1:``port``."""
    return {
        "NodeID": node_id,
        "NodeName": "127.0.0.1",
        "NodeManagerAddress": "127.0.0.1",
        "NodeManagerPort": port,
        "Alive": alive,
        "DeathReasonMessage": "" if alive else "health check failed due to missing too many heartbeats",
        "Resources": {"CPU": 1.0, "GPU": float(gpus), "memory": 2.0**30},
        "Labels": {"ray.io/node-id": node_id, "gpu-model": model},
    }


# ---------------------------------------------------------------------------------------------------------------------
# the node-loss rule of the backend


async def test_a_lost_actor_whose_raylet_refuses_sets_its_node_aside_at_once(refusing: int, listening: int) -> None:
    backend = RayBackend("127.0.0.1:1")
    heard: list[Fleet] = []
    backend._on_change = heard.append
    h200 = entry("aaaa1111", refusing)
    a100 = entry("bbbb2222", listening, model="NVIDIA-A100-80GB-PCIe")
    backend._read_fleet([h200, a100])
    assert {d.name for d in backend.devices()} == {"NVIDIA H200", "NVIDIA A100 80GB PCIe"}

    # the actor on the H200 node is lost (Ray still lists the node alive) and its raylet refuses: away, at once
    cause = await backend._node_lost("aaaa1111", UNAVAILABLE)
    why = f"its raylet at 127.0.0.1:{refusing} stopped answering"
    assert cause == f"its Ray node 127.0.0.1/aaaa1111 is away ({why})"
    (fleet,) = heard
    assert {d.name for d in fleet.devices} == {"NVIDIA A100 80GB PCIe"}
    assert fleet.away == (("127.0.0.1/aaaa1111", why),)
    # a second actor lost there adds nothing, and the next reading of Ray (still alive) keeps it aside
    assert await backend._node_lost("aaaa1111", UNAVAILABLE) == cause
    assert backend._read_fleet([h200, a100]) is False and len(heard) == 1

    # an actor lost on a node whose raylet answers: only the actor is gone
    assert await backend._node_lost("bbbb2222", UNAVAILABLE) is None
    assert await backend._node_lost(None, UNAVAILABLE) is None


async def test_a_node_set_aside_is_back_when_its_raylet_answers(listening: int) -> None:
    backend = RayBackend("127.0.0.1:1")
    backend._read_fleet([entry("aaaa1111", listening)])
    backend._away.mark("aaaa1111", Away("127.0.0.1/aaaa1111", "its raylet stopped answering", "127.0.0.1", listening))
    backend._read_fleet([entry("aaaa1111", listening)])
    assert backend.devices() == []

    await backend._probe_away([entry("aaaa1111", listening)])
    assert backend._read_fleet([entry("aaaa1111", listening)]) is True
    assert [d.name for d in backend.devices()] == ["NVIDIA H200"]


async def test_a_node_set_aside_that_ray_declares_dead_is_gone_and_says_why(refusing: int) -> None:
    backend = RayBackend("127.0.0.1:1")
    backend._read_fleet([entry("aaaa1111", refusing), entry("cccc3333", refusing)])
    assert await backend._node_lost("aaaa1111", UNAVAILABLE) is not None
    backend._read_fleet([entry("aaaa1111", refusing, alive=False), entry("cccc3333", refusing, alive=False)])
    assert len(backend._away) == 0 and backend.devices() == []
    # the node that was still in the fleet is gone in Ray's words
    assert dict(backend._fleet().away) == {
        "127.0.0.1/cccc3333": "Ray declared it dead (health check failed due to missing too many heartbeats)"
    }


async def test_a_closing_backend_blames_no_node_for_the_actors_it_kills(refusing: int) -> None:
    backend = RayBackend("127.0.0.1:1")
    backend._read_fleet([entry("aaaa1111", refusing)])
    backend._closed = True  # as close() sets it before killing its actors
    assert await backend._node_lost("aaaa1111", "The actor was killed by ray.kill") is None
    assert len(backend._away) == 0 and [d.name for d in backend.devices()] == ["NVIDIA H200"]


async def test_ray_saying_the_node_died_sets_it_aside_without_a_probe(listening: int) -> None:
    backend = RayBackend("127.0.0.1:1")
    backend._read_fleet([entry("aaaa1111", listening)])
    cause = await backend._node_lost("aaaa1111", DIED)
    assert cause is not None and cause.startswith("its Ray node 127.0.0.1/aaaa1111 is away (Ray says it died (")
    assert "The actor died because its node has died" in cause
    assert backend.devices() == []


# ---------------------------------------------------------------------------------------------------------------------
# pure words


@pytest.mark.parametrize(
    ("text", "died", "cause"),
    [
        (
            DIED,
            True,
            "The actor died unexpectedly before finishing this task. "
            "The actor died because its node has died. Node Id: b64342",
        ),
        (UNAVAILABLE, False, UNAVAILABLE[:300]),
        ("The actor died unexpectedly.\n\tpid: 1\nThe actor was killed by ray.kill", False, None),
        ("", False, "no reason given"),
    ],
)
def test_rays_death_causes_in_one_line(text: str, died: bool, cause: str | None) -> None:
    assert node_died(text) is died
    said = death_cause(text)
    assert "\n" not in said and len(said) <= 300
    if cause is not None:
        assert said == cause
    else:
        assert said == "The actor died unexpectedly. The actor was killed by ray.kill"


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({}, "flashpoint sent no token: start flashpoint with RAY_AUTH_MODE=token and the cluster's token in "),
        ({"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN": "t"}, "flashpoint sent no token"),
        ({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "t"}, "refused flashpoint's Ray token (read from RAY_AUTH_TOKEN"),
        ({"RAY_AUTH_MODE": "TOKEN", "RAY_AUTH_TOKEN_PATH": "/t"}, "(read from the file /t (RAY_AUTH_TOKEN_PATH))"),
        ({"RAY_AUTH_MODE": "token"}, "(read from ~/.ray/auth_token, or none was found)"),
    ],
)
def test_a_token_refusal_says_how_to_give_the_token(env: dict[str, str], says: str) -> None:
    advice = token_advice("10.0.0.5:6379", env)
    assert advice.startswith("the Ray cluster at 10.0.0.5:6379 ")
    assert says in advice
    assert "`ray get-auth-token` on the head node prints it" in advice
    assert "FLASHPOINT_RAY_ADDRESS" not in advice


def test_raylet_answers_only_where_something_listens(listening: int, refusing: int) -> None:
    assert raylet_answers("127.0.0.1", listening)
    assert not raylet_answers("127.0.0.1", refusing)


def test_away_nodes_are_kept_until_ray_stops_listing_them_alive() -> None:
    nodes = AwayNodes()
    assert nodes.mark("a", Away("n/a", "why", "127.0.0.1", 1)) and not nodes.mark("a", Away("n/a", "x", "h", 2))
    nodes.mark("b", Away("n/b", "why b", "127.0.0.1", 2))
    assert nodes.reasons() == [("n/a", "why"), ("n/b", "why b")]
    nodes.settle(["a"])
    assert "a" in nodes and "b" not in nodes
    assert nodes.back("a") is not None and len(nodes) == 0
    assert rayhealth.declared_dead({}) == "Ray declared it dead (no reason given)"
