"""The deploy manager: an uploaded project becomes a serving version of an app's environment (decision 0097).

A deploy is accepted in two steps. ``deploy`` keeps the upload under its SHA-256 (``artifacts``), unpacks it and
loads it in a separate process (``loader``): a project that does not load is refused with its error and takes no
version number. Then the version is numbered (``Deployments.begin``) and rolled out in the background: each endpoint
through the plane's ``roll_out`` (new workers beside the old, switch when ready), endpoints the new version lacks are
taken down, and the version ends ``serving`` or ``failed``. ``recover`` brings every serving version back when the
server starts; ``rollback`` and ``undeploy`` change what serves the same way.

What serves is kept per environment (``_live``): the endpoints as registered with the plane, whose input checkers
the intake holds under their ids.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from flashpoint.errors import BackendError, BadInputError, ConfigError, ConflictError, Error, NotFoundError
from flashpoint.hosting.artifacts import ArtifactStore
from flashpoint.hosting.deployments import Deployments, EnvInfo, VersionInfo, check_name
from flashpoint.hosting.loader import LoadedEndpoint, LoadedProject, load_isolated
from flashpoint.hosting.shapes import checkers as checkers_of
from flashpoint.scheduler.rollout import Together
from flashpoint.spec import EndpointSpec, WorkerTarget, endpoint_id

log = logging.getLogger("flashpoint.deploy")

#: seconds a rollout may take to be ready (builds included) before it is abandoned
ROLLOUT_TIMEOUT_S = 900.0
#: what ``app get`` and ``404``s say about an app that is not there (Flash's wording)
NOT_DEPLOYED = "app {app!r} is not deployed; deploy it first with 'flashpoint deploy'"


class Plane(Protocol):
    """What the manager needs of the control plane."""

    def register(self, spec: EndpointSpec, target: WorkerTarget, code_file: str | None = None) -> None: ...

    async def roll_out(
        self,
        spec: EndpointSpec,
        target: WorkerTarget,
        code_file: str | None = None,
        *,
        timeout_s: float,
        on_stage: Callable[[str, str], None] | None = None,
        together: Together | None = None,
    ) -> None: ...

    def unregister(self, key: str, *, reason: str) -> int: ...


@dataclass(frozen=True, slots=True)
class Deployed:
    """An endpoint as one version registers it: its spec (with app and environment), target and code file."""

    spec: EndpointSpec
    target: WorkerTarget
    code_file: str | None
    kind: str
    loaded: LoadedEndpoint

    def to_json(self) -> dict[str, str]:
        return {"name": self.spec.name, "id": self.spec.key, "kind": self.kind}


@dataclass(slots=True)
class Progress:
    """Where a rollout is: its stage (``load``, ``build``, ``warm``, ``switch``, ``done``) and what it is doing."""

    stage: str
    detail: str = ""


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def package_name(requirement: str) -> str:
    """A requirement's package name as PEP 503 compares them (``Torch_Audio>=2`` is ``torch-audio``)."""
    match = _NAME.match(requirement.strip())
    return re.sub(r"[-_.]+", "-", match.group(0)).lower() if match else requirement.strip().lower()


def without(project: LoadedProject, packages: Sequence[str]) -> LoadedProject:
    """``project`` with ``packages`` left out of its endpoints' dependencies."""
    if not packages:
        return project
    gone = {package_name(p) for p in packages}
    endpoints = {
        name: dataclasses.replace(
            ep,
            spec=dataclasses.replace(
                ep.spec, dependencies=tuple(d for d in ep.spec.dependencies if package_name(d) not in gone)
            ),
        )
        for name, ep in project.endpoints.items()
    }
    return dataclasses.replace(project, endpoints=endpoints)


class DeployManager:
    """Deploys, rolls back and undeploys apps' environments on one plane (see the module's docstring)."""

    def __init__(
        self,
        plane: Plane,
        deployments: Deployments,
        artifacts: ArtifactStore,
        checkers: dict[str, Callable[[Any], None]],
        *,
        code_root: Path,
        load: Callable[[Path], LoadedProject] = load_isolated,
        rollout_timeout_s: float = ROLLOUT_TIMEOUT_S,
        missing_secrets: Callable[[EndpointSpec], list[str]] | None = None,
    ) -> None:
        """``checkers`` is the intake's table (``api.runpod.Intake.checkers``), kept up to date here; ``code_root``
        holds the pickled code of endpoints that have no import path; ``missing_secrets(spec)`` names the secrets a
        deployed endpoint's env names that its app does not get (``SecretStore.missing``; None: no check before the
        plane's own at ``roll_out``)."""
        self.plane = plane
        self.deployments = deployments
        self.artifacts = artifacts
        self.checkers = checkers
        self.code_root = Path(code_root)
        self._load = load
        self.rollout_timeout_s = rollout_timeout_s
        self._missing_secrets = missing_secrets
        self._live: dict[tuple[str, str], dict[str, Deployed]] = {}
        self._progress: dict[tuple[str, str, int], Progress] = {}
        self._busy: set[tuple[str, str]] = set()
        #: apps served from a file or folder given to ``flashpoint serve APP`` (name: APP): not deployed, not changed
        self.pinned: dict[str, str] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # ----------------------------------------------------------------------------------------------------------------
    # what serves

    def live(self) -> list[tuple[str, str]]:
        """The environments that serve something, as ``(app, env)``."""
        return sorted(self._live)

    def endpoints(self, app: str, env: str) -> list[Deployed]:
        """The endpoints serving ``app``/``env`` now, by name."""
        return sorted(self._live.get((app, env), {}).values(), key=lambda d: d.spec.name)

    def rollout(self, app: str, env: str, number: int) -> dict[str, Any]:
        """A version as ``GET .../versions/{n}`` shows it (``Rollout`` of decision 0097, less the URLs)."""
        version = next((v for v in self.deployments.versions(app, env) if v.number == number), None)
        if version is None:
            raise NotFoundError(f"{app}/{env} has no version {number}; flashpoint env get {env} --app {app} lists them")
        progress = self._progress.get((app, env, number))
        stage = "done" if version.outcome != "pending" else (progress.stage if progress else "load")
        detail = version.detail if version.outcome != "pending" else (progress.detail if progress else "")
        endpoints = [dict(e) for e in version.manifest.get("endpoints", [])]
        return {
            "app": app,
            "env": env,
            "version": number,
            "state": version.outcome,
            "stage": stage,
            "detail": detail,
            "digest": version.digest,
            "endpoints": endpoints,
        }

    # ----------------------------------------------------------------------------------------------------------------
    # deploy

    async def deploy(self, app: str, env: str, data: bytes, *, by: str, exclude: Sequence[str] = ()) -> dict[str, Any]:
        """Accept an upload as the next version of ``app``/``env`` and start rolling it out; returns its ``rollout``.
        ``exclude``: packages left out of every endpoint's dependencies (Flash's ``--exclude``: what the machine's
        Python already provides).

        Raises:
            BadInputError: a bad name, an archive the store refuses (over the limit: code ``payload_too_large``), a
                project that does not load (its error quoted), or one whose endpoints name secrets not set for ``app``
                (code ``missing_secret``, naming each and the command that sets it); no version is numbered.
            ConflictError: a rollout of that environment is still running.
        """
        check_name("app", app)
        check_name("environment", env)
        self._claim(app, env)
        try:
            digest = await asyncio.to_thread(self.artifacts.put, data)
            root = await asyncio.to_thread(self.artifacts.unpack, digest)
            try:
                project = (await asyncio.to_thread(self._load, root)).for_app(app)
            except ConfigError as exc:
                raise BadInputError(
                    f"the project does not load, so {app}/{env} is unchanged and no version was made: {exc}"
                ) from None
            self._refuse_missing_secrets(app, env, project)
            manifest: dict[str, Any] = {
                "endpoints": [{"name": name, "id": endpoint_id(app, env, name), "kind": ep.kind}
                              for name, ep in project.endpoints.items()],
                "skipped": [list(pair) for pair in project.skipped],
                "exclude": sorted({package_name(p) for p in exclude}),
            }  # fmt: skip
            version = self.deployments.begin(app, env, digest=digest, by=by, manifest=manifest)
        except BaseException:
            self._busy.discard((app, env))
            raise
        self._progress[(app, env, version.number)] = Progress("build")
        self._spawn(self._roll_new(version, without(project, manifest["exclude"])))
        return self.rollout(app, env, version.number)

    def _refuse_missing_secrets(self, app: str, env: str, project: LoadedProject) -> None:
        """Refuse a project whose endpoints, deployed to ``app``, name secrets that are not set for it (its own or
        server-wide), naming each secret, its endpoints and the command that sets it. The plane checks again at
        ``roll_out``: a secret deleted meanwhile fails the rollout there."""
        if self._missing_secrets is None:
            return
        needs: dict[str, list[str]] = {}
        for name, loaded in project.endpoints.items():
            missing = self._missing_secrets(dataclasses.replace(loaded.spec, app=app, app_env=env))
            if missing:
                needs[name] = missing
        if not needs:
            return
        secrets = list(dict.fromkeys(secret for names in needs.values() for secret in names))
        endpoints = "; ".join(f"endpoint {name!r} names {', '.join(names)}" for name, names in needs.items())
        commands = ", ".join(f"`flashpoint secret set {secret} --app {app}`" for secret in secrets)
        raise BadInputError(
            f"secrets are not set for app {app!r}, so {app}/{env} is unchanged and no version was made: {endpoints}. "
            f"Set each with {commands} (the value is read from stdin or a prompt; a server-wide secret, set without "
            "--app, serves every app), then deploy again",
            code="missing_secret",
        )

    def refuse_pinned(self, app: str) -> None:
        """An app ``flashpoint serve APP`` serves from its files is changed by editing them and restarting it."""
        if app in self.pinned:
            raise ConflictError(
                f"app {app!r} is served from {self.pinned[app]} by this server (flashpoint serve APP): change its "
                "files and restart the server, or deploy under another name with --app"
            )

    def create_env(self, app: str, env: str, *, by: str) -> EnvInfo:
        """An empty environment (and its app), for deploys to come."""
        self.refuse_pinned(app)
        return self.deployments.create_env(app, env, by=by)

    def _claim(self, app: str, env: str) -> None:
        """One change of an environment at a time: a deploy, rollback or undeploy."""
        self.refuse_pinned(app)
        if (app, env) in self._busy:
            raise ConflictError(f"{app}/{env} is changing (a rollout is running); wait for it to finish, then retry")
        self._busy.add((app, env))

    def _spawn(self, work: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _roll_new(self, version: VersionInfo, project: LoadedProject) -> None:
        app, env, number = version.app, version.env, version.number
        progress = self._progress[(app, env, number)]
        try:
            await self._apply(app, env, project, progress=progress)
        except Exception as exc:  # the version failed: the old one serves on, and the record says why
            detail = str(exc) if isinstance(exc, Error) else f"{type(exc).__name__}: {exc}"
            if not isinstance(exc, Error):
                log.exception("rolling out version %d of %s/%s failed unexpectedly", number, app, env)
            log.warning("version %d of %s/%s failed: %s", number, app, env, detail)
            self.deployments.finish(app, env, number, "failed", detail)
        else:
            self.deployments.finish(app, env, number, "serving")
            log.info("version %d of %s/%s serves %s", number, app, env, ", ".join(project.endpoints) or "nothing")
        finally:
            self._busy.discard((app, env))
            self._progress.pop((app, env, number), None)

    def _deployed(self, app: str, env: str, loaded: LoadedEndpoint, root: Path, digest: str) -> Deployed:
        """The endpoint as this app's environment registers it: its id, its code run from the unpacked project."""
        spec = dataclasses.replace(loaded.spec, app=app, app_env=env)
        target = loaded.target
        if target.cwd is None:
            target = dataclasses.replace(target, cwd=str(root))
        code_file = None
        if target.pickled is not None:
            folder = self.code_root / digest
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = folder / f"{spec.name}.pkl"
            if not path.is_file():
                path.write_bytes(target.pickled)
            code_file = str(path)
        return Deployed(spec, target, code_file, loaded.kind, loaded)

    def _wanted(self, app: str, env: str, project: LoadedProject, removed: frozenset[str]) -> dict[str, Deployed]:
        digest = project.root.name
        return {
            name: self._deployed(app, env, loaded, project.root, digest)
            for name, loaded in project.endpoints.items()
            if name not in removed
        }

    async def _apply(
        self,
        app: str,
        env: str,
        project: LoadedProject,
        *,
        progress: Progress | None = None,
        removed: frozenset[str] = frozenset(),
    ) -> None:
        """Make ``project`` serve ``app``/``env``: its endpoints rolled out as one group (``rollout.Together``: all
        switch at once, when all are ready), then those it lacks taken down. When one endpoint's rollout fails, the
        others are abandoned before any switched, and the error is raised: the environment serves as it did."""
        old = dict(self._live.get((app, env), {}))
        new = self._wanted(app, env, project, removed)

        def stage(name: str) -> Callable[[str, str], None]:
            def report(what: str, detail: str) -> None:
                if progress is not None:
                    progress.stage = what
                    progress.detail = f"{name}: {detail}" if detail else name

            return report

        # one group: every endpoint's new workers warm, and all switch at once when all are ready (none before)
        together = Together(d.spec.key for d in new.values())
        tasks = {
            name: asyncio.ensure_future(
                self.plane.roll_out(d.spec, d.target, d.code_file, timeout_s=self.rollout_timeout_s,
                                    on_stage=stage(name), together=together)
            )
            for name, d in new.items()
        }  # fmt: skip
        try:
            if tasks:
                await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_EXCEPTION)
        finally:  # one failed (or this rollout was cancelled): the others are abandoned before any switched
            pending = [task for task in tasks.values() if not task.done()]
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        failed = [(name, t.exception()) for name, t in tasks.items() if not t.cancelled() and t.exception()]
        if failed:
            name, error = failed[0]
            if not isinstance(error, Error):
                raise error  # type: ignore[misc]
            raise BackendError(f"endpoint {name!r}: {error}") from error
        if progress is not None:
            progress.stage, progress.detail = "switch", ""
        for name in old.keys() - new.keys():
            self.plane.unregister(old[name].spec.key, reason=f"{name} is not in the version of {app}/{env} serving now")
        self._serve(app, env, old, new)

    def _serve(self, app: str, env: str, old: Mapping[str, Deployed], new: dict[str, Deployed]) -> None:
        """``new`` serves ``app``/``env``: the intake checks its endpoints' inputs (and no longer ``old``'s)."""
        for deployed in old.values():
            self._drop_checkers(deployed.spec.key)
        for deployed in new.values():
            self.checkers.update(checkers_of(deployed.spec.key, deployed.loaded.shapes, deployed.kind))
        if new:
            self._live[(app, env)] = new
        else:
            self._live.pop((app, env), None)

    def _drop_checkers(self, key: str) -> None:
        for name in [k for k in self.checkers if k == key or k.startswith(f"{key}/")]:
            del self.checkers[name]

    # ----------------------------------------------------------------------------------------------------------------
    # rollback, undeploy, delete

    async def rollback(self, app: str, env: str, *, to: int | None, by: str) -> dict[str, Any]:
        """Make an older version serve again (``to``, else the one before): recorded first, then rolled out; when it
        cannot be rolled out, the version that served serves again and the error is raised.

        Raises:
            NotFoundError, BadInputError, ConflictError: as ``Deployments.rollback``.
        """
        self._claim(app, env)
        try:
            before = self.deployments.serving(app, env)
            version = self.deployments.rollback(app, env, to=to, by=by)
            try:
                project = await self._project(version)
                await self._apply(app, env, project)
            except Exception:
                if before is not None:
                    self.deployments.rollback(app, env, to=before.number, by=by)
                raise
        finally:
            self._busy.discard((app, env))
        return self.rollout(app, env, version.number)

    async def undeploy(self, app: str, env: str, *, endpoint: str | None, by: str) -> EnvInfo:
        """Take down one endpoint of ``app``/``env``, or all of them (``endpoint`` None): their queued jobs fail,
        running ones finish.

        Raises:
            NotFoundError: no such environment, or no such endpoint serving there.
            ConflictError: nothing serves there, or a rollout is running.
        """
        live = self._live.get((app, env), {})
        if endpoint is not None and endpoint not in live and self.deployments.get_env(app, env) is not None:
            names = ", ".join(sorted(live)) or "none"
            raise NotFoundError(f"{app}/{env} serves no endpoint {endpoint!r}; it serves: {names}")
        self._claim(app, env)
        try:
            info = self.deployments.undeploy(app, env, endpoint=endpoint, by=by)
            gone = {endpoint: live[endpoint]} if endpoint is not None else dict(live)
            for name, deployed in gone.items():
                self.plane.unregister(deployed.spec.key, reason=f"{name} was undeployed from {app}/{env} by {by}")
            self._serve(app, env, gone, {n: d for n, d in live.items() if n not in gone})
        finally:
            self._busy.discard((app, env))
        return info

    async def delete_env(self, app: str, env: str, *, by: str) -> None:
        """Undeploy ``app``/``env`` (when something serves) and forget it and its history."""
        self.refuse_pinned(app)
        info = self.deployments.get_env(app, env)
        if info is None:
            raise NotFoundError(f"{app} has no environment {env!r}; flashpoint env list --app {app} lists them")
        if info.serving is not None:
            await self.undeploy(app, env, endpoint=None, by=by)
        if (app, env) in self._busy:
            raise ConflictError(f"{app}/{env} is changing (a rollout is running); wait for it to finish, then retry")
        self.deployments.delete_env(app, env)

    async def delete_app(self, app: str, *, by: str) -> None:
        """Delete every environment of ``app``, then the app."""
        self.refuse_pinned(app)
        if self.deployments.get_app(app) is None:
            raise NotFoundError(NOT_DEPLOYED.format(app=app))
        for env in self.deployments.list_envs(app):
            await self.delete_env(app, env.name, by=by)
        self.deployments.delete_app(app)

    # ----------------------------------------------------------------------------------------------------------------
    # restart

    async def _project(self, version: VersionInfo) -> LoadedProject:
        root = await asyncio.to_thread(self.artifacts.unpack, version.digest)
        project = (await asyncio.to_thread(self._load, root)).for_app(version.app)
        return without(project, version.manifest.get("exclude", ()))

    async def recover(self) -> list[str]:
        """After a restart: interrupted rollouts are marked failed, and every serving version is registered again
        (before the plane requeues its jobs). Returns a line per environment that could not come back."""
        problems: list[str] = []
        for version in self.deployments.recover():
            env = self.deployments.get_env(version.app, version.env)
            removed = env.removed if env is not None else frozenset()
            try:
                project = await self._project(version)
                wanted = self._wanted(version.app, version.env, project, frozenset(removed))
                for deployed in wanted.values():
                    self.plane.register(deployed.spec, deployed.target, deployed.code_file)
            except Error as exc:
                problems.append(f"{version.app}/{version.env} version {version.number}: {exc}")
                log.error("version %d of %s/%s could not come back: %s", version.number, version.app, version.env, exc)
                continue
            self._serve(version.app, version.env, {}, wanted)
        return problems

    async def close(self) -> None:
        """Stop the rollouts still running (their versions are marked failed at the next start)."""
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
