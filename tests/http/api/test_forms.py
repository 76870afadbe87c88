"""The streaming multipart reader, fed the way a socket feeds it: in pieces."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.http.shared.forms import MAX_FORM_TEXT_BYTES, FormError, StreamingForm

BOUNDARY = "----boundary42"
CONTENT_TYPE = f"multipart/form-data; boundary={BOUNDARY}"


def form_body(*parts: tuple[str, str | None, bytes]) -> bytes:
    out = b""
    for name, filename, data in parts:
        disposition = f'form-data; name="{name}"'
        if filename is not None:
            disposition += f'; filename="{filename}"'
        out += f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n".encode()
        if filename is not None:
            out += b"Content-Type: image/png\r\n"
        out += b"\r\n" + data + b"\r\n"
    return out + f"--{BOUNDARY}--\r\n".encode()


async def pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


async def read(form: StreamingForm, body: bytes, piece: int = 7) -> bytes:
    return b"".join([chunk async for chunk in form.file_bytes(pieces(body, piece))])


@pytest.mark.parametrize("piece", [1, 7, 1000, 1 << 20])
async def test_file_bytes_come_out_whole_whatever_the_read_size(piece: int) -> None:
    data = bytes(range(256)) * 300 + b"\r\n--not-a-boundary\r\n"
    form = StreamingForm(CONTENT_TYPE)

    got = await read(form, form_body(("note", None, b"hi"), ("file", "p.png", data)), piece)

    assert got == data
    assert form.file_seen
    assert form.filename == "p.png"
    assert form.content_type == "image/png"
    assert form.fields == {"note": "hi"}


async def test_fields_after_the_file_are_read_too() -> None:
    form = StreamingForm(CONTENT_TYPE)

    await read(form, form_body(("file", "a", b"x"), ("fileName", None, "é.txt".encode())))

    assert form.fields["fileName"] == "é.txt"


async def test_only_the_first_file_field_is_the_upload() -> None:
    form = StreamingForm(CONTENT_TYPE)

    got = await read(form, form_body(("file", "1", b"one"), ("file", "2", b"two")))

    assert got == b"one"


async def test_missing_file_field_is_reported() -> None:
    form = StreamingForm(CONTENT_TYPE)

    assert await read(form, form_body(("other", "x", b"data"))) == b""
    assert not form.file_seen


async def test_truncated_body_is_an_error() -> None:
    form = StreamingForm(CONTENT_TYPE)
    body = form_body(("file", "a", b"x" * 100))[:-30]

    with pytest.raises(FormError, match="ended before"):
        await read(form, body)


async def test_oversized_text_field_is_refused() -> None:
    form = StreamingForm(CONTENT_TYPE)

    with pytest.raises(FormError, match="over"):
        await read(form, form_body(("fileName", None, b"x" * (MAX_FORM_TEXT_BYTES + 1))), 4096)


@pytest.mark.parametrize(
    "header", ["application/json", "multipart/form-data", "text/plain; boundary=x"]
)
def test_non_multipart_content_type_is_refused(header: str) -> None:
    with pytest.raises(FormError, match="multipart/form-data"):
        StreamingForm(header)
