"""Errors as JSON `{"error": ..., "detail": ...}` with the right status.

Handlers never echo an internal exception: an unexpected error is logged with
its traceback and answered with a generic 500.
"""

from __future__ import annotations

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from app.api.forms import FormError
from app.store.errors import ContentUnavailable, ObjectNotFound, UploadTooLarge
from app.telegram.errors import DispatcherClosed, NoUsableBot, TelegramError

log = structlog.get_logger("app.api")


class ApiError(Exception):
    def __init__(
        self, status: int, error: str, detail: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail
        self.headers = headers


def error_response(
    status: int, error: str, detail: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse({"error": error, "detail": detail}, status_code=status, headers=headers)


def _database_unavailable(request: Request, exc: Exception) -> JSONResponse:
    log.warning("database_unavailable", path=request.url.path, error=type(exc).__name__)
    return error_response(
        503,
        "database_unavailable",
        "the database cannot be reached right now; try again shortly",
        {"Retry-After": "5"},
    )


_STATUS_NAMES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
    416: "range_not_satisfiable",
}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc.status, exc.error, exc.detail, exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        name = _STATUS_NAMES.get(exc.status_code, "http_error")
        headers = dict(exc.headers) if exc.headers else None
        return error_response(exc.status_code, name, str(exc.detail), headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        return error_response(422, "invalid_request", problems)

    @app.exception_handler(UploadTooLarge)
    async def _too_large(request: Request, exc: UploadTooLarge) -> JSONResponse:
        return error_response(413, "payload_too_large", str(exc), {"Connection": "close"})

    @app.exception_handler(FormError)
    async def _form(request: Request, exc: FormError) -> JSONResponse:
        return error_response(exc.status, _STATUS_NAMES[exc.status], str(exc))

    @app.exception_handler(ObjectNotFound)
    async def _not_found(request: Request, exc: ObjectNotFound) -> JSONResponse:
        return error_response(404, "not_found", str(exc))

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, exc: ClientDisconnect) -> JSONResponse:
        log.info("client_disconnected", path=request.url.path)
        return error_response(400, "client_disconnected", "the client went away")

    @app.exception_handler(NoUsableBot)
    async def _no_bot(request: Request, exc: NoUsableBot) -> JSONResponse:
        return error_response(503, "storage_unavailable", str(exc), {"Retry-After": "30"})

    @app.exception_handler(DispatcherClosed)
    async def _closing(request: Request, exc: DispatcherClosed) -> JSONResponse:
        return error_response(
            503, "shutting_down", "the service is shutting down", {"Retry-After": "5"}
        )

    @app.exception_handler(TelegramError)
    async def _telegram(request: Request, exc: TelegramError) -> JSONResponse:
        # str(exc) is built from Telegram's description and a bot id; no token.
        log.warning("telegram_error", path=request.url.path, error=str(exc))
        return error_response(502, "telegram_error", str(exc))

    @app.exception_handler(ContentUnavailable)
    async def _unavailable(request: Request, exc: ContentUnavailable) -> JSONResponse:
        return error_response(502, "content_unavailable", str(exc))

    @app.exception_handler(DBAPIError)
    async def _database(request: Request, exc: DBAPIError) -> JSONResponse:
        if exc.connection_invalidated or isinstance(exc, (OperationalError, InterfaceError)):
            return _database_unavailable(request, exc)
        log.exception("database_error", path=request.url.path)
        return error_response(500, "internal_error", "an internal error occurred; see the logs")

    @app.exception_handler(ConnectionError)
    async def _connection(request: Request, exc: ConnectionError) -> JSONResponse:
        # Telegram's connection errors are wrapped by the client; a bare one
        # comes from connecting to the database (or pgbouncer).
        return _database_unavailable(request, exc)

    @app.exception_handler(PoolTimeout)
    async def _pool(request: Request, exc: PoolTimeout) -> JSONResponse:
        return _database_unavailable(request, exc)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled_error", path=request.url.path)
        return error_response(500, "internal_error", "an internal error occurred; see the logs")
