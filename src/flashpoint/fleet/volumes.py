"""Network volumes on your own machines: Flash's ``NetworkVolume(name=...)`` is a named, persistent directory.

A volume lives in ``<root>/<name>`` (``<root>`` is ``FLASHPOINT_VOLUMES_DIR``, by default
``$FLASHPOINT_STATE_DIR/volumes``, i.e. ``~/.flashpoint/volumes``), an app's in ``<root>/apps/<app>/<env>/<name>``
(``app_root``: each app and environment has its own); on a cluster, point the root at a shared path mounted at the
same place on every node. The plane tells each worker its endpoint's volumes (``FLASHPOINT_VOLUMES``); the worker
creates the directory on first use and sees it at ``/runpod-volume`` where it can (``worker/isolation.py``), and
always through ``FLASHPOINT_VOLUME_PATH``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from flashpoint.flashtypes import NetworkVolume
from flashpoint.spec import volume_key

__all__ = ["app_root", "can_mount", "volume_dir", "volumes_root", "worker_env"]

#: where Flash's workers see their network volume
RUNPOD_VOLUME = "/runpod-volume"


def can_mount() -> bool:
    """Whether a worker here can see its volume at ``/runpod-volume``: root on Linux (a private mount namespace)."""
    return sys.platform.startswith("linux") and hasattr(os, "geteuid") and os.geteuid() == 0


def volumes_root(env: Mapping[str, str] | None = None) -> Path:
    """Where volumes live: ``FLASHPOINT_VOLUMES_DIR``, else ``$FLASHPOINT_STATE_DIR/volumes`` (``~/.flashpoint``)."""
    env = os.environ if env is None else env
    explicit = env.get("FLASHPOINT_VOLUMES_DIR")
    if explicit:
        return Path(explicit).expanduser().absolute()
    return (Path(env.get("FLASHPOINT_STATE_DIR") or "~/.flashpoint").expanduser() / "volumes").absolute()


def app_root(root: Path, app: str | None, env: str | None) -> Path:
    """Where the volumes of an endpoint of ``app``'s environment ``env`` live: ``<root>/apps/<app>/<env>``, so that
    two apps (or two environments of one) with a volume of one name never share it; ``root`` for an endpoint of no
    app. App and environment names are single path components (``spec.APP_NAME``)."""
    if app is None or env is None:
        return root
    return root / "apps" / app / env


def volume_dir(root: Path, volume: NetworkVolume) -> Path:
    """The directory of ``volume`` under ``root`` (its name was checked to be one path component)."""
    return root / volume_key(volume)


def worker_env(volumes: Sequence[NetworkVolume], root: Path) -> dict[str, str]:
    """The variable that tells a worker its endpoint's volumes; empty when it has none."""
    if not volumes:
        return {}
    listed = [
        {"name": volume_key(v), "datacenter": v.datacenter.value, "path": str(volume_dir(root, v))} for v in volumes
    ]
    # Runpod SDK 2.x's Volume.path reads RUNPOD_MOUNTS; flashpoint has one kind of volume, a directory, so each is
    # listed as a network and as a global volume, at its directory (decision 0108)
    mounts = [
        {"kind": kind, "reference": item["name"], "id": item["name"], "path": item["path"]}
        for item in listed
        for kind in ("network", "global")
    ]
    return {"FLASHPOINT_VOLUMES": json.dumps(listed), "RUNPOD_MOUNTS": json.dumps(mounts)}
