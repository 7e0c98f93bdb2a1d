"""Fuzzing the HTTP API of a real `flashpoint serve` (issue 9's repeatable checks).

(a) schemathesis generates requests for every operation of the native ``/v1`` API from the server's own OpenAPI
    schema (``/openapi.json``), valid ones and invalid ones, and checks that none gets a 5xx and that the answers
    conform to the schema (status codes, content types, bodies).
(b) hand-made hostile requests against every Runpod client route and every worker route: JSON nested 1,000+ deep,
    lone UTF-16 surrogates, invalid UTF-8, huge numbers, oversized bodies, duplicate keys, non-object JSON, empty
    bodies, wrong content types, very long URLs and ids, wrong and missing keys, slow and abandoned bodies.

Every test collects what went wrong (rather than stopping at the first problem), so one failure lists every problem
found, and ends by checking that the server still answers ``/health`` and a ``/runsync``.
"""

from __future__ import annotations

import re
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.checks import not_a_server_error
from schemathesis.errors import FailureGroup
from schemathesis.specs.openapi.checks import (  # where 4.25 and later all define them
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.conftest import Served
from tests.hardening.support import APP, strict_json

pytestmark = [pytest.mark.slow, pytest.mark.hardening, pytest.mark.timeout(240)]

MAX_BODY_MB = 1
MAX_BODY = MAX_BODY_MB * 1024 * 1024
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMED_OUT"}
#: the read deadlines (headers, body) the slow-request test gives the server, in seconds
SERVER_DEADLINE_S = 1.0


@dataclass
class Findings:
    """Every problem seen, each with the request that showed it; asserted empty at the end of a test."""

    problems: list[str] = field(default_factory=list)
    requests: int = 0

    def add(self, label: str, problem: str) -> None:
        self.problems.append(f"{label}: {problem}")

    def response(
        self, label: str, response: httpx.Response, expect: Callable[[int], bool] | set[int] | None = None
    ) -> Any:
        """Record one answer: never a 5xx, always JSON (errors too), with a status ``expect`` allows; its JSON."""
        self.requests += 1
        text = response.text[:300]
        if response.status_code >= 500:
            self.add(label, f"answered {response.status_code}: {text!r}")
            return None
        allowed = expect(response.status_code) if callable(expect) else expect is None or response.status_code in expect
        if not allowed:
            self.add(label, f"answered {response.status_code}, expected {expect}: {text!r}")
        try:
            return strict_json(response.text)
        except ValueError as exc:
            self.add(label, f"answered {response.status_code} with a body that is not JSON ({exc}): {text!r}")
            return None

    def check(self) -> None:
        if self.problems:
            summary = f"{len(self.problems)} problem(s) in {self.requests} requests:\n" + "\n".join(self.problems)
            pytest.fail(summary, pytrace=False)


def _client(server: Served, **headers: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={**server.headers, **headers}, timeout=30)


def _still_serves(server: Served, findings: Findings) -> None:
    """The server answers /health and runs a fresh /runsync job after everything else."""
    with _client(server) as client:
        findings.response("GET /v2/echo/health afterwards", client.get("/v2/echo/health"), {200})
        try:
            answer = client.post(
                "/v2/echo/runsync", json={"input": {"after": "all"}}, params={"wait": 60_000}, timeout=90
            )
        except httpx.HTTPError as exc:
            findings.add("POST /v2/echo/runsync afterwards", f"no answer: {exc!r}")
            return
        body = findings.response("POST /v2/echo/runsync afterwards", answer, {200})
        if body is not None and (
            body.get("status") != "COMPLETED" or body.get("output") != {"payload": {"after": "all"}}
        ):
            findings.add("POST /v2/echo/runsync afterwards", f"did not complete: {body}")


def _wait_terminal(client: httpx.Client, endpoint: str, job_id: str, timeout: float = 30) -> httpx.Response | None:
    """Poll /status until the job is terminal; the last answer, or None if it never got there."""
    deadline = time.monotonic() + timeout
    while True:
        answer = client.get(f"/v2/{endpoint}/status/{job_id}")
        if answer.status_code != 200 or answer.json().get("status") in TERMINAL:
            return answer
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)  # the poll interval of a wait with a deadline


# ----------------------------------------------------------------------------------------------------------------------
# (a) schemathesis over the native /v1 API


def _seed_jobs(server: Served, pause: Any, log: Any) -> dict[str, str]:
    """A completed, a failed and a running job (until ``pause`` is removed), so that the fuzzed routes also answer
    with real jobs."""
    pause.touch()
    with _client(server) as client:
        done = client.post("/v2/echo/runsync", json={"input": {"x": [1, "two", None]}}, params={"wait": 60_000})
        failed = client.post("/v2/fail/runsync", json={"input": {"message": "on purpose"}}, params={"wait": 60_000})
        running = client.post("/v2/record/run", json={"input": {"n": 0, "log": str(log), "pause": str(pause)}})
        assert done.json()["status"] == "COMPLETED", done.text
        assert failed.json()["status"] == "FAILED", failed.text
        assert running.status_code == 200, running.text
        return {"completed": done.json()["id"], "failed": failed.json()["id"], "running": running.json()["id"]}


#: a deploy's upload is a .tar.gz (api/approutes.py): schemathesis sends it as the bytes it makes for binary bodies
schemathesis.serializer.alias("application/gzip", "application/octet-stream")


def test_schemathesis_finds_no_server_error_in_the_native_api(serve: Any, tmp_path: Any) -> None:
    server = serve(app=APP)
    pause = tmp_path / "pause"
    jobs = _seed_jobs(server, pause, tmp_path / "ran.log")
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json", headers=server.headers, timeout=30)
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    findings = Findings()
    budget_end = time.monotonic() + 150  # the whole fuzzing run, whatever the number of operations
    seen: dict[str, int] = {}

    def fuzz(operation: Any, strategy: Any, examples: int, what: str) -> None:
        @given(case=strategy)
        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=True,  # the same requests on every run: CI failures reproduce
            suppress_health_check=list(HealthCheck),
            phases=[Phase.explicit, Phase.generate],
        )
        def run(case: Any) -> None:
            if time.monotonic() > budget_end:
                return
            findings.requests += 1
            seen[operation.label] = seen.get(operation.label, 0) + 1
            try:
                response = case.call(base_url=server.url, headers=server.headers, timeout=30)
            except Exception as exc:  # a connection the server dropped is a finding too
                findings.add(f"{what} {case.method} {case.formatted_path} {case.query}", f"no answer: {exc!r}")
                return
            try:
                case.validate_response(response, checks=checks)
            except (Exception, FailureGroup) as exc:  # a FailureGroup is a BaseExceptionGroup
                detail = re.sub(r"\s+", " ", str(exc))[:800]
                findings.add(f"{what} {case.method} {case.formatted_path} query={case.query}", detail)

        try:
            run()
        except Unsatisfiable:
            pass  # nothing invalid can be generated for an operation without parameters

    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 5, [op.label for op in operations]
    for operation in operations:
        path = operation.path
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            fuzz(operation, operation.as_strategy(generation_mode=mode), 25, mode.value)
        # the same operation on real names and ids, so the schema of real answers is checked too
        real: list[dict[str, str]] = []
        if "{job_id}" in path:
            real = [{"job_id": job_id} for job_id in jobs.values()]
        elif "{name}" in path:
            real = [{"name": name} for name in ("echo", "record", "fail")]
        query = {"timeout": 0.2} if path.endswith("/wait") else None  # the running job would hold /wait 30 s
        for parameters in real:
            strategy = operation.as_strategy(path_parameters=parameters, query=query)
            fuzz(operation, strategy, 5, f"real {parameters}")
    assert time.monotonic() <= budget_end, f"the fuzzing ran out of time; requests per operation: {seen}"
    pause.unlink()  # the running job may finish now
    _still_serves(server, findings)
    findings.check()


# ----------------------------------------------------------------------------------------------------------------------
# (b) hostile requests, made by hand

#: Runpod's client routes, as (method, path) with {id} for a job id
CLIENT_ROUTES = [
    ("POST", "/v2/echo/run"),
    ("POST", "/v2/echo/runsync?wait=1000"),
    ("GET", "/v2/echo/status/{id}"),
    ("GET", "/v2/echo/stream/{id}"),
    ("POST", "/v2/echo/cancel/{id}"),
    ("POST", "/v2/echo/retry/{id}"),
    ("POST", "/v2/echo/purge-queue"),
    ("GET", "/v2/echo/health"),
]
#: the worker protocol's routes
WORKER_ROUTES = [
    ("GET", "/v2/echo/job-take/w1"),
    ("GET", "/v2/echo/job-take-batch/w1?batch_size=5"),
    ("GET", "/v2/echo/job-stop/w1"),
    ("POST", "/v2/echo/job-done/w1/{id}"),
    ("POST", "/v2/echo/job-done-batch/w1?take=1"),
    ("POST", "/v2/echo/job-stream/w1/{id}"),
    ("GET", "/v2/echo/ping/w1"),
]


def _deep(depth: int, opener: bytes = b"[", closer: bytes = b"]", leaf: bytes = b"") -> bytes:
    return b'{"input": {"x": ' + opener * depth + leaf + closer * depth + b"}}"


#: hostile bodies: name -> (raw body, content type or None, what /run and /runsync must answer: a set of statuses,
#: or None for "anything below 500")
HOSTILE: dict[str, tuple[bytes, str | None, set[int] | None]] = {
    "json nested 1,500 deep (lists)": (_deep(1500), "application/json", {400}),
    "json nested 1,500 deep (objects)": (_deep(1500, b'{"a": ', b"}", b"1"), "application/json", {400}),
    "json nested 100,000 deep": (_deep(100_000), "application/json", {400}),
    "invalid utf-8": (b'{"input": {"s": "\xff\xfe"}}', "application/json", {400}),
    "utf-8-encoded surrogate (CESU)": (b'{"input": {"s": "\xed\xa0\x80"}}', "application/json", {400}),
    "1e999999": (b'{"input": {"x": 1e999999}}', "application/json", None),
    "-1e999999": (b'{"input": {"x": -1e999999}}', "application/json", None),
    "NaN literal": (b'{"input": {"x": NaN}}', "application/json", None),
    "10,000-digit int": (b'{"input": {"x": ' + b"7" * 10_000 + b"}}", "application/json", None),
    "duplicate keys": (b'{"input": {"a": 1}, "input": {"a": 2}}', "application/json", None),
    "list body": (b"[]", "application/json", {400}),
    "number body": (b"1", "application/json", {400}),
    "string body": (b'"input"', "application/json", {400}),
    "null body": (b"null", "application/json", {400}),
    "empty body": (b"", None, {400}),
    "truncated json": (b'{"input": {', "application/json", {400}),
    "trailing garbage": (b'{"input": {}} }', "application/json", {400}),
    "byte order mark": (b'\xef\xbb\xbf{"input": {}}', "application/json", None),
    "form body": (b"input=1", "application/x-www-form-urlencoded", {400}),
    "input not an object": (b'{"input": 5}', "application/json", {400}),
    "no input": (b'{"inpt": {}}', "application/json", {400}),
    "policy ttl 1e999999": (b'{"input": {}, "policy": {"ttl": 1e999999}}', "application/json", {400}),
    "policy negative timeout": (b'{"input": {}, "policy": {"executionTimeout": -1}}', "application/json", {400}),
    "policy an empty list": (b'{"input": {}, "policy": []}', "application/json", {400}),
    "policy a list": (b'{"input": {}, "policy": [1]}', "application/json", {400}),
    "policy false": (b'{"input": {}, "policy": false}', "application/json", {400}),
    "webhook file url": (b'{"input": {}, "webhook": "file:///etc/passwd"}', "application/json", {400}),
    "webhook a number": (b'{"input": {}, "webhook": 5}', "application/json", {400}),
    "flashpoint meta a list": (b'{"input": {}, "flashpoint": []}', "application/json", {400}),
    "pickled input": (b'{"input": {"__flashpoint_pickle__": "gARLAS4="}}', "application/json", {400}),
    "json as text/plain": (b'{"input": {"ct": 1}}', "text/plain", None),
    "json as form data": (b'{"input": {"ct": 2}}', "application/x-www-form-urlencoded", None),
    "json as multipart": (b'{"input": {"ct": 3}}', "multipart/form-data; boundary=zz", None),
    "json labelled latin-1": (b'{"input": {"ct": 4}}', "application/json; charset=latin-1", None),
    "json with no content type": (b'{"input": {"ct": 5}}', None, None),
}


def test_hostile_bodies_and_urls_on_client_routes_get_no_server_error(serve: Any) -> None:
    server = serve("--max-body-mb", str(MAX_BODY_MB), app=APP)
    findings = Findings()
    with _client(server) as client:
        done = client.post("/v2/echo/runsync", json={"input": {"a": 1}}, params={"wait": 60_000}).json()
        assert done["status"] == "COMPLETED", done
        job_id = done["id"]

        # every hostile body against every client route; /run and /runsync must also answer as HOSTILE says
        for name, (body, content_type, expect) in HOSTILE.items():
            headers = {"content-type": content_type} if content_type else {}
            for method, path in CLIENT_ROUTES:
                url = path.replace("{id}", job_id)
                label = f"{method} {url} with {name}"
                try:
                    answer = client.request(method, url, content=body, headers=headers)
                except httpx.HTTPError as exc:
                    findings.add(label, f"no answer: {exc!r}")
                    continue
                intake = path.startswith("/v2/echo/run")
                parsed = findings.response(label, answer, expect if intake else None)
                if intake and name.startswith("json nested") and isinstance(parsed, dict):
                    if parsed.get("code") != "bad_json":
                        findings.add(label, f"answered code {parsed.get('code')!r}, expected 'bad_json'")

        # oversized bodies: 413 before anything is parsed, by Content-Length or (chunked) while streaming
        big = b'{"input": {"s": "' + b"a" * (MAX_BODY + 1024) + b'"}}'

        def chunks() -> Iterator[bytes]:
            for start in range(0, len(big), 65536):
                yield big[start : start + 65536]

        for method, path in CLIENT_ROUTES:
            url = path.replace("{id}", job_id)
            answers = [(f"{method} {url} with {len(big)} bytes", client.request(method, url, content=big))]
            if path.startswith("/v2/echo/run"):
                answers.append(
                    (f"{method} {url} with {len(big)} bytes chunked", client.request(method, url, content=chunks()))
                )
            for label, answer in answers:
                parsed = findings.response(label, answer, {413})
                if isinstance(parsed, dict) and parsed.get("code") != "payload_too_large":
                    findings.add(label, f"answered code {parsed.get('code')!r}, expected 'payload_too_large'")

        # very long URLs and ids, odd path segments
        odd = [
            f"/v2/echo/status/{'a' * 60_000}",
            f"/v2/echo/cancel/{'b' * 20_000}",
            f"/v2/{'e' * 10_000}/run",
            f"/v2/{'e' * 10_000}/health",
            "/v2/echo/status/%00",
            "/v2/echo/status/%ff%fe",
            "/v2/echo/status/..%2f..%2fetc%2fpasswd",
            "/v2/%F0%9F%92%A5/health",
            "/v2/echo/status/" + job_id + "?" + "q=1&" * 5000,
        ]
        for url in odd:
            method = "POST" if url.endswith(("/run", "/runsync")) or "/cancel/" in url else "GET"
            findings.response(f"{method} {url[:80]}...", client.request(method, url, json={"input": {}}))
        for target, what in ((b"/v2/echo/status/" + b"c" * 200_000, "a 200 KB request target"),):
            status = _raw_status(server, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            if status is None or status >= 500:
                findings.add(f"GET with {what}", f"answered {status}")
        status = _raw_status(
            server, b"GET /v2/echo/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"h" * 200_000 + b"\r\n\r\n"
        )
        if status is None or status >= 500:
            findings.add("GET /v2/echo/health with a 200 KB header", f"answered {status}")

        # accepted hostile inputs must run to an end like any other job (the echo returns what it was given); this
        # process needs a higher recursion limit to parse and compare them itself
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 10_000))
        try:
            _accepted_inputs_echo(client, findings)
        finally:
            sys.setrecursionlimit(limit)

        # a wrong, blank or missing API key on every client route: 401, even with a hostile body
        for headers in ({"authorization": "Bearer wrong"}, {"authorization": ""}, {"authorization": "Bearer"}, {}):
            for method, path in CLIENT_ROUTES:
                url = path.replace("{id}", job_id)
                with httpx.Client(base_url=server.url, headers=headers, timeout=30) as bare:
                    label = f"{method} {url} with authorization {headers.get('authorization', '(none)')!r}"
                    findings.response(label, bare.request(method, url, content=_deep(1500)), {401})
    _still_serves(server, findings)
    findings.check()


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


def _accepted_inputs_echo(client: httpx.Client, findings: Findings) -> None:
    """Inputs the server may accept: if it does, the job completes and echoes them exactly."""
    for name, raw, value in (
        ("nested 500 deep", _deep(500), {"x": _nested(500)}),
        ("nested 990 deep", _deep(990), {"x": _nested(990)}),
        ("a 4,000-digit int", b'{"input": {"x": ' + b"7" * 4000 + b"}}", {"x": int("7" * 4000)}),
        ("a NUL character", b'{"input": {"x": "a\\u0000b"}}', {"x": "a\x00b"}),
    ):
        label = f"POST /v2/echo/runsync with {name}"
        body = findings.response(label, client.post("/v2/echo/runsync", content=raw, params={"wait": 30_000}))
        if body is None or "id" not in body:
            continue  # refused (4xx): a limit the server documents is fine
        if body.get("status") != "COMPLETED" or body.get("output") != {"payload": value}:
            detail = {k: body.get(k) for k in ("status", "reason", "error")}
            findings.add(label, f"was accepted but did not echo its input: {str(detail)[:400]}")
    for name in ("1e999999", "-1e999999", "NaN literal"):
        raw = HOSTILE[name][0]
        label = f"POST /v2/echo/run with {name}"
        body = findings.response(label, client.post("/v2/echo/run", content=raw))
        if body is not None and "id" in body:  # accepted: it must end, and its answers stay standard JSON
            final = _wait_terminal(client, "echo", body["id"])
            if final is None:
                findings.add(label, "was accepted and never finished")
            else:
                findings.response(f"GET /v2/echo/status of the job with {name}", final, {200})


def _raw_status(server: Served, request: bytes, timeout: float = 10) -> int | None:
    """Send raw bytes; the status of the answer, or None if the connection closed without one."""
    url = urlsplit(server.url)
    with socket.create_connection((url.hostname, url.port), timeout=timeout) as sock:
        try:
            sock.sendall(request)
        except OSError:
            pass  # the server may answer and close before reading everything
        head = b""
        try:
            while b"\r\n" not in head:
                data = sock.recv(4096)
                if not data:
                    break
                head += data
        except OSError:
            return None
    match = re.match(rb"HTTP/1\.[01] (\d{3})", head)
    return int(match.group(1)) if match else None


def test_lone_surrogates_are_accepted_and_come_back_escaped(serve: Any) -> None:
    """JSON may carry a lone UTF-16 surrogate as an escape (issue 9 point 2): the job runs, and /status, /runsync and
    the native API answer 200 with the same escape; nothing wedges."""
    server = serve(app=APP)
    findings = Findings()
    cases = {
        "high surrogate in a value": (rb'{"input": {"s": "\ud800"}}', {"s": "\ud800"}, r"\ud800"),
        "low surrogate in a key": (rb'{"input": {"\udfff": "k"}}', {"\udfff": "k"}, r"\udfff"),
        "reversed pair": (rb'{"input": {"s": "a\udc00\ud800b"}}', {"s": "a\udc00\ud800b"}, r"\udc00\ud800"),
    }
    with _client(server) as client:
        submitted = {}
        for name, (raw, _, _) in cases.items():
            body = findings.response(
                f"POST /v2/echo/run with a {name}", client.post("/v2/echo/run", content=raw), {200}
            )
            if body is not None and "id" in body:
                submitted[name] = body["id"]
        deadline = time.monotonic() + 30  # for all of them together
        for name, job_id in submitted.items():
            _, value, escape = cases[name]
            label = f"GET /v2/echo/status of the job with a {name}"
            try:
                answer = _wait_terminal(client, "echo", job_id, timeout=max(0.0, deadline - time.monotonic()))
            except httpx.HTTPError as exc:
                findings.add(label, f"no answer: {exc!r}")
                continue
            if answer is None:
                findings.add(label, f"the job never finished (30 s): {client.get(f'/v1/jobs/{job_id}').text[:300]}")
                continue
            body = findings.response(label, answer, {200})
            if body is not None and (body.get("status") != "COMPLETED" or body.get("output") != {"payload": value}):
                findings.add(label, f"did not echo its input: {str(body)[:400]}")
            if escape not in answer.text.lower():
                findings.add(label, f"the answer does not carry the escape {escape}: {answer.text[:300]!r}")
            native = client.get(f"/v1/jobs/{job_id}")
            findings.response(f"GET /v1/jobs of the job with a {name}", native, {200})
        raw, value, escape = cases["high surrogate in a value"]
        try:
            answer = client.post("/v2/echo/runsync", content=raw, params={"wait": 15_000}, timeout=60)
        except httpx.HTTPError as exc:
            findings.add("POST /v2/echo/runsync with a high surrogate", f"no answer: {exc!r}")
        else:
            body = findings.response("POST /v2/echo/runsync with a high surrogate", answer, {200})
            if body is not None and body.get("output") != {"payload": value}:
                findings.add("POST /v2/echo/runsync with a high surrogate", f"did not echo it: {str(body)[:300]}")
    _still_serves(server, findings)
    findings.check()


def test_worker_routes_refuse_everyone_without_the_worker_key(serve: Any) -> None:
    """Worker routes with no key, a blank, a wrong one or a client's API key: 401 whatever the body, never a 5xx."""
    server = serve("--max-body-mb", str(MAX_BODY_MB), app=APP)
    findings = Findings()
    bodies = {
        "no body": b"",
        "a result": b'{"output": {"stolen": true}}',
        "a result list": b'[{"id": "x", "output": 1}]',
        "json nested 1,500 deep": _deep(1500),
        "invalid utf-8": b'{"output": "\xff"}',
        "a lone surrogate": rb'{"output": "\ud800"}',
        "2 MiB": b'{"output": "' + b"a" * (2 * MAX_BODY) + b'"}',
    }
    with _client(server) as client:
        job = client.post("/v2/echo/run", json={"input": {"mine": True}}).json()["id"]
        for headers in (
            {},
            {"authorization": ""},
            {"authorization": "Bearer"},
            {"authorization": "wrong"},
            {"authorization": "Bearer wrong"},
            {"authorization": server.key},  # a client's API key is not the worker key
            {"authorization": f"Bearer {server.key}"},
        ):
            with httpx.Client(base_url=server.url, headers=headers, timeout=30) as bare:
                for method, path in WORKER_ROUTES:
                    url = path.replace("{id}", job)
                    for name, body in bodies.items() if method == "POST" else [("no body", b"")]:
                        label = f"{method} {url} with {name}, authorization {headers.get('authorization', '(none)')!r}"
                        try:
                            answer = bare.request(method, url, content=body)
                        except httpx.HTTPError as exc:
                            findings.add(label, f"no answer: {exc!r}")
                            continue
                        findings.response(label, answer, {401})
        # none of that reached the job: it runs and completes with its own output
        final = _wait_terminal(client, "echo", job)
        if final is None or final.json().get("output") != {"payload": {"mine": True}}:
            findings.add("the job the hostile workers named", f"ended as {None if final is None else final.text[:300]}")
    _still_serves(server, findings)
    findings.check()


def test_slow_and_abandoned_requests_neither_block_the_server_nor_log_tracebacks(
    serve: Any, capfd: pytest.CaptureFixture[str]
) -> None:
    """Clients that send a few bytes and stall (issue 9 point 4), or hang up mid-request (point 6): the server keeps
    serving meanwhile, answers a stalled request 408 once its own read deadline (set to 1 s here) passes, and logs no
    traceback for a client that went away."""
    server = serve("--header-timeout-s", str(SERVER_DEADLINE_S), "--body-timeout-s", str(SERVER_DEADLINE_S), app=APP)
    findings = Findings()
    url = urlsplit(server.url)
    key = server.key.encode()
    partial = {
        "a body that stalls after 10 of 200 bytes": (
            b"POST /v2/echo/run HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n" + b'{"input": ',
            {408},
        ),
        "a /runsync body that stalls after 10 of 200 bytes": (
            b"POST /v2/echo/runsync HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + b"\r\n"
            b"Content-Type: application/json\r\nContent-Length: 200\r\n\r\n" + b'{"input": ',
            {408},
        ),
        "a chunked body that stalls": (
            b"POST /v2/echo/run HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key + b"\r\n"
            b'Transfer-Encoding: chunked\r\n\r\n5\r\n{"inp\r\n',
            {408},
        ),
        "a head that stalls": (b"POST /v2/echo/run HTTP/1.1\r\nHost: x\r\nContent-Le", {408}),
        "a worker route body that stalls, with a wrong key": (
            b"POST /v2/echo/job-done/w1/j1 HTTP/1.1\r\nHost: x\r\nAuthorization: wrong\r\nContent-Length: 200\r\n\r\n{",
            {401, 408},
        ),
    }
    stalled: list[tuple[str, socket.socket, set[int]]] = []
    abandoned: list[socket.socket] = []
    try:
        for name, (request, expect) in partial.items():
            for copy in range(4):
                sock = socket.create_connection((url.hostname, url.port), timeout=10)
                sock.sendall(request)
                if copy % 2:
                    abandoned.append(sock)  # this client hangs up before the server's deadline
                else:
                    stalled.append((name, sock, expect))  # this one waits for the server to give up
        with _client(server) as client:
            started = time.monotonic()
            findings.response("GET /v2/echo/health while 20 requests stall", client.get("/v2/echo/health"), {200})
            answer = client.post("/v2/echo/runsync", json={"input": {"during": 1}}, params={"wait": 30_000}, timeout=60)
            findings.response("POST /v2/echo/runsync while 20 requests stall", answer, {200})
            if time.monotonic() - started > 20:
                findings.add("the server while requests stall", f"took {time.monotonic() - started:.1f}s to answer")
        for sock in abandoned:
            sock.close()  # hang up mid-request
        # the server gives up on each stalled request itself: 408, then it closes the connection
        deadline = time.monotonic() + SERVER_DEADLINE_S + 10
        for name, sock, expect in stalled:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                head = sock.recv(4096)
            except OSError as exc:
                findings.add(name, f"no answer {SERVER_DEADLINE_S + 10:.0f}s after the server's deadline: {exc!r}")
                continue
            match = re.match(rb"HTTP/1\.[01] (\d{3})", head)
            if match is None or int(match.group(1)) not in expect:
                findings.add(name, f"the server gave up on it with {head[:200]!r}, expected a status in {expect}")
    finally:
        for _, sock, _ in stalled:
            sock.close()
        for sock in abandoned:
            sock.close()
    with _client(server) as client:
        # the hangups reached the server long before this request, which waits behind a job round trip
        answer = client.post("/v2/echo/runsync", json={"input": {"after": 1}}, params={"wait": 30_000}, timeout=60)
        findings.response("POST /v2/echo/runsync after the hangups", answer, {200})
    _still_serves(server, findings)
    log = capfd.readouterr().err  # the server's stderr: it inherits this test's file descriptor 2
    if "starting worker" not in log:
        findings.add(
            "the server's log", "was not captured (no 'starting worker' line): tracebacks cannot be looked for"
        )
    tracebacks = [m.start() for m in re.finditer(r"^Traceback \(most recent call last\)", log, re.MULTILINE)]
    if tracebacks:
        start = tracebacks[0]
        findings.add(
            "the server's log", f"{len(tracebacks)} traceback(s); the first:\n{log[max(0, start - 300) : start + 2500]}"
        )
    findings.check()
