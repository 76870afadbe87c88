"""Log lines: one JSON object each, library lines included, request ids bound."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from app.logging import REQUEST_ID, configure_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    yield
    root.handlers[:], level = saved
    root.setLevel(level)
    structlog.reset_defaults()


def test_every_line_is_json_with_event_and_level(restore_logging: None) -> None:
    output = io.StringIO()
    configure_logging("INFO", "json", stream=output)
    bound = REQUEST_ID.set("r-1")
    try:
        structlog.get_logger("app.test").info("chunk_stored", bot_id=42, size=10)
    finally:
        REQUEST_ID.reset(bound)
    structlog.get_logger("app.test").info("gc_round")
    logging.getLogger("some.library").info("Started server process [%d]", 7)
    logging.getLogger("uvicorn.access").info("this is dropped: requests are logged once")
    logging.getLogger("httpx").info("HTTP Request: POST https://api.telegram.org/bot1:SECRET/x")

    lines = [json.loads(line) for line in output.getvalue().splitlines()]

    assert lines[0]["event"] == "chunk_stored"
    assert lines[0]["bot_id"] == 42
    assert lines[0]["request_id"] == "r-1"
    assert lines[0]["level"] == "info"
    assert "request_id" not in lines[1]
    assert lines[2]["event"] == "Started server process [7]"
    assert lines[2]["logger"] == "some.library"
    assert len(lines) == 3


def test_levels_below_the_setting_are_dropped_and_exceptions_keep_their_traceback(
    restore_logging: None,
) -> None:
    output = io.StringIO()
    configure_logging("WARNING", "json", stream=output)
    log = structlog.get_logger("app.store.gc")
    log.info("gc_round", deleted=3)
    try:
        raise RuntimeError("telegram went away")
    except RuntimeError:
        log.exception("gc_delete_failed", chunk_id=9)
    logging.getLogger("sqlalchemy.pool").info("dropped too")

    (line,) = [json.loads(line) for line in output.getvalue().splitlines()]

    assert line["event"] == "gc_delete_failed"
    assert line["level"] == "error"
    assert line["logger"] == "app.store.gc"
    assert line["chunk_id"] == 9
    assert "RuntimeError: telegram went away" in line["exception"]
