"""The simulator's control endpoints (/_sim/...): what tests do to Telegram
from outside (hold a method's calls, revoke a bot, lose a chat, corrupt a
message) and what they read back (statistics, stored files)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from app.telegram.simulator.config import MUTABLE_KNOBS
from app.telegram.simulator.state import TelegramSimulator


def control_routes(sim: TelegramSimulator) -> list[Route]:
    async def stats(request: Request) -> Response:
        return JSONResponse(sim.snapshot())

    async def reset_stats(request: Request) -> Response:
        sim.reset_stats()
        return JSONResponse({"ok": True})

    async def config(request: Request) -> Response:
        if request.method == "POST":
            try:
                changes = await request.json()
                if not isinstance(changes, dict):
                    raise ValueError("expected a JSON object of settings")
                sim.configure(**changes)
            except ValueError as exc:
                return JSONResponse({"ok": False, "description": str(exc)}, status_code=400)
        knobs = {name: getattr(sim.config, name) for name in sorted(MUTABLE_KNOBS)}
        return JSONResponse({"ok": True, "config": knobs})

    async def messages(request: Request) -> Response:
        stored = sim.stored_messages()
        return JSONResponse({"ok": True, "chats": {str(chat): ids for chat, ids in stored.items()}})

    async def kill(request: Request) -> Response:
        return JSONResponse({"ok": True, "dropped": sim.kill()})

    # The gate of `hold`/`release`, for tests that run the simulator as a
    # process: a POST holds or releases, a GET says how many calls wait.
    async def hold(request: Request) -> Response:
        method = str(request.path_params["method"])
        if request.method == "POST":
            sim.hold(method)
        return JSONResponse({"ok": True, "held": sim.held_calls(method)})

    async def release(request: Request) -> Response:
        sim.release(str(request.path_params["method"]))
        return JSONResponse({"ok": True})

    async def revoke(request: Request) -> Response:
        return _control(lambda: sim.revoke(*_ids(request, "bot_id")))

    # Channel ids are negative, which Starlette's int convertor does not match.
    async def kick(request: Request) -> Response:
        return _control(lambda: sim.kick(*_ids(request, "bot_id", "chat_id")))

    async def unkick(request: Request) -> Response:
        return _control(lambda: sim.unkick(*_ids(request, "bot_id", "chat_id")))

    # What Telegram can lose, for durability tests (see TelegramSimulator).
    async def lose_chat(request: Request) -> Response:
        return _control(lambda: sim.lose_chat(*_ids(request, "chat_id")))

    async def take_down(request: Request) -> Response:
        def act() -> dict[str, Any]:
            taken = sim.take_down(*_ids(request, "chat_id", "message_id"))
            return {"taken_down": [list(message) for message in taken]}

        return _control(act)

    async def corrupt(request: Request) -> Response:
        def act() -> dict[str, Any]:
            chat_id, message_id = _ids(request, "chat_id", "message_id")
            text = request.query_params.get("offset")
            offset = None if text is None else _integer(text, "offset must be an integer")
            return {"offset": sim.corrupt(chat_id, message_id, offset)}

        return _control(act)

    async def files(request: Request) -> Response:
        try:
            stored = sim.stored_files()
            live = {(chat, message) for chat, message, _ in sim.stored_files(include_gone=False)}
        except KeyError as exc:
            return _control_error(exc)
        listing = [
            {
                "chat_id": chat,
                "message_id": message,
                "size": len(data),
                "live": (chat, message) in live,
            }
            for chat, message, data in stored
        ]
        return JSONResponse({"ok": True, "files": listing})

    async def file_bytes(request: Request) -> Response:
        try:
            data = sim.document_bytes(*_ids(request, "chat_id", "message_id"))
        except (_Refused, KeyError) as exc:
            return _control_error(exc)
        return Response(data, media_type="application/octet-stream")

    return [
        Route("/_sim/stats", stats, methods=["GET"]),
        Route("/_sim/reset-stats", reset_stats, methods=["POST"]),
        Route("/_sim/config", config, methods=["GET", "POST"]),
        Route("/_sim/messages", messages, methods=["GET"]),
        Route("/_sim/kill", kill, methods=["POST"]),
        Route("/_sim/hold/{method}", hold, methods=["GET", "POST"]),
        Route("/_sim/release/{method}", release, methods=["POST"]),
        Route("/_sim/revoke/{bot_id}", revoke, methods=["POST"]),
        Route("/_sim/kick/{bot_id}/{chat_id}", kick, methods=["POST"]),
        Route("/_sim/unkick/{bot_id}/{chat_id}", unkick, methods=["POST"]),
        Route("/_sim/chats/{chat_id}/lose", lose_chat, methods=["POST"]),
        Route("/_sim/messages/{chat_id}/{message_id}/take-down", take_down, methods=["POST"]),
        Route("/_sim/messages/{chat_id}/{message_id}/corrupt", corrupt, methods=["POST"]),
        Route("/_sim/files", files, methods=["GET"]),
        Route("/_sim/files/{chat_id}/{message_id}", file_bytes, methods=["GET"]),
    ]


class _Refused(Exception):
    """A control request that is wrong as asked: 400 with this description."""


def _integer(text: str, description: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise _Refused(description) from None


def _ids(request: Request, *names: str) -> list[int]:
    return [_integer(str(request.path_params[name]), "ids must be integers") for name in names]


def _control(action: Callable[[], dict[str, Any] | None]) -> Response:
    """Run a control action: {"ok": true} plus what it returns, or its refusal."""
    try:
        answer = action()
    except (_Refused, ValueError, KeyError) as exc:
        return _control_error(exc)
    return JSONResponse({"ok": True, **(answer or {})})


def _control_error(exc: Exception) -> Response:
    # KeyError: an unknown bot, chat or message. ValueError: the simulator
    # refused the request as given (its message says why).
    status = 404 if isinstance(exc, KeyError) else 400
    return JSONResponse({"ok": False, "description": str(exc.args[0])}, status_code=status)
