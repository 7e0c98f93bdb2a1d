"""An app module for the Ray backend's code-shipping test (``tests/ray/test_shipping.py``).

The test copies it into a folder that the Ray nodes cannot see; its worker imports it from the folder Ray unpacked
as the actor's working directory.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from flashpoint import Endpoint, GpuType


@Endpoint(name="ray-app", gpu=GpuType.NVIDIA_H200)
async def from_app(hidden: str) -> dict[str, Any]:
    return {
        "file": __file__,
        "cwd": os.getcwd(),
        "argv": sys.argv,
        "hidden_visible": os.path.exists(os.path.join(hidden, "app")),
        "node": os.environ.get("FLASHPOINT_RAY_NODE_ID"),
        "pythonpath": os.environ.get("PYTHONPATH", ""),
    }
