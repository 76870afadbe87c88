"""Column types read back what they wrote: UtcDateTime the same instant,
marked UTC; JSON columns the same values."""

from __future__ import annotations

import asyncio
import json
import math
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import DateTime
from sqlalchemy.dialects import sqlite

from app.db.engine import create_engine
from app.db.sqlite_statements import SqliteThreadStatements
from app.db.types import UtcDateTime, json_loads

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


# What the JSON columns hold: metadata and tags (text to text), an object's
# parts (sizes and checksums): JSON of 64-bit integers at most.
_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats()
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(_JSON_VALUES)
def test_a_json_column_reads_back_what_the_standard_encoder_wrote(value: object) -> None:
    for text in (json.dumps(value), json.dumps(value, ensure_ascii=False)):
        read = json_loads(text)
        # NaN is not equal to itself: compare the texts of what was read.
        assert json.dumps(read) == json.dumps(json.loads(text))


def test_a_value_orjson_refuses_is_read_by_the_standard_parser() -> None:
    assert math.isnan(json_loads('{"x": NaN}')["x"])
    assert json_loads("[Infinity, 1]") == [math.inf, 1]


def test_every_sqlite_engine_reads_json_columns_with_json_loads(tmp_path: Path) -> None:
    """The app's engine and the request path's (app.db.sqlite_statements)."""
    engine = create_engine(f"sqlite:///{tmp_path}/json.db")
    assert engine.dialect._json_deserializer is json_loads
    statements = SqliteThreadStatements(str(tmp_path / "json.db"))
    try:
        for sync_engine in (statements._reads, statements._writes):
            assert sync_engine.dialect._json_deserializer is json_loads
    finally:
        asyncio.run(statements.close())
        asyncio.run(engine.dispose())
