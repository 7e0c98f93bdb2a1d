"""A module of the shipping test's script, beside it (``tests/ray/test_shipping.py``): the script's pickled functions
use it by reference, so a node that cannot see the script's folder imports it from the folder Ray shipped."""

from __future__ import annotations


def where() -> str:
    """The file this module was imported from, on the worker's node."""
    return __file__
