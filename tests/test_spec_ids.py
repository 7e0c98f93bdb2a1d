"""Endpoint ids: an app's endpoint in one environment has one stable, URL-safe id that splits back one way only."""

from __future__ import annotations

import dataclasses
from urllib.parse import quote

import pytest

from flashpoint.gpus import GpuGroup
from flashpoint.spec import build_spec, endpoint_id, split_endpoint_id


@pytest.mark.parametrize(
    ("app", "env", "name"),
    [("shop", "production", "worker"), ("a-b", "dev_2", "v1.llm-chat"), ("A", "B", "x.y.z")],
)
def test_an_id_splits_back_into_its_app_environment_and_name(app: str, env: str, name: str) -> None:
    ident = endpoint_id(app, env, name)
    assert split_endpoint_id(ident) == (app, env, name)
    assert quote(ident, safe="") == ident  # URL-safe as it is


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("worker", None),  # a bare name
        ("v1.llm", None),  # a bare name with a dot: no environment and name
        ("a..b", None),
        (".a.b", None),
        ("a.b.", None),
        ("a b.c.d", None),  # a space is in no app name
        ("a.b/c.d", None),  # nor a slash in an environment's
        ("a.b.c.d", ("a", "b", "c.d")),  # the name keeps its dots
    ],
)
def test_only_an_app_environment_and_name_split_as_an_id(text: str, parts: tuple[str, str, str] | None) -> None:
    assert split_endpoint_id(text) == parts


def test_a_deployed_spec_is_keyed_by_its_id_and_an_undeployed_one_by_its_name() -> None:
    spec = build_spec({"name": "worker", "gpu": GpuGroup.ANY})
    assert spec.key == "worker"
    deployed = dataclasses.replace(spec, app="shop", app_env="production")
    assert deployed.key == "shop.production.worker"
    assert deployed.name == "worker"
