"""Positional arguments travel as JSON over FLASHPOINT_URL (no ``--allow-pickle`` needed), and a call whose arguments
JSON cannot carry is refused naming them (issue 14 point 6)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

CLIENT = textwrap.dedent(
    """
    import asyncio, sys
    sys.path.insert(0, sys.argv[1])
    from positional_app import Scaler, label, total
    from flashpoint import BadInputError

    async def main() -> None:
        print("total", await total(1, 2, 3.5, scale=2))
        print("label", await label("hi"))
        print("scaler", (await Scaler(3, 1).apply(2))["value"])
        print("scaler-run", (await (await Scaler(2).apply.run(5)).result(timeout=60))["value"])
        try:
            await total(1, {1, 2})
        except BadInputError as exc:
            print("refused", str(exc).splitlines()[0])

    asyncio.run(main())
    """
)


def test_positional_arguments_work_over_flashpoint_url_and_a_refusal_names_the_argument(
    serve: Any, tmp_path: Path
) -> None:
    served = serve(app="tests/apps/positional_app.py")
    script = tmp_path / "client.py"
    script.write_text(CLIENT)
    env = {**os.environ, "FLASHPOINT_URL": served.url, "FLASHPOINT_API_KEY": served.key,
           "FLASHPOINT_STATE_DIR": str(tmp_path / "client-state")}  # fmt: skip
    env.pop("FLASHPOINT_SIMULATED_GPUS", None)
    done = subprocess.run(
        [sys.executable, str(script), str(ROOT / "tests" / "apps")], env=env, capture_output=True, text=True,
        timeout=150,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert lines["total"] == "13.0" and lines["label"] == "hi!"
    assert lines["scaler"] == "7" and lines["scaler-run"] == "10.0"
    assert "argument 'values' (tuple) cannot travel as JSON" in lines["refused"]
    assert "--allow-pickle" in lines["refused"]
