"""Running the simulator: embedded in a host's event loop, or standalone."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
from collections.abc import AsyncIterator, Generator, Sequence
from typing import Any

import structlog
import uvicorn

from app.telegram.simulator.config import SimulatorConfig, make_tokens
from app.telegram.simulator.http import create_simulator_app
from app.telegram.simulator.state import TelegramSimulator

log = structlog.get_logger()

# --- running it -----------------------------------------------------------------------


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server living inside another program's event loop."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        self.should_exit = True
        self._stopping.set()

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        # The host program owns SIGINT/SIGTERM.
        yield

    # uvicorn's main loop and shutdown poll and sleep in 0.1 s steps; every test
    # starts and stops a server, so these two wait on events and short polls.

    async def main_loop(self) -> None:
        while not await self.on_tick(0):  # on_tick(0) refreshes the Date header
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._stopping.wait()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        for server in self.servers:
            server.close()
        state = self.server_state
        for connection in list(state.connections):
            connection.shutdown()  # idle ones close now, busy ones after their response
        try:
            async with asyncio.timeout(self.config.timeout_graceful_shutdown):
                # uvicorn offers no event for "every connection is closed".
                while state.connections or state.tasks:  # noqa: ASYNC110
                    await asyncio.sleep(0.005)
        except TimeoutError:
            log.warning("sim_shutdown_cancelled_requests", requests=len(state.tasks))
            for task in state.tasks:
                task.cancel()
            await asyncio.gather(*state.tasks, return_exceptions=True)
        for server in self.servers:
            await server.wait_closed()


@contextlib.asynccontextmanager
async def run_simulator(
    sim: TelegramSimulator, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Serve the simulator in the current event loop; yields its base URL."""
    config = uvicorn.Config(
        create_simulator_app(sim),
        host=host,
        port=port,
        lifespan="off",
        log_level="warning",
        log_config=None,  # leave the host's logging configuration as it is
        access_log=False,
        ws="none",
        timeout_graceful_shutdown=5,
    )
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve())
    try:
        await _wait_until_started(server, task)
        yield _base_url(server, host)
    finally:
        server.stop()
        await task


async def _wait_until_started(server: uvicorn.Server, task: asyncio.Task[None]) -> None:
    while not server.started:
        if task.done():
            task.result()  # raises what stopped it
            raise RuntimeError("the simulator's server stopped during startup")
        await asyncio.sleep(0.002)


def _base_url(server: uvicorn.Server, host: str) -> str:
    port = server.servers[0].sockets[0].getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


# Option names of the `telegram-sim` command that differ from SimulatorConfig's.
_CLI_ALIASES = {"concurrency_limit": "max_concurrent_calls_per_bot"}


def main_simulator(
    host: str = "127.0.0.1",
    port: int = 8081,
    bots: int = 6,
    chat_id: int | Sequence[int] = -1001,
    *,
    tokens: Sequence[str] | None = None,
    tokens_file: str | os.PathLike[str] | None = None,
    first_bot_id: int = 100001,
    **knobs: Any,
) -> None:
    """Run the simulator standalone (`teleuploader telegram-sim`) until interrupted.

    Knobs are SimulatorConfig fields; ones given as None keep their default.
    The tokens it accepts are printed to stdout, one per line.
    """
    settings = {_CLI_ALIASES.get(name, name): value for name, value in knobs.items()}
    config = SimulatorConfig(
        tokens=list(tokens) if tokens else make_tokens(bots, first_bot_id),
        chat_ids=[chat_id] if isinstance(chat_id, int) else list(chat_id),
        **{name: value for name, value in settings.items() if value is not None},
    )
    sim = TelegramSimulator(config)
    if tokens_file is not None:
        with open(tokens_file, "w", encoding="utf-8") as out:
            out.write("".join(f"{token}\n" for token in sim.tokens))
    for token in sim.tokens:
        print(token)
    sys.stdout.flush()
    print(
        f"Telegram simulator on http://{host}:{port}, chats {sim.chat_ids}",
        file=sys.stderr,
    )
    uvicorn.run(
        create_simulator_app(sim),
        host=host,
        port=port,
        lifespan="off",
        log_level="warning",
        access_log=False,
        ws="none",
    )
