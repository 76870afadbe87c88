"""Running an ASGI app with uvicorn inside the current event loop.

Used by the demo (service and simulator in one process) and by the tests, which
talk to real HTTP servers on ephemeral ports.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import uvicorn


class ServerStartFailed(RuntimeError):
    pass


@asynccontextmanager
async def serve_in_task(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    lifespan: Literal["auto", "on", "off"] = "on",
) -> AsyncIterator[str]:
    """Serve `app` until the block ends; yields its base URL."""
    config = uvicorn.Config(
        app, host=host, port=port, lifespan=lifespan, log_config=None, log_level="warning"
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        if task.done():
            task.result()
            raise ServerStartFailed(f"the server on {host}:{port} did not start")
        await asyncio.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://{host}:{bound}"
    finally:
        server.should_exit = True
        await task
