"""UtcDateTime reads back what it wrote: the same instant, marked UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import DateTime
from sqlalchemy.dialects import sqlite

from app.db.types import UtcDateTime

_SQLITE = sqlite.dialect()


def _written(value: datetime) -> str:
    """The text SQLAlchemy stores in SQLite for `value`."""
    column = UtcDateTime()
    bind = column.dialect_impl(_SQLITE).bind_processor(_SQLITE)
    assert bind is not None
    text: str = bind(value)
    return text


def _read(text: object) -> datetime | None:
    column = UtcDateTime()
    process = column.dialect_impl(_SQLITE).result_processor(_SQLITE, None)
    assert process is not None
    result: datetime | None = process(text)
    return result


def _read_the_generic_way(text: str) -> datetime | None:
    """SQLAlchemy's own parse of SQLite's text, then marked UTC."""
    parse = DateTime().dialect_impl(_SQLITE).result_processor(_SQLITE, None)
    assert parse is not None
    return UtcDateTime().process_result_value(parse(text), _SQLITE)


@given(
    st.datetimes(
        min_value=datetime(1, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]),
    )
)
def test_a_timestamp_read_back_from_sqlite_is_the_same_instant_in_utc(value: datetime) -> None:
    text = _written(value)
    read = _read(text)
    assert read == value
    assert read is not None and read.tzinfo is UTC
    assert read == _read_the_generic_way(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # What migration 0002's SQLite default writes (milliseconds, zero-padded).
        ("2026-11-30 08:00:00.123000", datetime(2026, 11, 30, 8, 0, 0, 123000, tzinfo=UTC)),
        ("2026-11-30 08:00:00", datetime(2026, 11, 30, 8, 0, tzinfo=UTC)),
        # Text with an offset of its own is read in its own zone.
        ("2026-11-30T10:00:00+02:00", datetime(2026, 11, 30, 8, 0, tzinfo=UTC)),
    ],
)
def test_other_texts_sqlite_may_hold_are_read_as_utc(text: str, expected: datetime) -> None:
    read = _read(text)
    assert read == expected
    assert read is not None and read.tzinfo is UTC


def test_null_is_none_and_garbage_is_refused() -> None:
    assert _read(None) is None
    with pytest.raises(ValueError):
        _read("not a time")
    with pytest.raises(TypeError):
        _read(12)
