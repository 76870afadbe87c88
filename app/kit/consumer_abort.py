"""The one hook between the HTTP server and the code that produces a response.

A download that must end without a proper end (its client stalled, or
Telegram failed after the headers were sent) has to *abort* the connection:
ending the body would pass a short file for a whole one. The server
(app/kit/serving.py) sets `CONSUMER_ABORT` for each request; the store's reader
calls it. Here, below both, so that neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

# Aborts the connection of the client the current request streams to; None
# outside a request (a dropped download then raises when its client next asks
# for bytes).
CONSUMER_ABORT: ContextVar[Callable[[], None] | None] = ContextVar(
    "download_consumer_abort", default=None
)
