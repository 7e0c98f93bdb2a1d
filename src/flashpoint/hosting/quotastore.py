"""The server's quotas and budgets (decision 0113): one record per scope (an app, an app's environment, a key, or a
key within an app or environment) in its data directory (``<data-dir>/quotas/quotas.json``), set, listed and deleted
by ``flashpoint quota`` and ``/v1/quotas``, and read by the plane (``quotas()``, the plane's ``QuotaSource``).

Invariants:
- the records are in one JSON file, 0600 in a 0700 folder, replaced whole under a lock (``wholefile.py``, as the keys
  and secrets), so two writers never lose each other's change;
- names are checked as keys check theirs (``APP_NAME``, ``KEY_NAME``); a scope may name an app, environment or key
  that does not exist yet; a model is the catalog's name of one model;
- the plane asks ``quotas()`` on every plan: it answers from memory, reading the file again only after this store
  wrote it or, at most once a second, when the file changed under it (``flashpoint quota --data-dir``);
- a file that is not one this flashpoint wrote is refused with a ``ConfigError``, never rewritten.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flashpoint.errors import BadInputError, ConfigError, UnknownGPUError
from flashpoint.hosting.keystore import APP_NAME, KEY_NAME
from flashpoint.hosting.wholefile import locked, replace_whole
from flashpoint.scheduler.quotas import (
    DEFAULT_PERIOD,
    MAX_BUDGET_HOURS,
    MAX_GPUS,
    Quota,
    canonical_model,
    parse_period,
)

__all__ = ["MAX_QUOTAS", "QuotaStore"]

log = logging.getLogger("flashpoint.server")

#: the most quota records a server keeps (bounded input: each scope is one record)
MAX_QUOTAS = 1000
#: the most per-model limits one record holds
MAX_MODELS = 64
#: the file's format; a file of another is refused, never rewritten
VERSION = 1
FILE_NAME = "quotas.json"
#: how often ``quotas()`` looks whether the file changed under it (monotonic seconds)
RECHECK_S = 1.0

_Scope = tuple[str | None, str | None, str | None]


class QuotaStore:
    """The quotas under ``root`` (made 0700 on the first write). ``monotonic`` paces the plane's rereads."""

    def __init__(self, root: Path, *, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.root = Path(root)
        self.path = self.root / FILE_NAME
        self._monotonic = monotonic
        # the last file read, by its identity (inode, mtime, size), and its records
        self._identity: tuple[int, int, int] | None = None
        self._records: tuple[Quota, ...] = ()
        self._checked = float("-inf")

    def __repr__(self) -> str:
        return f"QuotaStore({str(self.root)!r})"

    def set(
        self,
        *,
        app: str | None = None,
        env: str | None = None,
        key: str | None = None,
        max_gpus: int | None = None,
        model: str | None = None,
        gpu_hours: float | None = None,
        period: str | None = None,
    ) -> Quota:
        """Set limits of the scope (``app``, ``env``, ``key``), keeping those not given: ``max_gpus`` the most
        devices at once (of ``model`` only, when given), ``gpu_hours`` a budget per rolling ``period`` (``24h`` when
        the scope has none yet). Returns the scope's record.

        Raises:
            BadInputError: a bad name, number, model or period, no limit at all, or a combination that cannot be.
        """
        _check_scope(app, env, key)
        if model is not None and max_gpus is None:
            raise BadInputError("--model limits the GPUs of one model held at once: give --max-gpus N with it")
        if max_gpus is None and gpu_hours is None and period is None:
            raise BadInputError(
                "say what to limit: --max-gpus N (the most GPUs held at once; with --model M, of that model) and/or "
                "--gpu-hours H --period 24h (a budget per rolling period)"
            )
        if max_gpus is not None and (isinstance(max_gpus, bool) or not isinstance(max_gpus, int)):
            raise BadInputError(f"--max-gpus is a whole number of GPUs; got {repr(max_gpus)[:40]}")
        if max_gpus is not None and not 0 <= max_gpus <= MAX_GPUS:
            raise BadInputError(f"--max-gpus is a whole number from 0 to {MAX_GPUS}; got {max_gpus}")
        canonical = _model(model) if model is not None else None
        if gpu_hours is not None and (
            isinstance(gpu_hours, bool)
            or not isinstance(gpu_hours, (int, float))
            or not 0 < gpu_hours <= MAX_BUDGET_HOURS
        ):
            raise BadInputError(
                f"--gpu-hours is a number of GPU-hours above 0 (at most {MAX_BUDGET_HOURS:g}); got "
                f"{repr(gpu_hours)[:40]} (to allow no GPUs at all, use --max-gpus 0)"
            )
        period_s: int | None = None
        if period is not None:
            try:
                period_s = parse_period(period)
            except ValueError as exc:
                raise BadInputError(f"--period: {exc}") from None
        with locked(self.root):
            records = self._read_file()
            old = records.get((app, env, key))
            if period_s is not None and gpu_hours is None and (old is None or old.gpu_hours is None):
                raise BadInputError("--period is the window of a budget: give --gpu-hours H with it")
            if old is None and len(records) >= MAX_QUOTAS:
                raise BadInputError(f"this server keeps at most {MAX_QUOTAS} quotas; delete some first")
            quota = old or Quota(app=app, env=env, key=key, period_s=parse_period(DEFAULT_PERIOD))
            models = dict(quota.models)
            if canonical is not None and max_gpus is not None:
                models[canonical] = max_gpus
                if len(models) > MAX_MODELS:
                    raise BadInputError(f"a quota limits at most {MAX_MODELS} models")
            quota = Quota(
                app=app,
                env=env,
                key=key,
                max_gpus=max_gpus if max_gpus is not None and canonical is None else quota.max_gpus,
                models=tuple(sorted(models.items())),
                gpu_hours=float(gpu_hours) if gpu_hours is not None else quota.gpu_hours,
                period_s=period_s if period_s is not None else quota.period_s,
            )
            records[quota.scope] = quota
            self._write(records)
        return quota

    def delete(
        self, *, app: str | None = None, env: str | None = None, key: str | None = None, model: str | None = None
    ) -> bool:
        """Delete the scope's quota (with ``model``: only that model's limit). False when there was none."""
        _check_scope(app, env, key)
        canonical = _model(model) if model is not None else None
        with locked(self.root):
            records = self._read_file()
            old = records.get((app, env, key))
            if old is None:
                return False
            if canonical is None:
                del records[old.scope]
            else:
                models = dict(old.models)
                if models.pop(canonical, None) is None:
                    return False
                kept = Quota(app, env, key, old.max_gpus, tuple(sorted(models.items())), old.gpu_hours, old.period_s)
                if kept.holds or kept.gpu_hours is not None:
                    records[old.scope] = kept
                else:
                    del records[old.scope]
            self._write(records)
        return True

    def list(self) -> list[Quota]:
        """Every quota, by scope (apps, then environments, then keys)."""
        return sorted(self._read_file().values(), key=_order)

    def quotas(self) -> tuple[Quota, ...]:
        """The plane's read (``QuotaSource``): from memory, the file looked at again at most once a second."""
        now = self._monotonic()
        if now - self._checked >= RECHECK_S:
            self._checked = now
            try:
                self._read_file()
            except ConfigError as exc:  # a plan must go on: the quotas read last stay in force, and the log says why
                log.warning("%s; the quotas read before stay in force", exc)
        return self._records

    # the file

    def _read_file(self) -> dict[_Scope, Quota]:
        try:
            info = os.stat(self.path)
        except FileNotFoundError:
            self._identity, self._records = None, ()
            return {}
        except OSError as exc:
            raise ConfigError(f"the quotas file {self.path} cannot be read: {exc.strerror}") from None
        identity = (info.st_ino, info.st_mtime_ns, info.st_size)  # a replace makes a new inode
        if identity != self._identity:
            try:
                text = self.path.read_bytes()
            except OSError as exc:
                raise ConfigError(f"the quotas file {self.path} cannot be read: {exc.strerror}") from None
            self._records = tuple(sorted(_parse(text, self.path), key=_order))
            self._identity = identity
        return {q.scope: q for q in self._records}

    def _write(self, records: dict[_Scope, Quota]) -> None:
        ordered = sorted(records.values(), key=_order)
        body = json.dumps({"version": VERSION, "quotas": [q.to_json() for q in ordered]}, ensure_ascii=False)
        replace_whole(self.root, FILE_NAME, body.encode())
        self._identity, self._records = None, tuple(ordered)
        self._read_file()  # remember the new file's identity, so the next read does not parse it again


def _order(quota: Quota) -> tuple[str, str, str]:
    return (quota.app or "", quota.env or "", quota.key or "")


def _model(text: object) -> str:
    if not isinstance(text, str) or not 0 < len(text) <= 100:
        raise BadInputError(f"--model names one GPU model, e.g. H100 or 'RTX 4090'; got {repr(text)[:60]}")
    try:
        return canonical_model(text)
    except (UnknownGPUError, ValueError) as exc:
        raise BadInputError(f"--model: {exc}") from None


def _check_scope(app: object, env: object, key: object) -> None:
    for what, value, rule, allowed in (
        ("app", app, APP_NAME, "letters, digits, '_' or '-'"),
        ("env", env, APP_NAME, "letters, digits, '_' or '-'"),
        ("key", key, KEY_NAME, "letters, digits, '.', '_' or '-'"),
    ):
        if value is not None and (not isinstance(value, str) or not rule.fullmatch(value)):
            raise BadInputError(
                f"--{what} is a name of {allowed} (a letter or digit first), at most 63; got {repr(value)[:80]}"
            )
    if app is None and key is None:
        raise BadInputError("say whose quota it is: --app A (with --env E for one environment) and/or --key NAME")
    if env is not None and app is None:
        raise BadInputError("an environment belongs to an app: name the app too (--app A --env E)")


def _parse(text: bytes, path: Path) -> list[Quota]:
    try:
        data: Any = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("quotas"), list):
            raise ValueError("version")
        quotas = [Quota.from_json(record) for record in data["quotas"]]
        for quota in quotas:
            _check_scope(*quota.scope)
        if len({q.scope for q in quotas}) != len(quotas) or len(quotas) > MAX_QUOTAS:
            raise ValueError("scopes")
    except (ValueError, KeyError, TypeError, AttributeError, BadInputError):
        raise ConfigError(
            f"the quotas file {path} is not one this flashpoint wrote (format {VERSION}); move it away and set the "
            "quotas again (`flashpoint quota set`)"
        ) from None
    return quotas
