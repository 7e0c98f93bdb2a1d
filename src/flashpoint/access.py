"""Who may do what: the access rule of scoped keys, as pure functions (decision 0094).

A request's key is a ``Principal`` (the server's own keys are ``ADMIN_SERVER``); a route names the ``Operation`` it
performs and the app and environment of the resource; ``decide`` answers ``ALLOW``, ``Forbidden`` (403, naming the
scope needed) or ``HIDDEN`` (404, as if the resource were absent). Lists are filtered with ``visible``.

    scope    INVOKE  READ  DEPLOY  ADMIN   sees
    admin      ✓      ✓      ✓      ✓     every app and the server
    deploy     ✓      ✓      ✓      403   its app (its env), or every app when it names none
    invoke     ✓     403    403     403   likewise

Precedence: what a key may not see is ``HIDDEN`` before any scope is weighed, so a 403 never tells a key that another
app's resource exists. A server-wide operation (``app=None``) is for admin keys only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = [
    "ADMIN_SERVER",
    "ALLOW",
    "HIDDEN",
    "Decision",
    "Forbidden",
    "Operation",
    "Principal",
    "Verdict",
    "decide",
    "decide_endpoint",
    "endpoint_visible",
    "job_operation",
    "visible",
]


@dataclass(frozen=True, slots=True)
class Principal:
    """The holder of a request's key: its name (recorded on the jobs it submits), its scope (``admin``, ``deploy`` or
    ``invoke``), and the app and environment it is limited to (None: every one)."""

    name: str
    scope: str
    app: str | None
    env: str | None


#: the server's own keys (``--api-key``, ``FLASHPOINT_API_KEY``, the key it writes for this machine's CLI)
ADMIN_SERVER = Principal("server", "admin", None, None)


class Operation(enum.Enum):
    """What a route does, for the rule."""

    #: call an endpoint (Runpod routes, Flash's sentinel, HTTP routes, what a caller asks of one: Runpod's
    #: ``/health``, the SDK's endpoint check), and read, cancel, retry or stream a job the key submitted itself
    INVOKE = "invoke"
    #: read an app's jobs (any submitter's), logs, endpoints and explanations
    READ = "read"
    #: deploy, roll back, undeploy; create or delete the app and its environments; the app's own secrets
    DEPLOY = "deploy"
    #: keys, server-wide secrets, the server's settings and fleet
    ADMIN = "admin"


#: the scope each operation needs at the least
_NEEDED = {Operation.INVOKE: "invoke", Operation.READ: "deploy", Operation.DEPLOY: "deploy", Operation.ADMIN: "admin"}
_RANK = {"invoke": 0, "deploy": 1, "admin": 2}
_DOING = {
    Operation.INVOKE: "call endpoints",
    Operation.READ: "read jobs, logs and endpoints",
    Operation.DEPLOY: "deploy, roll back or undeploy",
    Operation.ADMIN: "manage keys, server-wide secrets or the server",
}


class Verdict(enum.Enum):
    """The answers that carry nothing more than themselves."""

    #: go ahead
    ALLOW = "allow"
    #: answer 404, as if the resource did not exist: it is another app's, or another environment's
    HIDDEN = "hidden"


ALLOW = Verdict.ALLOW
HIDDEN = Verdict.HIDDEN


@dataclass(frozen=True, slots=True)
class Forbidden:
    """403: the key may see the resource but its scope does not allow the operation; ``needed`` is the scope that
    would (``deploy`` or ``admin``); ``doing`` (what was refused) and ``holder`` (the key) are for the message."""

    needed: str
    doing: str = ""
    holder: str = ""
    #: where the needed scope must reach, when it is more than the resource's app ("for all of app 'shop'")
    reach: str = ""

    def message(self) -> str:
        """The error's text, naming the scope needed (``raise ForbiddenError(decision.message())``)."""
        who = f"key {self.holder}" if self.holder else "this key"
        doing = f" may not {self.doing}" if self.doing else " may not do this"
        reach = f" {self.reach}" if self.reach else ""
        return f"{who}{doing}: that needs a key with the {self.needed} scope{reach}"


Decision = Verdict | Forbidden


def visible(who: Principal, app: str | None, env: str | None) -> bool:
    """Whether ``who`` may know that a resource of ``app`` (None: the server's own) and ``env`` (None: the whole app)
    exists: what lists of jobs, endpoints and apps are filtered by. Scope does not enter: an invoke key sees the
    endpoints of its app (its job lists are filtered further, by submitter: ``job_operation``)."""
    if who.scope == "admin":
        return True
    if app is None:
        return False
    if who.app is not None and app != who.app:
        return False
    return who.env is None or env is None or env == who.env


def decide(who: Principal, op: Operation, app: str | None, env: str | None) -> Decision:
    """May ``who`` perform ``op`` on a resource of ``app`` and ``env``?

    ``app=None`` is a server-wide operation (listing keys, the fleet): admin keys only; a listing over every app is not
    that: call ``visible`` per item instead. ``env=None`` is an operation on the whole app: a key limited to one
    environment may INVOKE and READ there (what it lists is then filtered), but may not DEPLOY the whole app.

    Returns:
        ``ALLOW``; ``HIDDEN`` when the resource is outside what ``who`` may see (checked first, so no scope answer
        reveals it); else ``Forbidden`` naming the scope needed.
    """
    if app is not None and not visible(who, app, env):
        return HIDDEN
    if who.scope == "admin":
        return ALLOW
    holder = f"{who.name!r} ({_describe(who)})"
    if app is None:  # the server's own: whatever the operation, only an admin key
        return Forbidden(
            "admin", _DOING[Operation.ADMIN] if op is Operation.ADMIN else "act on the whole server", holder
        )
    needed = _NEEDED[op]
    if _RANK.get(who.scope, -1) < _RANK[needed]:
        return Forbidden(needed, _DOING[op], holder)
    if env is None and who.env is not None and op is Operation.DEPLOY:
        return Forbidden("deploy", f"change every environment of app {app!r}", holder, f"for all of app {app!r}")
    return ALLOW


def endpoint_visible(who: Principal, app: str | None, env: str | None) -> bool:
    """``visible`` for an endpoint (or its jobs): ``app=None`` is an endpoint served outside any app (``flashpoint
    serve app.py``), which every key limited to no app sees; a key limited to an app does not (decision 0100)."""
    if app is None:
        return who.scope == "admin" or who.app is None
    return visible(who, app, env)


def decide_endpoint(who: Principal, op: Operation, app: str | None, env: str | None) -> Decision:
    """``decide`` for an endpoint (or its jobs) of ``app`` and ``env``, where ``app=None`` is not the server but an
    endpoint served outside any app: hidden from keys limited to an app, else the scope decides as for an app's."""
    if app is not None:
        return decide(who, op, app, env)
    if not endpoint_visible(who, None, None):
        return HIDDEN
    if who.scope == "admin":
        return ALLOW
    needed = _NEEDED[op]
    if _RANK.get(who.scope, -1) < _RANK[needed]:
        return Forbidden(needed, _DOING[op], f"{who.name!r} ({_describe(who)})")
    return ALLOW


def job_operation(who: Principal, submitted_by: str | None) -> Operation:
    """The operation reading, cancelling, retrying or streaming a job is for ``who``: ``INVOKE`` for a job it
    submitted itself (jobs record their submitter's key name), else ``READ`` (so an invoke key reaches only its own)."""
    return Operation.INVOKE if submitted_by is not None and submitted_by == who.name else Operation.READ


def _describe(who: Principal) -> str:
    where = "" if who.app is None else f" for app {who.app}" + ("" if who.env is None else f", env {who.env}")
    return f"{who.scope} scope{where}"
