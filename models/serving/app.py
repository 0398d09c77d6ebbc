"""The FastAPI app of `jobfit serve`: routes, the one-line error contract, the bearer token, the body
limit and the metrics. Built from a StateHolder; it reads no files, environment or MLflow itself."""

from __future__ import annotations

import hmac
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import pandas as pd
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from models.serving.answer import recommendation
from models.serving.code import code_estimate, wanted_files
from models.serving.job import job_info
from models.serving.k8s import PodAsk, admission_response
from models.serving.metrics import Metrics
from models.serving.schemas import (
    AdmissionReview,
    ClusterReadiness,
    ErrorResponse,
    FilesRequest,
    FilesResponse,
    Health,
    Readiness,
    RecommendRequest,
    RecommendResponse,
    ReloadResult,
)
from models.serving.state import ServingState, StateHolder

MAX_BODY_BYTES = 1024 * 1024
MUTATE_PATHS = ("/v1/k8s/mutate", "/v1/k8s/mutate/enforce")  # advise, enforce (docs/serve.md)
FILES_PATH = "/v1/workload/files"  # which files a submit hook should send (docs/hooks.md)
ENDPOINTS = frozenset(
    {
        "/v1/recommend",
        FILES_PATH,
        *MUTATE_PATHS,
        "/healthz",
        "/readyz",
        "/metrics",
        "/admin/reload",
        "/openapi.json",
        "/docs",
    }
)
JSON_PATHS = frozenset({"/v1/recommend", FILES_PATH, *MUTATE_PATHS})
OPEN_PATHS = frozenset({"/healthz"})
log = logging.getLogger("jobfit.serve")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
_ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": why}
    for status, why in (
        (401, "missing or wrong bearer token"),
        (413, "body over 1 MiB"),
        (422, "malformed JSON, unknown field or bad value"),
    )
}


def create_app(
    holder: StateHolder,
    token: str | None = None,
    clock: Callable[[], pd.Timestamp] = lambda: pd.Timestamp.now("UTC").tz_localize(None),
    max_body_bytes: int = MAX_BODY_BYTES,
    k8s_cluster: str | None = None,
) -> Any:
    """The ASGI app: FastAPI routes wrapped in the gate (token, body limit, metrics). The Kubernetes
    webhook answers for `k8s_cluster` (default: the first served cluster)."""
    metrics = Metrics()
    app = FastAPI(
        title="jobfit serve",
        version="1",
        description="Resource recommendations for jobs about to be submitted (docs/serve.md).",
        redoc_url=None,
    )

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(422, _one_line(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail), exc.headers)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        log.exception("internal error on %s", request.url.path)
        return _error(500, f"internal error ({type(exc).__name__}); this is a bug")

    # The answering routes are `async`: their work is a millisecond of CPU, which a hop to the thread
    # pool (what FastAPI does with a plain `def`) only lengthens; loading (/admin/reload) stays in it.
    @app.post("/v1/recommend", response_model=RecommendResponse, responses=_ERRORS)
    async def recommend(body: RecommendRequest) -> Any:
        """What the job will need: flags, per-target values and the expected saving."""
        state = holder.state
        try:
            info = job_info(body)
        except ValueError as exc:
            return _error(422, str(exc))
        answer = _answer(state, body, info, clock())
        log.info(
            "recommend cluster=%s user=%s script_sha256=%s status=%s",
            body.cluster,
            body.user,
            info.script_hash[:16],
            answer["status"],
        )
        return answer

    @app.post(FILES_PATH, response_model=FilesResponse, responses=_ERRORS)
    async def workload_files(body: FilesRequest) -> Any:
        """The files the script's entry points name, which the submit hook reads and sends as `sources`
        (the server cannot read the user's files; it only names them, from the script it was sent)."""
        return wanted_files(body.script)

    def mutate(review: AdmissionReview, mode: str) -> dict[str, Any]:
        state = holder.state
        served = next(iter(state.clusters), None) if state else None
        cluster = k8s_cluster or served or "none"

        def recommend(ask: PodAsk) -> dict[str, Any]:
            body = _pod_request(cluster, ask)
            return _answer(state, body, job_info(body), clock())

        answer = admission_response(review.model_dump(by_alias=True), mode, recommend)
        log.info("k8s mutate mode=%s cluster=%s uid=%s", mode, cluster, review.request.uid[:64])
        return answer

    @app.post("/v1/k8s/mutate", responses=_ERRORS)
    async def k8s_advise(body: AdmissionReview) -> dict[str, Any]:
        """Kubernetes AdmissionReview v1 (Pod or Job): always allowed; warnings and an annotation."""
        return mutate(body, "advise")

    @app.post("/v1/k8s/mutate/enforce", responses=_ERRORS)
    async def k8s_enforce(body: AdmissionReview) -> dict[str, Any]:
        """As /v1/k8s/mutate, plus a JSONPatch lowering the main containers' requests to the advice."""
        return mutate(body, "enforce")

    @app.get("/healthz", response_model=Health)
    def healthz() -> Health:
        """The process is alive (no token needed)."""
        return Health()

    @app.get("/readyz", response_model=Readiness, responses={503: {"model": Readiness}})
    def readyz() -> Any:
        """Whether champions are loaded, and which versions per cluster and target (503 when none)."""
        ready = _readiness(holder)
        return ready if ready.ready else JSONResponse(ready.model_dump(), status_code=503)

    @app.get("/metrics", response_class=PlainTextResponse)
    def prometheus() -> PlainTextResponse:
        """Prometheus text: requests by endpoint and status, latency histogram, model versions, reloads."""
        return PlainTextResponse(metrics.render(holder), media_type="text/plain; version=0.0.4")

    @app.post("/admin/reload", response_model=ReloadResult, responses={503: {"model": ErrorResponse}})
    def reload() -> Any:
        """Load the champions and history snapshots again and swap them in; requests keep being served."""
        start = time.perf_counter()
        try:
            holder.reload()
        except Exception as exc:  # the old state stays; the operator sees why
            log.exception("reload failed")
            return _error(503, f"reload failed, previous models kept: {type(exc).__name__}: {exc}")
        ready = _readiness(holder)
        return ReloadResult(**ready.model_dump(), reload_s=round(time.perf_counter() - start, 3))

    return _Gate(app, token, max_body_bytes, metrics)


def _answer(
    state: ServingState | None, body: RecommendRequest, info: Any, now: pd.Timestamp
) -> dict[str, object]:
    """The recommendation, or a status saying why there is none (hooks fail open on any of them)."""
    base: dict[str, object] = {"cluster": body.cluster, "user": body.user, "script_hash": info.script_hash}
    cluster = state.clusters.get(body.cluster) if state else None
    code = code_estimate(body.script, body.sources, info, cluster.gpu_mem_bytes if cluster else None)
    base["code_estimate"] = code
    if cluster is None:
        served = ", ".join(sorted(state.clusters)) if state else "none"
        why = f"cluster {body.cluster!r} is not served here (serving: {served})"
        return base | {"status": "unknown_cluster", "why": why}
    if not cluster.has_champion:
        why = f"no champion models for cluster {body.cluster!r} (run `jobfit train --cluster {body.cluster}`)"
        return base | {"status": "no_champion", "why": why}
    if cluster.source is None:
        why = (
            f"no history snapshot for cluster {body.cluster!r} (run `jobfit train --cluster {body.cluster}`)"
        )
        return base | {"status": "no_history_snapshot", "why": why}
    return recommendation(
        info,
        body.cluster,
        body.user,
        now,
        cluster.config,
        cluster.champions,
        cluster.history,
        cluster.source,
        cluster.gpu_mem_bytes,
        code,
    )


def _pod_request(cluster: str, ask: PodAsk) -> RecommendRequest:
    """The `/v1/recommend` request a pod's ask stands for (CPU rounded up to whole cores, memory in MiB,
    GPUs of the nodeSelector's model; the containers' command lines as the script, no files)."""
    return RecommendRequest(
        cluster=cluster,
        user=ask.user,
        job_name=ask.name[:200],
        cpus_per_task=min(max(math.ceil(ask.cpu_cores), 1), 10_000) if ask.cpu_cores else None,
        mem_per_node=f"{max(math.ceil(ask.mem_bytes / 1024**2), 1)}M" if ask.mem_bytes else None,
        gres=f"gpu:{ask.gpu_model + ':' if ask.gpu_model else ''}{min(ask.gpus, 64)}" if ask.gpus else None,
        script=ask.script[: 512 * 1024] if ask.script else None,
    )


def _readiness(holder: StateHolder) -> Readiness:
    state = holder.state
    clusters = {
        name: ClusterReadiness(
            versions=c.versions(),
            history_run_id=str(c.source["run_id"]) if c.source and c.source.get("run_id") else None,
            history_rows=c.history_rows,
            history_taken_at=str(c.source["taken_at"]) if c.source and c.source.get("taken_at") else None,
        )
        for name, c in (state.clusters if state else {}).items()
    }
    return Readiness(
        ready=bool(state and state.ready),
        loaded_at=state.loaded_at if state else None,
        reloads=holder.reloads,
        clusters=clusters,
    )


def _one_line(exc: RequestValidationError) -> str:
    """The first validation error as `where: what` on one line (pydantic's message, no input echoed)."""
    errors = exc.errors()
    if not errors:
        return "invalid request"
    first = errors[0]
    if first.get("type") == "json_invalid":
        return f"body is not valid JSON ({first.get('ctx', {}).get('error', 'parse error')})"
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first.get('msg', 'invalid')}{more}".replace("\n", " ")


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message.replace("\n", " ")}, status_code=status, headers=headers)


class _Gate:
    """Outermost ASGI layer: counts and times every request, enforces the bearer token (all but
    /healthz) and refuses bodies over the limit with 413 before FastAPI reads them."""

    def __init__(self, app: FastAPI, token: str | None, max_body_bytes: int, metrics: Metrics) -> None:
        self.app = app
        self.token = token.encode() if token else None
        self.max_body_bytes = max_body_bytes
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def counted_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        path = scope["path"]
        try:
            headers = {k.decode("latin-1").lower(): v for k, v in scope["headers"]}
            if self.token and path not in OPEN_PATHS and not self._authorized(headers):
                await _send_json(
                    counted_send, 401, "missing or wrong bearer token", {"www-authenticate": "Bearer"}
                )
                return
            length = headers.get("content-length")
            if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
                await _send_json(counted_send, 413, f"request body over {self.max_body_bytes} bytes")
                return
            body = await self._read_body(receive)
            if body is None:
                await _send_json(counted_send, 413, f"request body over {self.max_body_bytes} bytes")
                return
            if path in JSON_PATHS:  # hooks post JSON with whatever Content-Type their client sets
                scope = _as_json(scope)
            await self.app(scope, _replay(body, receive), counted_send)
        finally:
            endpoint = path if path in ENDPOINTS else "other"
            self.metrics.observe(endpoint, status, time.perf_counter() - start)

    def _authorized(self, headers: dict[str, bytes]) -> bool:
        scheme, _, value = headers.get("authorization", b"").partition(b" ")
        return scheme.lower() == b"bearer" and hmac.compare_digest(value.strip(), self.token or b"")

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The whole body (None when it grows past the limit: chunked uploads state no length)."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _as_json(scope: Scope) -> Scope:
    """The scope with `Content-Type: application/json` (FastAPI parses a body as JSON only under it)."""
    headers = [(k, v) for k, v in scope["headers"] if k.lower() != b"content-type"]
    return {**scope, "headers": [*headers, (b"content-type", b"application/json")]}


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: wait for the disconnect, as the server would send

    return replay


async def _send_json(send: Send, status: int, message: str, extra: dict[str, str] | None = None) -> None:
    payload = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    headers += [(k.encode(), v.encode()) for k, v in (extra or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})
