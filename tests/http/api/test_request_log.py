"""The request's log line and metrics when the shutdown's grace period cuts it
off: no 500 (the server did not fail; every deploy that cuts an upload would
set off 5xx alerts), but a warning that says so. tests/deploy/test_shutdown.py
cuts a real upload off in the real process."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
from starlette.types import Message, Receive, Scope, Send

from app.http.api.middleware import RequestContextMiddleware
from app.kit.logging import configure_logging
from app.store import reader
from app.store.metrics import Metrics
from tests.running_service import CHUNK, ServiceFactory, payload


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    output = io.StringIO()
    configure_logging("INFO", "json", stream=output)
    yield output
    root.handlers[:], level = saved
    root.setLevel(level)
    structlog.reset_defaults()


def scope() -> Scope:
    return {"type": "http", "method": "PUT", "path": "/f", "headers": [], "query_string": b""}


async def nothing_to_receive() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


async def cut_off(
    inner: Any, started: asyncio.Event, log_lines: io.StringIO
) -> tuple[dict[str, Any], list[Message], Metrics]:
    """Runs `inner` behind the middleware and cancels it once `started` is
    set, as the shutdown's grace period does: the request's log line, what
    reached the client and the metrics."""
    metrics = Metrics()
    app = RequestContextMiddleware(inner, lambda _scope: metrics)
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    task = asyncio.create_task(app(scope(), nothing_to_receive, send))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (line,) = [json.loads(text) for text in log_lines.getvalue().splitlines()]
    return line, sent, metrics


def requests_counted(metrics: Metrics, status: str) -> float:
    value = metrics.registry.get_sample_value(
        "teleuploader_http_requests_total",
        {"route": "unmatched", "method": "PUT", "status": status},
    )
    return value or 0.0


async def test_a_request_cut_off_before_its_answer_is_a_499_warning_not_a_500(
    log_lines: io.StringIO,
) -> None:
    started = asyncio.Event()

    async def endless(scope: Scope, receive: Receive, send: Send) -> None:
        started.set()
        await asyncio.Event().wait()

    line, sent, metrics = await cut_off(endless, started, log_lines)

    assert line["event"] == "http_request"
    assert (line["status"], line["cancelled"], line["level"]) == (499, True, "warning")
    assert sent == []
    assert requests_counted(metrics, "499") == 1
    assert requests_counted(metrics, "500") == 0


async def test_a_request_cut_off_while_answering_keeps_its_status_and_says_it_was_cut(
    log_lines: io.StringIO,
) -> None:
    started = asyncio.Event()

    async def stalls_after_the_head(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        started.set()
        await asyncio.Event().wait()

    line, sent, metrics = await cut_off(stalls_after_the_head, started, log_lines)

    assert (line["status"], line["cancelled"], line["level"]) == (200, True, "warning")
    assert [message["type"] for message in sent] == ["http.response.start"]
    assert requests_counted(metrics, "200") == 1


async def test_an_answered_request_is_an_info_line_without_cancelled(
    log_lines: io.StringIO,
) -> None:
    async def answers(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    metrics = Metrics()
    app = RequestContextMiddleware(answers, lambda _scope: metrics)

    async def send(message: Message) -> None:
        pass

    await app(scope(), nothing_to_receive, send)

    (line,) = [json.loads(text) for text in log_lines.getvalue().splitlines()]
    assert (line["status"], line["level"]) == (201, "info")
    assert "cancelled" not in line
    assert requests_counted(metrics, "201") == 1


async def test_a_log_line_names_a_public_id_by_its_start_never_whole(
    start_service: ServiceFactory,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A public id is a download link: a line about a failed download names
    it by its first characters, not by the link (docs/security.md, "Logs")."""
    service = await start_service(max_attempts=1, log_level="INFO")
    # No pause between the read's attempts: what it waits for is not the subject.
    monkeypatch.setattr(reader, "_pause", lambda _seconds: asyncio.sleep(0))
    async with service.client() as http:
        stored = await http.put(
            "/api/files/f.bin", content=payload(3 * CHUNK), headers=service.auth
        )
        public_id = stored.json()["public_id"]
        service.sim.set_method_faults("getFile", fault_5xx_rate=1.0)
        failed = await http.get(f"/f/{public_id}")
    assert failed.status_code == 503, failed.text
    log = capsys.readouterr().out
    assert "/f/" + public_id[:4] in log  # the failure is logged, with where
    assert public_id not in log
