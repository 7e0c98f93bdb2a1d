"""Secrets (rc2's ``runpod/apps/secret.py``): names, references, ``render_env`` and ``secret_names``."""

from __future__ import annotations

from typing import Any

import pytest

from flashpoint.runpodapps import Secret
from flashpoint.runpodapps.errors import AppError
from flashpoint.runpodapps.secret import SecretError, render_env, secret_names


@pytest.mark.parametrize("name", ["hf-token", "HF_TOKEN", "a.b-c_d", "7"])
def test_good_names(name: str) -> None:
    secret = Secret(name)
    assert secret.name == name
    assert secret.reference == f"{{{{ RUNPOD_SECRET_{name} }}}}"
    assert repr(secret) == f"<Secret {name!r}>"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "secret name must be a non-empty string"),
        (None, "secret name must be a non-empty string"),
        (3, "secret name must be a non-empty string"),
        ("hf token", "invalid secret name 'hf token': letters, digits, underscores, dots, and dashes only"),
        ("a/b", "invalid secret name 'a/b': letters, digits, underscores, dots, and dashes only"),
        ("{{x}}", "invalid secret name '{{x}}': letters, digits, underscores, dots, and dashes only"),
    ],
)
def test_bad_names(name: Any, message: str) -> None:
    with pytest.raises(SecretError) as raised:
        Secret(name)
    assert str(raised.value) == message
    assert isinstance(raised.value, AppError)


def test_render_env() -> None:
    env = {"HF_TOKEN": Secret("hf"), "N": 3, "FLAG": True, "TEXT": "x"}
    assert render_env(env) == {"HF_TOKEN": "{{ RUNPOD_SECRET_hf }}", "N": "3", "FLAG": "True", "TEXT": "x"}
    assert render_env(None) == {} and render_env({}) == {}


def test_secret_names() -> None:
    assert secret_names({"A": Secret("a"), "B": "b", "C": Secret("c")}) == ["a", "c"]
    assert secret_names(None) == []
