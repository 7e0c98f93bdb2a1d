"""Secrets: values a worker receives in its environment, named rather than written in code (mirrors
``runpod/apps/secret.py`` of ``runpod==2.0.0rc2``).

    @app.queue(env={"HF_TOKEN": runpod.Secret("hf-token")})
    def download(): ...

A ``Secret`` renders as Runpod's reference syntax ``{{ RUNPOD_SECRET_<name> }}`` (``render_env``), exactly as rc2
ships it; what the worker finally sees in ``HF_TOKEN`` is the bridge's to decide (flashpoint's own secrets).
Left out: rc2's ``validate_secrets``, which asks Runpod's cloud whether the secrets exist.

Standard library only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from flashpoint.runpodapps.errors import AppError

__all__ = ["Secret", "SecretError", "render_env", "secret_names"]

# the platform's env reference syntax (decrypted server-side at boot)
_REFERENCE_TEMPLATE = "{{{{ RUNPOD_SECRET_{name} }}}}"
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


class SecretError(AppError):
    code = "secret_error"


class Secret:
    """a reference to a platform secret by name."""

    def __init__(self, name: str):
        if not name or not isinstance(name, str):
            raise SecretError("secret name must be a non-empty string")
        if not _NAME_RE.match(name):
            raise SecretError(f"invalid secret name '{name}': letters, digits, underscores, dots, and dashes only")
        self.name = name

    @property
    def reference(self) -> str:
        """the env-var value the platform substitutes at boot."""
        return _REFERENCE_TEMPLATE.format(name=self.name)

    def __repr__(self) -> str:
        return f"<Secret {self.name!r}>"


def render_env(env: Mapping[str, Any] | None) -> dict[str, str]:
    """render an env mapping, expanding Secret values to references; plain values stringify."""
    if not env:
        return {}
    return {key: value.reference if isinstance(value, Secret) else str(value) for key, value in env.items()}


def secret_names(env: Mapping[str, Any] | None) -> list[str]:
    """names of every Secret referenced in an env mapping."""
    if not env:
        return []
    return [value.name for value in env.values() if isinstance(value, Secret)]
