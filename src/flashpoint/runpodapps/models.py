"""``model=runpod.Model("org/name")`` on your own machines: weights come from a local model store, never downloaded at
run time (decision 0108).

The store is a folder laid out as the Hugging Face hub cache (``models--org--name/refs/<branch>``,
``models--org--name/snapshots/<commit>/``): ``FLASHPOINT_MODEL_STORE``, by default the Hugging Face cache itself
(``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``), so weights a user already fetched with
``huggingface-cli download`` are found. A model that is not there fails the deploy (or the first call) with where it
was looked for and how to fetch it on a machine with internet access.

A resource's workers are told (``model_env``): ``FLASHPOINT_MODELS`` (``{reference: snapshot folder}``, which
``Model.path`` reads), ``HF_HUB_CACHE`` (the store: transformers and vLLM find the weights by their repository id) and
``HF_HUB_OFFLINE=1`` (nothing is downloaded at run time).

Standard library only.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

__all__ = ["STORE_VAR", "model_env", "model_store", "snapshot"]

#: where the model store is
STORE_VAR = "FLASHPOINT_MODEL_STORE"


def model_store(env: Mapping[str, str] | None = None) -> Path:
    """The model store: ``FLASHPOINT_MODEL_STORE``, else Hugging Face's hub cache (``HF_HUB_CACHE``, ``$HF_HOME/hub``,
    ``~/.cache/huggingface/hub``)."""
    env = os.environ if env is None else env
    for value in (env.get(STORE_VAR), env.get("HF_HUB_CACHE")):
        if value:
            return Path(value).expanduser().absolute()
    home = env.get("HF_HOME")
    base = Path(home).expanduser() if home else Path("~/.cache/huggingface").expanduser()
    return (base / "hub").absolute()


def _fetch_hint(repo: str, revision: str | None, store: Path) -> str:
    rev = f" --revision {revision}" if revision else ""
    return (
        f"on a machine with internet access run `huggingface-cli download {repo}{rev} --cache-dir DIR`, then copy "
        f"DIR/models--{repo.replace('/', '--')} into {store} (or point {STORE_VAR} at a store that has it)"
    )


def snapshot(repo: str, revision: str | None, store: Path) -> Path:
    """The folder holding ``repo``'s weights at ``revision`` (a branch, tag or commit; ``main`` when None).

    Raises:
        ModelError: the store does not have it (the path looked for, and how to fetch it).
    """
    from flashpoint.runpodapps.model import ModelError

    folder = store / f"models--{repo.replace('/', '--')}"
    wanted = revision or "main"
    ref = folder / "refs" / wanted
    commit = ref.read_text().strip() if ref.is_file() else wanted
    if "/" in commit or commit in ("", ".", ".."):
        raise ModelError(f"model {repo!r}: revision {wanted!r} is not a branch, tag or commit of the store")
    path = folder / "snapshots" / commit
    if not path.is_dir():
        raise ModelError(
            f"model {repo!r} (revision {wanted}) is not in the model store: looked for {path}; nothing is downloaded "
            f"at run time: {_fetch_hint(repo, revision, store)}"
        )
    return path


def model_env(model: Any, store: Path | None = None) -> dict[str, str]:
    """What the workers of a resource with ``model=`` are told: where its weights are (``FLASHPOINT_MODELS``), the
    store as Hugging Face's cache, and offline mode.

    Raises:
        ModelError: a bad reference, or weights the store does not have.
    """
    from flashpoint.runpodapps.model import Model

    reference = model if isinstance(model, Model) else Model(model)
    root = model_store() if store is None else store
    repo = f"{reference.owner}/{reference.name}"
    path = snapshot(repo, reference.revision, root)
    return {
        "FLASHPOINT_MODELS": json.dumps({reference.reference: str(path)}),
        "HF_HUB_CACHE": str(root),
        "HF_HUB_OFFLINE": "1",
    }
