"""A class endpoint's instances per worker (``worker/handler.py``): at most ``FLASHPOINT_MAX_INSTANCES``, the least
recently used dropped. The cache by table, then through ``Handler`` with a real class (constructed in a thread, as a
worker does); a real worker process is in ``tests/e2e/test_instances.py``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from flashpoint.wire import codec
from flashpoint.worker.handler import MAX_INSTANCES, Handler, Instances, max_instances


@pytest.mark.parametrize(
    ("limit", "uses", "kept", "dropped"),
    [
        (2, "ab", "ab", ""),
        (2, "abc", "bc", "a"),
        (2, "abac", "ac", "b"),  # a was used again: b is the least recent
        (2, "abacb", "cb", "ba"),
        (1, "abab", "b", "aba"),
        (3, "abcabcd", "bcd", "a"),
        (4, "aaaa", "a", ""),
    ],
)
async def test_the_least_recently_used_instance_goes_past_the_limit(
    limit: int, uses: str, kept: str, dropped: str
) -> None:
    cache = Instances(limit)
    loop = asyncio.get_running_loop()
    gone: list[str] = []
    for key in uses:
        if cache.get(key) is None:
            gone += cache.put(key, loop.create_future())
        assert len(cache) <= limit
    assert cache.keys() == list(kept) and gone == list(dropped)


async def test_forget_drops_only_the_instance_it_names() -> None:
    cache = Instances(2)
    loop = asyncio.get_running_loop()
    first, second = loop.create_future(), loop.create_future()
    cache.put("a", first)
    cache.put("a", second)  # replaced meanwhile
    cache.forget("a", first)
    assert cache.get("a") is second
    cache.forget("a", second)
    assert cache.get("a") is None and len(cache) == 0


@pytest.mark.parametrize(
    ("env", "limit"),
    [({}, MAX_INSTANCES), ({"FLASHPOINT_MAX_INSTANCES": ""}, MAX_INSTANCES), ({"FLASHPOINT_MAX_INSTANCES": "1"}, 1),
     ({"FLASHPOINT_MAX_INSTANCES": " 12 "}, 12)],
)  # fmt: skip
def test_the_limit_comes_from_the_environment(env: dict[str, str], limit: int) -> None:
    assert max_instances(env) == limit


@pytest.mark.parametrize("text", ["0", "-1", "2.5", "four", "1e3"])
def test_an_unusable_limit_says_what_to_set(text: str) -> None:
    with pytest.raises(ValueError, match=r"FLASHPOINT_MAX_INSTANCES is how many instances .* got "):
        max_instances({"FLASHPOINT_MAX_INSTANCES": text})
    with pytest.raises(ValueError):
        Instances(0)


class Model:
    """Counts its constructions; ``load`` says which instance answered."""

    built: list[int] = []

    def __init__(self, size: int) -> None:
        Model.built.append(size)
        self.size = size
        self.calls = 0

    def load(self) -> list[int]:
        self.calls += 1
        return [self.size, self.calls]


async def test_a_handler_keeps_the_most_recent_instances_and_rebuilds_a_dropped_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    Model.built = []
    handler = Handler(Model, instances=2)

    async def call(size: int) -> Any:
        init = codec.encode_call((size,), {})
        return await handler({"id": "j", "input": {}, "flashpoint": {"init": init}})

    answers = [await call(size) for size in (1, 2, 1, 3, 2, 1)]

    # 1, 2 built; 1 again (kept); 3 drops 2 (the least recent); 2 is built again and drops 1; 1 is built again
    assert Model.built == [1, 2, 3, 2, 1]
    assert answers == [[1, 1], [2, 1], [1, 2], [3, 1], [2, 1], [1, 1]]
    assert "dropped the least recently used instance of Model" in capsys.readouterr().err
