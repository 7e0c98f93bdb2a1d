"""A worker's caller key (``scheduler/credentials.py``): what it opens on a real embedded server's HTTP routes, and
what it never opens. No worker runs: the key is derived from the plane's secret, so the test derives it too."""

from __future__ import annotations

import hmac
from collections.abc import Callable

import httpx
import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.hosting.embedded import EmbeddedServer
from flashpoint.scheduler import credentials
from flashpoint.scheduler.credentials import caller_credential, caller_of, route_credential, worker_credential

#: a GPU the simulated fleet lacks: its jobs stay queued and no worker starts
waiting = Endpoint(name="caller-target", gpu=GpuType.NVIDIA_B200)(lambda text: text)


def key_of(embedded: EmbeddedServer, endpoint: str, worker: str) -> str:
    return caller_credential(embedded.plane.worker_credential(endpoint, worker), endpoint, worker)


def test_the_key_names_its_worker_and_any_change_refuses_it() -> None:
    keys = lambda endpoint, worker: worker_credential(b"secret", endpoint, worker)  # noqa: E731
    token = caller_credential(keys("a", "a-w1"), "a", "a-w1")
    assert caller_of(token, keys) == ("a", "a-w1")
    assert token != keys("a", "a-w1") and keys("a", "a-w1") not in token
    other = caller_credential(keys("a", "a-w2"), "a", "a-w2")
    assert other != token and caller_of(other, keys) == ("a", "a-w2")
    forged = caller_credential(keys("a", "a-w1"), "b", "a-w1")  # a's key, b's name
    for bad in (forged, token[:-1] + ("A" if token[-1] != "A" else "B"), "fpc.", "fpc.!!.x", "x" + token, ""):
        assert caller_of(bad, keys) is None
    assert caller_of(token, lambda e, w: worker_credential(b"another plane", e, w)) is None


def test_a_route_secret_is_its_own_key_per_worker_and_opens_nothing_else() -> None:
    keys = lambda endpoint, worker: worker_credential(b"secret", endpoint, worker)  # noqa: E731
    secret = route_credential(keys("a", "a-w1"), "a", "a-w1")
    assert len(secret) == 43 and secret == route_credential(keys("a", "a-w1"), "a", "a-w1")  # stateless
    others = {
        keys("a", "a-w1"),  # its pull key
        caller_credential(keys("a", "a-w1"), "a", "a-w1"),  # its caller key
        route_credential(keys("a", "a-w2"), "a", "a-w2"),  # another worker's
        route_credential(keys("b", "a-w1"), "b", "a-w1"),  # another endpoint's, same worker id
        route_credential(worker_credential(b"another plane", "a", "a-w1"), "a", "a-w1"),
    }
    assert secret not in others and len(others) == 5
    assert caller_of(secret, keys) is None  # not a caller key either


def test_the_mac_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[bytes] = []
    real = hmac.compare_digest

    def compare(a: bytes, b: bytes) -> bool:
        seen.append(a)
        return real(a, b)

    monkeypatch.setattr(credentials.hmac, "compare_digest", compare)
    keys = lambda endpoint, worker: worker_credential(b"secret", endpoint, worker)  # noqa: E731
    token = caller_credential(keys("a", "a-w1"), "a", "a-w1")
    assert caller_of(token, keys) is not None and seen == [token.encode()]


@pytest.mark.timeout(60)
@pytest.mark.slow
async def test_the_caller_key_opens_calls_and_its_own_jobs_only(
    make_embedded: Callable[..., EmbeddedServer],
) -> None:
    embedded = make_embedded("NVIDIA_H200:1")
    await waiting.explain()  # registered
    admin = {"Authorization": f"Bearer {embedded.api_key}"}
    mine = {"Authorization": f"Bearer {key_of(embedded, 'fanout-api', 'fanout-api-w1-abc')}"}
    theirs = {"Authorization": f"Bearer {key_of(embedded, 'fanout-api', 'fanout-api-w2-def')}"}
    async with httpx.AsyncClient(base_url=embedded.url, timeout=30) as client:
        body = {"input": {"text": "x"}}
        other = (await client.post("/v2/caller-target/run", json=body, headers=admin)).json()["id"]
        run = await client.post("/v2/caller-target/run", json=body, headers=mine)
        assert run.status_code == 200, run.text
        job = run.json()["id"]
        assert embedded.plane.job(job).extra["flashpoint"]["caller"] == "fanout-api-w1-abc"
        sync = await client.post("/v2/caller-target/runsync?wait=1000", json=body, headers=mine)
        assert sync.status_code == 200 and sync.json()["status"] == "IN_QUEUE"
        allowed = [
            client.get(f"/v2/caller-target/status/{job}", headers=mine),
            client.get(f"/v2/caller-target/stream/{job}", headers=mine),
            client.get(f"/v1/jobs/{job}", headers=mine),
            client.get(f"/v1/jobs/{job}/wait?timeout=0", headers=mine),
            client.get("/v1/endpoints/caller-target", headers=mine),
        ]
        for request in allowed:
            response = await request
            assert response.status_code == 200, (response.request.url, response.text)
        # another worker's job, or one an API key started: as if there were none
        for job_id, headers in ((job, theirs), (other, mine)):
            for method, path in (
                ("GET", f"/v2/caller-target/status/{job_id}"),
                ("GET", f"/v2/caller-target/stream/{job_id}"),
                ("POST", f"/v2/caller-target/cancel/{job_id}"),
                ("GET", f"/v1/jobs/{job_id}"),
                ("GET", f"/v1/jobs/{job_id}/wait?timeout=0"),
            ):
                response = await client.request(method, path, headers=headers)
                assert response.status_code == 404, (method, path, response.text)
        # everything else a client key opens is refused
        for method, path in (
            ("POST", f"/v2/caller-target/retry/{job}"),
            ("POST", "/v2/caller-target/purge-queue"),
            ("GET", "/v2/caller-target/health"),
            ("GET", "/v1/endpoints"),
            ("GET", "/v1/endpoints/caller-target/explain"),
            ("GET", "/v1/jobs"),
            ("GET", f"/v1/jobs/{job}/explain"),
            ("GET", f"/v1/jobs/{job}/logs"),
            ("GET", "/v1/fleet"),
        ):
            response = await client.request(method, path, headers=mine)
            assert response.status_code == 403, (method, path, response.text)
            assert response.json()["code"] == "forbidden"
        # worker routes take the worker key only; a wrong caller key is no key
        take = await client.get("/v2/fanout-api/job-take/fanout-api-w1-abc", headers=mine)
        assert take.status_code == 401
        token = mine["Authorization"]
        forged = {"Authorization": token[:-1] + ("A" if token[-1] != "A" else "B")}  # always a different key
        assert (await client.get(f"/v2/caller-target/status/{job}", headers=forged)).status_code == 401
        assert (await client.post(f"/v2/caller-target/cancel/{job}", headers=mine)).json()["status"] == "CANCELLED"
        assert embedded.plane.job(other).status.value == "IN_QUEUE"
