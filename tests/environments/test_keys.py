"""Environment keys (flashpoint/environments/keys.py): normal forms, stable keys, and requirement strings refused."""

from __future__ import annotations

import pytest

from flashpoint.environments import (
    InvalidRequirementError,
    PythonId,
    environment_key,
    normalize_requirement,
    normalize_requirements,
)
from flashpoint.errors import InvalidEndpointError

PY = PythonId(implementation="cpython", version="3.11", prefix="/opt/venv")


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        ("six==1.16.0", "six==1.16.0"),
        ("  Six == 1.16.0  ", "six==1.16.0"),
        ("Flask_SQLAlchemy>=3", "flask-sqlalchemy>=3"),
        ("zope.interface", "zope-interface"),
        ("six<2,>=1", "six<2,>=1"),
        ("six>=1,<2", "six<2,>=1"),
        ("Requests[SOCKS,Security]>=2", "requests[security,socks]>=2"),
        ("six; python_version >= '3.8'", 'six; python_version >= "3.8"'),
        ("pkg @ https://example.com/pkg-1.0-py3-none-any.whl", "pkg @ https://example.com/pkg-1.0-py3-none-any.whl"),
        ("pkg @ git+https://github.com/o/r@v1", "pkg @ git+https://github.com/o/r@v1"),
        ("pkg @ file:///srv/wheels/pkg-1.0-py3-none-any.whl", "pkg @ file:///srv/wheels/pkg-1.0-py3-none-any.whl"),
    ],
)
def test_normal_forms(given: str, normal: str) -> None:
    assert normalize_requirement(given) == normal
    assert normalize_requirement(normal) == normal  # the normal form is a fixed point


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("--index-url=https://evil.example/simple", "installer option"),
        ("-e git+https://github.com/o/r#egg=r", "installer option"),
        ("-r requirements.txt", "installer option"),
        ("  --extra-index-url https://x", "installer option"),
        ("six\n--index-url https://evil.example", "control character"),
        ("six\r", "control character"),
        ("six==1.0\x00", "control character"),
        ("", "empty"),
        ("   ", "empty"),
        ("six==1.0 --hash=sha256:abc", "not a PEP 508 requirement"),
        ("six==1.0 # a comment", "not a PEP 508 requirement"),
        ("six 1.0", "not a PEP 508 requirement"),
        ("./local/package", "not a PEP 508 requirement"),
        ("https://example.com/pkg.whl", "not a PEP 508 requirement"),
        ("six; rm -rf /", "not a PEP 508 requirement"),
        ("pkg @ ./relative/path", "not an absolute URL"),
        ("pkg @ relative", "not an absolute URL"),
        ("x" * 5000, "characters"),
    ],
)
def test_refused(given: str, says: str) -> None:
    with pytest.raises(InvalidRequirementError, match=says) as info:
        normalize_requirement(given)
    assert isinstance(info.value, InvalidEndpointError)  # caught wherever endpoint options are
    assert info.value.requirement == given or len(given) > 1000


def test_a_non_string_is_refused() -> None:
    with pytest.raises(InvalidRequirementError, match="must be a string"):
        normalize_requirement(3)  # type: ignore[arg-type]


def test_a_set_is_sorted_and_deduplicated() -> None:
    assert normalize_requirements(["six==1.16.0", "Attrs", "SIX == 1.16.0", "attrs"]) == ("attrs", "six==1.16.0")


def test_one_string_instead_of_a_list_says_so() -> None:
    with pytest.raises(InvalidRequirementError, match=r"a list .*\['six'\]"):
        normalize_requirements("six")


def test_two_pins_of_one_project_are_both_kept_for_the_installer_to_judge() -> None:
    assert normalize_requirements(["six==1.15.0", "six==1.16.0"]) == ("six==1.15.0", "six==1.16.0")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (["six==1.16.0", "attrs"], ["attrs", "six==1.16.0"]),
        (["Six==1.16.0"], ["six == 1.16.0", "six==1.16.0"]),
        (["requests[socks,security]"], ["Requests[Security,SOCKS]"]),
    ],
)
def test_equivalent_sets_share_a_key(a: list[str], b: list[str]) -> None:
    assert environment_key(a, PY) == environment_key(b, PY)


@pytest.mark.parametrize(
    ("requirements", "python"),
    [
        (["six==1.15.0"], PY),
        (["six==1.16.0", "attrs"], PY),
        (["six==1.16.0"], PythonId("cpython", "3.12", "/opt/venv")),
        (["six==1.16.0"], PythonId("pypy", "3.11", "/opt/venv")),
        (["six==1.16.0"], PythonId("cpython", "3.11", "/opt/other-venv")),
    ],
)
def test_anything_else_changes_the_key(requirements: list[str], python: PythonId) -> None:
    assert environment_key(requirements, python) != environment_key(["six==1.16.0"], PY)


def test_the_key_is_stable_and_short_hex() -> None:
    # a fixed value: a change here orphans every cached environment, so it must be deliberate (bump _FORMAT)
    key = environment_key(["six==1.16.0"], PY)
    assert key == environment_key(["six==1.16.0"], PY)
    assert len(key) == 16 and int(key, 16) >= 0
    assert key == "da3705a1c3c0f0e2"


def test_the_current_interpreter() -> None:
    python = PythonId.current()
    assert python.tag.startswith(("cpython-3.", "pypy-3."))
    assert python.version.count(".") == 1
