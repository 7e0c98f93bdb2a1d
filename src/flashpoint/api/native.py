"""Read-only native routes of a control plane under /v1: fleet, endpoints, jobs and their explanations."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from flashpoint.api.workers import error_response, json_response, key_matches
from flashpoint.errors import NotFoundError
from flashpoint.scheduler.loop import ControlPlane


def native_routes(plane: ControlPlane, keys: tuple[str, ...]) -> list[Route]:
    def denied(request: Request) -> Response | None:
        if key_matches(request.headers.get("authorization"), keys):
            return None
        return error_response(401, "unauthorized", "send the API key as Authorization: Bearer KEY")

    async def fleet(request: Request) -> Response:
        if (bad := denied(request)) is not None:
            return bad
        return json_response({"devices": plane.fleet_view(), "summary": plane.fleet_summary()})

    async def endpoints(request: Request) -> Response:
        if (bad := denied(request)) is not None:
            return bad
        body = []
        for name, ep in plane.endpoints.items():
            body.append(
                {
                    "name": name,
                    "gpu": ep.spec.describe_gpu(),
                    "workersMin": ep.spec.workers_min,
                    "workersMax": ep.spec.workers_max,
                    "queueDepth": ep.queued,
                    "workers": [w.to_json() for w in ep.workers.values()],
                    "explanation": plane.explain_endpoint(name).to_json(),
                }
            )
        return json_response({"endpoints": body})

    async def explain_endpoint(request: Request) -> Response:
        if (bad := denied(request)) is not None:
            return bad
        try:
            return json_response(plane.explain_endpoint(request.path_params["name"]).to_json())
        except NotFoundError as exc:
            return error_response(404, exc.code, str(exc))

    async def job(request: Request) -> Response:
        if (bad := denied(request)) is not None:
            return bad
        try:
            found = plane.job(request.path_params["job_id"])
        except NotFoundError as exc:
            return error_response(404, exc.code, str(exc))
        body = found.view().to_json()
        body["endpoint"] = found.endpoint
        body["logs"] = list(found.logs)
        body["explanation"] = plane.explain_job(found.id).to_json()
        return json_response(body)

    return [
        Route("/v1/fleet", fleet, methods=["GET"]),
        Route("/v1/endpoints", endpoints, methods=["GET"]),
        Route("/v1/endpoints/{name}/explain", explain_endpoint, methods=["GET"]),
        Route("/v1/jobs/{job_id}", job, methods=["GET"]),
    ]
