"""The embedded server's cold start pays for no HTTP stack it does not use: FastAPI (native API, Runpod's client
routes' errors) and aiohttp (webhooks) are imported on the first request that needs them, in a fresh
interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

SCRIPT = textwrap.dedent(
    """
    import json, sys, urllib.error, urllib.request
    from flashpoint.config import Settings
    from flashpoint.hosting.embedded import EmbeddedServer

    heavy = ("fastapi", "aiohttp", "flashpoint.api.runpod", "flashpoint.api.routeproxy")

    def loaded():
        return sorted(name for name in heavy if name in sys.modules)

    def status(path):
        try:
            return urllib.request.urlopen(server.url + path, timeout=10).status
        except urllib.error.HTTPError as exc:
            return exc.code

    server = EmbeddedServer(Settings.load(env={"FLASHPOINT_SIMULATED_GPUS": "NVIDIA_H200:1",
                                               "FLASHPOINT_STATE_DIR": sys.argv[1]})).start()
    try:
        seen = {"started": loaded(), "other path": [status("/nothing"), loaded()]}
        seen["client route"] = [status("/v2/anything/health"), loaded()]
    finally:
        server.close()
    print(json.dumps(seen))
    """
)


def test_the_embedded_server_imports_fastapi_and_aiohttp_only_when_a_request_needs_them(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "state")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["started"] == []
    assert seen["other path"] == [404, []]
    status, loaded = seen["client route"]
    assert status == 401 and "flashpoint.api.runpod" in loaded and "flashpoint.api.routeproxy" not in loaded
