"""Which endpoint a caller means: an endpoint id (``app.env.name``, or a bare name for one served outside any app)
first, else a bare name that exactly one endpoint has. Pure: it reads the endpoints' keys and names only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from flashpoint.errors import ConflictError, NotFoundError


def resolve(name: str, names: Mapping[str, str]) -> str:
    """The key of the endpoint ``name`` means, among ``names`` (every endpoint's key to its bare name).

    An exact key wins (an endpoint registered without an app has its name as key); else the one endpoint whose bare
    name is ``name``.

    Raises:
        NotFoundError: no endpoint has that key or name (the message lists the keys there are).
        ConflictError: several endpoints (of several apps or environments) have that bare name; the message names
            their ids, to call one by.
    """
    if name in names:
        return name
    matches = sorted(key for key, bare in names.items() if bare == name)
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise ConflictError(
            f"endpoint {name!r} is deployed in several apps: {', '.join(matches)}; call it by id",
        )
    raise missing(name, names)


def missing(name: str, keys: Iterable[str]) -> NotFoundError:
    """The 404 of an endpoint no key or bare name matches, listing the keys there are."""
    return NotFoundError(f"no endpoint named {name!r}; endpoints: {', '.join(sorted(keys)) or 'none'}")
