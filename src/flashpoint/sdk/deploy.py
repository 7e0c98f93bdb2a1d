"""Deploying a project folder to a flashpoint server, and its apps and environments, over ``/v1/apps`` (decisions
0097 and 0101): ``deploy()``, the ``DeployClient`` the CLI's ``deploy``, ``app``, ``env``, ``undeploy`` and
``rollback`` commands share, and the shapes they return.

A deploy packs the folder (``hosting.artifacts.pack``, reached through a lazy seam), uploads it as the next version of
``app``/``env``, then follows the version's rollout (``GET .../versions/{n}``, every ``POLL_S``) until it serves or
fails, reporting each new stage. Errors are the SDK's: the server's ``{"code", "message"}`` become the class its code
names (``sdk.client.error_for``); a version that fails is ``DeployError``, one still rolling out when the time is up
``DeployTimeoutError``.

SDK tier: httpx and ``sdk.client`` are imported when a request is made, so ``import flashpoint`` loads no HTTP stack.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from flashpoint.clock import Clock, SystemClock
from flashpoint.errors import BadInputError, ConfigError, Error, NotFoundError

__all__ = [
    "DEFAULT_ENV",
    "DEFAULT_TIMEOUT_S",
    "POLL_S",
    "STAGES",
    "DeployClient",
    "DeployError",
    "DeployResult",
    "DeployTimeoutError",
    "DeployedEndpoint",
    "Progress",
    "Rollout",
    "default_app",
    "deploy",
    "error_of",
    "follow",
    "server_of",
]

#: the environment a deploy goes to unless told (Flash's default)
DEFAULT_ENV = "production"
#: how long ``deploy`` follows a rollout before giving up on waiting (the rollout itself goes on)
DEFAULT_TIMEOUT_S = 900.0
#: seconds between two looks at a rollout
POLL_S = 0.25
#: a rollout's stages, in order (decision 0097's ``Rollout.stage``)
STAGES = ("upload", "load", "build", "warm", "switch", "done")
#: seconds one request may take, except the upload (which waits for the server to store and load the project)
REQUEST_TIMEOUT_S = 30.0
#: what an app's or an environment's name may be (the server's rule, ``hosting.deployments.APP_NAME``): checked here
#: only to say, before packing, that a folder's name cannot be the default app
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")


class DeployError(Error):
    """A deployed version failed: it did not load, build or become ready (``rollout.detail`` says why); what served
    before keeps serving."""

    code = "deploy_failed"

    def __init__(self, message: str, rollout: Rollout | None = None) -> None:
        super().__init__(message)
        #: the version's rollout as last seen
        self.rollout = rollout


class DeployTimeoutError(DeployError):
    """A rollout was still going when ``deploy``'s time was up. It goes on on the server: ``flashpoint env get``
    shows how it ends."""

    code = "deploy_timed_out"


@dataclass(frozen=True, slots=True)
class DeployedEndpoint:
    """An endpoint of a deployed version: its name in the code, its id on the server (``app.env.name``), its kind
    (``"queue"``: Runpod's ``/v2/{id}`` routes, ``"route"``: HTTP routes under ``/{id}``) and its URL."""

    name: str
    id: str
    kind: str
    url: str

    @classmethod
    def from_json(cls, data: Any) -> DeployedEndpoint:
        return cls(str(data["name"]), str(data["id"]), str(data["kind"]), str(data["url"]))

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "id": self.id, "kind": self.kind, "url": self.url}


@dataclass(frozen=True, slots=True)
class DeployResult:
    """What ``deploy`` made: the app, the environment, the version now serving and its endpoints."""

    app: str
    env: str
    version: int
    endpoints: tuple[DeployedEndpoint, ...]

    def to_json(self) -> dict[str, Any]:
        """``{"app", "env", "version", "endpoints": [{"name", "id", "kind", "url"}]}``: what ``flashpoint deploy
        --json`` prints."""
        return {
            "app": self.app,
            "env": self.env,
            "version": self.version,
            "endpoints": [e.to_json() for e in self.endpoints],
        }


@dataclass(frozen=True, slots=True)
class Rollout:
    """Where a version's rollout is (decision 0097's ``Rollout``): ``state`` is ``pending`` until it ``serving`` (or
    was ``replaced`` since) or ``failed``; ``stage`` one of ``STAGES``."""

    app: str
    env: str
    version: int
    state: str
    stage: str
    detail: str
    digest: str
    endpoints: tuple[DeployedEndpoint, ...]

    @classmethod
    def from_json(cls, data: Any) -> Rollout:
        try:
            return cls(
                app=str(data["app"]),
                env=str(data["env"]),
                version=int(data["version"]),
                state=str(data["state"]),
                stage=str(data.get("stage") or ""),
                detail=str(data.get("detail") or ""),
                digest=str(data.get("digest") or ""),
                endpoints=tuple(DeployedEndpoint.from_json(e) for e in data.get("endpoints") or ()),
            )
        except (KeyError, TypeError, ValueError, AttributeError):
            raise Error(f"the server answered with something that is not a rollout: {str(data)[:200]!r}") from None

    @property
    def finished(self) -> bool:
        """Whether the rollout is over (``state`` is no longer ``pending``)."""
        return self.state != "pending"

    def result(self) -> DeployResult:
        return DeployResult(self.app, self.env, self.version, self.endpoints)


@dataclass(frozen=True, slots=True)
class Progress:
    """One step of a deploy, for ``on_stage``: ``stage`` is ``"upload"`` (before the upload: ``detail`` gives the
    size and the file count) or the rollout's stage; ``version`` is None until the server numbered it."""

    stage: str
    detail: str
    version: int | None = None


# ----------------------------------------------------------------------------------------------------------------
# errors


def error_of(status: int, text: str, *, url: str, has_key: bool, what: str) -> Error:
    """The error to raise for an answer ``status`` with body ``text`` to ``what`` (``"POST /v1/apps/..."``): the class
    the body's ``code`` names, with the server's message (``sdk.client.error_for``); a 401 says which key to set."""
    from flashpoint.sdk.client import error_for  # loads httpx: only once a request was made

    try:
        data = json.loads(text) if text else None
    except ValueError:
        data = None
    code = data.get("code") if isinstance(data, dict) else None
    message = data.get("message") if isinstance(data, dict) else None
    if status == 401:
        said = "refused the API key" if has_key else "needs an API key"
        return ConfigError(
            f"the flashpoint server at {url} {said}: pass --key (or set FLASHPOINT_API_KEY) to a key it accepts"
            + (f" ({message})" if isinstance(message, str) and message else "")
        )
    if isinstance(code, str) and isinstance(message, str) and message:
        return error_for(code, message)
    if status == 404:  # no error body of ours: the route itself is missing
        return NotFoundError(
            f"the server at {url} has no {what.partition(' ')[2]}: is it a `flashpoint serve` that takes deploys, "
            "of this version?"
        )
    if status == 413:
        return BadInputError(f"the flashpoint server at {url} refused the upload as too large (HTTP 413)",
                             code="payload_too_large")  # fmt: skip
    return Error(f"the flashpoint server at {url} answered {what} with HTTP {status}: {text[:200]!r}")


# ----------------------------------------------------------------------------------------------------------------
# the client


def _seg(text: str) -> str:
    return quote(text, safe="")


class DeployClient:
    """``/v1/apps`` of the flashpoint server at ``url``, with API key ``key`` (sent as ``Authorization: Bearer``).

    Every method returns the answer's JSON (or the value it stands for) and raises the error the server's answer names
    (``error_of``). Use it as a context manager, or ``close()`` it.
    """

    def __init__(self, url: str, key: str | None = None, *, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        import httpx

        base = url.strip().rstrip("/")
        if not base.startswith(("http://", "https://")):
            raise ConfigError(f"the server's URL must be an http(s) URL such as http://10.0.0.5:8000; got {url!r}")
        keys = [part.strip() for part in (key or "").split(",") if part.strip()]
        self.url = base
        self.key = keys[0] if keys else None
        self.timeout_s = timeout_s
        headers = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        self._http = httpx.Client(base_url=base, headers=headers, timeout=httpx.Timeout(timeout_s), trust_env=False)

    def __enter__(self) -> DeployClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        params: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> Any:
        """One request to ``path`` (under the server's URL): its JSON answer, or the error it names."""
        import httpx

        what = f"{method} {path}"
        timeout = httpx.Timeout(timeout_s or self.timeout_s, connect=min(self.timeout_s, timeout_s or self.timeout_s))
        try:
            response = self._http.request(
                method, path, json=body, content=content, headers=headers, params=params, timeout=timeout
            )
        except httpx.TimeoutException:
            raise Error(f"the flashpoint server at {self.url} did not answer {what} in time") from None
        except httpx.HTTPError as exc:
            raise Error(
                f"cannot reach the flashpoint server at {self.url} ({exc or type(exc).__name__}); check the URL "
                "(--url or FLASHPOINT_URL)"
            ) from None
        if not response.is_success:
            raise error_of(response.status_code, response.text, url=self.url, has_key=self.key is not None, what=what)
        try:
            return response.json()
        except ValueError:
            raise Error(f"the flashpoint server at {self.url} answered {what} with a body that is not JSON") from None

    # apps ---------------------------------------------------------------------------------------------------------

    def apps(self) -> list[dict[str, Any]]:
        """``GET /v1/apps``: the apps the key may see, each with its environments' names."""
        apps: list[dict[str, Any]] = self.request("GET", "/v1/apps")["apps"]
        return apps

    def app(self, app: str) -> dict[str, Any]:
        """``GET /v1/apps/{app}``: ``{"app": AppInfo, "envs": [EnvInfo]}``."""
        found: dict[str, Any] = self.request("GET", f"/v1/apps/{_seg(app)}")
        return found

    def delete_app(self, app: str) -> dict[str, Any]:
        """``DELETE /v1/apps/{app}``: undeploy every environment and forget the app."""
        deleted: dict[str, Any] = self.request("DELETE", f"/v1/apps/{_seg(app)}")
        return deleted

    # environments -------------------------------------------------------------------------------------------------

    def _env_path(self, app: str, env: str) -> str:
        return f"/v1/apps/{_seg(app)}/envs/{_seg(env)}"

    def envs(self, app: str) -> list[dict[str, Any]]:
        """``GET /v1/apps/{app}/envs``: the app's environments (``EnvInfo``)."""
        envs: list[dict[str, Any]] = self.request("GET", f"/v1/apps/{_seg(app)}/envs")["envs"]
        return envs

    def create_env(self, app: str, env: str) -> dict[str, Any]:
        """``POST /v1/apps/{app}/envs/{env}``: an empty environment (and the app, if new)."""
        made: dict[str, Any] = self.request("POST", self._env_path(app, env))
        return made

    def env(self, app: str, env: str) -> dict[str, Any]:
        """``GET /v1/apps/{app}/envs/{env}``: ``{"env", "versions", "history", "endpoints"}``."""
        found: dict[str, Any] = self.request("GET", self._env_path(app, env))
        return found

    def delete_env(self, app: str, env: str) -> dict[str, Any]:
        """``DELETE /v1/apps/{app}/envs/{env}``: undeploy the environment and forget it and its history."""
        deleted: dict[str, Any] = self.request("DELETE", self._env_path(app, env))
        return deleted

    # versions -----------------------------------------------------------------------------------------------------

    def upload(
        self, app: str, env: str, data: bytes, *, exclude: Sequence[str] = (), timeout_s: float | None = None
    ) -> Rollout:
        """``POST .../versions`` with the packed project: its rollout, once the server stored and loaded it."""
        params = {"exclude": ",".join(exclude)} if exclude else None
        answer = self.request(
            "POST",
            self._env_path(app, env) + "/versions",
            content=data,
            headers={"Content-Type": "application/gzip"},
            params=params,
            timeout_s=timeout_s,
        )
        return Rollout.from_json(answer)

    def version(self, app: str, env: str, number: int) -> Rollout:
        """``GET .../versions/{n}``: where version ``number``'s rollout is."""
        return Rollout.from_json(self.request("GET", f"{self._env_path(app, env)}/versions/{number}"))

    def rollback(self, app: str, env: str, *, to: int | None = None) -> Rollout:
        """``POST .../rollback``: serve version ``to`` again (None: the one before)."""
        return Rollout.from_json(self.request("POST", self._env_path(app, env) + "/rollback", body={"to": to}))

    def undeploy(self, app: str, env: str, *, endpoint: str | None = None) -> dict[str, Any]:
        """``POST .../undeploy``: take endpoint ``endpoint`` down (None: all of them); the ``EnvInfo`` after."""
        info: dict[str, Any] = self.request("POST", self._env_path(app, env) + "/undeploy", body={"endpoint": endpoint})
        return info


# ----------------------------------------------------------------------------------------------------------------
# following a rollout


def follow(
    fetch: Callable[[], Rollout],
    first: Rollout,
    *,
    timeout_s: float,
    on_stage: Callable[[Progress], None] | None = None,
    clock: Clock | None = None,
    sleep: Callable[[float], None] = time.sleep,
    poll_s: float = POLL_S,
) -> Rollout:
    """Follow a rollout from ``first`` with ``fetch`` every ``poll_s`` until it is over, telling ``on_stage`` of each
    new stage (or new detail of a stage). Returns the rollout once it serves.

    Raises:
        DeployError: the version failed (its detail says why).
        DeployTimeoutError: it was still pending after ``timeout_s``.
    """
    clock = clock or SystemClock()
    deadline = clock.monotonic() + timeout_s
    seen: tuple[str, str] | None = None
    rollout = first
    while True:
        if (rollout.stage, rollout.detail) != seen and on_stage is not None:
            on_stage(Progress(rollout.stage, rollout.detail, rollout.version))
        seen = (rollout.stage, rollout.detail)
        if rollout.finished:
            break
        left = deadline - clock.monotonic()
        if left <= 0:
            raise DeployTimeoutError(
                f"version {rollout.version} of {rollout.app}/{rollout.env} is still at stage {rollout.stage!r} after "
                f"{timeout_s:g} s; its rollout goes on on the server: `flashpoint env get {rollout.env} --app "
                f"{rollout.app}` shows how it ends",
                rollout,
            )
        sleep(min(poll_s, left))
        rollout = fetch()
    if rollout.state == "failed":
        raise DeployError(
            f"version {rollout.version} of {rollout.app}/{rollout.env} failed"
            + (f" at stage {rollout.stage!r}" if rollout.stage and rollout.stage != "done" else "")
            + f": {rollout.detail or 'no reason given'}; what served before keeps serving",
            rollout,
        )
    return rollout


# ----------------------------------------------------------------------------------------------------------------
# deploy


def default_app(root: Path) -> str:
    """The app a folder deploys as unless told: the folder's name (Flash's default), when it is a valid app name."""
    name = root.resolve().name
    if not _NAME.fullmatch(name):
        raise BadInputError(
            f"the folder's name {name!r} cannot be an app's name (letters, digits, '_' or '-', at most 63, starting "
            "with a letter or digit); name the app with --app NAME (app= in Python)"
        )
    return name


def app_and_env(root: Path, app: str | None, env: str | None) -> tuple[str, str]:
    """The app and environment a deploy of ``root`` goes to (decision 0108): ``app``, else the one Runpod SDK 2.x App
    the folder declares, else the folder's name; ``env``, else that App's own, else ``production``.

    Raises:
        BadInputError: ``app`` is None and the folder declares several Apps (name one).
    """
    from flashpoint.hosting.appscan import declared_apps  # noqa: TID251 - the seam (docs/architecture.md)

    apps = declared_apps(root)
    if app is None and len(apps) > 1:
        listed = ", ".join(f"{a.name!r} ({a.file})" for a in apps)
        raise BadInputError(f"{str(root)!r} declares several apps ({listed}): deploy each with app= (--app)")
    chosen = next((a for a in apps if a.name == app), None) if app is not None else (apps[0] if apps else None)
    if app is None:
        app = chosen.name if chosen is not None else default_app(root)
    return app, env or (chosen.env if chosen is not None else DEFAULT_ENV)


def server_of(url: str | None, key: str | None) -> tuple[str, str | None]:
    """The server a deploy goes to: ``url``, else ``FLASHPOINT_URL``; its key: ``key``, else ``FLASHPOINT_API_KEY``."""
    url = url or os.environ.get("FLASHPOINT_URL") or None
    if not url:
        raise ConfigError(
            "name the flashpoint server to deploy to: url='http://HOST:8000' (or set FLASHPOINT_URL), and its key "
            "(key= or FLASHPOINT_API_KEY); `flashpoint deploy` also finds the one `flashpoint serve` of this machine"
        )
    return url, key if key is not None else (os.environ.get("FLASHPOINT_API_KEY") or None)


def _size(size: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def deploy(
    path: str | os.PathLike[str] = ".",
    *,
    app: str | None = None,
    env: str | None = None,
    url: str | None = None,
    key: str | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    exclude: Sequence[str] = (),
    on_stage: Callable[[Progress], None] | None = None,
) -> DeployResult:
    """Deploy the project folder ``path`` to a flashpoint server as the next version of ``app``/``env``, and wait
    until it serves.

    The folder is packed as ``flashpoint deploy`` packs it (``.gitignore``/``.flashignore``, never ``.env``), uploaded,
    loaded by the server, then rolled out: its environments built, its workers started beside the old ones, traffic
    switched when they are ready.

    Args:
        path: the project folder.
        app: the app's name; default: the one Runpod SDK 2.x ``App`` the folder declares (``App("name")``), else
            the folder's name (as Flash).
        env: the environment; default: that App's ``env`` (``"default"`` when it names none), else
            ``"production"``.
        url: the server, e.g. ``http://10.0.0.5:8000``; default ``FLASHPOINT_URL``.
        key: an API key with the deploy scope for the app; default ``FLASHPOINT_API_KEY``.
        timeout: seconds to wait for the rollout (it goes on on the server after that).
        exclude: package names to leave out of the dependency install (Flash's ``--exclude``); the server drops
            them from every endpoint's dependencies.
        on_stage: called with each step (``Progress``) as the deploy goes.

    Returns:
        The version serving and its endpoints (``DeployResult.to_json()`` is what ``flashpoint deploy --json``
        prints).

    Raises:
        BadInputError: the folder cannot be packed (over the size limit, not a folder) or the server refused it (a
            project that does not load: its error quoted).
        ConfigError: no server named, or the key missing or refused.
        ForbiddenError: the key's scope does not allow deploying this app.
        ConflictError: another rollout of the environment is running.
        DeployError: the version failed to roll out; what served before keeps serving.
        DeployTimeoutError: still rolling out after ``timeout`` seconds.

    Example:
        >>> result = flashpoint.deploy("shop", url="http://10.0.0.5:8000", key=KEY)  # doctest: +SKIP
        >>> result.endpoints[0].url  # doctest: +SKIP
        'http://10.0.0.5:8000/v2/shop.production.embed'
    """
    # the seam (docs/architecture.md): the hosts' own packer, so the digest is the one the server computes
    from flashpoint.hosting.artifacts import pack  # noqa: TID251

    root = Path(path).expanduser()
    if not root.is_dir():
        raise BadInputError(f"{str(root)!r} is not a folder: deploy a project folder")
    app, env = app_and_env(root, app, env)
    server, api_key = server_of(url, key)
    if not timeout > 0:
        raise ConfigError(f"timeout must be a positive number of seconds, got {timeout!r}")
    clock = SystemClock()
    deadline = clock.monotonic() + timeout
    packed = pack(root)
    if on_stage is not None:
        files = f"{packed.files} file{'s' if packed.files != 1 else ''}"
        on_stage(Progress("upload", f"{_size(packed.size)} in {files} ({_size(len(packed.data))} packed)"))
    with DeployClient(server, api_key) as client:
        first = client.upload(app, env, packed.data, exclude=exclude, timeout_s=max(1.0, deadline - clock.monotonic()))
        done = follow(
            lambda: client.version(app, env, first.version),
            first,
            timeout_s=max(0.0, deadline - clock.monotonic()),
            on_stage=on_stage,
            clock=clock,
        )
    return done.result()
