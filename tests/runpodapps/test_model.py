"""Models (rc2's ``runpod/apps/model.py``): reference parsing, rc2's paths, and ``FLASHPOINT_MODELS``'s local
directories."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from flashpoint.runpodapps import Model
from flashpoint.runpodapps.model import ModelError, model_reference


@pytest.mark.parametrize(
    ("reference", "owner", "name", "revision"),
    [
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama", "Llama-3.1-8B-Instruct", None),
        ("Qwen/Qwen2.5-0.5B:main", "Qwen", "Qwen2.5-0.5B", "main"),
        ("o_1/n.2:0123abc", "o_1", "n.2", "0123abc"),
    ],
)
def test_references(reference: str, owner: str, name: str, revision: str | None) -> None:
    model = Model(reference)
    assert (model.reference, model.owner, model.name, model.revision) == (reference, owner, name, revision)
    assert repr(model) == f"<Model {reference!r}>"


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("", "model reference must be a non-empty string"),
        (None, "model reference must be a non-empty string"),
        ("llama", "invalid model reference 'llama': expected 'owner/name' or 'owner/name:revision'"),
        ("a/b/c", "invalid model reference 'a/b/c': expected 'owner/name' or 'owner/name:revision'"),
        ("a b/c", "invalid model reference 'a b/c': expected 'owner/name' or 'owner/name:revision'"),
        (":rev", "invalid model reference ':rev': expected 'owner/name' or 'owner/name:revision'"),
    ],
)
def test_bad_references(reference: Any, message: str) -> None:
    with pytest.raises(ModelError) as raised:
        Model(reference)
    assert str(raised.value) == message


def test_rc2_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    model = Model("Qwen/Qwen2.5-0.5B")
    assert model.path == Path("/runpod/model-store/huggingface/Qwen/Qwen2.5-0.5B")
    assert model.hf_cache_path == Path("/runpod-volume/huggingface-cache/hub/models--Qwen--Qwen2.5-0.5B")
    assert Model("Qwen/Qwen2.5-0.5B:v1").path == Path("/runpod/model-store/huggingface/Qwen/Qwen2.5-0.5B/v1")
    monkeypatch.setenv("MODEL_REVISION", "abc")
    assert Model("Qwen/Qwen2.5-0.5B:v1").path == Path("/runpod/model-store/huggingface/Qwen/Qwen2.5-0.5B/abc")


def test_flashpoint_models_snapshot(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B" / "snapshots" / "0123"
    monkeypatch.setenv("FLASHPOINT_MODELS", json.dumps({"Qwen/Qwen2.5-0.5B": str(snapshot)}))
    model = Model("Qwen/Qwen2.5-0.5B")
    assert model.path == snapshot
    assert model.hf_cache_path == tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B"


def test_flashpoint_models_plain_folder_and_revision(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    weights = tmp_path / "weights"
    monkeypatch.setenv("FLASHPOINT_MODELS", json.dumps({"a/b:v2": str(weights / "v2"), "a/b": str(weights / "latest")}))
    assert Model("a/b:v2").path == weights / "v2"  # the full reference first
    assert Model("a/b:v3").path == weights / "latest"  # else owner/name
    assert Model("a/b").hf_cache_path == weights / "latest"  # not in a cache: the folder itself
    assert Model("c/d").path == Path("/runpod/model-store/huggingface/c/d")  # not named: rc2's path


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("{", "FLASHPOINT_MODELS is not JSON"),
        ("[]", "FLASHPOINT_MODELS must be a JSON object of model reference -> directory"),
        ('{"a/b": 3}', "FLASHPOINT_MODELS['a/b'] must be a directory, got 3"),
    ],
)
def test_bad_flashpoint_models(monkeypatch: pytest.MonkeyPatch, value: str, message: str) -> None:
    monkeypatch.setenv("FLASHPOINT_MODELS", value)
    with pytest.raises(ModelError, match=message.replace("[", r"\[").replace("]", r"\]")):
        _ = Model("a/b").path


def test_model_reference() -> None:
    assert model_reference(None) is None
    assert model_reference(Model("a/b:c")) == "a/b:c"
    assert model_reference("a/b") == "a/b"
    with pytest.raises(ModelError, match="model must be a runpod.Model or 'owner/name' string, got int"):
        model_reference(3)
