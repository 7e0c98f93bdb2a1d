"""Stubs for resources declared elsewhere (rc2's ``runpod/apps/stubs.py``): construction, environment, options, and
their calls over an in-memory target."""

from __future__ import annotations

from typing import Any

import pytest

from flashpoint.runpodapps import Api, Job, Queue
from flashpoint.runpodapps.targets import InvocationTarget
from tests.runpodapps.memtarget import MemoryTarget


@pytest.fixture
def target(monkeypatch: pytest.MonkeyPatch) -> MemoryTarget:
    """Every stub's calls go to one in-memory target (``with_options`` clones are plain ``Queue`` objects, as rc2's)."""
    memory = MemoryTarget(lambda **kwargs: kwargs)

    def _target(self: object) -> InvocationTarget:
        return memory

    monkeypatch.setattr(Queue, "_target", _target)
    monkeypatch.setattr(Api, "_target", _target)
    return memory


@pytest.mark.parametrize("kwargs", [{}, {"name": "a", "id": "b"}])
def test_exactly_one_of_name_and_id(kwargs: dict[str, Any]) -> None:
    for stub in (Queue, Api):
        with pytest.raises(ValueError) as raised:
            stub(app="other", **kwargs)
        assert str(raised.value) == "provide exactly one of name= or id="


def test_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Queue(app="a", name="q").env == "default"
    monkeypatch.setenv("FLASH_ENVIRONMENT", "staging")
    assert Queue(app="a", name="q").env == "staging"
    assert Api(app="a", id="ep-1", env="prod").env == "prod"


def test_reprs_and_fields() -> None:
    queue = Queue(app="other", name="transcribe")
    assert (queue.app_name, queue.resource_name, queue.resource_id) == ("other", "transcribe", None)
    assert repr(queue) == "<Queue stub other/transcribe>"
    assert repr(Api(app="other", id="ep-9")) == "<Api stub other/ep-9>"


def test_queue_with_options() -> None:
    queue = Queue(app="a", id="ep-1", env="e")
    clone = queue.with_options(ttl=5).with_options(low_priority=True, webhook="https://h")
    assert queue._job_options == {}
    assert (clone.resource_id, clone.env, clone.resource_name) == ("ep-1", "e", None)
    assert clone._job_options == {"policy": {"ttl": 5, "lowPriority": True}, "webhook": "https://h"}


def test_queue_calls_are_by_keyword(target: MemoryTarget) -> None:
    queue = Queue(app="a", name="q")
    assert queue.remote(text="hi") == {"text": "hi"}
    assert queue.with_options(ttl=3).remote() == {}
    assert target.payloads == [
        {"input": {"text": "hi"}},
        {"input": {"__empty": True}, "policy": {"ttl": 3}},
    ]
    with pytest.raises(TypeError):
        queue.remote("positional")


def test_queue_spawn_and_job(target: MemoryTarget) -> None:
    queue = Queue(app="a", name="q")
    job = queue.spawn(x=1)
    assert isinstance(job, Job)
    assert job.result() == {"x": 1}
    assert queue.job(job.id).status() == "COMPLETED"


def test_queue_stream(target: MemoryTarget) -> None:
    target.fn = lambda n: iter(range(n))
    assert list(Queue(app="a", name="q").stream(n=3)) == [0, 1, 2]


def test_api_verbs(target: MemoryTarget) -> None:
    api = Api(app="a", name="inference")
    assert api.post("/generate", {"prompt": "hi"}) == {"method": "POST", "path": "/generate", "body": {"prompt": "hi"}}
    for verb in ("get", "put", "delete", "patch"):
        assert getattr(api, verb)("/x")["method"] == verb.upper()
