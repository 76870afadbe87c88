"""Errors as JSON `{"error": ..., "detail": ...}` with the right status.

Store, Telegram and database errors are answered from the table both APIs
share (`app.http.shared.errors`). Handlers never echo an internal exception: an
unexpected error is logged with its traceback and answered with a generic 500.
"""

from __future__ import annotations

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from app.http.shared.errors import INTERNAL_ERROR, Failure, failure_for
from app.http.shared.forms import FormError
from app.http.shared.route_label import logged_path
from app.store.errors import StoreError, TelegramError

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


def failure_response(failure: Failure) -> JSONResponse:
    headers = failure.headers
    if failure.status == 413:
        # The rest of the body is not read: it must not pass for the next request.
        headers["Connection"] = "close"
    return error_response(failure.status, failure.error, failure.message, headers or None)


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

    @app.exception_handler(FormError)
    async def _form(request: Request, exc: FormError) -> JSONResponse:
        return error_response(exc.status, _STATUS_NAMES[exc.status], str(exc))

    @app.exception_handler(ClientDisconnect)
    async def _gone(request: Request, exc: ClientDisconnect) -> JSONResponse:
        log.info("client_disconnected", path=logged_path(request.scope))
        return error_response(400, "client_disconnected", "the client went away")

    # Store, Telegram and database errors: the one table both APIs share.
    async def _from_table(request: Request, exc: Exception) -> JSONResponse:
        failure = failure_for(exc, path=logged_path(request.scope))
        if failure is None:
            log.exception("unhandled_error", path=logged_path(request.scope))
            failure = INTERNAL_ERROR
        return failure_response(failure)

    for kind in (StoreError, TelegramError, DBAPIError, PoolTimeout, ConnectionError, Exception):
        app.add_exception_handler(kind, _from_table)
