"""Who a request is and what it may do: its key as an ``access.Principal``, and the access rule applied to a route
(decisions 0094, 0100).

- ``principal_of(request)``: the server's own keys (``app.state.api_keys``, compared in constant time) are
  ``ADMIN_SERVER``; a scoped ``fpk_`` token is what ``app.state.key_lookup`` (``principal_lookup`` over the server's
  key store; None: no scoped keys) says; a worker's caller key is an invoke principal limited to its worker's app and
  environment (a deployed worker's on a server without keys too); a server with no keys at all (loopback only,
  ``api/loopguard.py``) treats every other request as ``ADMIN_SERVER``; anything else is 401. Kept on
  ``request.state.principal``.
- ``authorize(request, op, app, env)``: ``decide``; 403 ``ForbiddenError`` naming the scope needed, or a 404 worded as
  the app or environment being absent.
- ``resolve_endpoint`` and ``authorize_job``: the same for an endpoint by name and a job by id, where what a key may
  not see answers exactly as what does not exist (the missing endpoint's message lists only what the key sees).
- ``submitter``: the name a job records for who submitted it.

Edge module (HTTP layer): Starlette's types; the key store stays in ``hosting``, reached through ``key_lookup``.
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, Protocol

from starlette.exceptions import HTTPException
from starlette.requests import Request

from flashpoint.access import (
    ADMIN_SERVER,
    ALLOW,
    Decision,
    Forbidden,
    Operation,
    Principal,
    decide,
    decide_endpoint,
    endpoint_visible,
    job_operation,
)
from flashpoint.api.workers import key_matches
from flashpoint.errors import ConflictError, ForbiddenError, NotFoundError
from flashpoint.jobs import Job
from flashpoint.scheduler.credentials import bearer, caller_of
from flashpoint.scheduler.loop import ControlPlane
from flashpoint.scheduler.records import EndpointState
from flashpoint.spec import split_endpoint_id

#: what a scoped key's token starts with (``hosting.keystore.TOKEN_PREFIX``; a test checks they agree)
SCOPED_PREFIX = "fpk_"
#: a worker's caller key is a principal of this name and the worker's id (key names cannot hold ':')
CALLER_NAME = "worker:"
#: the 401's message
UNAUTHORIZED = "missing or wrong API key: send Authorization: Bearer KEY"

#: ``app.state.key_lookup``: a scoped key's token to its principal, None for a token no key has
KeyLookup = Callable[[str], Principal | None]


class KeyRecord(Protocol):
    """What ``principal_lookup`` reads of a key store's answer (``hosting.keystore.KeyInfo``)."""

    @property
    def name(self) -> str: ...

    @property
    def scope(self) -> str: ...

    @property
    def app(self) -> str | None: ...

    @property
    def env(self) -> str | None: ...


class LooksUpKeys(Protocol):
    """A key store (``hosting.keystore.KeyStore``): a token to what may be shown of its key, or None."""

    def lookup(self, token: str) -> KeyRecord | None: ...


def principal_lookup(store: LooksUpKeys) -> KeyLookup:
    """The ``app.state.key_lookup`` of a server with scoped keys: ``app.state.key_lookup = principal_lookup(keys)``."""

    def lookup(token: str) -> Principal | None:
        info = store.lookup(token)
        return None if info is None else Principal(info.name, info.scope, info.app, info.env)

    return lookup


def key_state(api_keys: tuple[str, ...], key_lookup: KeyLookup | None = None) -> Any:
    """What the guard reads keys from, for routes served outside a FastAPI app (the embedded plane): an object with
    ``api_keys`` and ``key_lookup``, as a FastAPI app's ``state`` has them."""
    return SimpleNamespace(api_keys=tuple(api_keys), key_lookup=key_lookup)


def keyless(state: Any) -> bool:
    """Whether a server has none of its own keys (loopback only, ``api/loopguard.py``): a request without a key is
    the admin there."""
    return not getattr(state, "api_keys", ())


def identify(plane: ControlPlane | None, state: Any, header: str | None) -> Principal | None:
    """The principal an ``Authorization`` header makes of a request to a server whose keys ``state`` holds
    (``api_keys``, ``key_lookup``), and whose ``plane`` checks workers' caller keys (None: there are none); None:
    refuse it with 401."""
    keys: tuple[str, ...] = getattr(state, "api_keys", ())
    if keys and key_matches(header, keys):
        return ADMIN_SERVER
    token = bearer(header)
    lookup: KeyLookup | None = getattr(state, "key_lookup", None)
    if lookup is not None and token.startswith(SCOPED_PREFIX):
        who = lookup(token)
        if who is not None:
            return who
    caller = None if plane is None else caller_of(token, plane.worker_credential)
    if caller is not None:
        endpoint, worker_id = caller
        app, env, _ = split_endpoint_id(endpoint) or (None, None, None)
        # a deployed worker's calls (fan-out) stay inside its own app and environment, on a server with keys or
        # without: a deploy key's code never reaches another app's endpoints through its caller key, and a bare name
        # its code calls is its own app's (decision 0104)
        if keys or app is not None:
            return Principal(CALLER_NAME + worker_id, "invoke", app, env)
    if not keys:
        # no server key: a loopback-only server (api/loopguard.py), where every local caller is the admin (a worker
        # of a served project too); a scoped key, or a deployed worker's caller key, sent to it still counts as
        # itself (above), so scopes can be tried on a dev server
        return ADMIN_SERVER
    return None


def caller_worker(who: Principal) -> str | None:
    """The worker whose caller key ``who`` is, else None."""
    return who.name[len(CALLER_NAME) :] if who.name.startswith(CALLER_NAME) else None


def unauthorized() -> HTTPException:
    """The 401 (the JSON error handler of ``api/errors.py`` renders it)."""
    # Starlette's class (the embedded server loads no FastAPI) types detail as text; FastAPI's handler takes a dict
    detail: Any = {"code": "unauthorized", "message": UNAUTHORIZED}
    return HTTPException(401, detail=detail, headers={"WWW-Authenticate": "Bearer"})


def principal_of(request: Request, state: Any = None) -> Principal:
    """The request's principal, computed once per request (``request.state.principal``).

    Args:
        request: the request.
        state: where the server's keys are (``api_keys``, ``key_lookup``, ``plane``); default ``request.app.state``.

    Raises:
        HTTPException: 401, for a key that is none of these.
    """
    known: Principal | None = getattr(request.state, "principal", None)
    if known is not None:
        return known
    if state is None:
        state = request.app.state
    who = identify(getattr(state, "plane", None), state, request.headers.get("authorization"))
    if who is None:
        raise unauthorized()
    request.state.principal = who
    # what the request's jobs record: the key's name; none on a keyless server (every local caller alike)
    request.state.submitter = None if keyless(state) and who is ADMIN_SERVER else who.name
    return who


def submitter(request: Request) -> str | None:
    """The name a job submitted by this request records (``Job.submitted_by``): the key's, ``server`` for the server's
    own keys, ``worker:<id>`` for a worker's caller key, None on a server without keys."""
    name: str | None = getattr(request.state, "submitter", None)
    return name


def _raise(decision: Decision, hidden: Callable[[], NotFoundError]) -> None:
    if decision is ALLOW:
        return
    if isinstance(decision, Forbidden):
        raise ForbiddenError(decision.message())
    raise hidden()


def authorize(request: Request, op: Operation, app: str | None, env: str | None) -> Principal:
    """Apply the access rule to a route on a resource of ``app`` and ``env`` (``app=None``: the server's own).

    Returns:
        The request's principal, when the rule allows it.

    Raises:
        ForbiddenError: 403, the message naming the scope needed.
        NotFoundError: 404 for an app or environment the key may not see, worded as if it were not deployed.
    """
    who = principal_of(request)
    _raise(decide(who, op, app, env), lambda: hidden_app(who, app or "", env))
    return who


def hidden_app(who: Principal, app: str, env: str | None) -> NotFoundError:
    """The 404 of an app (or environment) ``who`` may not see: the words of one that is not deployed."""
    if (who.app is not None and who.app != app) or env is None:
        return NotFoundError(f"app {app!r} is not deployed; deploy it first with 'flashpoint deploy'")
    return NotFoundError(f"app {app!r} has no environment {env!r}; flashpoint env list --app {app} lists them")


# ---------------------------------------------------------------------------------------------------------------------
# endpoints and jobs


def app_env_of(key: str) -> tuple[str | None, str | None]:
    """The app and environment of an endpoint key (``app.env.name``); ``(None, None)`` for one outside any app."""
    parts = split_endpoint_id(key)
    return (None, None) if parts is None else (parts[0], parts[1])


def sees_endpoint(who: Principal, key: str) -> bool:
    """Whether ``who`` may know that endpoint ``key`` (or a job of it) exists: what lists are filtered by."""
    return endpoint_visible(who, *app_env_of(key))


def missing_endpoint(plane: ControlPlane, who: Principal, name: str) -> NotFoundError:
    """The 404 of an endpoint ``who`` does not find: absent, or one it may not see, in the same words, listing only
    the endpoints it sees."""
    seen = sorted(key for key in plane.state.endpoints if sees_endpoint(who, key))
    return NotFoundError(f"no endpoint named {name!r}; endpoints: {', '.join(seen) or 'none'}")


def find_endpoint(plane: ControlPlane, who: Principal, name: str) -> EndpointState:
    """Endpoint ``name`` (an id, or a bare name the plane resolves) among those ``who`` may see.

    Raises:
        NotFoundError: none it sees has that name.
        ConflictError: a bare name several endpoints it sees have (naming only those).
    """
    if who.scope == "admin":
        return plane.endpoint(name)  # the plane's own answers: every endpoint is the admin's to see
    try:
        ep = plane.endpoint(name)
    except NotFoundError:
        raise missing_endpoint(plane, who, name) from None
    except ConflictError:
        # a bare name several apps have: the ones this key sees decide; the others are never named to it
        matches = [e for e in plane.state.endpoints.values() if e.spec.name == name and sees_endpoint(who, e.spec.key)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise missing_endpoint(plane, who, name) from None
        ids = ", ".join(sorted(e.spec.key for e in matches))
        raise ConflictError(f"endpoint name {name!r} is ambiguous: use one of the ids {ids}") from None
    if not sees_endpoint(who, ep.spec.key):
        raise missing_endpoint(plane, who, name)
    return ep


def resolve_endpoint(request: Request, plane: ControlPlane, name: str, op: Operation) -> EndpointState:
    """Endpoint ``name`` when the request's key may ``op`` it (Runpod's routes, Flash's, HTTP routes, ``/v1``).

    Raises:
        NotFoundError: absent, or outside what the key sees (the same answer).
        ForbiddenError: the key sees it but its scope does not allow ``op``.
    """
    who = principal_of(request)
    ep = find_endpoint(plane, who, name)
    _raise(decide_endpoint(who, op, *app_env_of(ep.spec.key)), lambda: missing_endpoint(plane, who, name))
    return ep


def authorize_job(
    request: Request, job: Job, missing: Callable[[], NotFoundError], op: Operation | None = None
) -> None:
    """May the request's key read (or cancel, retry, stream) ``job``? Its own job is ``INVOKE``, another's ``READ``
    (``job_operation``); ``op`` overrides that. A job the key may not see raises ``missing()``, the same 404 as a job
    that does not exist."""
    who = principal_of(request)
    wanted = op if op is not None else job_operation(who, job.submitted_by)
    _raise(decide_endpoint(who, wanted, *app_env_of(job.endpoint)), missing)


def sees_job(who: Principal, job_endpoint: str, submitted_by: str | None) -> bool:
    """Whether a list shows ``who`` a job: one of an endpoint it sees that it may read (an invoke key: its own)."""
    op = job_operation(who, submitted_by)
    return decide_endpoint(who, op, *app_env_of(job_endpoint)) is ALLOW
