"""Request bodies as Telegram reads them: multipart, form or JSON, paced, into `_Params`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import mimetypes
import posixpath
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from python_multipart import MultipartParser
from python_multipart.exceptions import FormParserError, MultipartParseError
from python_multipart.multipart import parse_options_header
from starlette.requests import ClientDisconnect, Request

from app.telegram.simulator.model import ApiError, ReceivedBytes, _Params, _StoredFile, _Upload

if TYPE_CHECKING:
    from python_multipart.multipart import MultipartCallbacks


def _received_file(upload: _Upload, params: _Params) -> _StoredFile:
    if not upload.data:
        raise ApiError(400, "Bad Request: file must be non-empty")
    name = posixpath.basename(upload.filename.replace("\\", "/")) or "document"
    mime = upload.content_type
    if not _flag(params, "disable_content_type_detection"):
        mime = mimetypes.guess_type(name)[0] or mime
    return _StoredFile(
        unique_id="AgAD" + secrets.token_urlsafe(12),
        content=upload.data,
        file_name=name,
        mime_type=mime or "application/octet-stream",
    )


def _flag(params: _Params, name: str) -> bool:
    return params.fields.get(name, "").strip().lower() in ("true", "1")


def _int_param(params: _Params, name: str, invalid: str) -> int:
    try:
        return int(params.fields.get(name, "").strip())
    except ValueError:
        raise ApiError(400, invalid) from None


def _chat_id_param(params: _Params, name: str) -> int:
    text = params.fields.get(name, "").strip()
    if not text:
        raise ApiError(400, f"Bad Request: {name} is empty")
    # "@channelname" and other non-numeric ids name no chat the simulator has.
    return _int_param(params, name, "Bad Request: chat not found")


def _message_id_param(params: _Params, name: str) -> int:
    return _int_param(params, name, "Bad Request: message identifier is not specified")


# --- request bodies -----------------------------------------------------------------


class _MultipartCollector:
    """Feeds body pieces to python-multipart's streaming parser, keeps parts in memory.

    A part's data is kept as views of the received pieces (`ReceivedBytes`):
    growing one buffer piece by piece, then copying it into `bytes`, cost the
    simulator more CPU than the service it was serving (it shares the
    machine with the service in tests and benches)."""

    def __init__(self, boundary: bytes) -> None:
        self._parts: list[tuple[dict[str, str], list[memoryview]]] = []
        self._header_name = bytearray()
        self._header_value = bytearray()
        callbacks: MultipartCallbacks = {
            "on_part_begin": self._on_part_begin,
            "on_part_data": self._on_part_data,
            "on_header_field": self._on_header_field,
            "on_header_value": self._on_header_value,
            "on_header_end": self._on_header_end,
        }
        # A bad body is only reported once it has been read to its end.
        self._parser: MultipartParser | None = None
        with contextlib.suppress(FormParserError, ValueError):
            self._parser = MultipartParser(boundary, callbacks) if boundary else None

    def feed(self, piece: bytes) -> None:
        if self._parser is None:
            return
        try:
            self._parser.write(piece)
        except (MultipartParseError, FormParserError):
            self._parser = None

    def finish(self) -> _Params:
        if self._parser is not None:
            try:
                self._parser.finalize()
            except (MultipartParseError, FormParserError):
                self._parser = None
        if self._parser is None:
            raise ApiError(400, "Bad Request: can't parse multipart/form-data request")
        params = _Params()
        for headers, pieces in self._parts:
            _, options = parse_options_header(headers.get("content-disposition"))
            name = options.get(b"name", b"").decode("utf-8", "replace")
            if b"filename" in options:
                params.files[name] = _Upload(
                    filename=options[b"filename"].decode("utf-8", "replace"),
                    content_type=headers.get("content-type", "").strip(),
                    data=ReceivedBytes(pieces),
                )
            else:
                params.fields[name] = b"".join(pieces).decode("utf-8", "replace")
        return params

    def _on_part_begin(self) -> None:
        self._parts.append(({}, []))

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        # The parser passes the piece fed to it or its own boundary, both
        # immutable `bytes`, so a view of them stays valid; anything else is copied.
        view = memoryview(data)[start:end]
        self._parts[-1][1].append(view if isinstance(data, bytes) else memoryview(bytes(view)))

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name.extend(memoryview(data)[start:end])

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value.extend(memoryview(data)[start:end])

    def _on_header_end(self) -> None:
        name = self._header_name.decode("latin-1").strip().lower()
        self._parts[-1][0][name] = self._header_value.decode("latin-1")
        self._header_name.clear()
        self._header_value.clear()


class _BufferCollector:
    """Keeps a small non-multipart body (form-urlencoded or JSON) whole."""

    def __init__(self, content_type: str) -> None:
        self._content_type = content_type
        self._body = bytearray()

    def feed(self, piece: bytes) -> None:
        self._body.extend(piece)

    def finish(self) -> _Params:
        if not self._body.strip():
            return _Params()
        text = self._body.decode("utf-8", "replace")
        if self._content_type == "application/json":
            return _Params(fields=_json_fields(text))
        return _Params(fields=dict(parse_qsl(text, keep_blank_values=True)))


def _json_fields(text: str) -> dict[str, str]:
    try:
        payload = json.loads(text)
    except ValueError:
        raise ApiError(400, "Bad Request: can't parse JSON object") from None
    if not isinstance(payload, dict):
        raise ApiError(400, "Bad Request: can't parse JSON object")
    return {str(key): _param_text(value) for key, value in payload.items() if value is not None}


def _param_text(value: Any) -> str:
    # Parameters arrive as text in the other encodings; JSON ones are made alike.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return str(value)
    return json.dumps(value)


@dataclass
class _Body:
    """A request body read to its end; parsed only when the call gets that far."""

    collector: _MultipartCollector | _BufferCollector
    query: dict[str, str]
    too_large: bool
    _parsed: _Params | None = None

    def params(self) -> _Params:
        if self._parsed is None:
            params = self.collector.finish()
            for name, value in self.query.items():
                params.fields.setdefault(name, value)
            self._parsed = params
        return self._parsed

    def files_size(self) -> int:
        """The bytes of every file part (telegram-bot-api's Query::files_size)."""
        if self.too_large or not isinstance(self.collector, _MultipartCollector):
            return 0
        return sum(len(upload.data) for upload in self.params().files.values())


async def _read_body(
    request: Request,
    *,
    max_bytes: int,
    bandwidth: float | None,
    on_bytes: Callable[[int], None],
) -> _Body:
    """Read the body at no more than `bandwidth` bytes/s, parsing as it comes.

    A body over `max_bytes` is still read to its end (and thrown away) so that
    the client gets the 413 instead of a broken pipe.
    """
    content_type, options = parse_options_header(request.headers.get("content-type"))
    collector: _MultipartCollector | _BufferCollector
    if content_type == b"multipart/form-data":
        collector = _MultipartCollector(options.get(b"boundary", b""))
    else:
        collector = _BufferCollector(content_type.decode("latin-1"))
    started = time.monotonic()
    size = 0
    async for piece in request.stream():
        size += len(piece)
        on_bytes(len(piece))
        if size <= max_bytes:
            collector.feed(piece)
        if bandwidth is not None:
            await _pace(started, size, bandwidth)
    if bandwidth is not None and await request.is_disconnected():
        # The bytes came in faster than the simulated link carries them; a
        # client that left before the link "delivered" them sent no whole body.
        raise ClientDisconnect()
    return _Body(collector, dict(request.query_params), too_large=size > max_bytes)


async def _pace(started: float, done: int, bandwidth: float) -> None:
    """Sleep until `done` bytes would have taken their time at `bandwidth`."""
    ahead = done / bandwidth - (time.monotonic() - started)
    if ahead > 0:
        await asyncio.sleep(ahead)
