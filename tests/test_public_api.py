"""The public surface of ``flashpoint``: ``__all__`` is exactly what the package exposes, all of it documented.

Covers ``flashpoint._version`` (``__version__``) for tests/test_layout.py."""

from __future__ import annotations

import inspect
import re
from typing import Any

import flashpoint


def _public_names() -> set[str]:
    return {
        name
        for name, value in vars(flashpoint).items()
        if not name.startswith("_") and not inspect.ismodule(value) and name != "annotations"
    }


def test_all_matches_the_public_names() -> None:
    exported = [name for name in flashpoint.__all__ if name != "__version__"]

    assert sorted(exported) == sorted(_public_names())
    assert len(flashpoint.__all__) == len(set(flashpoint.__all__)), "duplicates in __all__"


def test_no_private_names_in_all_except_version() -> None:
    assert [name for name in flashpoint.__all__ if name.startswith("_")] == ["__version__"]


def test_version_is_exported() -> None:
    assert isinstance(flashpoint.__version__, str)
    assert re.fullmatch(r"\d+\.\d+\.\d+([.+-]?\w+)*", flashpoint.__version__)


def test_every_name_in_all_resolves() -> None:
    namespace: dict[str, Any] = {}
    exec("from flashpoint import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(flashpoint.__all__)


def test_every_exported_object_has_its_own_docstring() -> None:
    missing = []
    for name in flashpoint.__all__:
        if name == "__version__":
            continue
        obj = getattr(flashpoint, name)
        # a class's own docstring, not one inherited from a base (str, Enum, Exception)
        doc = vars(obj).get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
        if not (isinstance(doc, str) and doc.strip()):
            missing.append(name)
    assert missing == []


def test_package_docstring() -> None:
    assert flashpoint.__doc__ is not None
    assert "Endpoint" in flashpoint.__doc__


def test_runpod_flash_names_are_exported() -> None:
    from flashpoint.flash import names

    assert set(names.__all__) <= set(flashpoint.__all__)
    for name in names.__all__:
        assert getattr(flashpoint, name) is getattr(names, name)


def test_legacy_aliases_say_they_are_deprecated() -> None:
    legacy = (
        "CpuLiveLoadBalancer",
        "CpuLiveServerless",
        "CpuLoadBalancerSlsResource",
        "CpuServerlessEndpoint",
        "LiveLoadBalancer",
        "LiveServerless",
        "LoadBalancerSlsResource",
        "ServerlessEndpoint",
        "remote",
    )
    for name in legacy:
        assert (getattr(flashpoint, name).__doc__ or "").startswith("Deprecated"), name
