"""runpodapps/models.py: ``model=`` weights from a local Hugging Face-style store: where the store is, which snapshot
folder a reference and revision name, what is said when the store lacks it, and what a resource's workers are told."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flashpoint.runpodapps import Model
from flashpoint.runpodapps.model import ModelError
from flashpoint.runpodapps.models import STORE_VAR, model_env, model_store, snapshot

COMMIT = "0123456789abcdef0123456789abcdef01234567"
DEV_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"

HOME_HUB = Path("~/.cache/huggingface/hub").expanduser().absolute()

STORES = [
    pytest.param(
        {STORE_VAR: "/stores/fp", "HF_HUB_CACHE": "/stores/hf", "HF_HOME": "/home/hf"}, "/stores/fp", id="own var"
    ),
    pytest.param({"HF_HUB_CACHE": "/stores/hf", "HF_HOME": "/home/hf"}, "/stores/hf", id="HF_HUB_CACHE"),
    pytest.param({STORE_VAR: "", "HF_HUB_CACHE": "/stores/hf"}, "/stores/hf", id="empty own var skipped"),
    pytest.param({"HF_HOME": "/home/hf"}, "/home/hf/hub", id="HF_HOME/hub"),
    pytest.param({"HF_HUB_CACHE": "", "HF_HOME": "/home/hf"}, "/home/hf/hub", id="empty HF_HUB_CACHE skipped"),
    pytest.param({}, str(HOME_HUB), id="default"),
    pytest.param({"HF_HOME": ""}, str(HOME_HUB), id="empty HF_HOME is the default"),
    pytest.param({STORE_VAR: "~/models"}, str(Path("~/models").expanduser()), id="~ expanded"),
    pytest.param({"HF_HOME": "~/hf"}, str(Path("~/hf/hub").expanduser()), id="~ in HF_HOME expanded"),
]


@pytest.mark.parametrize(("env", "expected"), STORES)
def test_model_store_precedence(env: dict[str, str], expected: str) -> None:
    assert model_store(env) == Path(expected)


def test_a_relative_store_is_made_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert model_store({STORE_VAR: "weights"}) == tmp_path / "weights"


def test_model_store_reads_the_process_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STORE_VAR, "/from/the/process")
    assert model_store() == Path("/from/the/process")


def make_store(root: Path, repo: str = "org/name") -> Path:
    """A store laid out as the Hugging Face hub cache: refs/main and refs/dev, and their two snapshots."""
    folder = root / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(COMMIT)  # the hub writes no newline; tolerate one anyway (below)
    (folder / "refs" / "dev").write_text(DEV_COMMIT + "\n")
    for commit in (COMMIT, DEV_COMMIT):
        (folder / "snapshots" / commit).mkdir(parents=True)
        (folder / "snapshots" / commit / "config.json").write_text("{}")
    return folder


SNAPSHOTS = [
    pytest.param(None, COMMIT, id="no revision: refs/main"),
    pytest.param("main", COMMIT, id="main"),
    pytest.param("dev", DEV_COMMIT, id="a named branch (ref with newline)"),
    pytest.param(DEV_COMMIT, DEV_COMMIT, id="a commit hash"),
]


@pytest.mark.parametrize(("revision", "commit"), SNAPSHOTS)
def test_snapshot_finds_the_revisions_folder(tmp_path: Path, revision: str | None, commit: str) -> None:
    folder = make_store(tmp_path)
    assert snapshot("org/name", revision, tmp_path) == folder / "snapshots" / commit


def test_a_missing_model_names_the_path_looked_for_and_how_to_fetch_it(tmp_path: Path) -> None:
    with pytest.raises(ModelError) as raised:
        snapshot("org/absent", None, tmp_path)

    message = str(raised.value)
    assert "model 'org/absent' (revision main) is not in the model store" in message
    assert f"looked for {tmp_path / 'models--org--absent' / 'snapshots' / 'main'}" in message
    assert "nothing is downloaded at run time" in message
    assert "huggingface-cli download org/absent --cache-dir DIR" in message
    assert f"copy DIR/models--org--absent into {tmp_path}" in message
    assert STORE_VAR in message


def test_a_missing_revision_is_named_in_the_fetch_hint(tmp_path: Path) -> None:
    make_store(tmp_path)

    with pytest.raises(ModelError) as raised:
        snapshot("org/name", "v2", tmp_path)

    message = str(raised.value)
    assert "(revision v2)" in message
    assert f"looked for {tmp_path / 'models--org--name' / 'snapshots' / 'v2'}" in message
    assert "huggingface-cli download org/name --revision v2 --cache-dir DIR" in message


def test_a_ref_whose_snapshot_is_gone_names_the_commit_folder(tmp_path: Path) -> None:
    folder = make_store(tmp_path)
    (folder / "snapshots" / COMMIT / "config.json").unlink()
    (folder / "snapshots" / COMMIT).rmdir()

    with pytest.raises(ModelError, match=f"looked for {folder / 'snapshots' / COMMIT}"):
        snapshot("org/name", None, tmp_path)


BAD_REVISIONS = [
    pytest.param("../escape", None, id="a path"),
    pytest.param("..", None, id="dot dot"),
    pytest.param(".", None, id="dot"),
    pytest.param("empty", "", id="a ref holding nothing"),
    pytest.param("nested", "../../elsewhere", id="a ref holding a path"),
]


@pytest.mark.parametrize(("revision", "ref_text"), BAD_REVISIONS)
def test_a_bad_revision_is_refused(tmp_path: Path, revision: str, ref_text: str | None) -> None:
    folder = make_store(tmp_path)
    if ref_text is not None:
        (folder / "refs" / revision).write_text(ref_text)

    with pytest.raises(ModelError, match=f"model 'org/name': revision '{revision}' is not a branch, tag or commit"):
        snapshot("org/name", revision, tmp_path)


def test_model_env_tells_the_workers_where_the_weights_are(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = make_store(tmp_path)

    env = model_env(Model("org/name:dev"), tmp_path)

    assert env == {
        "FLASHPOINT_MODELS": json.dumps({"org/name:dev": str(folder / "snapshots" / DEV_COMMIT)}),
        "HF_HUB_CACHE": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
    }
    # what the worker's Model reads back: the snapshot, and its cache folder
    monkeypatch.setenv("FLASHPOINT_MODELS", env["FLASHPOINT_MODELS"])
    assert Model("org/name:dev").path == folder / "snapshots" / DEV_COMMIT
    assert Model("org/name:dev").hf_cache_path == folder


def test_model_env_takes_a_reference_string_and_the_default_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = make_store(tmp_path)
    monkeypatch.setenv(STORE_VAR, str(tmp_path))

    env = model_env("org/name")

    assert json.loads(env["FLASHPOINT_MODELS"]) == {"org/name": str(folder / "snapshots" / COMMIT)}
    assert env["HF_HUB_CACHE"] == str(tmp_path)


def test_model_env_refuses_a_bad_reference_and_a_missing_model(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="invalid model reference 'no-owner'"):
        model_env("no-owner", tmp_path)
    with pytest.raises(ModelError, match="is not in the model store"):
        model_env(Model("org/absent"), tmp_path)
