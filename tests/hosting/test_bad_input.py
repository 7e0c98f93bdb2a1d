"""Every bad request gets a JSON error with a stable code and advice; nothing is half-stored; the server goes on.

Covers ``flashpoint.wire.bodylimit`` (the body limit) for tests/test_layout.py."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from flashpoint.wire.codec import PICKLE_KEY
from tests.conftest import Served

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


@pytest.fixture
def server(serve: Any) -> Served:
    return serve("--max-body-mb", "0.05")


@pytest.fixture
def client(server: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as http:
        yield http


def _stored(client: httpx.Client, endpoint: str) -> int:
    return len(client.get("/v1/jobs", params={"endpoint": endpoint, "limit": 1000}).json()["jobs"])


@pytest.mark.parametrize(
    ("path", "body", "status", "code", "advice"),
    [
        ("/v2/fail/run", b"{not json", 400, "bad_json", "valid UTF-8 JSON"),
        ("/v2/fail/run", b"\xff\xfe", 400, "bad_json", "valid UTF-8 JSON"),
        ("/v2/fail/run", b"[1, 2]", 400, "bad_request", '{"input"'),
        ("/v2/fail/run", b'{"inputs": {"message": "x"}}', 400, "missing_input", 'no "input"'),
        ("/v2/fail/run", b'{"input": [1, 2]}', 400, "bad_input", "keyword arguments"),
        ("/v2/fail/run", b'{"input": {}}', 400, "bad_input", "missing a required argument: 'message'"),
        ("/v2/fail/run", b'{"input": {"message": "x", "nope": 1}}', 400, "bad_input", "unexpected keyword"),
        ("/v2/fail/runsync", b'{"input": {"message": "x"}, "policy": {"ttl": "soon"}}', 400, "bad_request", "ttl"),
        ("/v2/fail/run", b'{"input": {"message": "x"}, "policy": {"executionTimeout": -5}}', 400, "bad_request",
         "executionTimeout"),
        ("/v2/fail/run", b'{"input": {"message": "x"}, "webhook": "ftp://x"}', 400, "bad_request", "http(s) URL"),
        ("/v2/fail/run", b'{"input": {"message": "x"}, "policy": []}', 400, "bad_request", '"policy" must be an'),
        ("/v2/fail/run", b'{"input": {"message": "x"}, "policy": false}', 400, "bad_request", '"policy" must be'),
        ("/v2/fail/run", b'{"input": {"message": NaN}}', 400, "bad_json", "numbers must be finite"),
        ("/v2/fail/run", b'{"input": {"message": 1e999999}}', 400, "bad_json", "too large for a 64-bit float"),
        ("/v2/nowhere/run", b'{"input": {}}', 404, "not_found", "endpoints: "),
    ],
)  # fmt: skip
def test_bad_requests_get_json_errors_and_store_nothing(
    client: httpx.Client, path: str, body: bytes, status: int, code: str, advice: str
) -> None:
    before = _stored(client, "fail")
    response = client.post(path, content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()
    assert error["code"] == code
    assert advice in error["message"] and error["error"] == error["message"]
    assert _stored(client, "fail") == before
    assert client.post("/v2/echo/runsync", json={"input": {"still": "serving"}}).json()["status"] == "COMPLETED"


def test_unknown_job_and_route_are_json_404s(client: httpx.Client) -> None:
    for method, path in [("GET", "/v2/echo/status/nope"), ("POST", "/v2/echo/cancel/nope"), ("GET", "/v1/jobs/x"),
                         ("GET", "/v2/echo/nonsense")]:  # fmt: skip
        response = client.request(method, path)
        assert response.status_code == 404, path
        assert response.json()["code"] == "not_found"


def test_body_over_the_limit_is_413_and_not_stored(client: httpx.Client) -> None:
    before = _stored(client, "echo")
    response = client.post("/v2/echo/run", json={"input": {"blob": "x" * 60_000}})
    assert response.status_code == 413
    assert response.json()["code"] == "payload_too_large"
    assert "--max-body-mb" in response.json()["message"]
    assert _stored(client, "echo") == before


def test_pickled_input_is_refused_without_allow_pickle(client: httpx.Client) -> None:
    envelope = {PICKLE_KEY: base64.b64encode(b"not even a pickle").decode()}
    response = client.post("/v2/echo/run", json={"input": envelope})
    assert response.status_code == 400
    assert response.json()["code"] == "pickle_not_allowed"
    assert "--allow-pickle" in response.json()["message"]


def test_output_json_cannot_carry_fails_the_job_with_a_clear_reason(client: httpx.Client) -> None:
    state = client.post("/v2/weird/runsync", json={"input": {}}).json()
    assert state["status"] == "FAILED"
    job = client.get(f"/v1/jobs/{state['id']}").json()
    assert job["reason"] == "output_not_serializable"
    assert "cannot be carried as JSON" in job["error"]["message"]


def test_wrong_method_is_a_json_405(client: httpx.Client) -> None:
    response = client.get("/v2/echo/run")
    assert response.status_code == 405
    assert response.json()["code"] == "method_not_allowed" and "POST" in response.json()["message"]
