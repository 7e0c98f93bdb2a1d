"""Secret references in an endpoint's ``env`` (``flashpoint.spec``): ``flashpoint.Secret("name")`` and Runpod's
template ``{{ RUNPOD_SECRET_<name> }}``, found in a spec and expanded for a worker through a resolver."""

from __future__ import annotations

from typing import Any

import pytest

import flashpoint
from flashpoint import Endpoint, GpuGroup, Secret
from flashpoint.errors import InvalidEndpointError
from flashpoint.flashtypes import PodTemplate
from flashpoint.spec import (
    MissingSecretsError,
    env_secrets,
    expand_env,
    secret_name_problem,
    secret_references,
)


def spec_with(env: Any) -> flashpoint.spec.EndpointSpec:
    return Endpoint(name="ep", gpu=GpuGroup.ANY, env=env).spec


def test_secret_is_exported_and_reads_as_runpods_template() -> None:
    assert flashpoint.Secret is Secret
    assert str(Secret("hf-token")) == "{{ RUNPOD_SECRET_hf-token }}"
    assert Secret("a") == Secret("a")
    with pytest.raises(AttributeError):
        Secret("a").name = "b"  # type: ignore[misc]


@pytest.mark.parametrize("name", ["", "a/b", "../x", "RUNPOD_KEY", "runpodx", "1a", "a b", "a\0", "a" * 192, 5])
def test_a_bad_secret_name_is_refused_at_declaration(name: Any) -> None:
    assert secret_name_problem(name) is not None
    with pytest.raises(InvalidEndpointError):
        Secret(name)


@pytest.mark.parametrize(
    ("env", "stored", "names"),
    [
        ({}, {}, ()),
        ({"A": "plain"}, {"A": "plain"}, ()),
        ({"T": Secret("hf-token")}, {"T": "{{ RUNPOD_SECRET_hf-token }}"}, ("hf-token",)),
        ({"T": "{{RUNPOD_SECRET_x}}"}, {"T": "{{RUNPOD_SECRET_x}}"}, ("x",)),
        ({"T": "{{   RUNPOD_SECRET_x\t}}"}, {"T": "{{   RUNPOD_SECRET_x\t}}"}, ("x",)),
        ({"T": "Bearer {{ RUNPOD_SECRET_a }}:{{ RUNPOD_SECRET_b }}"}, None, ("a", "b")),
        ({"A": Secret("b"), "B": "{{ RUNPOD_SECRET_a }}", "C": Secret("b")}, None, ("b", "a")),
        # not Runpod's syntax: plain text, passed on as written
        ({"T": "{ RUNPOD_SECRET_x }"}, None, ()),
        ({"T": "{{ SECRET_x }}"}, None, ()),
        ({"T": "{{ runpod_secret_x }}"}, None, ()),
        ({"T": "RUNPOD_SECRET_x"}, None, ()),
    ],
)
def test_references_are_found_in_env(env: Any, stored: Any, names: tuple[str, ...]) -> None:
    spec = spec_with(env)
    if stored is not None:
        assert dict(spec.env) == stored
    assert secret_references(spec) == names
    assert env_secrets(spec.env) == names


def test_a_templates_env_may_name_secrets_too() -> None:
    template = PodTemplate(env=[{"key": "T", "value": "{{ RUNPOD_SECRET_tpl }}"}])
    spec = Endpoint(name="ep", gpu=GpuGroup.ANY, template=template, env={"U": Secret("own")}).spec
    assert set(secret_references(spec)) == {"tpl", "own"}


@pytest.mark.parametrize(
    "env",
    [
        {"T": "{{ RUNPOD_SECRET_a/b }}"},
        {"T": "{{ RUNPOD_SECRET_ }}"},
        {"T": "{{ RUNPOD_SECRET_RUNPOD_X }}"},
        {"T": "{{ RUNPOD_SECRET_../../etc/passwd }}"},
        {"T": 5},
        {"T": b"bytes"},
        {5: "x"},
        ["T"],
    ],
)
def test_bad_env_is_refused_at_declaration(env: Any) -> None:
    with pytest.raises(InvalidEndpointError):
        spec_with(env)


SECRETS = {"a": "AAA", "b": "B\\1 $x", "loop": "{{ RUNPOD_SECRET_a }}"}


@pytest.mark.parametrize(
    ("env", "expanded"),
    [
        ({}, {}),
        ({"X": "plain {{ not }}"}, {"X": "plain {{ not }}"}),
        ({"X": "{{ RUNPOD_SECRET_a }}"}, {"X": "AAA"}),
        ({"X": "pre-{{RUNPOD_SECRET_a}}-{{ RUNPOD_SECRET_b }}-post"}, {"X": "pre-AAA-B\\1 $x-post"}),
        # one pass: a value that looks like a reference stays as it is
        ({"X": "{{ RUNPOD_SECRET_loop }}"}, {"X": "{{ RUNPOD_SECRET_a }}"}),
    ],
)
def test_expand_env(env: dict[str, str], expanded: dict[str, str]) -> None:
    assert expand_env(env, SECRETS.get, endpoint="ep") == expanded


def test_expand_names_every_missing_secret_once_in_order() -> None:
    env = {"X": "{{ RUNPOD_SECRET_gone }}", "Y": "{{ RUNPOD_SECRET_a }}{{ RUNPOD_SECRET_lost }}", "Z": Secret("gone")}
    with pytest.raises(MissingSecretsError) as caught:
        expand_env({k: str(v) for k, v in env.items()}, SECRETS.get, endpoint="ep")
    assert caught.value.names == ("gone", "lost")
    assert "'ep'" in str(caught.value) and "gone, lost" in str(caught.value)
    assert "flashpoint secret set" in str(caught.value)
    assert "AAA" not in str(caught.value)
    assert isinstance(caught.value, InvalidEndpointError)
