"""structlog, configured once for the whole process.

Log lines are events with snake_case names and keyword fields. A bot is always
named by `bot_id`; tokens never reach a log line (BotToken's str() is masked, and
the client scrubs Telegram's text).
"""

from __future__ import annotations

import logging
import sys

import structlog

_configured = False


def configure_logging(level: str = "INFO", fmt: str = "json") -> None:
    global _configured
    numeric = logging.getLevelName(level.upper())
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    else:
        shared.append(structlog.processors.format_exc_info)
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[*shared, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stdout),
        cache_logger_on_first_use=False,
    )
    # Libraries that log through the standard library (uvicorn, sqlalchemy).
    logging.basicConfig(level=numeric, stream=sys.stdout, format="%(message)s", force=True)
    # httpx logs every request URL at INFO, and a Bot API URL carries the token.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)
    _configured = True
