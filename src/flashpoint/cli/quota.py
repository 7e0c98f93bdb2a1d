"""``flashpoint quota set|list|delete``: a server's quotas and budgets (decision 0113): the most GPUs an app, an
environment or a key holds at once (in total, or of one model with ``--model``) and a GPU-hour budget per rolling
period.

``--key NAME`` is the key a quota is for, so the server's API key is ``--api-key`` here (or ``FLASHPOINT_API_KEY``).
The server is ``--url`` (an admin key), else the one ``flashpoint serve`` of this machine; ``--data-dir DIR`` acts on
a server's data directory itself (a running server sees the change within a second).

Edge module: may import anything in flashpoint, plus typer and httpx (through ``cli.live``).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from flashpoint.cli.live import LivePlane
from flashpoint.cli.output import console, print_json
from flashpoint.cli.secret import DataDirOption
from flashpoint.cli.target import UrlOption, one_server
from flashpoint.errors import NotFoundError
from flashpoint.hosting.quotastore import QuotaStore
from flashpoint.scheduler.quotas import DEFAULT_PERIOD, format_period, iso
from flashpoint.terminal import inert, inert_data

app = typer.Typer(
    name="quota",
    help="A server's quotas and budgets: the most GPUs an app, environment or key holds at once, and GPU-hours per "
    "period: set, list, delete.",
    no_args_is_help=True,
)

AppOption = Annotated[str | None, typer.Option("--app", "-a", help="The app the quota is for.", show_default=False)]
EnvOption = Annotated[
    str | None, typer.Option("--env", "-e", help="Only this environment of the app.", show_default=False)
]
QuotaKeyOption = Annotated[
    str | None,
    typer.Option("--key", help="The API key (by name) the quota is for: its jobs' workers.", show_default=False),
]
ApiKeyOption = Annotated[
    str | None,
    typer.Option(
        "--api-key",
        envvar="FLASHPOINT_API_KEY",
        metavar="KEY",
        show_default=False,
        help="The admin API key of the server at --url (--key names the quota's key).",
    ),
]
ModelOption = Annotated[
    str | None, typer.Option("--model", help="With --max-gpus: the GPU model it limits, e.g. H100.", show_default=False)
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _server(url: str | None, api_key: str | None) -> LivePlane:
    return one_server(url, api_key)


def _local(data_dir: Any) -> QuotaStore:
    return QuotaStore(data_dir.expanduser() / "quotas")


def _scope(app: str | None, env: str | None, key: str | None) -> dict[str, str]:
    return {name: value for name, value in (("app", app), ("env", env), ("key", key)) if value is not None}


@app.command("set")
def set_quota(
    app_name: AppOption = None,
    env_name: EnvOption = None,
    key_name: QuotaKeyOption = None,
    max_gpus: Annotated[
        int | None, typer.Option("--max-gpus", help="The most GPUs held at once.", show_default=False)
    ] = None,
    model: ModelOption = None,
    gpu_hours: Annotated[
        float | None,
        typer.Option("--gpu-hours", help="GPU-hours it may use per --period (busy and idle).", show_default=False),
    ] = None,
    period: Annotated[
        str | None,
        typer.Option(
            "--period", help=f"The budget's rolling window: 1h, 24h, 7d (default {DEFAULT_PERIOD}).", show_default=False
        ),
    ] = None,  # fmt: skip
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    data_dir: DataDirOption = None,
    json_output: JsonOption = False,
) -> None:
    """Set limits of an app (--app), an environment (--app --env) or a key (--key), keeping its other limits.

    A request over --max-gpus waits (explain says quota); a spent --gpu-hours budget refuses new jobs (429) until
    it renews.
    """
    if data_dir is not None:
        quota = _local(data_dir).set(
            app=app_name, env=env_name, key=key_name, max_gpus=max_gpus, model=model, gpu_hours=gpu_hours, period=period
        )
        shown = quota.to_json()
    else:
        body: dict[str, Any] = {
            **_scope(app_name, env_name, key_name),
            "maxGpus": max_gpus,
            "model": model,
            "gpuHours": gpu_hours,
            "period": period,
        }
        given = {k: v for k, v in body.items() if v is not None}
        shown = _server(url, api_key).request("PUT", "/v1/quotas", body=given)
    if json_output:
        print_json(shown)
        return
    print(inert(f"quota of {_who(shown)}: {_limits(shown)}"))


@app.command("list")
def list_quotas(
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    data_dir: DataDirOption = None,
    json_output: JsonOption = False,
) -> None:
    """List the quotas and budgets, with what each scope holds and has used now."""
    if data_dir is not None:
        rows = [q.to_json() for q in _local(data_dir).list()]  # no server: no use to show
    else:
        rows = _server(url, api_key).request("GET", "/v1/quotas")["quotas"]
    if json_output:
        print_json(rows)
        return
    if not rows:
        print("no quotas; set one with: flashpoint quota set --app A --max-gpus N (or --gpu-hours H --period 24h)")
        return
    console().print(quota_table(rows))


@app.command("delete")
def delete_quota(
    app_name: AppOption = None,
    env_name: EnvOption = None,
    key_name: QuotaKeyOption = None,
    model: Annotated[str | None, typer.Option("--model", help="Only this model's limit.", show_default=False)] = None,
    url: UrlOption = None,
    api_key: ApiKeyOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Delete the quota of an app, environment or key (with --model: only that model's limit)."""
    scope = _scope(app_name, env_name, key_name)
    if data_dir is not None:
        if not _local(data_dir).delete(app=app_name, env=env_name, key=key_name, model=model):
            raise NotFoundError("no such quota; `flashpoint quota list` shows them")
    else:
        params = {**scope, **({"model": model} if model else {})}
        _server(url, api_key).request("DELETE", "/v1/quotas", params=params)
    print(inert(f"quota of {_who(scope)} deleted" + (f" (its {model} limit)" if model else "")))


def _who(row: dict[str, Any]) -> str:
    parts = [f"app {row['app']}" if row.get("app") else "", f"env {row['env']}" if row.get("env") else ""]
    parts.append(f"key {row['key']}" if row.get("key") else "")
    return " ".join(p for p in parts if p) or "?"


def _limits(row: dict[str, Any]) -> str:
    parts = []
    if row.get("maxGpus") is not None:
        parts.append(f"at most {row['maxGpus']} GPUs at once")
    parts += [f"at most {n} {m} at once" for m, n in (row.get("models") or {}).items()]
    if row.get("gpuHours") is not None:
        parts.append(f"{row['gpuHours']:g} GPU-hours per {row.get('period') or format_period(row['periodS'])}")
    return "; ".join(parts) or "no limits"


def use_text(row: dict[str, Any]) -> str:
    """What a quota's scope holds and used: ``holds 2 of 4 GPUs; 1 of 2 NVIDIA H200; 3.50 of 10 GPU-hours (24h)``,
    with ``spent until ...`` for a spent budget."""
    use = row.get("use") or {}
    parts = []
    if row.get("maxGpus") is not None:
        parts.append(f"holds {use.get('gpus', 0)} of {row['maxGpus']} GPUs")
    for model, limit in (row.get("models") or {}).items():
        parts.append(f"holds {(use.get('models') or {}).get(model, 0)} of {limit} {model}")
    if row.get("gpuHours") is not None:
        used = use.get("gpuHours")
        budget = f"{'?' if used is None else format(used, '.2f')} of {row['gpuHours']:g} GPU-hours ({row['period']})"
        if use.get("spent"):
            budget += f", spent until {iso(use['renewsAt'])}"
        parts.append(budget)
    return "; ".join(parts)


def quota_table(rows: list[dict[str, Any]]) -> Table:
    """The quotas, one row each: the scope, its limits, its use now."""
    rows = inert_data(rows)
    table = Table(title_justify="left", padding=(0, 1))
    for column in ("app", "env", "key", "limits", "use now"):
        table.add_column(column)
    for row in rows:
        table.add_row(
            Text(row.get("app") or "-"),
            Text(row.get("env") or "(every)" if row.get("app") else "-"),
            Text(row.get("key") or "-"),
            Text(_limits(row)),
            Text(use_text(row) if "use" in row else "(ask the server)"),
        )
    return table
