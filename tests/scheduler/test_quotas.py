"""Quotas' pure decisions by table (decision 0113): periods, scopes, the hold check and its words, budgets and when
they renew, over a usage reader of the test's (``FakeUsage``: intervals of GPU use, cut by the window)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from flashpoint.explain import Code
from flashpoint.gpus import ANY_GPU, GpuType, model_of
from flashpoint.scheduler.quotas import (
    Quota,
    budget_message,
    canonical_model,
    format_period,
    hold_reason,
    key_hold_reason,
    parse_period,
    renews_at,
    spent,
)

H200 = model_of(GpuType.NVIDIA_H200)
H100 = model_of(GpuType.NVIDIA_H100_80GB_HBM3)
T0 = 1_800_000_000.0


@dataclass
class FakeUsage:
    """GPU use as intervals ``(app, env, key, start, end, gpus)``; a window counts the part of each inside it."""

    spans: list[tuple[str | None, str | None, str | None, float, float, int]] = field(default_factory=list)
    asked: int = 0

    def gpu_seconds(
        self,
        *,
        app: str | None = None,
        env: str | None = None,
        key: str | None = None,
        since: float,
        now: float | None = None,
    ) -> float:
        self.asked += 1
        end = T0 if now is None else now
        total = 0.0
        for a, e, k, start, stop, gpus in self.spans:
            if (app is not None and a != app) or (env is not None and e != env) or (key is not None and k != key):
                continue
            total += max(0.0, min(stop, end) - max(start, since)) * gpus
        return total


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1h", 3600), ("24h", 86400), ("7d", 604800), ("30m", 1800), ("2w", 1209600), (" 24H ", 86400)],
)
def test_periods_are_a_number_and_a_unit(text: str, seconds: int) -> None:
    assert parse_period(text) == seconds


@pytest.mark.parametrize("text", ["", "24", "h", "0h", "-1h", "1.5h", "1y", "367d", "30s", "1h30m", 24, None, "9" * 50])
def test_other_periods_are_refused_saying_what_to_write(text: object) -> None:
    with pytest.raises(ValueError, match="30m, 1h, 24h, 7d or 2w"):
        parse_period(text)


@pytest.mark.parametrize(("seconds", "text"), [(3600, "1h"), (86400, "24h"), (604800, "7d"), (1800, "30m")])
def test_periods_are_written_back_as_they_read(seconds: int, text: str) -> None:
    assert format_period(seconds) == text
    assert parse_period(text) == seconds


def test_a_model_is_the_catalogs_name_of_one_model() -> None:
    assert canonical_model("H100") == "NVIDIA H100 80GB HBM3"
    assert canonical_model("nvidia_h200") == "NVIDIA H200"
    with pytest.raises(ValueError, match="not a pool or any"):
        canonical_model("any")


SHOP = Quota(app="shop", max_gpus=4)
SHOP_PROD = Quota(app="shop", env="prod", max_gpus=2)
CI = Quota(key="ci", max_gpus=1)
CI_IN_SHOP = Quota(app="shop", key="ci", max_gpus=1)


@pytest.mark.parametrize(
    ("quota", "app", "env", "key", "endpoints", "covers"),
    [
        (SHOP, "shop", "prod", None, True, True),
        (SHOP, "shop", "staging", "ci", True, True),
        (SHOP, "other", "prod", None, False, False),
        (SHOP, None, None, None, False, False),  # an endpoint of no app
        (SHOP_PROD, "shop", "prod", None, True, True),
        (SHOP_PROD, "shop", "staging", None, False, False),
        (CI, "shop", "prod", "ci", False, True),  # a key's: not the planner's, but its jobs'
        (CI, None, None, "ci", False, True),
        (CI, "shop", "prod", "other", False, False),
        (CI_IN_SHOP, "shop", "prod", "ci", False, True),
        (CI_IN_SHOP, "other", "prod", "ci", False, False),
        (Quota(app="shop", gpu_hours=1.0), "shop", "prod", None, False, True),  # a budget alone holds nothing
    ],
)
def test_which_quota_applies(
    quota: Quota, app: str | None, env: str | None, key: str | None, endpoints: bool, covers: bool
) -> None:
    assert quota.of_endpoints(app, env) is endpoints
    assert quota.covers(app, env, key) is covers


@pytest.mark.parametrize(
    ("quota", "candidate", "held", "held_model", "need", "words"),
    [
        (SHOP, H200, 3, 3, 1, None),
        (SHOP, H200, 4, 4, 1, "app shop holds 4 of its 4 GPUs (quota: --app shop --max-gpus 4); frees when one"),
        (SHOP, H200, 3, 3, 2, "app shop holds 3 of its 4 GPUs and a worker needs 2 (quota: --app shop --max-gpus 4)"),
        (SHOP, H200, 0, 0, 8, "a worker needs 8 GPUs, more than app shop's quota of 4"),
        (SHOP_PROD, ANY_GPU, 2, 2, 1, "app shop env prod holds 2 of its 2 GPUs (quota: --app shop --env prod"),
        # a per-model limit holds its model back, and not the others
        (Quota(app="shop", models=(("NVIDIA H100 80GB HBM3", 2),)), H100, 2, 2, 1, "holds 2 of its 2 NVIDIA H100"),
        (Quota(app="shop", models=(("NVIDIA H100 80GB HBM3", 2),)), H200, 5, 3, 1, None),
        (Quota(app="shop", models=(("NVIDIA H100 80GB HBM3", 2),)), ANY_GPU, 5, 5, 1, None),
        (Quota(app="shop", max_gpus=0), H200, 0, 0, 1, "more than app shop's quota of 0"),
    ],
)
def test_the_hold_check_and_its_words(
    quota: Quota, candidate: object, held: int, held_model: int, need: int, words: str | None
) -> None:
    reason = hold_reason(quota, candidate, held=held, held_model=held_model, need=need)  # type: ignore[arg-type]
    if words is None:
        assert reason is None
    else:
        assert reason is not None and reason.code is Code.QUOTA
        assert words in reason.detail, reason.detail


def test_a_model_limit_names_its_model_in_the_command_that_set_it() -> None:
    quota = Quota(app="shop", models=(("NVIDIA H100 80GB HBM3", 2),))
    reason = hold_reason(quota, H100, held=2, held_model=2, need=1)
    assert reason is not None
    assert "(quota: --app shop --model 'NVIDIA H100 80GB HBM3' --max-gpus 2)" in reason.detail


@pytest.mark.parametrize(
    ("held", "held_model", "model", "need", "over"),
    [(0, 0, "NVIDIA H200", 1, False), (1, 1, "NVIDIA H200", 1, True), (1, 1, "NVIDIA H200", 0, False)],
)
def test_a_keys_hold_check(held: int, held_model: int, model: str, need: int, over: bool) -> None:
    why = key_hold_reason(CI, held=held, held_model=held_model, model=model, need=need)
    assert (why is not None) is over
    if why is not None:
        assert why.startswith("key ci holds 1 of its 1 GPUs (quota: --key ci --max-gpus 1)")
        assert "frees when one of its jobs ends" in why


BUDGET = Quota(app="shop", gpu_hours=10.0, period_s=86400)


def test_a_budget_under_its_hours_is_not_spent() -> None:
    usage = FakeUsage([("shop", "prod", None, T0 - 3600 * 9, T0, 1)])  # 9 GPU-hours
    assert spent(BUDGET, usage, T0) is None


def test_a_spent_budget_renews_when_enough_of_its_use_is_older_than_the_period() -> None:
    # Given 2 GPUs for 5 h, ending 1 h ago: 10 GPU-hours, the budget, in the last 24 h
    usage = FakeUsage([("shop", "prod", None, T0 - 6 * 3600, T0 - 3600, 2)])
    done = spent(BUDGET, usage, T0)
    assert done is not None
    assert done.used_s == pytest.approx(36000)
    # then it renews once the first second of that use is older than 24 h: 18 h from now
    assert done.renews_at == T0 + 18 * 3600 + 1
    assert done.retry_after_s == 18 * 3600 + 1
    assert usage.asked < 40  # a binary search, not a walk over the period
    # and a moment later it is no longer spent
    assert spent(BUDGET, usage, done.renews_at) is None
    assert spent(BUDGET, usage, done.renews_at - 1) is not None


def test_other_apps_use_counts_against_no_budget_but_its_own() -> None:
    usage = FakeUsage([("other", "prod", None, T0 - 86400, T0, 4)])
    assert spent(BUDGET, usage, T0) is None


def test_a_keys_budget_counts_its_jobs_use() -> None:
    quota = Quota(key="ci", gpu_hours=1.0, period_s=3600)
    usage = FakeUsage([("shop", "prod", "ci", T0 - 3600, T0, 1), ("shop", "prod", "other", T0 - 3600, T0, 8)])
    done = spent(quota, usage, T0)
    assert done is not None and done.renews_at == T0 + 1


def test_the_refusal_names_the_budget_its_use_and_when_it_renews() -> None:
    usage = FakeUsage([("shop", "prod", None, T0 - 6 * 3600, T0 - 3600, 2)])
    done = spent(BUDGET, usage, T0)
    assert done is not None
    message = budget_message(done)
    assert "the GPU-hour budget of app shop is spent: 10.00 of its 10 GPU-hours in the last 24h" in message
    assert "(quota: --app shop --gpu-hours 10 --period 24h)" in message
    assert "renews at 2027-01-16 02:00:01 UTC (in 18h)" in message
    assert "flashpoint quota set --app shop --gpu-hours H" in message


def test_renewal_with_use_up_to_now_is_a_full_period_away_at_most() -> None:
    usage = FakeUsage([("shop", "prod", None, T0 - 86400, T0, 1)])  # 24 GPU-hours, evenly: over 10
    assert renews_at(BUDGET, usage, T0) == T0 + 14 * 3600 + 1  # 10 h of it left in the window: under the budget


def test_quotas_round_trip_through_json() -> None:
    quota = Quota(
        app="shop", env="prod", key="ci", max_gpus=4, models=(("NVIDIA H200", 2),), gpu_hours=1.5, period_s=3600
    )
    assert Quota.from_json(quota.to_json()) == quota
    assert quota.to_json()["period"] == "1h"


@pytest.mark.parametrize(
    "bad",
    [{"maxGpus": -1}, {"maxGpus": True}, {"maxGpus": 1.5}, {"gpuHours": 0}, {"gpuHours": "1"}, {"models": []},
     {"models": {"NVIDIA H200": -2}}, {"periodS": 1}, {"app": 3}],
)  # fmt: skip
def test_quota_json_of_the_wrong_shape_is_refused(bad: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        Quota.from_json({"app": "shop", **bad})
