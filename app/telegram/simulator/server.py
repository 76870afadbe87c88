"""Running the simulator: embedded in a host's event loop, or standalone."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence
from typing import Any

import structlog
import uvicorn

from app.kit.serving import serve_in_task
from app.telegram.simulator.config import SimulatorConfig, make_tokens
from app.telegram.simulator.http import create_simulator_app
from app.telegram.simulator.state import TelegramSimulator

log = structlog.get_logger("app.telegram.simulator.server")

# --- running it -----------------------------------------------------------------------


def run_simulator(
    sim: TelegramSimulator, host: str = "127.0.0.1", port: int = 0
) -> contextlib.AbstractAsyncContextManager[str]:
    """Serve the simulator in the current event loop, through the same
    helper as the service; yields its base URL."""
    return serve_in_task(
        create_simulator_app(sim), host=host, port=port, lifespan="off", graceful_seconds=5
    )


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
    tls_cert: str | None = None,
    tls_key: str | None = None,
    **knobs: Any,
) -> None:
    """Run the simulator standalone (`teleuploader telegram-sim`) until interrupted.

    Knobs are SimulatorConfig fields; ones given as None keep their default.
    The tokens it accepts are printed to stdout, one per line. With `tls_cert`
    and `tls_key` (PEM files) it serves HTTPS, as Telegram does.
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
    scheme = "https" if tls_cert else "http"
    print(
        f"Telegram simulator on {scheme}://{host}:{port}, chats {sim.chat_ids}",
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
        ssl_certfile=tls_cert,
        ssl_keyfile=tls_key,
    )
