"""The errors of per-endpoint environments, in flashpoint's one tree (``flashpoint.errors``).

    Error
    ├─ InvalidEndpointError
    │  └─ InvalidRequirementError    a ``dependencies`` entry that is not one PEP 508 requirement
    ├─ EnvironmentBuildError         the installer failed (or ran past its time limit); carries its output's tail
    └─ BuildInterrupted              the caller stopped the build (its plane closed): a signal, not a failure

They live here rather than in ``flashpoint.errors`` because only this package raises them; they subclass that
module's classes, so ``except flashpoint.Error`` catches them and the HTTP layer maps them by their base.
"""

from __future__ import annotations

from collections.abc import Sequence

from flashpoint.errors import Error, InvalidEndpointError


class InvalidRequirementError(InvalidEndpointError):
    """A dependency string that is not a single PEP 508 requirement (or that tries to be an installer option)."""

    code = "invalid_requirement"

    def __init__(self, message: str, *, requirement: str = "") -> None:
        super().__init__(message)
        self.requirement = requirement


class EnvironmentBuildError(Error):
    """Installing an endpoint's dependencies failed.

    ``output_tail`` holds the installer's last lines (bounded), which usually name the requirement that could not be
    resolved. ``recorded`` is true when the error comes from an earlier build's record rather than from a build that
    just ran: the cache raises it again without running the installer until the caller asks for a retry.
    """

    code = "environment_build_failed"

    def __init__(
        self,
        message: str,
        *,
        key: str = "",
        requirements: Sequence[str] = (),
        output_tail: Sequence[str] = (),
        returncode: int | None = None,
        recorded: bool = False,
    ) -> None:
        super().__init__(message)
        self.key = key
        self.requirements = tuple(requirements)
        self.output_tail = tuple(output_tail)
        self.returncode = returncode
        self.recorded = recorded

    def __str__(self) -> str:
        text = super().__str__()
        if self.output_tail:
            return text + "\n\nInstaller output (last lines):\n" + "\n".join(self.output_tail)
        return text


class BuildInterrupted(Error):
    """The build was stopped by the caller's ``Interrupt`` (the plane closing) before it finished.

    Not a failure, so not named one: nothing is recorded, the installer was killed and its temporary directory
    removed, and the next ``ensure`` of the same requirements builds them again.
    """

    code = "environment_build_interrupted"

    def __init__(self, message: str, *, key: str = "") -> None:
        super().__init__(message)
        self.key = key
