"""structlog, configured once for the whole process.

Log lines are events with snake_case names and keyword fields, one JSON object
per line on stdout (journald keeps them), or lines for humans when stdout is
a terminal (LOG_FORMAT=auto, the default). Lines from libraries that log through
the standard library (uvicorn, SQLAlchemy, Alembic) go through the same
renderer, so every line parses. A bot is always named by `bot_id`; tokens never
reach a log line (BotToken's str() is masked, the client scrubs Telegram's
text, and httpx's request logging, which would print Bot API URLs, is off).

Our own events are rendered by structlog and written straight to the stream,
not handed to the standard library: its LogRecord, caller lookup, handler and
formatter cost three times the rendering, and at the default level every
request logs a line (a quarter of a small S3 request's CPU went there).

Every line logged while a request is served carries its `request_id`. It is
one context variable (`REQUEST_ID`), set by the request middleware:
structlog's own context variables cost 3-4 µs a request to bind, reset and
merge into every line (the merge walks every context variable), for the one
value we bind.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from contextvars import ContextVar
from typing import Any, Final, TextIO

import orjson
import structlog
from structlog.typing import EventDict, WrappedLogger

from app.kit.bidi import escape_controls

#: The id of the request being served, for its log lines and error bodies.
REQUEST_ID: ContextVar[str | None] = ContextVar("request_id", default=None)


def _add_request_id(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
    request_id = REQUEST_ID.get()
    if request_id is not None:
        event_dict.setdefault("request_id", request_id)
    return event_dict


def _escape_controls(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
    """Text values as a terminal shows them without acting on them: a value
    may be a client's (an S3 key, a file name) and hold ESC. The traceback
    is made after this, and keeps its lines."""
    for name, value in event_dict.items():
        if isinstance(value, str):
            event_dict[name] = escape_controls(value)
    return event_dict


# (second, its text): every line is stamped, and the text up to the second
# changes once a second. structlog's TimeStamper formats a datetime for each
# line (1.7 µs; 0.6 µs this way). A tuple, so that threads logging at once
# read a consistent pair.
_second_text: tuple[int, str] = (-1, "")


def utc_timestamp(ns: int) -> str:
    """`ns` nanoseconds after the epoch as `2026-11-30T08:00:00.123456Z`."""
    global _second_text
    second, micro = divmod(ns // 1000, 1_000_000)
    cached, text = _second_text
    if second != cached:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second_text = (second, text)
    return f"{text}.{micro:06d}Z"


def _add_timestamp(_logger: WrappedLogger, _name: str, event_dict: EventDict) -> EventDict:
    event_dict["timestamp"] = utc_timestamp(time.time_ns())
    return event_dict


# Built once: json.dumps builds an encoder for every call given an option
# (structlog gives its fallback for values JSON has no type for).
_JSON: Final = json.JSONEncoder(default=repr)
# orjson writes a request's line in a seventh of the standard encoder's time
# (0.9 against 6.4 µs). Dataclasses and datetimes go to `repr` as they do
# with the standard encoder: orjson would write a dataclass's fields, and
# BotToken is a dataclass whose `repr`, not its fields, masks the secret.
_ORJSON_OPTIONS: Final = orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME


def _json_line(event_dict: EventDict, **_options: Any) -> str:
    """The line as the standard encoder writes it, but for spaces: ASCII, with
    anything else as `\\u` escapes (a journal or terminal set to ASCII
    takes it). What orjson refuses (keys that are not text, integers past
    64 bits, lone surrogates) or writes as UTF-8 goes to the standard encoder."""
    try:
        line = orjson.dumps(event_dict, default=repr, option=_ORJSON_OPTIONS).decode()
    except TypeError:  # orjson.JSONEncodeError
        return _JSON.encode(event_dict)
    return line if line.isascii() else _JSON.encode(event_dict)


class _NamedWriter(structlog.WriteLogger):
    """structlog's line writer (a lock per stream, a flush per line), named
    like the standard library's loggers so that lines say where they come from."""

    def __init__(self, stream: TextIO, name: str) -> None:
        super().__init__(stream)
        self.name = name


class _WriterFactory:
    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def __call__(self, *args: Any) -> _NamedWriter:
        # Every module names its logger: structlog.get_logger("app.store.gc").
        return _NamedWriter(self._stream, str(args[0]) if args else "app")


def configure_logging(level: str = "INFO", fmt: str = "json", stream: TextIO | None = None) -> None:
    """Log at `level` and above to `stream` (stdout), as JSON lines or, with
    `fmt` "console", for humans; "auto" picks console on a terminal and JSON
    elsewhere (a pipe, a file, journald)."""
    out = stream if stream is not None else sys.stdout
    if fmt == "auto":
        fmt = "console" if out.isatty() else "json"
    numeric = logging.getLevelName(level.upper())
    shared: list[structlog.types.Processor] = [
        _add_request_id,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        _add_timestamp,
    ]
    renderer: structlog.types.Processor
    # JSON escapes control characters itself; lines for humans need it done.
    escaping: list[structlog.types.Processor] = []
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
        escaping.append(_escape_controls)
    else:
        renderer = structlog.processors.JSONRenderer(serializer=_json_line)
    structlog.configure(
        processors=[*shared, *escaping, structlog.processors.format_exc_info, renderer],
        logger_factory=_WriterFactory(out),
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=shared,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                *escaping,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(numeric)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "alembic"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # Every request is logged once as `http_request` with its request id.
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    # httpx logs every request URL at INFO, and a Bot API URL carries the token.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
