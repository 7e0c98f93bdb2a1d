"""Per-endpoint environments end to end: endpoints declared in this process, an embedded server, real worker
processes running in environments uv really builds from the registry (pinned small pure-Python packages).

The plane's rules (jobs wait ``building_environment``, a failure fails them, the host satisfying a requirement set) are
door tests (tests/scheduler/test_envgate.py); the cache's (keys, the lock, prune) are tests/test_environments_*.py and
tests/e2e/test_environments.py. What only processes show is here: each endpoint's worker imports its own pin.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from flashpoint import Endpoint, JobFailedError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

GPU = "NVIDIA A100 80GB PCIe"


def versions() -> dict[str, str]:
    """Run inside a worker: the six it imports, and the interpreter it runs on."""
    import sys

    import six

    return {"six": six.__version__, "python": sys.executable, "six_file": six.__file__}


@pytest.fixture
def envs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "envs"
    monkeypatch.setenv("FLASHPOINT_ENV_DIR", str(root))
    return root


async def test_two_endpoints_pinning_one_package_each_run_their_own_version(make_embedded, envs: Path) -> None:
    make_embedded("NVIDIA_A100_80GB_PCIe:2")

    @Endpoint(name="six-old", gpu=GPU, dependencies=["six==1.15.0"])
    async def old() -> dict:
        return versions()

    @Endpoint(name="six-new", gpu=GPU, dependencies=["six==1.16.0"])
    async def new() -> dict:
        return versions()

    first, second = await asyncio.wait_for(asyncio.gather(old(), new()), 240)

    assert first["six"] == "1.15.0" and second["six"] == "1.16.0"  # the host's is 1.17.0 (or none)
    for result in (first, second):
        assert Path(result["python"]).is_relative_to(envs) and Path(result["six_file"]).is_relative_to(envs)
    assert Path(first["python"]).parent.parent != Path(second["python"]).parent.parent  # two environments


async def test_a_requirement_that_does_not_exist_fails_the_job_with_the_installers_error(
    make_embedded, envs: Path
) -> None:
    make_embedded("NVIDIA_A100_80GB_PCIe:1")

    @Endpoint(name="nonexistent", gpu=GPU, dependencies=["flashpoint-no-such-package-xyz==1.0"])
    async def nothing() -> None: ...

    with pytest.raises(JobFailedError) as info:
        await asyncio.wait_for(nothing(), 120)
    error = info.value
    assert error.reason == "environment_failed" and error.remote_type == "EnvironmentBuildError"
    assert "flashpoint-no-such-package-xyz" in str(error)

    with pytest.raises(JobFailedError, match="flashpoint-no-such-package-xyz"):  # recorded: fails at once
        await asyncio.wait_for(nothing(), 10)


async def test_a_missing_system_dependency_fails_jobs_naming_it_and_its_install_command(
    make_embedded, envs: Path
) -> None:
    make_embedded("NVIDIA_A100_80GB_PCIe:1")

    @Endpoint(name="needs-apt", gpu=GPU, system_dependencies=["sh", "flashpoint-no-such-pkg"])
    async def needs() -> str:
        return "ran"

    with pytest.raises(JobFailedError) as info:
        await asyncio.wait_for(needs(), 60)
    assert info.value.reason == "dependency_missing"
    message = str(info.value)
    assert "flashpoint-no-such-pkg" in message and "apt-get install -y flashpoint-no-such-pkg" in message
    assert "install -y sh" not in message and "sh," not in message  # sh is on PATH
