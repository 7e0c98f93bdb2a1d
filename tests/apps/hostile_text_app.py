"""An app whose endpoint hands text that would steer a terminal back in every channel a job has: its log lines (stdout
and stderr), its output, and, asked to fail, its error message and traceback (tests/hardening/test_terminal_text.py)."""

from __future__ import annotations

import sys
from typing import Any

from flashpoint import Endpoint


@Endpoint(name="hostile", cpu="cpu3c-1-2")
async def hostile(text: str, fail: bool = False) -> dict[str, Any]:
    print(f"stdout line {text}")
    print(f"stderr line {text}", file=sys.stderr)
    if fail:
        raise ValueError(f"failed with {text}")
    return {"echo": text, text: 1}
