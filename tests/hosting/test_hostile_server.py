"""A served app against hostile data (issue 9): deep nesting, text UTF-8 cannot carry, a full queue, a result too
large for the plane. Real `flashpoint serve` processes, real workers, real HTTP."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.conftest import Served

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def _post(served: Served, path: str, raw: str) -> httpx.Response:
    headers = {**served.headers, "Content-Type": "application/json"}
    return httpx.post(f"{served.url}{path}", content=raw.encode(), headers=headers, timeout=60)


def test_deep_nesting_is_a_400_and_the_server_goes_on(serve: Any) -> None:
    served = serve()
    for depth in (129, 1_000, 100_000):
        body = '{"input": {"payload": ' + "[" * depth + "]" * depth + "}}"
        answer = _post(served, "/v2/echo/run", body)
        assert answer.status_code == 400, (depth, answer.text)
        assert answer.json()["code"] == "bad_json" and "nested deeper than 128" in answer.json()["message"]
    shallow = '{"input": {"payload": ' + "[" * 100 + "]" * 100 + "}}"
    assert _post(served, "/v2/echo/runsync", shallow).json()["status"] == "COMPLETED"


def test_lone_surrogates_travel_through_input_output_error_and_listings(serve: Any) -> None:
    served = serve()
    # the raw JSON text holds the escape: valid JSON, not representable in UTF-8
    done = _post(served, "/v2/echo/runsync", '{"input": {"s": "\\ud800 and \\udfff"}}')
    assert done.status_code == 200, done.text
    state = done.json()
    assert state["status"] == "COMPLETED" and state["output"]["payload"] == {"s": "\ud800 and \udfff"}
    failed = _post(served, "/v2/fail/runsync", '{"input": {"message": "file \\udcff"}}')
    assert failed.status_code == 200, failed.text
    assert failed.json()["status"] == "FAILED" and "file \udcff" in failed.json()["error"]
    with httpx.Client(base_url=served.url, headers=served.headers, timeout=30) as client:
        failed_id = failed.json()["id"]
        for path in (f"/v2/echo/status/{state['id']}", f"/v1/jobs/{state['id']}", f"/v2/fail/status/{failed_id}",
                     "/v1/jobs", "/v1/jobs?endpoint=fail"):  # fmt: skip
            answer = client.get(path)
            assert answer.status_code == 200, (path, answer.text)
            json.loads(answer.content.decode("utf-8"))  # valid UTF-8 JSON, surrogates escaped


def test_a_full_queue_is_a_429_that_stores_nothing(serve: Any) -> None:
    served = serve("--max-queued-mb", "0.001")  # 1,048 bytes of queued input
    big = json.dumps({"input": {"payload": "x" * 2000}})
    answer = _post(served, "/v2/echo/run", big)
    assert answer.status_code == 429 and answer.json()["code"] == "queue_full"
    assert "--max-queued-mb" in answer.json()["message"]
    stored = httpx.get(f"{served.url}/v1/jobs", params={"endpoint": "echo"}, headers=served.headers).json()["jobs"]
    assert stored == []
    assert _post(served, "/v2/echo/runsync", '{"input": {"small": 1}}').json()["status"] == "COMPLETED"


def test_a_result_over_the_limit_fails_its_job_with_a_reason(serve: Any) -> None:
    served = serve("--max-result-mb", "0.01")  # 10 KiB
    state = _post(served, "/v2/count/runsync", '{"input": {"n": 2000}}').json()  # about 20 KB of aggregated output
    assert state["status"] == "FAILED" and state["reason"] == "output_too_large"
    assert "--max-result-mb" in state["error"]
    assert _post(served, "/v2/count/runsync", '{"input": {"n": 3}}').json()["output"] == [{"i": 0}, {"i": 1}, {"i": 2}]
