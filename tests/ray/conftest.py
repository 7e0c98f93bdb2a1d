"""A real local Ray cluster (``ray.cluster_utils.Cluster``) with heterogeneous simulated GPU nodes.

Each node declares its GPUs with ``num_gpus`` and describes them with the labels ``flashpoint ray-flags`` prints
(``gpu-model`` and ``flashpoint-simulated=1``): simulated GPUs are the only fake, and they are labelled as such.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from flashpoint.backends.ray import quiet_ray
from flashpoint.hosting.embedded import EmbeddedServer

quiet_ray()  # before Ray is imported anywhere in this process


def require_ray() -> Any:
    """``ray.cluster_utils``: skipped locally when Ray is not installed, a failure in CI (which installs it)."""
    try:
        import ray.cluster_utils
    except ImportError as exc:
        if os.environ.get("CI"):
            raise AssertionError("Ray is not installed; `pip install -e '.[test]'` brings it") from exc
        pytest.skip("Ray is not installed; `pip install -e '.[test]'` brings it")
    return ray.cluster_utils


@pytest.fixture(autouse=True)
def _ray_installed() -> None:
    require_ray()


#: the fleet of the issue: 2 x A100 80GB PCIe, 1 x H200, 4 x H100 80GB HBM3, one model per node
FLEET = {"NVIDIA-A100-80GB-PCIe": 2, "NVIDIA-H200": 1, "NVIDIA-H100-80GB-HBM3": 4}


@dataclass
class RayCluster:
    """A running local Ray cluster, and the node of each GPU model on it."""

    cluster: Any
    nodes: dict[str, Any] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return str(self.cluster.address)

    def add(self, label: str, count: int, **labels: str) -> Any:
        """Add a node with ``count`` simulated GPUs of the model ``label`` names (NVML name, spaces as hyphens)."""
        node = self.cluster.add_node(
            num_cpus=1, num_gpus=count, labels={"gpu-model": label, "flashpoint-simulated": "1", **labels}
        )
        self.cluster.wait_for_nodes()
        self.nodes[label] = node
        return node

    def node_id(self, label: str) -> str:
        return str(self.nodes[label].node_id)

    def remove(self, label: str) -> None:
        self.cluster.remove_node(self.nodes.pop(label))


def _start(fleet: dict[str, int]) -> RayCluster:
    cluster = require_ray().Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "num_gpus": 0, "include_dashboard": False}
    )
    started = RayCluster(cluster)
    for label, count in fleet.items():
        started.add(label, count)
    return started


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[RayCluster]:
    """One cluster for a module's tests that only add to it."""
    started = _start(FLEET)
    yield started
    started.cluster.shutdown()


@pytest.fixture
def fresh_cluster() -> Iterator[Callable[[dict[str, int]], RayCluster]]:
    """A cluster of its own, for a test that removes nodes."""
    clusters: list[RayCluster] = []

    def start(fleet: dict[str, int]) -> RayCluster:
        clusters.append(_start(fleet))
        return clusters[-1]

    yield start
    for started in clusters:
        started.cluster.shutdown()


@pytest.fixture
def ray_embedded(make_embedded: Callable[..., EmbeddedServer]) -> Callable[..., EmbeddedServer]:
    """An embedded server whose workers are Ray actors on the given cluster (FLASHPOINT_BACKEND=ray)."""

    def start(cluster: RayCluster, **env: str) -> EmbeddedServer:
        return make_embedded(
            "",
            FLASHPOINT_BACKEND="ray",
            FLASHPOINT_RAY_ADDRESS=cluster.address,
            FLASHPOINT_RAY_READY_TIMEOUT_S=env.pop("FLASHPOINT_RAY_READY_TIMEOUT_S", "60"),
            **env,
        )

    return start
