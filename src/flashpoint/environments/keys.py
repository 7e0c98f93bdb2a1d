"""Environment keys: a requirement set, normalised, plus the interpreter it is for, as a short stable hash.

Pure: no I/O. Every requirement string an endpoint declares passes ``normalize_requirement`` before anything else sees
it, so nothing a caller sends can become an option of the installer (see ``docs/architecture.md``, "Per-endpoint
environments").
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from flashpoint.environments.errors import InvalidRequirementError

__all__ = ["KEY_LENGTH", "PythonId", "environment_key", "normalize_requirement", "normalize_requirements"]

#: hex characters of a key: 64 bits, so two requirement sets on one machine never meet by chance
KEY_LENGTH = 16
#: a requirement longer than this is refused (a URL requirement is the longest honest one)
MAX_REQUIREMENT_LENGTH = 4096
#: bump when the layout of an environment changes, so old ones are not reused
_FORMAT = 1

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_EXAMPLES = (
    "e.g. 'six==1.16.0', 'torch>=2.3', 'pkg[extra]~=1.2; python_version>=\"3.10\"', 'pkg @ https://host/pkg.whl'"
)


@dataclass(frozen=True)
class PythonId:
    """The interpreter an environment is built for, as far as its key cares.

    ``prefix`` is the host environment (``sys.prefix``): an environment inherits that environment's site-packages by
    path (its ``.pth`` names them), so two virtual environments of the same Python sharing one cache must not share
    its environments either.
    """

    #: ``sys.implementation.name``: ``cpython``, ``pypy``
    implementation: str
    #: ``major.minor``: environments survive patch upgrades of the interpreter (a venv links to it)
    version: str
    #: the host environment whose site-packages the environment inherits
    prefix: str

    @classmethod
    def current(cls) -> PythonId:
        """This interpreter."""
        return cls(
            implementation=sys.implementation.name,
            version=f"{sys.version_info.major}.{sys.version_info.minor}",
            prefix=str(Path(sys.prefix).resolve()),
        )

    @property
    def tag(self) -> str:
        """``cpython-3.11``: how listings show it."""
        return f"{self.implementation}-{self.version}"


def normalize_requirement(text: str) -> str:
    """One dependency string as the cache keys and installs it, or ``InvalidRequirementError`` saying what to write.

    The project name (and extras) are canonicalised per PEP 503 (``Six`` and ``six`` are one project), specifiers
    and markers come out in packaging's normal form, so equivalent spellings give one key.

    Refused, because they would reach the installer as something other than a requirement: a string starting with
    ``-`` (``--index-url``, ``-e``, ``-r``), control characters (a newline would start a new requirements line),
    anything that is not exactly one PEP 508 requirement, and a direct reference (``name @ URL``) whose URL has no
    scheme (a relative path would be read against whatever directory the installer runs in).
    """
    if not isinstance(text, str):
        raise InvalidRequirementError(f"a dependency must be a string, not {type(text).__name__}: {text!r}")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise InvalidRequirementError(
            f"dependency {text!r} contains a control character (a newline, say): write one requirement per list "
            f"item, {_EXAMPLES}",
            requirement=text,
        )
    stripped = text.strip()
    if not stripped:
        raise InvalidRequirementError("a dependency is an empty string: remove it from the list", requirement=text)
    if len(stripped) > MAX_REQUIREMENT_LENGTH:
        raise InvalidRequirementError(
            f"dependency {stripped[:60]!r}... is {len(stripped)} characters; the most is {MAX_REQUIREMENT_LENGTH}",
            requirement=text,
        )
    if stripped.startswith("-"):
        raise InvalidRequirementError(
            f"dependency {stripped!r} looks like an installer option: dependencies are requirement strings only "
            f"({_EXAMPLES}). To install from another index, configure pip (pip config set global.extra-index-url "
            "URL); flashpoint passes pip's configuration on to the installer",
            requirement=text,
        )
    try:
        req = Requirement(stripped)
    except InvalidRequirement as exc:
        raise InvalidRequirementError(
            f"dependency {stripped!r} is not a PEP 508 requirement ({str(exc).splitlines()[0]}): write it as one "
            f"line of a requirements file without options or comments, {_EXAMPLES}",
            requirement=text,
        ) from None
    if req.url is not None:
        parts = urlsplit(req.url)
        if not _SCHEME.fullmatch(parts.scheme) or not (parts.netloc or parts.path.startswith("/")):
            raise InvalidRequirementError(
                f"dependency {stripped!r} refers to {req.url!r}, which is not an absolute URL: use "
                "'name @ https://host/file.whl', 'name @ git+https://host/repo@ref' or 'name @ file:///absolute/path'",
                requirement=text,
            )
    req.name = canonicalize_name(req.name)
    req.extras = {canonicalize_name(extra) for extra in req.extras}
    return str(req)


def normalize_requirements(requirements: Iterable[str]) -> tuple[str, ...]:
    """A requirement set in its one normal form: each normalised, duplicates dropped, sorted.

    Two requirements on the same project (``six==1.15``, ``six==1.16``) are both kept: markers may make them apply
    to different interpreters, and when they do conflict the installer says so better than a check here could.
    """
    if isinstance(requirements, str):  # iterating "six" would give "s", "i", "x"
        raise InvalidRequirementError(
            f"dependencies must be a list of requirement strings, not one string: write [{requirements!r}]",
            requirement=requirements,
        )
    return tuple(sorted({normalize_requirement(text) for text in requirements}))


def environment_key(requirements: Iterable[str], python: PythonId) -> str:
    """The cache key of ``requirements`` (normalised here) built for ``python``: ``KEY_LENGTH`` hex characters.

    Stable across processes and releases of flashpoint that keep ``_FORMAT``; order, duplicates and spelling of
    the requirements do not change it.
    """
    payload = {
        "format": _FORMAT,
        "requirements": list(normalize_requirements(requirements)),
        "python": python.tag,
        "host": python.prefix,
    }
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return digest[:KEY_LENGTH]
