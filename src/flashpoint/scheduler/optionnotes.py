"""What Flash's cloud options mean on your own machines, in words ``explain`` shows beside an endpoint's reasons.

DESIGN §8: an option with a local meaning gets one, and one without is accepted, recorded and said plainly, never
silently dropped. Pure: the plane passes what it knows of the host (the volumes' root, whether workers can mount).
"""

from __future__ import annotations

from pathlib import Path

from flashpoint.fleet import volumes
from flashpoint.spec import EndpointSpec, volume_key

__all__ = ["host_option_notes", "option_notes"]


def host_option_notes(spec: EndpointSpec) -> tuple[str, ...]:
    """``option_notes`` with this host's facts: its volumes' root and whether its workers can mount."""
    if not spec.volumes and not spec.template and not spec.cloud_only:
        return ()
    root = volumes.app_root(volumes.volumes_root(), spec.app, spec.app_env)
    return option_notes(spec, volumes_root=root, can_mount=volumes.can_mount())


def option_notes(spec: EndpointSpec, *, volumes_root: Path, can_mount: bool) -> tuple[str, ...]:
    """One sentence per Flash option this endpoint sets whose meaning here differs from Runpod's cloud."""
    notes: list[str] = []
    for volume in spec.volumes:
        where = (
            "workers see it at /runpod-volume (a mount namespace of their own) and in FLASHPOINT_VOLUME_PATH"
            if can_mount
            else "workers find it in FLASHPOINT_VOLUME_PATH; /runpod-volume needs workers running as root on Linux"
        )
        notes.append(
            f"volume {volume_key(volume)!r} is the directory {volumes_root / volume_key(volume)} on each node "
            f"(FLASHPOINT_VOLUMES_DIR; a shared path on a cluster); {where}; its size ({volume.size} GB) is not "
            "enforced"
        )
    if spec.template is not None and spec.template.env:
        notes.append(f"template env ({', '.join(k for k, _ in spec.template.env)}) reaches the workers")
    if spec.cloud_only:
        notes.append(
            f"{', '.join(spec.cloud_only)}: Runpod cloud settings (images, disks, ports, FlashBoot, download "
            "acceleration), recorded and not applied here: workers are processes on your own machines"
        )
    return tuple(notes)
