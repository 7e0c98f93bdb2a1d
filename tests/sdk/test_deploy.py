"""``flashpoint.deploy``'s pure parts (sdk/deploy.py): the contract's shapes read and written, a rollout followed
against a fake clock (the only thing faked: time), the server's error bodies turned into the SDK's errors, one per
status, and the defaults (the app from the folder's name, the server from the environment)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import flashpoint
from flashpoint.clock import FakeClock
from flashpoint.errors import BadInputError, ConfigError, ConflictError, Error, ForbiddenError, NotFoundError
from flashpoint.sdk.deploy import (
    DeployError,
    DeployResult,
    DeployTimeoutError,
    Progress,
    Rollout,
    default_app,
    error_of,
    follow,
    server_of,
)

URL = "http://10.0.0.5:8000"
ENDPOINTS = [
    {"name": "embed", "id": "shop.production.embed", "kind": "queue", "url": f"{URL}/v2/shop.production.embed"},
    {"name": "api", "id": "shop.production.api", "kind": "route", "url": f"{URL}/shop.production.api"},
]


def rollout(state: str = "pending", stage: str = "build", detail: str = "", version: int = 3) -> dict[str, Any]:
    """A ``Rollout`` as decision 0097 writes it."""
    return {"app": "shop", "env": "production", "version": version, "state": state, "stage": stage, "detail": detail,
            "digest": "ab" * 32, "endpoints": ENDPOINTS}  # fmt: skip


def test_the_public_api_exports_deploy_and_its_result() -> None:
    assert flashpoint.deploy is not None and flashpoint.DeployResult is DeployResult
    assert issubclass(flashpoint.DeployTimeoutError, flashpoint.DeployError)
    assert issubclass(flashpoint.DeployError, flashpoint.Error)


def test_a_rollout_reads_the_contract_and_its_result_is_what_json_prints() -> None:
    read = Rollout.from_json(rollout("serving", "done"))
    assert read.finished and read.version == 3 and read.endpoints[1].kind == "route"
    assert read.result().to_json() == {"app": "shop", "env": "production", "version": 3, "endpoints": ENDPOINTS}
    assert not Rollout.from_json(rollout()).finished


def test_an_answer_that_is_no_rollout_is_an_error_quoting_it() -> None:
    with pytest.raises(Error, match="not a rollout"):
        Rollout.from_json({"app": "shop"})


# --------------------------------------------------------------------------------------------------------------------
# following a rollout


class Server:
    """Answers to ``GET .../versions/{n}`` in turn (the last one again once they run out), on a fake clock."""

    def __init__(self, *answers: dict[str, Any]) -> None:
        self.answers = [Rollout.from_json(a) for a in answers]
        self.asked = 0

    def fetch(self) -> Rollout:
        self.asked += 1
        return self.answers[min(self.asked, len(self.answers)) - 1]


def test_follow_reports_each_new_stage_once_and_returns_the_serving_version() -> None:
    clock = FakeClock()
    server = Server(
        rollout(stage="build"),
        rollout(stage="warm", detail="0 of 2 workers ready"),
        rollout(stage="warm", detail="0 of 2 workers ready"),
        rollout(stage="warm", detail="2 of 2 workers ready"),
        rollout(stage="switch"),
        rollout("serving", "done"),
    )
    seen: list[Progress] = []

    done = follow(server.fetch, Rollout.from_json(rollout(stage="load")), timeout_s=60, on_stage=seen.append,
                  clock=clock, sleep=clock.advance)  # fmt: skip

    assert done.state == "serving" and server.asked == 6
    assert [(p.stage, p.detail) for p in seen] == [
        ("load", ""),
        ("build", ""),
        ("warm", "0 of 2 workers ready"),
        ("warm", "2 of 2 workers ready"),
        ("switch", ""),
        ("done", ""),
    ]
    assert {p.version for p in seen} == {3}
    assert clock.monotonic() == pytest.approx(1_000.0 + 6 * 0.25)  # one pause per look


def test_a_failed_version_raises_with_its_detail() -> None:
    clock = FakeClock()
    server = Server(rollout("failed", "warm", "worker exited with code 1: ImportError: torch"))
    with pytest.raises(DeployError, match="version 3 of shop/production failed at stage 'warm': worker exited") as e:
        follow(server.fetch, Rollout.from_json(rollout()), timeout_s=60, clock=clock, sleep=clock.advance)
    assert not isinstance(e.value, DeployTimeoutError)
    assert e.value.rollout is not None and e.value.rollout.state == "failed"
    assert "what served before keeps serving" in str(e.value)


def test_a_rollout_still_pending_at_the_timeout_says_it_goes_on_and_where_to_look() -> None:
    clock = FakeClock()
    server = Server(rollout(stage="build"))
    with pytest.raises(DeployTimeoutError, match="still at stage 'build' after 2 s") as e:
        follow(server.fetch, Rollout.from_json(rollout()), timeout_s=2, clock=clock, sleep=clock.advance)
    assert "flashpoint env get production --app shop" in str(e.value)
    assert server.asked == 8  # every 0.25 s for 2 s, and no look past the deadline
    assert clock.monotonic() == pytest.approx(1_002.0)


def test_a_rollout_over_at_once_is_not_asked_again() -> None:
    server = Server()
    done = follow(server.fetch, Rollout.from_json(rollout("serving", "done")), timeout_s=1)
    assert done.version == 3 and server.asked == 0


# --------------------------------------------------------------------------------------------------------------------
# the server's errors, one per status


def _error(status: int, body: Any, *, has_key: bool = True) -> Error:
    text = body if isinstance(body, str) else json.dumps(body)
    return error_of(status, text, url=URL, has_key=has_key, what="POST /v1/apps/shop/envs/production/versions")


def test_400_a_project_that_does_not_load_quotes_the_load_error() -> None:
    error = _error(400, {"code": "bad_input", "message": "app.py: NameError: name 'torch' is not defined"})
    assert isinstance(error, BadInputError) and str(error) == "app.py: NameError: name 'torch' is not defined"


def test_401_without_a_key_says_to_pass_one_and_with_one_that_it_was_refused() -> None:
    missing = _error(401, {"code": "unauthorized", "message": "missing API key"}, has_key=False)
    assert isinstance(missing, ConfigError)
    assert f"the flashpoint server at {URL} needs an API key: pass --key" in str(missing)
    refused = _error(401, {"code": "unauthorized", "message": "invalid API key"})
    assert isinstance(refused, ConfigError) and "refused the API key" in str(refused)


def test_403_names_the_scope_the_key_lacks() -> None:
    error = _error(403, {"code": "forbidden", "message": "key 'ci' has the invoke scope; deploying needs deploy"})
    assert isinstance(error, ForbiddenError) and "needs deploy" in str(error)


def test_404_says_the_app_is_not_deployed() -> None:
    message = "app 'shop' is not deployed; deploy it first with 'flashpoint deploy'"
    error = _error(404, {"code": "not_found", "message": message})
    assert isinstance(error, NotFoundError) and str(error) == message


def test_409_says_another_rollout_runs() -> None:
    error = _error(409, {"code": "conflict", "message": "version 4 of shop/production is rolling out"})
    assert isinstance(error, ConflictError) and "rolling out" in str(error)


def test_413_keeps_its_code_and_the_servers_advice() -> None:
    error = _error(413, {"code": "payload_too_large", "message": "the upload is over 1500 MB; raise --max-artifact-mb"})
    assert isinstance(error, BadInputError) and error.code == "payload_too_large"
    assert "--max-artifact-mb" in str(error)
    bare = _error(413, "<html>413 Request Entity Too Large</html>")  # a proxy's answer, not the server's
    assert isinstance(bare, BadInputError) and bare.code == "payload_too_large" and "too large" in str(bare)


def test_404_from_a_server_without_the_routes_says_so() -> None:
    error = _error(404, {"detail": "Not Found"})
    assert isinstance(error, NotFoundError)
    assert "has no /v1/apps/shop/envs/production/versions: is it a `flashpoint serve` that takes deploys" in str(error)


def test_an_answer_with_no_error_body_quotes_the_status_and_the_text() -> None:
    error = _error(502, "Bad Gateway")
    assert type(error) is Error and "HTTP 502" in str(error) and "Bad Gateway" in str(error)


# --------------------------------------------------------------------------------------------------------------------
# defaults


def test_the_default_app_is_the_folders_name(tmp_path: Path) -> None:
    (tmp_path / "shop").mkdir()
    assert default_app(tmp_path / "shop") == "shop"
    (tmp_path / "my shop.v2").mkdir()
    with pytest.raises(BadInputError, match=r"'my shop.v2' cannot be an app's name.*--app NAME"):
        default_app(tmp_path / "my shop.v2")


def test_the_server_comes_from_the_arguments_then_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # the environment is the process's: set and cleared with monkeypatch
    monkeypatch.delenv("FLASHPOINT_URL", raising=False)
    monkeypatch.delenv("FLASHPOINT_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="name the flashpoint server to deploy to"):
        server_of(None, None)
    assert server_of(URL, "k") == (URL, "k")
    monkeypatch.setenv("FLASHPOINT_URL", URL)
    monkeypatch.setenv("FLASHPOINT_API_KEY", "from-env")
    assert server_of(None, None) == (URL, "from-env")
    assert server_of(None, "") == (URL, "")  # a key given as empty means none, not the environment's


def test_deploy_refuses_what_is_not_a_folder_before_asking_any_server(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="is not a folder"):
        flashpoint.deploy(tmp_path / "missing", url=URL)
