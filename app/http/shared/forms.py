"""A streaming multipart/form-data reader for uploads (the native API's form
upload and S3's POST Object).

Starlette's `UploadFile` parses the whole body before the handler runs and
spools big parts to /tmp. Here the body is fed to python-multipart's low-level
parser as it arrives, and the bytes of the `file` field come out as an async
stream that the upload pipeline consumes chunk by chunk.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Final

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header

from app.store.limits import MAX_CONTENT_TYPE_LENGTH

# Only `file` and `fileName` matter; the caps leave room for what a browser
# form adds (a submit button, a CSRF token) and refuse a body that is mostly
# fields, before it is read on. Every field read is held until the end.
#: Parts (fields and files) in one form.
MAX_FORM_PARTS: Final = 32
#: Bytes of all text fields together.
MAX_FORM_TEXT_BYTES: Final = 64 * 1024
#: Bytes of one part's headers (names and values).
MAX_PART_HEADER_BYTES: Final = 8 * 1024


class FormError(Exception):
    """The body is not a usable multipart form; the message says why.

    ``status`` is 413 when the form is over one of the caps above, else 400.
    """

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class _Part:
    name: str = ""
    filename: str | None = None
    content_type: str | None = None
    headers: dict[str, str] = field(default_factory=dict)


class StreamingForm:
    """Reads one file field (`file_field`) and small text fields from a body.

    Iterate `file_bytes()` to get the file's content; afterwards `fields` holds
    the text fields (even those sent after the file), `file_seen` tells whether
    the file field was present, and `filename` / `content_type` describe it.
    """

    def __init__(
        self,
        content_type_header: str,
        *,
        file_field: str = "file",
        named_parts_are_text: bool = False,
        announce_file: bool = False,
    ) -> None:
        """`named_parts_are_text`: every part but the file is a text field,
        even one sent with a filename (as `requests` sends every field given
        to `files=`). `announce_file`: `file_bytes` yields an empty piece when
        the file part begins, so a caller can act on the fields sent before
        it (S3's POST Object reads its policy there) before the content."""
        try:
            kind, params = parse_options_header(content_type_header)
        except UnicodeEncodeError:  # HTTP headers are latin-1; an app may pass more
            kind, params = b"", {}
        boundary = params.get(b"boundary")
        if kind != b"multipart/form-data" or not boundary:
            raise FormError("expected a multipart/form-data body with a boundary")
        self.file_field = file_field
        self._named_parts_are_text = named_parts_are_text
        self._announce_file = announce_file
        self.fields: dict[str, str] = {}
        self.file_seen = False
        self.filename: str | None = None
        self.content_type: str | None = None
        self._out: list[bytes] = []
        self._part = _Part()
        self._header_name = b""
        self._header_value = b""
        self._text = bytearray()
        self._text_bytes = 0
        self._parts = 0
        self._header_bytes = 0
        self._in_file = False
        self._done_with_file = False
        self._finished = False
        try:
            self._parser = self._new_parser(boundary)
        except FormParserError as exc:  # a boundary over its 256-byte limit
            raise FormError(f"unusable multipart boundary: {exc}") from None

    def _new_parser(self, boundary: bytes) -> MultipartParser:
        return MultipartParser(
            boundary,
            callbacks={
                "on_part_begin": self._on_part_begin,
                "on_part_data": self._on_part_data,
                "on_part_end": self._on_part_end,
                "on_header_field": self._on_header_field,
                "on_header_value": self._on_header_value,
                "on_header_end": self._on_header_end,
                "on_headers_finished": self._on_headers_finished,
                "on_end": self._on_end,
            },
        )

    async def file_bytes(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        async for data in body:
            try:
                self._parser.write(data)
            except FormParserError as exc:
                raise FormError(f"malformed multipart body: {exc}") from None
            if self._out:
                out, self._out = self._out, []
                for piece in out:
                    yield piece
        try:
            self._parser.finalize()
        except FormParserError as exc:
            raise FormError(f"malformed multipart body: {exc}") from None
        if not self._finished:
            raise FormError("the multipart body ended before its closing boundary")
        for piece in self._out:
            yield piece
        self._out = []

    # --- parser callbacks ---------------------------------------------------------

    def _on_part_begin(self) -> None:
        self._parts += 1
        if self._parts > MAX_FORM_PARTS:
            raise FormError(f"the form has more than {MAX_FORM_PARTS} fields", 413)
        self._part = _Part()
        self._text = bytearray()
        self._header_bytes = 0

    def _count_header_bytes(self, n: int) -> None:
        self._header_bytes += n
        if self._header_bytes > MAX_PART_HEADER_BYTES:
            raise FormError(f"a form part's headers are over {MAX_PART_HEADER_BYTES} bytes")

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._count_header_bytes(end - start)
        self._header_name += data[start:end]

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._count_header_bytes(end - start)
        self._header_value += data[start:end]

    def _on_header_end(self) -> None:
        name = self._header_name.decode("latin-1").lower()
        # Kept byte for byte (latin-1): parse_options_header works on latin-1
        # text, and a browser sends a non-Latin file name as raw UTF-8 bytes.
        self._part.headers[name] = self._header_value.decode("latin-1")
        self._header_name = b""
        self._header_value = b""

    def _on_headers_finished(self) -> None:
        disposition = self._part.headers.get("content-disposition", "")
        _, params = parse_options_header(disposition)
        self._part.name = params.get(b"name", b"").decode("utf-8", "replace")
        raw_filename = params.get(b"filename")
        self._part.filename = (
            raw_filename.decode("utf-8", "replace") if raw_filename is not None else None
        )
        content_type = self._part.headers.get("content-type")
        self._part.content_type = (
            content_type.encode("latin-1").decode("utf-8", "replace")
            if content_type is not None
            else None
        )
        if len(self._part.content_type or "") > MAX_CONTENT_TYPE_LENGTH:
            raise FormError(
                f"the Content-Type of form field {self._part.name[:64]!r} is longer than "
                f"{MAX_CONTENT_TYPE_LENGTH} characters"
            )
        # Only the first file field is the upload; later ones are read and dropped.
        self._in_file = self._part.name == self.file_field and not self._done_with_file
        if self._in_file:
            self.file_seen = True
            self.filename = self._part.filename
            self.content_type = self._part.content_type
            if self._announce_file:
                self._out.append(b"")

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self._in_file:
            self._out.append(bytes(data[start:end]))
        elif self._is_text(self._part):
            self._text_bytes += end - start
            if self._text_bytes > MAX_FORM_TEXT_BYTES:
                raise FormError(
                    f"the form's text fields are over {MAX_FORM_TEXT_BYTES} bytes in all", 413
                )
            self._text += data[start:end]

    def _on_part_end(self) -> None:
        if self._in_file:
            self._in_file = False
            self._done_with_file = True
        elif self._is_text(self._part) and self._part.name:
            self.fields[self._part.name] = self._text.decode("utf-8", "replace")

    def _is_text(self, part: _Part) -> bool:
        if part.name == self.file_field:
            return False  # a second file: read and dropped
        return part.filename is None or (self._named_parts_are_text and bool(part.name))

    def _on_end(self) -> None:
        self._finished = True
