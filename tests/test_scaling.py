"""flashpoint's scaling options on ``Endpoint`` (issue 25, point 3), by table: what each accepts, and the error each
bad value gets, saying what to write."""

from __future__ import annotations

from typing import Any

import pytest

from flashpoint import Endpoint, GpuType
from flashpoint.errors import InvalidEndpointError
from flashpoint.scaling import Scaling


def target(n: dict[str, Any]) -> int:
    return len(n)


@pytest.mark.parametrize(
    ("options", "scaling", "rule"),
    [
        ({}, Scaling(), None),
        ({"target_latency_ms": 250}, Scaling(target_latency_ms=250), "latency"),
        ({"target_concurrency": 4}, Scaling(target_concurrency=4), "concurrency"),
        ({"scaler": target}, Scaling(scaler=target), "user"),
        (
            {"workers": (0, 3), "workers_schedule": {"0 9 * * 1-5": 2, " 0 18 * * 1-5 ": 0}},
            Scaling(workers_schedule=(("0 9 * * 1-5", 2), ("0 18 * * 1-5", 0))),
            None,
        ),
        (
            {"workers": 2, "target_concurrency": 1, "workers_schedule": {"0 9 * * *": 1}},
            Scaling(target_concurrency=1, workers_schedule=(("0 9 * * *", 1),)),
            "concurrency",
        ),
    ],
)
def test_scaling_options_accepted(options: dict[str, Any], scaling: Scaling, rule: str | None) -> None:
    spec = Endpoint(name="s", gpu=GpuType.NVIDIA_H200, **options).spec
    assert spec.scaling == scaling
    assert spec.scaling.rule == rule


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"target_latency_ms": 0}, "target_latency_ms must be a whole number >= 1, got 0; e.g. target_latency_ms=500"),
        ({"target_latency_ms": 2.5}, "target_latency_ms must be a whole number >= 1"),
        ({"target_concurrency": True}, "target_concurrency must be a whole number >= 1"),
        ({"scaler": "my_scaler"}, "scaler must be a function of the endpoint's metrics"),
        ({"target_latency_ms": 100, "target_concurrency": 2}, "target_latency_ms and target_concurrency are each a"),
        ({"target_concurrency": 2, "scaler": target}, "give one of them"),
        ({"workers_schedule": ["0 9 * * *"]}, "workers_schedule must map cron expressions to minimum workers"),
        ({"workers_schedule": {}}, "workers_schedule must map cron expressions"),
        ({"workers_schedule": {9: 1}}, "workers_schedule's keys are cron expressions (strings), got 9"),
        ({"workers": 2, "workers_schedule": {"0 9 * * *": 3}}, "from 0 to workers max (2), got 3"),
        ({"workers_schedule": {"0 9 * * *": -1}}, "from 0 to workers max (1), got -1"),
        ({"workers_schedule": {f"{m} 9 * * *": 1 for m in range(33)}}, "(1 to 32 entries)"),
    ],
)
def test_bad_scaling_options_say_what_to_write(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidEndpointError) as raised:
        Endpoint(name="s", gpu=GpuType.NVIDIA_H200, **options)
    assert message in str(raised.value)
    assert "Endpoint 's'" in str(raised.value)
