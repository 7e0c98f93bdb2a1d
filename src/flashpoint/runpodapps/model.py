"""Models: Hugging Face weights a resource needs, named by repo id (mirrors ``runpod/apps/model.py`` of
``runpod==2.0.0rc2``).

    llama = runpod.Model("meta-llama/Llama-3.1-8B-Instruct")

    @app.queue(gpu="H100", model=llama)
    def chat(prompt: str):
        llm = vllm.LLM(model=str(llama.path))

The reference is checked as rc2 checks it (``owner/name`` or ``owner/name:revision``). Where the weights are:

- on flashpoint, when the environment variable ``FLASHPOINT_MODELS`` holds a JSON object ``{reference: directory}``
  naming this model (its full reference first, else its ``owner/name``), ``.path`` is that directory and
  ``.hf_cache_path`` its ``models--owner--name`` folder: the folder of that name among the directory and its
  parents (for a Hugging Face cache snapshot, ``.../models--owner--name/snapshots/<rev>``, the parent of
  ``snapshots``), or the directory itself when it is a plain folder of weights outside any cache;
- otherwise rc2's paths: ``/runpod/model-store/huggingface/{owner}/{name}/{revision}`` (revision from
  ``MODEL_REVISION``, else the reference's) and ``/runpod-volume/huggingface-cache/hub/models--{owner}--{name}``.

Standard library only.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from flashpoint.runpodapps.errors import AppError

__all__ = ["HF_CACHE_ROOT", "MODELS_ENV", "MODEL_STORE_ROOT", "Model", "ModelError", "model_reference"]

MODEL_STORE_ROOT = Path("/runpod/model-store/huggingface")
HF_CACHE_ROOT = Path("/runpod-volume/huggingface-cache")

#: flashpoint's map of model references to local directories (a JSON object)
MODELS_ENV = "FLASHPOINT_MODELS"

_REPO_RE = re.compile(r"^[\w.-]+/[\w.-]+$")


class ModelError(AppError):
    code = "model_error"


class Model:
    """a huggingface model reference, staged by the platform."""

    def __init__(self, reference: str):
        if not reference or not isinstance(reference, str):
            raise ModelError("model reference must be a non-empty string")
        repo, _, revision = reference.partition(":")
        if not _REPO_RE.match(repo):
            raise ModelError(f"invalid model reference '{reference}': expected 'owner/name' or 'owner/name:revision'")
        self.reference = reference
        self.owner, self.name = repo.split("/")
        self.revision = revision or None

    @property
    def _cache_folder(self) -> str:
        return f"models--{self.owner}--{self.name}"

    def _local(self) -> Path | None:
        """the directory ``FLASHPOINT_MODELS`` maps this model to, if it does."""
        text = os.environ.get(MODELS_ENV)
        if not text:
            return None
        try:
            table = json.loads(text)
        except ValueError as exc:
            raise ModelError(f"{MODELS_ENV} is not JSON: {exc}") from None
        if not isinstance(table, dict):
            raise ModelError(f"{MODELS_ENV} must be a JSON object of model reference -> directory")
        for key in (self.reference, f"{self.owner}/{self.name}"):
            directory = table.get(key)
            if directory is not None:
                if not isinstance(directory, str) or not directory:
                    raise ModelError(f"{MODELS_ENV}[{key!r}] must be a directory, got {directory!r}")
                return Path(directory)
        return None

    @property
    def path(self) -> Path:
        """the weights directory: ``FLASHPOINT_MODELS``'s for this model, else rc2's model-store path.

        rc2: the platform resolves the exact revision at deploy time and exposes it via MODEL_REVISION; outside a
        worker (or before the mount exists) this still forms the correct path shape.
        """
        local = self._local()
        if local is not None:
            return local
        revision = os.environ.get("MODEL_REVISION") or self.revision or ""
        base = MODEL_STORE_ROOT / self.owner / self.name
        return base / revision if revision else base

    @property
    def hf_cache_path(self) -> Path:
        """the huggingface-convention cache directory for this model (``models--owner--name``).

        With ``FLASHPOINT_MODELS`` naming this model: the folder of that name among the directory and its parents
        (a snapshot's ``.../models--owner--name``), else the directory itself. Otherwise rc2's path.
        """
        local = self._local()
        if local is not None:
            for folder in (local, *local.parents):
                if folder.name == self._cache_folder:
                    return folder
            return local
        return HF_CACHE_ROOT / "hub" / self._cache_folder

    def __repr__(self) -> str:
        return f"<Model {self.reference!r}>"


def model_reference(model: Any) -> str | None:
    """normalize a spec's model field to the api-facing reference."""
    if model is None:
        return None
    if isinstance(model, Model):
        return model.reference
    if isinstance(model, str):
        return Model(model).reference
    raise ModelError(f"model must be a runpod.Model or 'owner/name' string, got {type(model).__name__}")
