"""Every route against every kind of key (decisions 0094, 0100), over real HTTP on 127.0.0.1: the server's ``Dispatch``
(Runpod's routes, Flash's sentinel, the route proxy, ``/v1``, ``/metrics``) over a door plane, with a real
``KeyStore`` behind ``app.state.key_lookup``.

The table ``ROUTES`` names each route's operation and resource as the decisions say (not as the code does), and the
expected answer of each key is the access rule's for that operation: 2xx (the guard let it through), 403 with a JSON
error naming the scope needed, or 404 as if the resource were absent; no key and a wrong key are 401 everywhere. A
route of another module is one more ``Row`` in ``ROUTES``, or a test of its own that asks ``check_rows(matrix, key,
rows)`` with this module's ``matrix`` fixture.
``/runsync`` is left out: it is ``/run``'s handler that holds; Flash's runsync stands for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
import uvicorn

from flashpoint import Endpoint
from flashpoint.access import (
    ADMIN_SERVER,
    ALLOW,
    Forbidden,
    Operation,
    Principal,
    decide,
    decide_endpoint,
    endpoint_visible,
    job_operation,
    visible,
)
from flashpoint.api.app import Dispatch, create_app
from flashpoint.api.approutes import router as app_router
from flashpoint.api.guard import SCOPED_PREFIX, app_env_of, principal_lookup
from flashpoint.api.keyroutes import router as key_router
from flashpoint.api.quotaroutes import router as quota_router
from flashpoint.api.runpod import Intake
from flashpoint.api.secretroutes import router as secret_router
from flashpoint.api.transport import hardened_protocol
from flashpoint.hosting.artifacts import ArtifactStore
from flashpoint.hosting.deploying import DeployManager
from flashpoint.hosting.deployments import Deployments
from flashpoint.hosting.keystore import TOKEN_PREFIX, KeyStore
from flashpoint.hosting.quotastore import QuotaStore
from flashpoint.hosting.secretstore import SecretStore
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.spec import RouteSpec
from tests.scheduler.door import ROUTE_TARGET, TARGET, open_door

pytestmark = pytest.mark.timeout(60)

SERVER_KEY = "matrix-server-key"
#: the endpoint every endpoint row is about, and a route endpoint beside it; ``plain`` belongs to no app
EP = "shop.prod.embed"
WEB = "shop.prod.web"
PLAIN = "plain"
#: every endpoint the server has, by id
ENDPOINTS = (EP, "shop.staging.embed", "other.prod.embed", WEB, PLAIN)

#: the keys: a scoped one is (scope, app, env); ``server`` is the server's own, ``none`` and ``bad`` are no key
KEYS: dict[str, tuple[str, str | None, str | None] | None] = {
    "server": None,
    "admin": ("admin", None, None),
    "deploy-all": ("deploy", None, None),
    "deploy-app": ("deploy", "shop", None),
    "deploy-env": ("deploy", "shop", "prod"),
    "deploy-other-env": ("deploy", "shop", "staging"),
    "deploy-other-app": ("deploy", "other", None),
    "invoke-all": ("invoke", None, None),
    "invoke-app": ("invoke", "shop", None),
    "invoke-env": ("invoke", "shop", "prod"),
    "invoke-other-env": ("invoke", "shop", "staging"),
    "invoke-other-app": ("invoke", "other", None),
    "none": None,
    "bad": None,
}
NO_KEY = ("none", "bad")


@dataclass(frozen=True)
class Row:
    """One route: what it is asked, the operation it performs, and on what.

    ``path`` may hold ``{job}`` (a job of ``EP``); ``job`` says whose: ``"own"`` (submitted by the key under test: the
    row runs only for keys that may submit) or ``"other"`` (the server's); the operation of a job row is then
    ``job_operation``'s. ``app``/``env`` are the resource's (``app=None``, ``env=None``: the server's own);
    ``endpoint=True`` decides it as an endpoint (``decide_endpoint``: ``app=None`` is an endpoint of no app).
    ``ok`` lists the statuses that mean the guard let it through."""

    name: str
    method: str
    path: str
    op: Operation
    app: str | None = None
    env: str | None = None
    endpoint: bool = False
    job: str | None = None
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    ok: tuple[int, ...] = (200,)


def _ep_rows(ep: str) -> list[Row]:
    app, env = app_env_of(ep)
    on = {"app": app, "env": env, "endpoint": True}
    return [
        Row(f"run {ep}", "POST", f"/v2/{ep}/run", Operation.INVOKE, json={"input": {}}, **on),
        Row(f"health {ep}", "GET", f"/v2/{ep}/health", Operation.INVOKE, **on),
        Row(f"purge-queue {ep}", "POST", f"/v2/{ep}/purge-queue", Operation.READ, **on),
        Row(f"GET /v1/endpoints/{ep}", "GET", f"/v1/endpoints/{ep}", Operation.INVOKE, **on),
        Row(f"explain {ep}", "GET", f"/v1/endpoints/{ep}/explain", Operation.READ, **on),
    ]


def _job_rows(whose: str) -> list[Row]:
    app, env = app_env_of(EP)
    on: dict[str, Any] = {"app": app, "env": env, "endpoint": True, "job": whose}
    return [
        Row(f"status ({whose} job)", "GET", f"/v2/{EP}/status/{{job}}", Operation.INVOKE, **on),
        Row(f"stream ({whose} job)", "GET", f"/v2/{EP}/stream/{{job}}", Operation.INVOKE, **on),
        Row(f"GET /v1/jobs/id ({whose} job)", "GET", "/v1/jobs/{job}", Operation.INVOKE, **on),
        Row(f"job explain ({whose} job)", "GET", "/v1/jobs/{job}/explain", Operation.INVOKE, **on),
        Row(f"job logs ({whose} job)", "GET", "/v1/jobs/{job}/logs", Operation.INVOKE, **on),
        Row(f"job wait ({whose} job)", "GET", "/v1/jobs/{job}/wait?timeout=0", Operation.INVOKE, **on),
        # a queued job cannot be retried (409): the guard let it through all the same
        Row(f"retry ({whose} job)", "POST", f"/v2/{EP}/retry/{{job}}", Operation.INVOKE, ok=(409,), **on),
        Row(f"cancel ({whose} job)", "POST", f"/v2/{EP}/cancel/{{job}}", Operation.INVOKE, **on),
    ]


#: the table: every route a key reaches (the lead's /v1/apps rows join it with ROUTES.append)
ROUTES: list[Row] = [
    *_ep_rows(EP),
    *_ep_rows(PLAIN),
    *_job_rows("own"),
    *_job_rows("other"),
    Row(
        "flash sentinel",
        "POST",
        "/v2/flash/runsync?wait=1000",
        Operation.INVOKE,
        "shop",
        "prod",
        endpoint=True,
        json={"input": {}},
        headers={"X-Flash-App": "shop", "X-Flash-Environment": "prod", "X-Flash-Endpoint": "embed"},
    ),
    # the route endpoint's GPU is nowhere in the fleet: a request the guard lets through is 503 at once
    Row("route proxy", "GET", f"/{WEB}/echo", Operation.INVOKE, "shop", "prod", endpoint=True, ok=(503,)),
    Row("fleet", "GET", "/v1/fleet", Operation.ADMIN),
    Row("metrics", "GET", "/metrics", Operation.ADMIN),
    Row("keys", "GET", "/v1/keys", Operation.ADMIN),
    Row("server-wide secrets", "GET", "/v1/secrets", Operation.ADMIN),
    Row("an app's secrets", "GET", "/v1/secrets?app=shop", Operation.DEPLOY, "shop"),
    Row("set an app's secret", "PUT", "/v1/secrets/TOKEN?app=shop", Operation.DEPLOY, "shop", json={"value": "x"}),
    # /v1/apps (api/approutes.py): the environments shop/prod, shop/staging and other/prod exist, nothing serves
    Row("an app", "GET", "/v1/apps/shop", Operation.READ, "shop"),
    Row("an app's environments", "GET", "/v1/apps/shop/envs", Operation.READ, "shop"),
    Row("an environment", "GET", "/v1/apps/shop/envs/prod", Operation.READ, "shop", "prod"),
    Row("create an environment", "POST", "/v1/apps/shop/envs/prod", Operation.DEPLOY, "shop", "prod", ok=(409,)),
    # the guard comes before the body is read: a key it lets through hears that the body is no .tar.gz
    Row(
        "upload a version",
        "POST",
        "/v1/apps/shop/envs/prod/versions",
        Operation.DEPLOY,
        "shop",
        "prod",
        ok=(400,),
        json={},
    ),  # fmt: skip
    Row("a version", "GET", "/v1/apps/shop/envs/prod/versions/1", Operation.READ, "shop", "prod", ok=(404,)),
    Row("roll back", "POST", "/v1/apps/shop/envs/prod/rollback", Operation.DEPLOY, "shop", "prod", ok=(404,), json={}),
    Row("undeploy", "POST", "/v1/apps/shop/envs/prod/undeploy", Operation.DEPLOY, "shop", "prod", ok=(409,), json={}),
    Row("delete an app", "DELETE", "/v1/apps/nothing", Operation.DEPLOY, "nothing", ok=(404,)),
    # /v1/quotas (api/quotaroutes.py, decision 0113): the server's, for admin keys only, reading them too
    Row("quotas", "GET", "/v1/quotas", Operation.ADMIN),
    Row("set a quota", "PUT", "/v1/quotas", Operation.ADMIN, json={"app": "shop", "maxGpus": 4}),
    Row("delete a quota", "DELETE", "/v1/quotas?app=nothing", Operation.ADMIN, ok=(404,)),
]


@dataclass
class Matrix:
    """A served app and a client per key."""

    url: str
    plane: ControlPlane
    keys: KeyStore
    tokens: dict[str, str]
    principals: dict[str, Principal]

    def client(self, key: str) -> httpx.AsyncClient:
        headers = {} if key == "none" else {"Authorization": f"Bearer {self.tokens[key]}"}
        return httpx.AsyncClient(base_url=self.url, headers=headers, timeout=10)


def expected(row: Row, who: Principal, submitted_by: str | None = None) -> Any:
    """What the rule says of ``row`` for ``who``: ALLOW, HIDDEN or a Forbidden."""
    op = job_operation(who, submitted_by) if row.job is not None else row.op
    if row.endpoint:
        return decide_endpoint(who, op, row.app, row.env)
    return decide(who, op, row.app, row.env)


def _spec(name: str, app: str | None, env: str | None, **options: Any) -> Any:
    spec = Endpoint(name=name, **options).spec
    return dataclasses.replace(spec, app=app, app_env=env) if app else spec


@pytest_asyncio.fixture
async def matrix(tmp_path: Path) -> AsyncIterator[Matrix]:
    door = await open_door()
    for key in ENDPOINTS:
        parts = key.split(".")
        app, env, name = (parts[0], parts[1], parts[2]) if len(parts) == 3 else (None, None, key)
        if key == WEB:  # a GPU the fleet has none of: never runs
            routes = (RouteSpec("GET", "/echo", "echo"),)
            spec = dataclasses.replace(_spec(name, app, env, gpu="NVIDIA A100 80GB PCIe"), kind="routes", routes=routes)
            door.plane.register(spec, ROUTE_TARGET)
        else:
            door.plane.register(_spec(name, app, env, gpu="NVIDIA H200"), TARGET)
    store = KeyStore(tmp_path / "keys")
    tokens = {"server": SERVER_KEY, "bad": SCOPED_PREFIX + "x" * 43}
    principals = {"server": ADMIN_SERVER}
    for name, scoped in KEYS.items():
        if scoped is not None:
            scope, app, env = scoped
            tokens[name] = store.create(name, scope=scope, app=app, env=env, by="test")[1]
            principals[name] = Principal(name, scope, app, env)
    app = create_app(door.plane, api_keys=(SERVER_KEY,), intake=Intake({}), route_wait_s=0.05)
    app.include_router(key_router, prefix="/v1")
    app.include_router(secret_router, prefix="/v1")
    app.state.keys = store
    app.state.secrets = SecretStore(tmp_path / "secrets")
    app.include_router(quota_router, prefix="/v1")
    app.state.quotas = QuotaStore(tmp_path / "quotas")
    app.state.key_lookup = principal_lookup(store)  # as serve sets it, after create_app
    deployments = Deployments(tmp_path / "deployments.db")
    for app_name, env in (("shop", "prod"), ("shop", "staging"), ("other", "prod")):
        deployments.create_env(app_name, env, by="test")
    app.include_router(app_router, prefix="/v1")
    app.state.deploys = DeployManager(
        door.plane, deployments, ArtifactStore(tmp_path / "artifacts"), {}, code_root=tmp_path / "code"
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    # the server's own protocol: one write per answer (two would wait out the client's delayed ACK, 40 ms each)
    config = uvicorn.Config(Dispatch(app, door.plane), http=hardened_protocol(), log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        assert not task.done(), task
        await asyncio.sleep(0.01)
    await door.settle()
    yield Matrix(f"http://127.0.0.1:{sock.getsockname()[1]}", door.plane, store, tokens, principals)
    server.should_exit = True
    await task
    sock.close()
    await door.plane.close()


async def _submit(client: httpx.AsyncClient, ep: str = EP) -> str:
    answer = await client.post(f"/v2/{ep}/run", json={"input": {}})
    assert answer.status_code == 200, answer.text
    job: str = answer.json()["id"]
    return job


def _problem(row: Row, key: str, rule: Any, answer: httpx.Response) -> str | None:
    """Why ``answer`` is not what the rule says, or None."""
    said = f"{row.name} as {key}: {answer.status_code} {answer.text[:200]}"
    if answer.status_code >= 400 and answer.headers.get("content-type", "").split(";")[0] != "application/json":
        return f"{said} (not JSON)"
    if rule is ALLOW:
        return None if answer.status_code in row.ok else f"{said}, expected {row.ok}"
    if isinstance(rule, Forbidden):
        if answer.status_code != 403 or answer.json().get("code") != "forbidden":
            return f"{said}, expected 403 naming the {rule.needed} scope"
        return None if f"the {rule.needed} scope" in answer.json()["message"] else f"{said}: names no scope"
    if answer.status_code != 404 or answer.json().get("code") != "not_found":
        return f"{said}, expected 404"
    return None


async def check_rows(matrix: Matrix, key: str, rows: Sequence[Row]) -> list[str]:
    """Ask every row as ``key`` and return what differs from the rule (empty: all as expected)."""
    problems: list[str] = []
    async with matrix.client(key) as client, matrix.client("server") as server:
        for row in rows:
            submitted_by: str | None = "server"
            path = row.path
            if row.job is not None:
                if row.job == "own":
                    may_submit = key not in NO_KEY and (
                        decide_endpoint(matrix.principals[key], Operation.INVOKE, *app_env_of(EP)) is ALLOW
                    )
                    if not may_submit:
                        continue  # a key that may not submit has no job of its own
                    job = await _submit(client)
                    submitted_by = key
                else:
                    job = await _submit(server)
                path = path.replace("{job}", job)
            answer = await client.request(row.method, path, json=row.json, headers=row.headers)
            if key in NO_KEY:
                if answer.status_code != 401 or answer.json().get("code") != "unauthorized":
                    problems.append(f"{row.name} as {key}: {answer.status_code}, expected 401")
                continue
            problem = _problem(row, key, expected(row, matrix.principals[key], submitted_by), answer)
            if problem is not None:
                problems.append(problem)
    return problems


@pytest.mark.parametrize("key", list(KEYS))
async def test_every_route_answers_each_key_as_the_rule_says(matrix: Matrix, key: str) -> None:
    problems = await check_rows(matrix, key, ROUTES)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("key", [k for k in KEYS if k not in NO_KEY])
async def test_lists_show_only_what_the_key_may_see(matrix: Matrix, key: str) -> None:
    who = matrix.principals[key]
    async with matrix.client("server") as server:
        theirs = {await _submit(server, ep): ep for ep in (EP, "other.prod.embed", PLAIN)}
    async with matrix.client(key) as client:
        own = await _submit(client) if decide_endpoint(who, Operation.INVOKE, "shop", "prod") is ALLOW else None
        listed = await client.get("/v1/endpoints")
        jobs = await client.get("/v1/jobs")
    assert listed.status_code == 200 and jobs.status_code == 200
    names = {row["name"] for row in listed.json()["endpoints"]}
    assert names == {ep for ep in ENDPOINTS if endpoint_visible(who, *app_env_of(ep))}
    seen = {job["id"] for job in jobs.json()["jobs"]}
    readable = {job for job, ep in theirs.items() if decide_endpoint(who, Operation.READ, *app_env_of(ep)) is ALLOW}
    assert seen == readable | ({own} if own else set())
    assert all(job["submittedBy"] in ("server", key) for job in jobs.json()["jobs"])


async def test_a_hidden_endpoint_answers_as_a_missing_one(matrix: Matrix) -> None:
    # Given a key of app other, which may not see app shop
    async with matrix.client("invoke-other-app") as client:
        hidden = await client.post(f"/v2/{EP}/run", json={"input": {}})
        missing = await client.post("/v2/shop.prod.nothing/run", json={"input": {}})
    # then shop's endpoint is as absent as one that does not exist, and no message names shop's endpoints
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["message"].replace(EP, "X") == missing.json()["message"].replace("shop.prod.nothing", "X")
    assert "shop" not in hidden.json()["message"].replace(EP, "")


async def test_jobs_record_their_submitter(matrix: Matrix) -> None:
    async with matrix.client("invoke-app") as client, matrix.client("server") as server:
        mine = await _submit(client)
        theirs = await _submit(server)
        shown = (await client.get(f"/v1/jobs/{mine}")).json()
        listed = (await server.get("/v1/jobs")).json()["jobs"]
    assert matrix.plane.job(mine).submitted_by == "invoke-app"
    assert matrix.plane.job(theirs).submitted_by == "server"
    assert shown["submittedBy"] == "invoke-app"
    assert {job["id"]: job["submittedBy"] for job in listed} == {mine: "invoke-app", theirs: "server"}
    assert "flashpoint" not in matrix.plane.job(mine).extra  # the worker never sees the key's name


async def test_an_invoke_key_reads_its_own_job_and_not_another_keys(matrix: Matrix) -> None:
    async with matrix.client("invoke-env") as mine, matrix.client("invoke-app") as other:
        job = await _submit(mine)
        own = await mine.get(f"/v2/{EP}/status/{job}")
        foreign = await other.get(f"/v2/{EP}/status/{job}")
    assert own.status_code == 200
    assert foreign.status_code == 403 and "the deploy scope" in foreign.json()["message"]


def test_the_guard_knows_scoped_tokens_by_the_key_stores_prefix() -> None:
    assert SCOPED_PREFIX == TOKEN_PREFIX


@pytest.mark.parametrize("key", [k for k in KEYS if k not in NO_KEY])
async def test_the_app_list_shows_only_what_the_key_may_see(matrix: Matrix, key: str) -> None:
    who = matrix.principals[key]
    async with matrix.client(key) as client:
        listed = await client.get("/v1/apps")
    assert listed.status_code == 200, listed.text
    every = {"other": ["prod"], "shop": ["prod", "staging"]}
    wanted = {app: [e for e in envs if visible(who, app, e)] for app, envs in every.items()}
    assert {a["name"]: a["envs"] for a in listed.json()["apps"]} == {app: envs for app, envs in wanted.items() if envs}
