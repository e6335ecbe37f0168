"""The gateway's FastAPI routes: OpenAI's `/v1/chat/completions`, `/v1/completions`,
`/v1/models`, each behind the episode's Bearer key.

Every error is answered in OpenAI's format, `{"error": {"message", "type", "param", "code"}}`:
a missing or unknown key 401, a malformed body (bad JSON, a wrong field) 400 naming the field,
an episode past a bound 400 (`service`), an unknown route 404; an unexpected failure is a 500
with the exception's type only, never a traceback (the server's log keeps it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TypeVar

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException

from rllib_llm.rollout.gateway.episodes import EpisodeRecord, EpisodeRegistry
from rllib_llm.rollout.gateway.service import GatewayService
from rllib_llm.rollout.gateway.wire import (
    ChatCompletionRequest,
    CompletionRequest,
    GatewayError,
    error_body,
)

logger = logging.getLogger(__name__)
Body = TypeVar("Body", bound=BaseModel)


def make_app(service: GatewayService, episodes: EpisodeRegistry) -> FastAPI:
    """The app answering for `episodes` with `service`; its lifespan runs the engine loop."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        task = asyncio.create_task(service.batcher.engine_loop())
        yield
        task.cancel()

    app = FastAPI(lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    # async: FastAPI runs a sync dependency in its thread pool, a thread hop per request.
    async def episode(request: Request) -> EpisodeRecord:
        scheme, _, key = request.headers.get("authorization", "").partition(" ")
        record = episodes.get(key.strip()) if scheme.lower() == "bearer" else None
        if record is None:
            raise GatewayError(401, "Incorrect API key provided: each episode has its own key, "
                               "valid while the episode runs", code="invalid_api_key")
        return record

    # Answers are JSONResponse already: a returned dict would first go through FastAPI's
    # jsonable_encoder, a recursive walk in Python, per request.
    @app.get("/v1/models")
    async def models(record: EpisodeRecord = Depends(episode)):
        return JSONResponse(service.models())

    # The completions routes take the raw request: FastAPI's body parameter (its dependency
    # solving, `json.loads`, pydantic's validation of Python objects) cost ~0.3 ms of the
    # ~1.5 ms a call spends in the server thread; pydantic validating the JSON bytes itself
    # does the same checks and raises the same errors.
    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        record = await episode(request)
        body = await _body(request, ChatCompletionRequest)
        _refuse_streaming(body.stream)
        return JSONResponse(await service.chat(body, record))

    @app.post("/v1/completions")
    async def completions(request: Request):
        record = await episode(request)
        body = await _body(request, CompletionRequest)
        _refuse_streaming(body.stream)
        return JSONResponse(await service.completion(body, record))

    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, exc: GatewayError):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = [str(p) for p in first.get("loc", ()) if p != "body"]
        message = f"{first.get('msg', 'invalid request')}" + (
            f" (at {'.'.join(where)})" if where else "")
        return JSONResponse(error_body(message, type="invalid_request_error",
                                       param=".".join(where) or None, code=first.get("type")),
                            status_code=400)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return JSONResponse(error_body(str(exc.detail), type="invalid_request_error"),
                            status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        logger.exception("gateway: %s failed", request.url.path)
        return JSONResponse(error_body(f"internal error ({type(exc).__name__})",
                                       type="server_error"), status_code=500)

    return app


async def _body(request: Request, model: type[Body]) -> Body:
    """The request's JSON body as `model`; a malformed one raises what FastAPI's body parameter
    raises (`RequestValidationError`, each error's location under "body"), answered with 400."""
    try:
        return model.model_validate_json(await request.body())
    except ValidationError as e:
        raise RequestValidationError([{**err, "loc": ("body", *err["loc"])}
                                      for err in e.errors(include_url=False)]) from None


def _refuse_streaming(stream: bool) -> None:
    if stream:
        raise GatewayError(400, "stream=true is not supported by this gateway; send "
                           "stream=false", param="stream", code="unsupported_value")
