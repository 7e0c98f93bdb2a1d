"""Storage references and where a worker finds them mounted (mirrors ``runpod/apps/volume.py`` of
``runpod==2.0.0rc2``).

``NetworkVolume`` and ``GlobalVolume`` name storage; a resource's ``mounts={path: volume}`` attaches it.
``normalize_mounts`` and ``validate_mounts`` are rc2's checks (absolute paths without ``..``, no overlap, at most one
volume of each kind, endpoints mount theirs at ``/runpod-volume``, global volumes need a GPU). Inside a worker,
``volume.path`` answers from the bindings ``_configure_mounts`` installed; when nothing installed any, the first
``.path`` reads them from the ``RUNPOD_MOUNTS`` environment variable (a JSON list of ``{kind, reference, id, path}``,
as rc2's deploy hands its workers), which is how flashpoint's workers are told.

Left out of rc2's module: ``VolumeResolver`` and the ``attach_*`` functions, which find or create volumes in
Runpod's cloud; flashpoint's volumes are folders the bridge and the fleet decide.

Standard library only.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any

from flashpoint.runpodapps.errors import AppError

__all__ = [
    "DEFAULT_SIZE_GB",
    "ENDPOINT_MOUNT_PATH",
    "MOUNTS_ENV",
    "GlobalVolume",
    "NetworkVolume",
    "Volume",
    "VolumeError",
    "normalize_mounts",
    "validate_mounts",
]

DEFAULT_SIZE_GB = 50
ENDPOINT_MOUNT_PATH = Path("/runpod-volume")

#: the variable a worker's mount bindings arrive in: a JSON list of {kind, reference, id, path}
MOUNTS_ENV = "RUNPOD_MOUNTS"


class VolumeError(AppError):
    code = "volume_error"


class Volume(ABC):
    """a storage reference, independent of its attachment to a worker."""

    def __init__(self, reference: str):
        if not isinstance(reference, str) or not reference.strip():
            raise VolumeError("volume reference must be a non-empty string")
        self._reference = reference

    @property
    @abstractmethod
    def kind(self) -> str:
        """the storage backend for this reference."""

    @property
    def reference(self) -> str:
        return self._reference

    @property
    def path(self) -> Path:
        """the unique mount path for this volume in the current worker."""
        if not _configured:
            _configure_from_env()
        paths = _mount_bindings.get((self.kind, self.reference), ())
        if not paths:
            raise VolumeError(f"{self.kind} volume {self.reference!r} is not mounted in the current execution")
        if len(paths) != 1:
            raise VolumeError(f"{self.kind} volume {self.reference!r} has multiple mounts; use an explicit mount path")
        return paths[0]


class NetworkVolume(Volume):
    """a network volume resolved by name or id, with datacenter placement."""

    kind = "network"

    def __init__(self, name: str, *, size: int = DEFAULT_SIZE_GB, datacenter: str | None = None, create: bool = True):
        super().__init__(name)
        self.size = size
        self.datacenter = datacenter
        self.create = create

    @property
    def name(self) -> str:
        return self.reference

    def __repr__(self) -> str:
        return f"<NetworkVolume {self.name!r} size={self.size}GB>"


class GlobalVolume(Volume):
    """a global volume resolved by name or id without datacenter placement."""

    kind = "global"

    def __init__(self, name: str, *, create: bool = True):
        super().__init__(name)
        self.create = create

    @property
    def name(self) -> str:
        return self.reference

    def __repr__(self) -> str:
        return f"<GlobalVolume {self.name!r}>"


def _mount_path(path: Any) -> str:
    if (
        not isinstance(path, str)
        or not path.startswith("/")
        or path.startswith("//")
        or "\0" in path
        or ".." in PurePosixPath(path).parts
    ):
        raise VolumeError("mount paths must be absolute paths without '..'")
    return str(PurePosixPath(path))


def normalize_mounts(mounts: Mapping[str, Volume] | None) -> dict[str, Volume]:
    """copy and normalize an explicit path-to-volume mapping."""
    if mounts is None:
        return {}
    if not isinstance(mounts, Mapping):
        raise VolumeError("mounts must map absolute paths to volume objects")
    normalized: dict[str, Volume] = {}
    for raw_path, volume in mounts.items():
        path = _mount_path(raw_path)
        if not isinstance(volume, Volume):
            raise VolumeError("mounts require NetworkVolume or GlobalVolume references")
        if path in normalized:
            raise VolumeError(f"duplicate mount path {path!r}")
        normalized[path] = volume
    return normalized


def validate_mounts(mounts: Mapping[str, Volume], kind: str, is_cpu: bool) -> None:
    """validate the mount capabilities of the target execution environment."""
    paths = [PurePosixPath(path) for path in mounts]
    for index, path in enumerate(paths):
        if any(path.is_relative_to(other) or other.is_relative_to(path) for other in paths[:index]):
            raise VolumeError("mount paths must not overlap")
    for volume_kind in ("network", "global"):
        if sum(volume.kind == volume_kind for volume in mounts.values()) > 1:
            raise VolumeError(f"resources support at most one {volume_kind} volume")
    if kind == "sandbox":
        reserved = PurePosixPath("/etc/resolv.conf")
        if any(path.is_relative_to(reserved) or reserved.is_relative_to(path) for path in paths):
            raise VolumeError("sandbox mounts must not overlap /etc/resolv.conf")
    if kind in ("queue", "api") and mounts:
        if len(mounts) != 1 or next(iter(mounts)) != str(ENDPOINT_MOUNT_PATH):
            raise VolumeError("endpoints support one volume mounted at /runpod-volume")
    if is_cpu and any(isinstance(volume, GlobalVolume) for volume in mounts.values()):
        raise VolumeError("global volumes require gpu compute")


# --- the worker's bindings -----------------------------------------------------------------------------------------

_mount_bindings: Mapping[tuple[str, str], tuple[Path, ...]] = MappingProxyType({})
#: whether bindings were installed (by _configure_mounts, or from RUNPOD_MOUNTS on first use)
_configured = False


def _configure_mounts(bindings: list[dict[str, str]]) -> None:
    """install resolved mounts for this worker before importing user code.

    each binding is ``{"kind": "network"|"global", "reference": name, "id": volume id, "path": mount path}``; a
    volume is found by its reference or its id.
    """
    global _mount_bindings, _configured
    if not isinstance(bindings, list):
        raise VolumeError("worker mount bindings must be a list")
    resolved: dict[tuple[str, str], list[Path]] = {}
    for binding in bindings:
        if not isinstance(binding, Mapping):
            raise VolumeError("worker mount bindings must be objects")
        kind = binding.get("kind")
        reference = binding.get("reference")
        volume_id = binding.get("id")
        if (
            kind not in ("network", "global")
            or not isinstance(reference, str)
            or not isinstance(volume_id, str)
            or not reference.strip()
            or not volume_id.strip()
        ):
            raise VolumeError("worker mount bindings require kind, reference, and id")
        path = Path(_mount_path(binding.get("path")))
        for key in ((kind, reference), (kind, volume_id)):
            paths = resolved.setdefault(key, [])
            if path not in paths:
                paths.append(path)
    _mount_bindings = MappingProxyType({key: tuple(paths) for key, paths in resolved.items()})
    _configured = True


def _configure_from_env() -> None:
    """install the bindings ``RUNPOD_MOUNTS`` holds, if it is set (once: later changes to it are not read)."""
    text = os.environ.get(MOUNTS_ENV)
    if not text:
        return
    try:
        bindings = json.loads(text)
    except ValueError as exc:
        raise VolumeError(f"{MOUNTS_ENV} is not JSON: {exc}") from None
    _configure_mounts(bindings)


def _reset_mounts() -> None:
    """testing only: forget the installed bindings, so the next ``.path`` reads ``RUNPOD_MOUNTS`` again."""
    global _mount_bindings, _configured
    _mount_bindings = MappingProxyType({})
    _configured = False
