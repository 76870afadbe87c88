"""Schemathesis against the native API's own OpenAPI document: every operation,
with requests generated from its schema (valid and invalid), in process on both
databases, with a key; the rule is no 5xx."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.core.result import Ok

from app.runtime.main import create_app
from app.telegram.simulator import make_tokens
from tests.db.helpers import Database
from tests.in_process import InProcess, in_process
from tests.running_service import make_settings

T = TypeVar("T")
_UNUSED = Database(backend="sqlite", url="sqlite+aiosqlite://", migration_url="sqlite://")
# The document does not depend on the settings; the app is not started here.
SCHEMA = schemathesis.openapi.from_dict(
    create_app(make_settings(_UNUSED, "http://127.0.0.1:1", make_tokens(1))).openapi()
)
OPERATIONS = [result.ok() for result in SCHEMA.get_all_operations() if isinstance(result, Ok)]


class LoopThread:
    """An event loop in its own thread: hypothesis calls the test body
    synchronously, and the app's connections belong to one loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=60)

    def close(self) -> None:
        """Stop the loop only once nothing runs on it: a task left pending
        (a shared key lookup, say) would be destroyed later from another
        thread, with its database connection's thread still calling back."""
        self.run(self._drain())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()

    async def _drain(self) -> None:
        tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.loop.shutdown_asyncgens()


@pytest.fixture
def running(database: Database) -> Iterator[tuple[LoopThread, InProcess]]:
    thread = LoopThread()
    context = in_process(database)
    app = thread.run(context.__aenter__())
    try:
        yield thread, app
    finally:
        thread.run(context.__aexit__(None, None, None))
        thread.close()


def _text(value: str) -> str:
    return value.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _file_part(part: tuple[str, tuple[str | None, Any]]) -> tuple[str, tuple[str | None, bytes]]:
    """A multipart part as httpx can encode it: schemathesis also generates
    numbers and lone surrogates, which httpx's encoder (not the app) chokes on."""
    name, (filename, content) = part
    if not isinstance(content, bytes):
        content = _text(str(content)).encode()
    return _text(name), (None if filename is None else _text(filename), content)


_SENT = {"method", "url", "headers", "params", "json", "content", "data", "files"}


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda op: f"{op.method} {op.path}")
def test_operation_never_answers_5xx(running: tuple[LoopThread, InProcess], operation: Any) -> None:
    thread, app = running

    @settings(
        max_examples=40,
        deadline=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(operation.as_strategy())
    def check(case: Any) -> None:
        kwargs = {
            k: v for k, v in case.as_transport_kwargs(base_url="http://app").items() if k in _SENT
        }
        kwargs["headers"] = {**(kwargs.get("headers") or {}), **app.auth}
        if isinstance(kwargs.get("data"), bytes):
            # A raw body (`null` for an optional JSON one): httpx takes it as `content`.
            kwargs["content"] = kwargs.pop("data")
        if kwargs.get("files"):
            kwargs["files"] = [_file_part(part) for part in kwargs["files"]]
        response: httpx.Response = thread.run(app.client.request(**kwargs))
        assert response.status_code < 500, (kwargs, response.status_code, response.text[:300])

    check()
