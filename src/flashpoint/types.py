"""Type aliases shared across flashpoint; no runtime imports of flashpoint modules."""

from __future__ import annotations

from typing import Any, TypeAlias

JSON: TypeAlias = Any
JSONObject: TypeAlias = dict[str, Any]
