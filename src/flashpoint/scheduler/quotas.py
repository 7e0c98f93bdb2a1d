"""Quotas and budgets, as pure decisions (decision 0113): which quota applies to an endpoint, an app's environment or
a key; whether taking devices would go over one (the hold check, per GPU model or in total); whether a GPU-hour budget
over a rolling period is spent, and when it renews; and the words of each.

A quota's scope is an app (``--app``), an app's environment (``--app --env``), a key (``--key``), or a key within an
app or environment. One record per scope holds its limits: the most devices held at once (``max_gpus``, every model
together), the most of one model (``models``), and a budget of GPU-hours per rolling ``period_s``. Who applies them:
the plane's ``QuotaGate`` (``quotagate.py``) over its state; the records live in the server's data directory
(``hosting/quotastore.py``). Nothing here reads a clock or a file.
"""

from __future__ import annotations

import datetime
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from flashpoint.explain import Code, WaitReason
from flashpoint.gpus import AnyGPU, Candidate, GpuGroup, GpuType, model_of, parse_gpu

__all__ = [
    "DEFAULT_PERIOD",
    "MAX_BUDGET_HOURS",
    "MAX_GPUS",
    "Quota",
    "QuotaSource",
    "Spent",
    "UsageReader",
    "budget_message",
    "canonical_model",
    "format_period",
    "hold_reason",
    "parse_period",
    "renews_at",
    "spent",
]

#: a budget's period when ``--gpu-hours`` comes without ``--period``
DEFAULT_PERIOD = "24h"
#: the bounds of a period: a minute to a year
MIN_PERIOD_S, MAX_PERIOD_S = 60, 366 * 86400
#: the largest ``--max-gpus`` and ``--gpu-hours`` a quota takes (bounded input; far above any fleet)
MAX_GPUS = 1_000_000
MAX_BUDGET_HOURS = 1e9
_PERIOD = re.compile(r"([1-9][0-9]{0,5})([mhdw])")
_UNIT_S = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PERIOD_HINT = "write a period as a number and a unit: 30m, 1h, 24h, 7d or 2w (from a minute to 366 days)"


def parse_period(text: object) -> int:
    """``"24h"`` -> 86400: minutes (``m``), hours (``h``), days (``d``) or weeks (``w``), a minute to 366 days.

    Raises:
        ValueError: anything else, saying what to write.
    """
    match = _PERIOD.fullmatch(text.strip().lower()) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"{_PERIOD_HINT}; got {repr(text)[:40]}")
    seconds = int(match[1]) * _UNIT_S[match[2]]
    if not MIN_PERIOD_S <= seconds <= MAX_PERIOD_S:
        raise ValueError(f"{_PERIOD_HINT}; got {text!r}")
    return seconds


def format_period(seconds: int) -> str:
    """86400 -> ``"24h"``, 604800 -> ``"7d"``, 5400 -> ``"90m"``: the largest of d (whole days past a day), h, m."""
    if seconds % 86400 == 0 and seconds > 86400:
        return f"{seconds // 86400}d"
    if seconds % 3600 == 0:
        return f"{seconds // 3600}h"
    return f"{math.ceil(seconds / 60)}m"


def canonical_model(text: str) -> str:
    """The catalog's name of the one GPU model ``text`` names (``"H100"`` -> ``"NVIDIA H100 80GB HBM3"``).

    Raises:
        UnknownGPUError: an unknown or ambiguous name (from ``parse_gpu``).
        ValueError: a pool or ``any``, which is no single model.
    """
    parsed = parse_gpu(text)
    if isinstance(parsed, GpuGroup) or parsed is GpuType.ANY:
        raise ValueError(f"--model names one GPU model (e.g. H100, 'RTX 4090'), not a pool or any; got {text!r}")
    return (model_of(parsed) if isinstance(parsed, GpuType) else parsed).name


@dataclass(frozen=True, slots=True)
class Quota:
    """The limits of one scope (``app``, ``env``, ``key``; None: any). Names are checked where quotas are stored
    (``hosting/quotastore.py``), not here."""

    app: str | None = None
    env: str | None = None
    key: str | None = None
    #: the most devices of every model its workers hold at once (None: no limit)
    max_gpus: int | None = None
    #: the most devices of one model (its catalog name) held at once, per model
    models: tuple[tuple[str, int], ...] = ()
    #: the GPU-hours it may use per rolling ``period_s`` (None: no budget)
    gpu_hours: float | None = None
    period_s: int = 86400

    @property
    def scope(self) -> tuple[str | None, str | None, str | None]:
        return (self.app, self.env, self.key)

    @property
    def holds(self) -> bool:
        """It limits devices held at once (in total or of some model)."""
        return self.max_gpus is not None or bool(self.models)

    def within(self, app: str | None, env: str | None) -> bool:
        """Its app and environment (when it names them) are ``app`` and ``env``."""
        return (self.app is None or self.app == app) and (self.env is None or self.env == env)

    def of_endpoints(self, app: str | None, env: str | None) -> bool:
        """A hold quota on the workers of an app or environment (no key) that ``app``/``env``'s endpoints fall
        under: what the planner checks before it starts a worker."""
        return self.key is None and self.app is not None and self.holds and self.within(app, env)

    def covers(self, app: str | None, env: str | None, key: str | None) -> bool:
        """It applies to a job of an endpoint of ``app``/``env`` submitted by ``key``."""
        return (
            (self.key is None or self.key == key)
            and (self.app is not None or self.key is not None)
            and (self.within(app, env))
        )

    def limit_of(self, model: str | None) -> int | None:
        """The per-model limit of ``model`` (None: it sets none)."""
        return next((n for m, n in self.models if m == model), None) if model is not None else None

    def who(self) -> str:
        """``app shop``, ``app shop env prod``, ``key ci``, ``key ci in app shop``."""
        where = "" if self.app is None else f"app {self.app}" + ("" if self.env is None else f" env {self.env}")
        if self.key is None:
            return where
        return f"key {self.key}" + (f" in {where}" if where else "")

    def scope_flags(self) -> str:
        """``--app shop --env prod --key ci``: the scope as ``flashpoint quota`` names it."""
        parts = [f"--{name} {value}" for name, value in zip(("app", "env", "key"), self.scope, strict=True) if value]
        return " ".join(parts)

    def hold_flags(self, model: str | None = None) -> str:
        """The command that set one hold limit: ``--app shop --max-gpus 4`` or ``--app shop --model 'NVIDIA H100
        80GB HBM3' --max-gpus 2``."""
        if model is None:
            return f"{self.scope_flags()} --max-gpus {self.max_gpus}"
        return f"{self.scope_flags()} --model {_quoted(model)} --max-gpus {self.limit_of(model)}"

    def budget_flags(self) -> str:
        """``--app shop --gpu-hours 10 --period 24h``."""
        return f"{self.scope_flags()} --gpu-hours {self.gpu_hours:g} --period {format_period(self.period_s)}"

    def to_json(self) -> dict[str, Any]:
        return {
            "app": self.app,
            "env": self.env,
            "key": self.key,
            "maxGpus": self.max_gpus,
            "models": dict(self.models),
            "gpuHours": self.gpu_hours,
            "period": format_period(self.period_s),
            "periodS": self.period_s,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Quota:
        """What ``to_json`` wrote (shapes checked; names are the store's to check). ValueError when it is not."""
        models = data.get("models")
        models = {} if models is None else models
        period_s = data.get("periodS", 86400)
        if not isinstance(models, dict) or isinstance(period_s, bool) or not isinstance(period_s, int):
            raise ValueError("models or period")
        quota = cls(
            app=_text_or_none(data.get("app")),
            env=_text_or_none(data.get("env")),
            key=_text_or_none(data.get("key")),
            max_gpus=_count_or_none(data.get("maxGpus")),
            models=tuple(sorted((str(m), _count(n)) for m, n in models.items())),
            gpu_hours=_hours_or_none(data.get("gpuHours")),
            period_s=period_s,
        )
        if not MIN_PERIOD_S <= quota.period_s <= MAX_PERIOD_S:
            raise ValueError("period")
        return quota


class QuotaSource(Protocol):
    """Where a plane reads its quotas (``hosting.quotastore.QuotaStore``); asked on every plan, so it answers from
    memory."""

    def quotas(self) -> Sequence[Quota]: ...


class UsageReader(Protocol):
    """What the budget check needs of a usage meter (``scheduler/usage.py``'s ``UsageMeter``): the GPU-seconds used
    between ``since`` and ``now`` (wall time) by an app's or environment's workers (busy and idle), or by a key's
    jobs (busy), each filter applied when given."""

    def gpu_seconds(
        self,
        *,
        app: str | None = None,
        env: str | None = None,
        key: str | None = None,
        since: float,
        now: float | None = None,
    ) -> float: ...


# ----------------------------------------------------------------------------------------------------------------------
# holding devices


def hold_reason(quota: Quota, candidate: Candidate, *, held: int, held_model: int, need: int) -> WaitReason | None:
    """Why a worker needing ``need`` devices of ``candidate`` may not start under ``quota``, whose scope holds
    ``held`` devices in total and ``held_model`` of the candidate's model now (None: it may). A per-model limit
    applies to its model only; ``ANY`` is checked against the total alone (its model is not known before it is
    placed)."""
    model = None if isinstance(candidate, AnyGPU) else candidate.name
    label = "ANY" if model is None else model
    checks: list[tuple[int, int, str | None]] = []
    if quota.max_gpus is not None:
        checks.append((quota.max_gpus, held, None))
    per_model = quota.limit_of(model)
    if per_model is not None:
        checks.append((per_model, held_model, model))
    for limit, used, of in checks:
        if used + need <= limit:
            continue
        gpus = "GPUs" if of is None else f"{of} GPUs"
        flags = quota.hold_flags(of)
        if need > limit:
            detail = (
                f"a worker needs {need} {gpus}, more than {quota.who()}'s quota of {limit} (quota: {flags}); "
                f"raise it (flashpoint quota set {quota.scope_flags()}"
                + (f" --model {_quoted(of)}" if of else "")
                + f" --max-gpus {need})"
            )
        elif used >= limit:
            detail = (
                f"{quota.who()} holds {used} of its {limit} {gpus} (quota: {flags}); frees when one of its workers "
                "stops"
            )
        else:
            detail = (
                f"{quota.who()} holds {used} of its {limit} {gpus} and a worker needs {need} (quota: {flags}); frees "
                "when one of its workers stops"
            )
        return WaitReason(label, Code.QUOTA, detail)
    return None


def key_hold_reason(quota: Quota, *, held: int, held_model: int, model: str | None, need: int) -> str | None:
    """``hold_reason``'s words for a key's quota when a worker of ``need`` devices of ``model`` would take one of
    its jobs (None: it may): a key holds the devices of the workers running its jobs."""
    checks: list[tuple[int, int, str | None]] = []
    if quota.max_gpus is not None:
        checks.append((quota.max_gpus, held, None))
    per_model = quota.limit_of(model)
    if per_model is not None:
        checks.append((per_model, held_model, model))
    for limit, used, of in checks:
        if used + need > limit:
            gpus = "GPUs" if of is None else f"{of} GPUs"
            return (
                f"{quota.who()} holds {used} of its {limit} {gpus} (quota: {quota.hold_flags(of)}); its next job "
                f"needs a worker of {need}; frees when one of its jobs ends"
            )
    return None


# ----------------------------------------------------------------------------------------------------------------------
# budgets


@dataclass(frozen=True, slots=True)
class Spent:
    """A budget that is spent: its quota, the GPU-seconds used in its window, and when it renews (wall time: the
    earliest moment enough of that use is older than the period, if nothing more is used)."""

    quota: Quota
    used_s: float
    renews_at: float
    now: float = field(default=0.0)

    @property
    def retry_after_s(self) -> int:
        return max(1, math.ceil(self.renews_at - self.now))


def budget_used(quota: Quota, usage: UsageReader, now: float, *, since: float | None = None) -> float:
    """GPU-seconds ``quota``'s scope used in the window ending ``now`` (from ``since``; default: the period)."""
    start = now - quota.period_s if since is None else since
    return usage.gpu_seconds(app=quota.app, env=quota.env, key=quota.key, since=start, now=now)


def spent(quota: Quota, usage: UsageReader, now: float) -> Spent | None:
    """The budget of ``quota`` when it is spent at ``now`` (its window's use at or over its GPU-hours), else None."""
    if quota.gpu_hours is None:
        return None
    used = budget_used(quota, usage, now)
    if used < quota.gpu_hours * 3600:
        return None
    return Spent(quota, used, renews_at(quota, usage, now), now)


def renews_at(quota: Quota, usage: UsageReader, now: float) -> float:
    """The earliest wall time, to the second, at which the window's use falls under the budget if nothing more is
    used: the use since ``t - period`` (up to ``now``) shrinks as ``t`` grows, so a binary search over the period
    finds it (about 20 reads of the meter)."""
    budget = (quota.gpu_hours or 0.0) * 3600
    low, high = 0, quota.period_s  # seconds after now: at `high` the window starts at now and holds nothing
    while low < high:
        middle = (low + high) // 2
        if budget_used(quota, usage, now, since=now + middle - quota.period_s) < budget:
            high = middle
        else:
            low = middle + 1
    return now + low


def budget_message(spent: Spent) -> str:
    """The refusal: ``app shop has used 10.0 of its 10 GPU-hours in the last 24h (quota: --app shop --gpu-hours 10
    --period 24h); it renews at 2027-01-15 09:00:00 UTC (in 3h 20m), or raise it with flashpoint quota set ...``."""
    quota = spent.quota
    return (
        f"the GPU-hour budget of {quota.who()} is spent: {spent.used_s / 3600:.2f} of its {quota.gpu_hours:g} "
        f"GPU-hours in the last {format_period(quota.period_s)} (quota: {quota.budget_flags()}); new jobs are refused "
        f"until it renews at {iso(spent.renews_at)} (in {duration(spent.renews_at - spent.now)}), or raise it "
        f"(flashpoint quota set {quota.scope_flags()} --gpu-hours H)"
    )


def iso(t: float) -> str:
    """Wall time as ``2027-01-15 09:00:00 UTC``."""
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def duration(seconds: float) -> str:
    """``3h 20m``, ``45s``, ``2d 4h``."""
    s = max(0, math.ceil(seconds))
    days, s = divmod(s, 86400)
    hours, s = divmod(s, 3600)
    minutes, s = divmod(s, 60)
    parts = [f"{days}d" if days else "", f"{hours}h" if hours else "", f"{minutes}m" if minutes else ""]
    parts = [p for p in parts if p][:2]
    return " ".join(parts) or f"{s}s"


# ----------------------------------------------------------------------------------------------------------------------


def _quoted(text: str) -> str:
    return f"'{text}'" if " " in text else text


def _text_or_none(value: object) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise ValueError("name")


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_GPUS:
        raise ValueError("count")
    return value


def _count_or_none(value: object) -> int | None:
    return None if value is None else _count(value)


def _hours_or_none(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_BUDGET_HOURS:
        raise ValueError("hours")
    return float(value)
