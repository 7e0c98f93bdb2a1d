"""The job commands: ``flashpoint jobs``, ``job ID``, ``logs ID [-f]``, ``cancel ID``, ``retry ID`` and
``call ENDPOINT '{json}' [--async]``, against the planes of this machine or the server at ``--url``.

Jobs are read through the native ``/v1`` API; cancel, retry and call use Runpod's ``/v2/{endpoint}/...`` routes,
which every plane serves (a script's embedded plane too).

What a job holds (its output, error, traceback and log lines) is printed inert (``flashpoint.terminal``); ``--json``
prints it exactly, and ``call`` prints the output as JSON whose escapes parse back to it exactly.

Edge module: may import anything in flashpoint, plus typer, rich and httpx (through ``cli.live``).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Annotated, Any

import typer
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from flashpoint.cli.appfilter import AppFilter, AppFilterOption, EnvFilterOption, app_env_text
from flashpoint.cli.live import LivePlane, describe
from flashpoint.cli.output import JsonOption, clock, console, duration_ms, print_json
from flashpoint.cli.target import (
    KeyOption,
    UrlOption,
    ask,
    complete_endpoints,
    complete_job_ids,
    find_job,
    required_planes,
    seg,
    where,
)
from flashpoint.errors import BadInputError, NotFoundError
from flashpoint.jobs import JobStatus
from flashpoint.terminal import inert, inert_data, json_text
from flashpoint.wire import coldstart

#: seconds one ``/v1/jobs/{id}/wait`` long-poll is held while ``call`` waits (the server allows 60)
CALL_HOLD_S = 50.0
#: seconds one long-poll is held while ``logs -f`` follows: new lines show at least this often
FOLLOW_HOLD_S = 1.0

JobIdArgument = Annotated[
    str, typer.Argument(metavar="JOB_ID", help="The job's id.", autocompletion=complete_job_ids, show_default=False)
]
_RUN_HINT = ", or run a function in this process with `flashpoint run app.py::fn`"


# ----------------------------------------------------------------------------------------------------------------
# flashpoint jobs


def jobs(
    endpoint: Annotated[
        str | None,
        typer.Option(
            "--endpoint",
            help="Only this endpoint's jobs (its id, or its name with --app and --env).",
            autocompletion=complete_endpoints,
        ),
    ] = None,
    app: AppFilterOption = None,
    env: EnvFilterOption = None,
    status: Annotated[
        JobStatus | None, typer.Option("--status", "-s", case_sensitive=False, help="Only jobs in this status.")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, max=1000, help="At most this many jobs per process.")
    ] = 50,
    url: UrlOption = None,
    key: KeyOption = None,
    as_json: JsonOption = False,
) -> None:
    """List jobs, newest first: their endpoint (and its app and environment), status, timing and where they ran."""
    found = required_planes(url, key)
    params = {"limit": str(limit)}
    if endpoint:
        params["endpoint"] = endpoint
    if status:
        params["status"] = status.value
    params.update(AppFilter(app, env).params())
    listed: list[tuple[LivePlane, dict[str, Any]]] = []
    for plane in found:
        body = ask(plane, "/v1/jobs", params)
        listed.extend((plane, job) for job in (body or {}).get("jobs", []))
    listed.sort(key=lambda pair: pair[1].get("createdAt") or 0.0, reverse=True)
    if as_json:
        print_json({"jobs": [{**job, "plane": {"pid": p.pid, "url": p.url}} for p, job in listed]})
        return
    out = console()
    if not listed:
        filters = " ".join(f"{k}={v}" for k, v in params.items() if k != "limit")
        out.print(Text(f"no jobs{' with ' + filters if filters else ''} in {where(found)}"))
        return
    several = len(found) > 1
    of_apps = any(app_env_text(job["endpoint"]) for _, job in listed)
    table = Table(title_justify="left", padding=(0, 1))
    columns = (
        "id",
        *(("app/env",) if of_apps else ()),
        "endpoint",
        "status",
        "by",
        "created",
        "waited",
        "ran",
        "where",
        *(("process",) if several else ()),
    )
    for column in columns:
        table.add_column(column, justify="right" if column in ("waited", "ran") else "left", no_wrap=column == "id")
    for plane, raw in listed:
        job = inert_data(raw)
        table.add_row(
            job["id"],
            *((Text(app_env_text(job["endpoint"])),) if of_apps else ()),
            Text(job["endpoint"]),
            _status_text(job),
            Text(job.get("submittedBy") or "-"),
            clock(job.get("createdAt")),
            duration_ms(job.get("delayTime")),
            duration_ms(job.get("executionTime")),
            Text(_placement_text(job.get("placement"))),
            *((str(plane.pid or plane.url),) if several else ()),
        )
    out.print(table)


def _status_text(job: dict[str, Any]) -> Text:
    status, reason = job["status"], job.get("reason")
    style = {"COMPLETED": "green", "FAILED": "red", "TIMED_OUT": "red", "CANCELLED": "yellow"}.get(status, "")
    text = Text(status, style=style)
    if reason and reason != "completed":
        text.append(f" ({reason})")
    return text


def _placement_text(placement: dict[str, Any] | None) -> str:
    if not placement:
        return "-"
    kind = "simulated" if placement.get("simulated") else "real"
    if placement.get("gpuModel"):
        devices = ", ".join(str(i) for i in placement.get("deviceIds", []))
        return f"{placement['gpuModel']} on {placement['node']} (device {devices}, {kind})"
    cores = ", ".join(str(c) for c in placement.get("cores", []))
    return f"{placement.get('cpuInstance') or 'CPU'} on {placement['node']} (cores {cores or '-'}, {kind})"


# ----------------------------------------------------------------------------------------------------------------
# flashpoint job ID


def job(job_id: JobIdArgument, url: UrlOption = None, key: KeyOption = None, as_json: JsonOption = False) -> None:
    """Show one job: its status, placement, timeline, and its output or error (or why it waits)."""
    plane, body = find_job(required_planes(url, key), job_id)
    if as_json:
        print_json({**body, "plane": {"pid": plane.pid, "url": plane.url}})
        return
    console().print(job_view(plane, body))


def timeline(body: dict[str, Any]) -> str:
    """``queued 12:00:01.250 -> started 12:00:02.100 (waited 850 ms) -> ended 12:00:03.000 (ran 900 ms)``."""
    created, delay, ran = body.get("createdAt"), body.get("delayTime"), body.get("executionTime")
    parts = [f"queued {clock(created)}"]
    if created and delay is not None:
        parts.append(f"started {clock(created + delay / 1000)} (waited {duration_ms(delay)})")
    if created and delay is not None and ran is not None:
        parts.append(f"ended {clock(created + (delay + ran) / 1000)} (ran {duration_ms(ran)})")
    elif body["status"] in ("CANCELLED", "TIMED_OUT", "FAILED") and delay is None:
        parts.append(f"ended {body['status']} before it started")
    return " -> ".join(parts)


def gpu_use_text(body: dict[str, Any]) -> str:
    """A GPU job's figures while it ran (decision 0117): "peak 812 MiB, mean 43.5% utilisation"; "simulated: no
    telemetry" on simulated devices; "not sampled" for an ended job no sample saw; "" for a job on no GPU."""
    placement = body.get("placement") or {}
    if not placement.get("gpuModel"):
        return ""
    if placement.get("simulated"):
        return "simulated: no telemetry"
    parts = []
    if body.get("gpuMemoryPeakMb") is not None:
        parts.append(f"peak {body['gpuMemoryPeakMb']} MiB")
    if body.get("gpuUtilizationMeanPct") is not None:
        parts.append(f"mean {body['gpuUtilizationMeanPct']}% utilisation")
    if parts:
        return ", ".join(parts)
    return "recorded when it ends" if body.get("status") == "IN_PROGRESS" else "not sampled"


def job_view(plane: LivePlane, raw: dict[str, Any]) -> RenderableType:
    """What ``flashpoint job ID`` draws: the job's texts inert, its output as terminal-safe JSON."""
    body = inert_data(raw)
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    grid.add_row("job", Text(body["id"]))
    grid.add_row("status", _status_text(body))
    grid.add_row("endpoint", Text(body["endpoint"]))
    if app_env_text(body["endpoint"]):
        grid.add_row("app/env", Text(app_env_text(body["endpoint"])))
    if body.get("submittedBy"):  # the key that submitted it (a server without keys records none)
        grid.add_row("submitted by", Text(body["submittedBy"]))
    grid.add_row("on", Text(describe(plane)))
    grid.add_row("placement", Text(_placement_text(body.get("placement"))))
    if body.get("workerId"):
        grid.add_row("worker", Text(body["workerId"]))
    gpu_use = gpu_use_text(body)
    if gpu_use:
        grid.add_row("GPU use", Text(gpu_use))
    if cold := coldstart.sentence(coldstart.from_json(body.get("coldStart"))):  # the cold start it waited on
        grid.add_row("cold start", Text(cold))
    grid.add_row("timeline", Text(timeline(body)))
    if body.get("retries"):
        grid.add_row("retries", str(body["retries"]))
    if body.get("lowPriority"):
        grid.add_row("priority", "low (runs after its queue's other jobs)")
    for number, attempt in enumerate(body.get("attempts") or [], 1):  # runs that ended without ending it
        grid.add_row(f"attempt {number}", Text(_attempt_text(attempt)))
    logs = body.get("logs") or []
    grid.add_row("logs", Text(f"{len(logs)} line{'s' if len(logs) != 1 else ''}: flashpoint logs {body['id']}"))
    parts: list[RenderableType] = [grid]
    status = body["status"]
    if status in ("IN_QUEUE", "IN_PROGRESS") and body.get("explanation"):
        parts.append(Text("why: " + body["explanation"].get("summary", "")))
        parts.extend(Text(f"  {r['candidate']}: {r['code']} ({r['detail']})") for r in body["explanation"]["reasons"])
    if body.get("output") is not None:
        parts.append(Text("output:", style="bold"))
        parts.append(Text(json_text(raw["output"])))
    if body.get("error"):
        error = body["error"]
        parts.append(Text(f"error: {error.get('type')}: {error.get('message')}", style="red"))
        if error.get("traceback"):
            parts.append(Text(error["traceback"].rstrip()))
    return Group(*parts)


def _attempt_text(attempt: dict[str, Any]) -> str:
    """One earlier run of a job: its outcome, worker, placement and how long it ran."""
    ran = ""
    started, ended = attempt.get("startedAt"), attempt.get("endedAt")
    if isinstance(started, int | float) and isinstance(ended, int | float):
        ran = f", ran {ended - started:.1f}s"
    worker = attempt.get("workerId") or "?"
    return f"{attempt.get('outcome', '?')} (worker {worker} on {_placement_text(attempt.get('placement'))}{ran})"


# ----------------------------------------------------------------------------------------------------------------
# flashpoint logs ID [-f]


def logs(
    job_id: JobIdArgument,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines until the job ends.")] = False,
    app: AppFilterOption = None,
    env: EnvFilterOption = None,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Print a job's log lines (what its handler printed); with -f, follow them until the job ends.

    With --app or --env, only a job of that app or environment: another's is not printed.
    """
    plane, body = find_job(required_planes(url, key), job_id)
    wanted = AppFilter(app, env)
    if not wanted.matches(body["endpoint"]):
        raise NotFoundError(
            f"job {job_id!r} is a job of {body['endpoint']!r}, not of {wanted}; leave out --app and --env to read it"
        )
    shown = 0
    try:
        while True:
            lines: list[str] = body.get("logs") or []
            for line in lines[shown:]:
                print(inert(line), flush=True)
            shown = max(shown, len(lines))
            if not follow or JobStatus(body["status"]).terminal:
                break
            # the job's own long-poll: it answers at once when the job ends, else after the hold with the new lines
            body = plane.request(
                "GET", f"/v1/jobs/{seg(job_id)}/wait", params={"timeout": f"{FOLLOW_HOLD_S:g}"}, hold_s=FOLLOW_HOLD_S
            )
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if follow:
        print(inert(f"-- job {job_id} {body['status']}"), file=sys.stderr)
    # a log that was cut ends with the plane's own line saying so (jobs.LOG_CUT), printed with the rest


# ----------------------------------------------------------------------------------------------------------------
# flashpoint cancel ID, flashpoint retry ID


def cancel(job_id: JobIdArgument, url: UrlOption = None, key: KeyOption = None) -> None:
    """Cancel a job: a queued one leaves its queue, a running one's worker is told to stop it."""
    plane, body = find_job(required_planes(url, key), job_id)
    if JobStatus(body["status"]).terminal:
        print(inert(f"job {job_id} had already ended {body['status']}; nothing to cancel"))
        return
    answer = plane.request("POST", f"/v2/{seg(body['endpoint'])}/cancel/{seg(job_id)}")
    print(inert(f"job {job_id} {answer.get('status', 'CANCELLED')}"))


def retry(job_id: JobIdArgument, url: UrlOption = None, key: KeyOption = None) -> None:
    """Put a FAILED or TIMED_OUT job back in its queue, with the same id and input."""
    plane, body = find_job(required_planes(url, key), job_id)
    answer = plane.request("POST", f"/v2/{seg(body['endpoint'])}/retry/{seg(job_id)}")
    print(inert(f"job {job_id} {answer.get('status', 'IN_QUEUE')} again; follow it with: flashpoint logs -f {job_id}"))


# ----------------------------------------------------------------------------------------------------------------
# flashpoint call ENDPOINT '{json}'


def call(
    endpoint: Annotated[
        str, typer.Argument(help="The endpoint's name.", autocompletion=complete_endpoints, show_default=False)
    ],
    data: Annotated[
        str,
        typer.Argument(
            metavar="[INPUT]",
            help="The job's input: a JSON object of the function's keyword arguments, e.g. '{\"data\": {\"x\": 1}}'; "
            "- reads it from stdin.",
        ),
    ] = "{}",
    run_async: Annotated[
        bool, typer.Option("--async", help="Print the job's id at once instead of waiting for its output.")
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", metavar="SECONDS", show_default=False, help="Stop waiting after this long."),
    ] = None,
    url: UrlOption = None,
    key: KeyOption = None,
) -> None:
    """Submit a job to ENDPOINT from the shell, wait for it and print its output as JSON.

    The endpoint must be served by a running flashpoint process: a `flashpoint serve` server (or the one at --url),
    or a script whose embedded plane has called it. Exit status 1 when the job fails, is cancelled or times out.
    """
    payload = _parse_input(data)
    plane = _serving(required_planes(url, key, _RUN_HINT), endpoint)
    answer = plane.request("POST", f"/v2/{seg(endpoint)}/run", body={"input": payload})
    job_id = str(answer["id"])
    if run_async:
        print(inert(job_id, lines=False))
        return
    print(inert(f"job {job_id} on {describe(plane)}"), file=sys.stderr)
    try:
        body = _wait(plane, job_id, timeout)
    except KeyboardInterrupt:
        print(
            inert(f"\nstopped waiting; job {job_id} goes on: flashpoint job {job_id}, flashpoint cancel {job_id}"),
            file=sys.stderr,
        )
        raise typer.Exit(130) from None
    status = body["status"]
    if status == "COMPLETED":
        print(json_text(body.get("output")))
        return
    if status in ("IN_QUEUE", "IN_PROGRESS"):
        why = (body.get("explanation") or {}).get("summary")
        print(
            inert(
                f"job {job_id} is still {status} after {timeout:g} s{': ' + why if why else ''}; it goes on: "
                f"flashpoint job {job_id}"
            ),
            file=sys.stderr,
        )
        raise typer.Exit(1)
    error = body.get("error") or {}
    detail = f": {error.get('type')}: {error.get('message')}" if error else ""
    print(inert(f"job {job_id} {status} ({body.get('reason')}){detail}"), file=sys.stderr)
    if error.get("traceback"):
        print(inert(error["traceback"].rstrip()), file=sys.stderr)
    raise typer.Exit(1)


def _parse_input(data: str) -> Any:
    text = sys.stdin.read() if data == "-" else data
    try:
        payload = json.loads(text)
    except ValueError as exc:
        raise BadInputError(
            f"the input is not JSON ({exc}): {text[:80]!r}; pass a JSON object in single quotes, e.g. "
            f'flashpoint call ENDPOINT \'{{"data": {{"x": 1}}}}\''
        ) from None
    return payload


def _serving(found: list[LivePlane], endpoint: str) -> LivePlane:
    """The first plane that serves ``endpoint``; else ``NotFoundError`` naming what the planes do serve."""
    served: set[str] = set()
    for plane in found:
        body = ask(plane, "/v1/endpoints")
        names = {row["name"] for row in (body or {}).get("endpoints", [])}
        # an id, or a bare name (the server resolves it: one endpoint, else 409 naming the ids)
        if endpoint in names or endpoint in {name.rpartition(".")[2] for name in names}:
            return plane
        served |= names
    listing = f"they serve {', '.join(sorted(served))}" if served else "they serve no endpoint yet"
    raise NotFoundError(
        f"no endpoint {endpoint!r} in {where(found)} ({listing}); serve the file that declares it with "
        f"`flashpoint serve app.py`{_RUN_HINT}"
    )


def _wait(plane: LivePlane, job_id: str, timeout: float | None) -> dict[str, Any]:
    """Long-poll ``/v1/jobs/{id}/wait`` until the job ends or ``timeout`` seconds pass; the job's last body."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        hold = CALL_HOLD_S if deadline is None else max(0.0, min(CALL_HOLD_S, deadline - time.monotonic()))
        body: dict[str, Any] = plane.request(
            "GET", f"/v1/jobs/{seg(job_id)}/wait", params={"timeout": f"{hold:.3f}"}, hold_s=hold
        )
        if JobStatus(body["status"]).terminal or (deadline is not None and time.monotonic() >= deadline):
            return body
