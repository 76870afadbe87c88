"""tus concatenation at spool durability: a final upload answers once its
partials' bytes are durable in the spool, as S3's Complete does. The file
reads from the spool files until the flush settles it (app.db.pending), then
from Telegram; with COMPLETE_WAITS_FOR=telegram it waits for the flush."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from sqlalchemy import func, select

from app.db.models import Chunk, MultipartUpload, PendingCopy, Piece, SpooledPart
from tests.http.api.test_tus import (
    _count,
    _scalar,
    _spool_is_empty,
    b64,
    create,
    head,
    patch,
    tus_headers,
)
from tests.running_service import CHUNK, Service, ServiceFactory, eventually, payload

# Postgres too (both_backends): a pending final settles under the locks of
# its partials' uploads, which the flusher's commits take on other connections.
# Read across every partial's boundary: the end of the first, the second
# whole, the start of the third.
RANGE = (CHUNK + 10, CHUNK + 30)


async def partial(service: Service, data: bytes) -> str:
    url = await create(service, len(data), **{"Upload-Concat": "partial"})
    assert (await patch(service, url, 0, data)).status_code == 204
    return url


async def concatenate(service: Service, urls: list[str]) -> httpx.Response:
    async with service.client() as http:
        return await http.post(
            "/api/tus/",
            headers=tus_headers(
                service,
                **{
                    "Upload-Concat": "final;" + " ".join(urls),
                    "Upload-Metadata": f"filename {b64('whole.bin')}",
                },
            ),
        )


async def read(service: Service, url: str, byte_range: tuple[int, int] | None = None) -> bytes:
    headers = {} if byte_range is None else {"Range": f"bytes={byte_range[0]}-{byte_range[1]}"}
    async with service.client() as http:
        response = await http.get(url, headers=headers)
    assert response.status_code == (200 if byte_range is None else 206), response.text
    return response.content


@pytest.mark.both_backends
async def test_a_final_upload_answers_before_telegram_has_the_bytes(service: Service) -> None:
    pieces = [payload(CHUNK + 17, seed=40), payload(5, seed=41), payload(2 * CHUNK, seed=42)]
    whole = b"".join(pieces)
    # Every read while held comes from the spool: a read from Telegram could
    # wait for a bot held at the gate. (A final with a partial already in
    # Telegram: tests/db/test_resumable.py.)
    with service.sim.holding("sendDocument"):
        async with asyncio.timeout(10):
            urls = [await partial(service, piece) for piece in pieces]
            final = await concatenate(service, urls)
            assert final.status_code == 201, final.text
            url = final.headers["x-file-url"]
            served = await read(service, url)
            ranged = await read(service, url, RANGE)
        assert service.live_messages() == []  # nothing in Telegram yet
        assert await _count(service, Piece) == 0  # the file is pending

    assert final.headers["upload-length"] == str(len(whole))
    assert served == whole
    assert ranged == whole[RANGE[0] : RANGE[1] + 1]
    looked = await head(service, final.headers["location"])
    assert looked.headers["x-file-id"] == final.headers["x-file-id"]
    assert [(await head(service, u)).status_code for u in urls] == [404, 404, 404]

    async def settled() -> bool:
        return (
            await _count(service, MultipartUpload) == 0
            and await _count(service, SpooledPart) == 0
            and await _count(service, PendingCopy) == 0
            and await _spool_is_empty(service)
        )

    await eventually(settled, within=20)
    # From Telegram now; no byte went there twice.
    assert await read(service, url) == whole
    assert await read(service, url, RANGE) == whole[RANGE[0] : RANGE[1] + 1]
    assert await _scalar(service, select(func.sum(Chunk.size))) == len(whole)
    assert await _scalar(service, select(func.sum(Piece.length))) == len(whole)


async def test_waiting_for_telegram_a_final_upload_waits_for_the_flush(
    start_service: ServiceFactory,
) -> None:
    service = await start_service(complete_waits_for="telegram")
    # Tails over the 1 KiB the simulator takes below: spooled, then refused.
    pieces = [payload(CHUNK + 3000, seed=45), payload(5000, seed=46)]
    urls = [await partial(service, piece) for piece in pieces]
    service.sim.configure(max_upload_bytes=1024)  # every chunk is refused

    refused = await concatenate(service, urls)

    assert refused.status_code == 503, refused.text
    assert [(await head(service, u)).status_code for u in urls] == [200, 200]  # not consumed
    service.sim.configure(max_upload_bytes=50 * 1024 * 1024)
    answers: list[httpx.Response] = []

    async def concatenated() -> bool:
        # 503 until the flusher's next round (it retries after a failure).
        answers.append(await concatenate(service, urls))
        return answers[-1].status_code == 201

    await eventually(concatenated, within=30)
    final = answers[-1]
    # Answered with every byte in Telegram: an ordinary file at once.
    assert await _count(service, MultipartUpload) == 0
    assert await _count(service, SpooledPart) == 0
    assert await read(service, final.headers["x-file-url"]) == b"".join(pieces)
