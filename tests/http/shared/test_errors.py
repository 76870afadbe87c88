"""The one error table (app/http/shared/errors.py): which failures of the layers below
are worth a retry (503 + Retry-After) and which are not, and that both APIs
render the same decision."""

from __future__ import annotations

import sqlite3

import pytest
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from app.http.api.errors import failure_response
from app.http.s3.errors import s3_error_for
from app.http.shared.errors import failure_for
from app.store.errors import ContentUnavailable, InstanceFenced, ObjectNotFound
from app.telegram.errors import (
    DispatcherClosed,
    NoUsableBot,
    PermanentError,
    RateLimited,
    TransientError,
)

TOKEN = "123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw"


class PgError(Exception):
    """What the asyncpg dialect puts in `orig`: a message and a SQLSTATE."""

    def __init__(self, message: str, sqlstate: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


def db_error(kind: type[DBAPIError], orig: Exception) -> DBAPIError:
    return kind("UPDATE chunks SET ...", {}, orig)


UNAVAILABLE = [
    pytest.param(db_error(DBAPIError, ConnectionRefusedError("refused")), id="refused"),
    pytest.param(db_error(DBAPIError, PgError("admin shutdown", "57P01")), id="pg-shutdown"),
    pytest.param(db_error(DBAPIError, PgError("connection failure", "08006")), id="pg-08"),
    pytest.param(
        db_error(OperationalError, sqlite3.OperationalError("database is locked")),
        id="sqlite-locked",
    ),
    pytest.param(PoolTimeout("QueuePool limit reached"), id="pool-timeout"),
    pytest.param(ConnectionResetError("reset"), id="bare-connection-error"),
]

NOT_UNAVAILABLE = [
    pytest.param(db_error(DBAPIError, PgError("deadlock detected", "40P01")), 500, id="deadlock"),
    pytest.param(
        db_error(DBAPIError, PgError("could not serialize", "40001")), 500, id="serialization"
    ),
    pytest.param(db_error(IntegrityError, PgError("duplicate key", "23505")), 500, id="integrity"),
    pytest.param(
        db_error(DataError, PgError("value too long for type varchar(255)", "22001")),
        400,
        id="data",
    ),
    pytest.param(
        # What SQLAlchemy's asyncpg adapter raises for the same refusal.
        db_error(DBAPIError, PgError("value too long for type character varying(255)", "22001")),
        400,
        id="data-asyncpg",
    ),
    pytest.param(
        db_error(OperationalError, sqlite3.OperationalError("no such table: objects")),
        500,
        id="sqlite-schema",
    ),
]


@pytest.mark.parametrize("exc", UNAVAILABLE)
def test_only_a_database_out_of_reach_is_a_503_with_retry_after(exc: Exception) -> None:
    failure = failure_for(exc)
    assert failure is not None
    assert (failure.status, failure.error, failure.retry_after) == (503, "database_unavailable", 5)
    assert "refused" not in failure.message and "locked" not in failure.message


@pytest.mark.parametrize(("exc", "status"), NOT_UNAVAILABLE)
def test_other_database_errors_are_not_503_and_tell_the_client_nothing_internal(
    exc: Exception, status: int
) -> None:
    failure = failure_for(exc)
    assert failure is not None
    assert failure.status == status
    assert failure.retry_after is None
    assert "UPDATE" not in failure.message and "varchar" not in failure.message


def test_retry_after_comes_from_the_pool_estimate_the_dispatcher_attached() -> None:
    limited = RateLimited("Too Many Requests: retry after 4", retry_after=4, bot_id=1)
    limited.pool_wait = 12.2
    failure = failure_for(limited)
    assert failure is not None
    assert (failure.status, failure.s3_code, failure.retry_after) == (503, "SlowDown", 13)
    # Without an estimate, Telegram's own retry_after.
    failure = failure_for(RateLimited("Too Many Requests", retry_after=4, bot_id=1))
    assert failure is not None and failure.retry_after == 4

    transient = TransientError("sendDocument: Internal Server Error", bot_id=1)
    transient.pool_wait = 0.2
    failure = failure_for(transient)
    assert failure is not None
    assert (failure.status, failure.s3_code, failure.retry_after) == (503, "ServiceUnavailable", 1)


@pytest.mark.parametrize(
    ("exc", "status", "retry_after"),
    [
        (NoUsableBot("no usable bot is left"), 503, "30"),
        (DispatcherClosed("stopping"), 503, "5"),
        (ContentUnavailable("chunk 3 could not be read"), 503, "5"),
        (ObjectNotFound("gone"), 404, None),
        (PermanentError(f"Bad Request: chat not found {TOKEN}", status=400, bot_id=1), 502, None),
    ],
)
def test_both_apis_render_the_same_decision(
    exc: Exception, status: int, retry_after: str | None
) -> None:
    native = failure_response(failure_for(exc))  # type: ignore[arg-type]
    s3 = s3_error_for(exc)
    assert s3 is not None
    assert native.status_code == s3.status == status
    assert native.headers.get("retry-after") == s3.headers.get("Retry-After") == retry_after
    assert TOKEN.split(":")[1] not in native.body.decode() + s3.message


def test_errors_of_other_layers_are_left_to_the_api() -> None:
    assert failure_for(ValueError("a bug")) is None
    assert s3_error_for(KeyError("a bug")) is None


def test_an_upload_refused_by_a_fenced_instance_is_a_503_that_says_why() -> None:
    failure = failure_for(InstanceFenced(retry_after=5))
    assert failure is not None
    assert (failure.status, failure.s3_code, failure.retry_after) == (503, "ServiceUnavailable", 5)
    assert "taken for dead" in failure.message and "retry" in failure.message
