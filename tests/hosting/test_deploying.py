"""The deploy manager's rules (``hosting/deploying.py``) over a real deployments database, a real artifact store and
the real isolated loader, with a recording plane standing in for the control plane (whose rollouts have their own
tests in ``tests/scheduler/``, and the whole path its end-to-end test in ``test_deploy_serve.py``): what is rolled out
and taken down, what a failed rollout puts back, which checkers the intake holds, what comes back at a restart."""

from __future__ import annotations

import asyncio
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from flashpoint.errors import BackendError, BadInputError, ConflictError
from flashpoint.hosting.artifacts import ArtifactStore, pack
from flashpoint.hosting.deploying import DeployManager, package_name, without
from flashpoint.hosting.deployments import Deployments
from flashpoint.hosting.loader import load_isolated
from flashpoint.hosting.secretstore import SecretStore
from flashpoint.scheduler.rollout import Together
from flashpoint.spec import EndpointSpec, WorkerTarget

TWO = """
from flashpoint import Endpoint, GpuGroup


@Endpoint(name="embed", gpu=GpuGroup.ANY, dependencies=["numpy>=1.26", "Torch_Audio==2.1"])
async def embed(text: str) -> dict:
    return {{"v": {v}}}


@Endpoint(name="rank", gpu=GpuGroup.ANY)
async def rank(query: str, k: int = 3) -> dict:
    return {{"v": {v}}}
"""

ONE = """
from flashpoint import Endpoint, GpuGroup


@Endpoint(name="embed", gpu=GpuGroup.ANY)
async def embed(text: str, model: str = "small") -> dict:
    return {"v": 3}
"""


class RecordingPlane:
    """Records what the manager asks of the plane; ``fail`` names the endpoints whose rollout fails."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []  # (what, key, number of dependencies)
        self.registered: dict[str, EndpointSpec] = {}
        self.fail: set[str] = set()
        self.groups: dict[int, asyncio.Event] = {}

    def register(self, spec: EndpointSpec, target: WorkerTarget, code_file: str | None = None) -> None:
        self.calls.append(("register", spec.key, len(spec.dependencies)))
        self.registered[spec.key] = spec

    async def roll_out(self, spec: EndpointSpec, target: WorkerTarget, code_file: str | None = None, *,
                       timeout_s: float, on_stage: Callable[[str, str], None] | None = None,
                       together: Together | None = None) -> None:  # fmt: skip
        """As the plane's: a ready rollout of a group waits until the whole group is ready, then all switch."""
        await asyncio.sleep(0)
        self.calls.append(("roll_out", spec.key, len(spec.dependencies)))
        assert target.cwd is not None and Path(target.cwd, "main.py").is_file()  # workers run the unpacked code
        if spec.name in self.fail:
            raise BackendError("worker exited 5 times while starting")
        assert together is not None and spec.key in together.keys
        go = self.groups.setdefault(id(together), asyncio.Event())
        if together.arrive(spec.key):
            go.set()
        try:
            await go.wait()
        except asyncio.CancelledError:
            self.calls.append(("abandoned", spec.key, 0))
            raise
        self.registered[spec.key] = spec

    def unregister(self, key: str, *, reason: str) -> int:
        self.calls.append(("unregister", key, 0))
        self.registered.pop(key, None)
        return 0


def upload(tmp_path: Path, name: str, source: str) -> bytes:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "main.py").write_text(textwrap.dedent(source))
    return pack(folder).data


def manager(tmp_path: Path, plane: RecordingPlane, checkers: dict[str, Any]) -> DeployManager:
    return DeployManager(
        plane,
        Deployments(tmp_path / "deployments.db"),
        ArtifactStore(tmp_path / "artifacts"),
        checkers,
        code_root=tmp_path / "code",
        load=load_isolated,
    )


async def settled(deploys: DeployManager) -> None:
    """Wait for the rollouts the manager runs in the background (bounded)."""
    tasks = list(deploys._tasks)
    if tasks:
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=30)


@pytest.mark.parametrize(
    ("requirement", "name"),
    [
        ("numpy>=1.26", "numpy"),
        ("Torch_Audio==2.1", "torch-audio"),
        ("zope.interface", "zope-interface"),
        ("  requests[socks] ; python_version>'3'", "requests"),
        ("Pillow", "pillow"),
    ],
)
def test_package_names_compare_as_pep_503_says(requirement: str, name: str) -> None:
    assert package_name(requirement) == name


def test_a_version_rolls_out_then_the_next_takes_an_endpoint_away(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane, checkers = RecordingPlane(), {}
        deploys = manager(tmp_path, plane, checkers)
        first = await deploys.deploy("shop", "prod", upload(tmp_path, "v1", TWO.format(v=1)), by="ana",
                                     exclude=["torch-audio"])  # fmt: skip
        assert (first["version"], first["state"]) == (1, "pending")
        await settled(deploys)
        assert deploys.rollout("shop", "prod", 1)["state"] == "serving"
        # both rolled out, Flash's --exclude taking torch-audio out of the install
        assert sorted(plane.calls) == [("roll_out", "shop.prod.embed", 1), ("roll_out", "shop.prod.rank", 0)]
        assert set(checkers) == {"shop.prod.embed", "shop.prod.embed/embed", "shop.prod.rank", "shop.prod.rank/rank"}
        with pytest.raises(BadInputError, match="does not fit"):
            checkers["shop.prod.rank"]({"k": 2})  # query is missing: checked without importing the project

        plane.calls.clear()
        await deploys.deploy("shop", "prod", upload(tmp_path, "v2", ONE), by="ana")
        await settled(deploys)
        assert plane.calls == [("roll_out", "shop.prod.embed", 0), ("unregister", "shop.prod.rank", 0)]
        assert set(checkers) == {"shop.prod.embed", "shop.prod.embed/embed"}
        assert [d.spec.key for d in deploys.endpoints("shop", "prod")] == ["shop.prod.embed"]
        assert [(v.number, v.outcome) for v in deploys.deployments.versions("shop", "prod")] == [
            (2, "serving"),
            (1, "replaced"),
        ]

    asyncio.run(scenario())


def test_a_failed_endpoint_abandons_the_others_before_any_switched(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane, checkers = RecordingPlane(), {}
        deploys = manager(tmp_path, plane, checkers)
        await deploys.deploy("shop", "prod", upload(tmp_path, "v1", TWO.format(v=1)), by="ana")
        await settled(deploys)
        before = dict(checkers)

        plane.calls.clear()
        plane.fail = {"rank"}
        await deploys.deploy("shop", "prod", upload(tmp_path, "v2", TWO.format(v=2)), by="ana")
        await settled(deploys)
        rollout = deploys.rollout("shop", "prod", 2)
        assert rollout["state"] == "failed"
        assert rollout["detail"] == "endpoint 'rank': worker exited 5 times while starting"
        # embed was ready and waited for rank; rank failed, so embed's rollout was abandoned: neither switched
        assert sorted(plane.calls) == [
            ("abandoned", "shop.prod.embed", 0),
            ("roll_out", "shop.prod.embed", 2),
            ("roll_out", "shop.prod.rank", 0),
        ]
        assert checkers == before
        assert deploys.deployments.serving("shop", "prod").number == 1  # type: ignore[union-attr]

    asyncio.run(scenario())


def test_a_project_that_does_not_load_takes_no_number_and_one_rollout_at_a_time(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane = RecordingPlane()
        deploys = manager(tmp_path, plane, {})
        with pytest.raises(BadInputError, match="no_such_module_anywhere") as refused:
            await deploys.deploy("shop", "prod", upload(tmp_path, "bad", "import no_such_module_anywhere\n"), by="a")
        assert "shop/prod is unchanged and no version was made" in str(refused.value)
        assert deploys.deployments.get_env("shop", "prod") is None

        await deploys.deploy("shop", "prod", upload(tmp_path, "v1", ONE), by="ana")
        with pytest.raises(ConflictError, match="a rollout is running"):
            await deploys.deploy("shop", "prod", upload(tmp_path, "v2", ONE.replace("3", "4")), by="ana")
        await settled(deploys)
        assert [v.number for v in deploys.deployments.versions("shop", "prod")] == [1]

    asyncio.run(scenario())


def test_a_restart_registers_what_serves_less_what_was_undeployed(tmp_path: Path) -> None:
    async def first_run() -> None:
        deploys = manager(tmp_path, RecordingPlane(), {})
        await deploys.deploy("shop", "prod", upload(tmp_path, "v1", TWO.format(v=1)), by="ana", exclude=["numpy"])
        await settled(deploys)
        await deploys.undeploy("shop", "prod", endpoint="rank", by="ana")
        deploys.deployments.close()

    async def second_run() -> None:
        plane, checkers = RecordingPlane(), {}
        deploys = manager(tmp_path, plane, checkers)
        assert await deploys.recover() == []
        # registered (not rolled out: the plane requeues their jobs next), the exclusion kept
        assert plane.calls == [("register", "shop.prod.embed", 1)]
        assert set(checkers) == {"shop.prod.embed", "shop.prod.embed/embed"}

    asyncio.run(first_run())
    asyncio.run(second_run())


def test_without_leaves_other_packages_and_projects_alone(tmp_path: Path) -> None:
    folder = tmp_path / "p"
    folder.mkdir()
    (folder / "main.py").write_text(textwrap.dedent(TWO.format(v=1)))
    project = load_isolated(folder)
    assert without(project, []) is project
    trimmed = without(project, ["NUMPY"])
    assert trimmed.endpoints["embed"].spec.dependencies == ("Torch_Audio==2.1",)
    assert project.endpoints["embed"].spec.dependencies == ("numpy>=1.26", "Torch_Audio==2.1")


SECRETS = """
from flashpoint import Endpoint, GpuGroup, Secret


@Endpoint(name="embed", gpu=GpuGroup.ANY, env={"T": Secret("tok"), "U": "{{ RUNPOD_SECRET_key }}"})
async def embed(text: str) -> dict:
    return {"v": 1}


@Endpoint(name="rank", gpu=GpuGroup.ANY, env={"T": Secret("tok")})
async def rank(query: str) -> dict:
    return {"v": 1}
"""


def test_a_project_naming_secrets_its_app_lacks_takes_no_number(tmp_path: Path) -> None:
    async def scenario() -> None:
        plane, store = RecordingPlane(), SecretStore(tmp_path / "secrets")
        store.set("tok", "v-lab-7f3", app="lab")  # another app's secret of that name is not this app's
        store.set("key", "v-server-9c1")  # a server-wide one serves every app
        deploys = DeployManager(
            plane,
            Deployments(tmp_path / "deployments.db"),
            ArtifactStore(tmp_path / "artifacts"),
            {},
            code_root=tmp_path / "code",
            missing_secrets=store.missing,
        )
        data = upload(tmp_path, "v1", SECRETS)
        with pytest.raises(BadInputError) as refused:
            await deploys.deploy("shop", "prod", data, by="ana")
        said = str(refused.value)
        assert refused.value.code == "missing_secret"
        assert "shop/prod is unchanged and no version was made" in said
        assert "endpoint 'embed' names tok; endpoint 'rank' names tok" in said
        assert said.count("`flashpoint secret set tok --app shop`") == 1 and "key" not in said.replace("--app", "")
        assert "v-lab" not in said and "v-server" not in said
        assert deploys.deployments.get_env("shop", "prod") is None and plane.calls == []

        store.set("tok", "v-shop-2e8", app="shop")
        accepted = await deploys.deploy("shop", "prod", data, by="ana")
        assert accepted["version"] == 1  # the refusal took no number, and freed the environment
        await settled(deploys)
        assert sorted(plane.calls) == [("roll_out", "shop.prod.embed", 0), ("roll_out", "shop.prod.rank", 0)]
        assert {spec.app for spec in plane.registered.values()} == {"shop"}

    asyncio.run(scenario())
