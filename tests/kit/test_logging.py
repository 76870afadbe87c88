"""Log lines: one JSON object each, library lines included, request ids bound."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from app.config.settings import BotToken, load_settings
from app.kit.logging import REQUEST_ID, _json_line, configure_logging, utc_timestamp


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


@given(st.integers(min_value=0, max_value=253_402_300_799_999_999_999), st.booleans())
def test_a_timestamp_is_the_utc_instant_to_the_microsecond(ns: int, again: bool) -> None:
    if again:  # the second's text cached by a stamp just before
        utc_timestamp(ns - ns % 1_000_000_000)
    expected = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=ns // 1000)
    assert utc_timestamp(ns) == expected.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_each_line_carries_the_time_it_was_logged(restore_logging: None) -> None:
    output = io.StringIO()
    configure_logging("INFO", "json", stream=output)
    before = datetime.now(UTC)
    structlog.get_logger("app.test").info("first")
    time.sleep(0.01)
    structlog.get_logger("app.test").info("second")
    after = datetime.now(UTC)
    stamps = [
        datetime.fromisoformat(json.loads(line)["timestamp"])
        for line in output.getvalue().splitlines()
    ]
    assert before <= stamps[0] < stamps[1] <= after
    assert stamps[1] - stamps[0] >= timedelta(seconds=0.01)


# What a log line's fields can hold: text (any code point but lone
# surrogates, which get their own case below), numbers, nested values.
_FIELD_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(st.dictionaries(st.text(), _FIELD_VALUES, max_size=6))
def test_a_line_says_what_the_standard_encoder_says_in_ascii(fields: dict[str, object]) -> None:
    line = _json_line(fields)
    assert line.isascii()
    assert json.loads(line) == json.loads(json.dumps(fields))


def test_values_orjson_would_write_otherwise_are_written_as_the_standard_encoder_does() -> None:
    token = BotToken.parse("123456:AAE-secret-of-the-bot-0123456789")
    fields: dict[object, object] = {
        "bot": token,  # a dataclass: its masking repr, never its fields
        "when": datetime(2026, 12, 4, 20, 0, tzinfo=UTC),
        "big": 2**70,
        "broken": "\ud800",
        7: "a key that is not text",
        "error": ValueError("boom"),
    }
    line = _json_line(fields)
    assert "secret-of-the-bot" not in line
    assert line.isascii()
    assert json.loads(line) == {
        "bot": "BotToken(123456:***)",
        "when": repr(fields["when"]),
        "big": 2**70,
        "broken": "\ud800",
        "7": "a key that is not text",
        "error": "ValueError('boom')",
    }
    # Each value alone (the fallback is per line, so a line without the
    # others takes orjson's path).
    for name in ("bot", "when", "error"):
        alone = json.loads(_json_line({name: fields[name]}))
        assert alone == {name: repr(fields[name])}


def test_the_default_format_is_for_humans_on_a_terminal_and_json_elsewhere(
    restore_logging: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("LOG_FORMAT", raising=False)
    monkeypatch.chdir(tmp_path)  # no stray .env
    assert load_settings().log_format == "auto"

    controller, terminal_fd = os.openpty()
    with os.fdopen(terminal_fd, "w") as terminal:
        configure_logging("INFO", "auto", stream=terminal)
        structlog.get_logger("app.test").info("bots_ready", usable=2)
        terminal.flush()
        # Colours, too: a terminal shows them.
        shown = re.sub(r"\x1b\[[0-9;]*m", "", os.read(controller, 4096).decode())
    os.close(controller)
    assert "bots_ready" in shown and "usable=2" in shown
    assert not shown.lstrip().startswith("{")

    piped = io.StringIO()
    configure_logging("INFO", "auto", stream=piped)
    structlog.get_logger("app.test").info("bots_ready", usable=2)
    assert json.loads(piped.getvalue())["usable"] == 2


# A name as a client may send it: an OSC that retitles the terminal, one that
# clears the screen, a one-byte CSI, a bidi override, a line break.
HOSTILE = "photo\x1b]0;owned\x07\x1b[2J\x9b1m\u202egnp.exe\nforged_line"


def test_a_name_in_a_line_for_humans_cannot_act_on_the_terminal(
    restore_logging: None,
) -> None:
    stream = io.StringIO()
    configure_logging("INFO", "console", stream=stream)
    structlog.get_logger("app.test").info("stored", key=HOSTILE)
    logging.getLogger("uvicorn.error").warning("foreign %s", HOSTILE)
    try:
        raise ValueError("boom")
    except ValueError:
        structlog.get_logger("app.test").exception("failed", key=HOSTILE)
    shown = stream.getvalue()
    assert not any(ch in shown for ch in "\x1b\x07\x9b\u202e")
    assert shown.count("photo\\x1b]0;owned\\x07\\x1b[2J\\x9b1m[U+202E]gnp.exe\\x0aforged_line") == 3
    # Only the traceback spans lines.
    assert "\nforged_line" not in shown
    assert "Traceback (most recent call last):\n" in shown


def test_a_name_in_a_json_line_is_escaped_by_json(restore_logging: None) -> None:
    stream = io.StringIO()
    configure_logging("INFO", "json", stream=stream)
    structlog.get_logger("app.test").info("stored", key=HOSTILE)
    [line] = stream.getvalue().splitlines()
    assert line.isascii() and line.isprintable()
    assert json.loads(line)["key"] == HOSTILE
