"""The download promises of docs/architecture.md, through the real service and the
Telegram simulator:

- a download reads only the chunks its range touches, and `getFile` results
  are cached;
- each chunk is read through the bot that uploaded it (file_ids are
  bot-scoped), so a normal download makes no `forwardMessage` call;
- if that bot is gone, another bot forwards the stored message and reads it;
- a download that fails after the headers were sent is aborted, never ended
  short; transient drops are survived.

What is checked is what Telegram saw (the simulator's per-bot counts) and the
bytes the client got. The database plays no part in these promises, so they
run on SQLite only.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
import structlog

from tests.running_service import CHAT_ID, CHUNK, Service, ServiceFactory, eventually, payload

pytestmark = pytest.mark.parametrize("database", ["sqlite"], indirect=True)


async def put(service: Service, name: str, data: bytes) -> str:
    async with service.client() as http:
        response = await http.put(f"/api/files/{name}", content=data, headers=service.auth)
    assert response.status_code == 201, response.text
    return str(response.json()["public_id"])


async def get(service: Service, public_id: str, first: int, last: int) -> bytes:
    """The bytes first..last (inclusive) of a file, as a client sees them."""
    async with service.client() as http:
        response = await http.get(f"/f/{public_id}", headers={"Range": f"bytes={first}-{last}"})
    assert response.status_code == 206, response.text
    return response.content


def uploaders(service: Service, data: bytes) -> list[int]:
    """The bot that posted each CHUNK-sized chunk of `data`, found in the channel."""
    by_content = {
        service.sim.document_bytes(CHAT_ID, message_id): service.sim.message_sender(
            CHAT_ID, message_id
        )
        for message_id in service.live_messages()
    }
    return [by_content[data[start : start + CHUNK]] for start in range(0, len(data), CHUNK)]


@pytest.fixture(autouse=True)
def plain_tracebacks() -> Iterator[None]:
    """structlog's default console renderer prints a failed request's traceback
    with every local variable, which takes the shared event loop for seconds."""
    saved = structlog.get_config()
    structlog.configure(
        processors=[
            structlog.dev.ConsoleRenderer(exception_formatter=structlog.dev.plain_traceback)
            if isinstance(processor, structlog.dev.ConsoleRenderer)
            else processor
            for processor in saved["processors"]
        ]
    )
    yield
    structlog.configure(**saved)


def per_bot(service: Service, count: str) -> Counter[int]:
    """Per bot: a Bot API method's calls (e.g. "getFile"), or "downloads"."""
    counts: Counter[int] = Counter()
    for bot_id, stats in service.sim.stats().items():
        counts[bot_id] = stats.downloads if count == "downloads" else stats.calls.get(count, 0)
    return +counts  # without the zeros


async def test_a_range_reads_only_the_chunks_it_touches_and_get_file_is_cached(
    service: Service,
) -> None:
    data = payload(6 * CHUNK, seed=1)
    public_id = await put(service, "six.bin", data)
    owner = uploaders(service, data)
    assert len(set(owner)) == 3  # spread over the bots, so a wrong-bot read would show
    service.sim.reset_stats()
    downloads: Counter[int] = Counter()
    get_files: Counter[int] = Counter()

    # (first byte, last byte, chunks read, chunks whose file_path is not cached yet)
    steps = [
        (4 * CHUNK + 10, 4 * CHUNK + 99, [4], [4]),  # inside one chunk
        (2 * CHUNK - 5, 2 * CHUNK + 4, [1, 2], [1, 2]),  # across a boundary
        (4 * CHUNK, 5 * CHUNK - 1, [4], []),  # exactly one chunk, path cached
        (0, 6 * CHUNK - 1, [0, 1, 2, 3, 4, 5], [0, 3, 5]),  # the whole file
        (CHUNK, 6 * CHUNK - 1, [1, 2, 3, 4, 5], []),  # all cached now
    ]
    for first, last, read, looked_up in steps:
        assert await get(service, public_id, first, last) == data[first : last + 1]
        downloads.update(owner[index] for index in read)
        get_files.update(owner[index] for index in looked_up)
        where = f"after bytes={first}-{last}"
        assert per_bot(service, "downloads") == downloads, where
        assert per_bot(service, "getFile") == get_files, where
    assert per_bot(service, "forwardMessage") == Counter()


async def test_a_normal_download_reads_each_chunk_through_its_uploader(
    service: Service,
) -> None:
    files = {f"f{n}.bin": payload(3 * CHUNK + 1000 * n, seed=10 + n) for n in range(3)}
    ids = {name: await put(service, name, data) for name, data in files.items()}
    chunks_by_bot = Counter(
        service.sim.message_sender(CHAT_ID, message_id) for message_id in service.live_messages()
    )
    assert len(chunks_by_bot) == 3
    service.sim.reset_stats()

    async def whole(name: str) -> bytes:
        async with service.client() as http:
            return (await http.get(f"/f/{ids[name]}")).content

    got = await asyncio.gather(*(whole(name) for name in files))

    assert got == list(files.values())
    # Every chunk exactly once, by the bot that posted it; no bot was asked
    # for a file_id it does not own (that would be a 400 from Telegram).
    assert per_bot(service, "downloads") == chunks_by_bot
    assert per_bot(service, "getFile") == chunks_by_bot
    assert per_bot(service, "forwardMessage") == Counter()
    assert all(stats.errors == {} for stats in service.sim.stats().values())


async def test_when_the_uploader_is_gone_another_bot_forwards_the_message_and_reads_it(
    service: Service,
) -> None:
    data = payload(3 * CHUNK, seed=2)
    public_id = await put(service, "orphaned.bin", data)
    originals = sorted(service.live_messages())
    owner = uploaders(service, data)
    gone = owner[1]
    service.sim.revoke(gone)
    service.sim.reset_stats()

    async with service.client() as http:
        first = await http.get(f"/f/{public_id}")
        second = await http.get(f"/f/{public_id}")

    assert first.status_code == second.status_code == 200
    assert first.content == second.content == data
    # One forward per chunk of the revoked bot, by another bot, and only for
    # the first download: the new file_id is remembered.
    forwards = per_bot(service, "forwardMessage")
    assert sum(forwards.values()) == owner.count(gone)
    assert gone not in forwards
    assert per_bot(service, "downloads")[gone] == 0
    # The forwarded copy was only a way to get a file_id: its post is deleted.

    async def only_the_originals_left() -> bool:
        return sorted(service.live_messages()) == originals

    await eventually(only_the_originals_left)


async def test_a_download_that_fails_after_the_headers_is_aborted_not_ended_short(
    start_service: ServiceFactory,
) -> None:
    # Four chunks and a window of two: the first is read (and checked) before
    # the headers go out, the second is read ahead meanwhile; the last two are
    # fetched only once the client has taken what came before.
    service = await start_service(download_buffer_bytes=2 * CHUNK)
    data = payload(4 * CHUNK, seed=3)
    public_id = await put(service, "doomed.bin", data)

    received = bytearray()
    async with service.client() as http, http.stream("GET", f"/f/{public_id}") as response:
        assert response.status_code == 200
        announced = response.headers.get("content-length")
        service.sim.set_faults(fault_download_drop_rate=1.0)  # every download drops halfway
        # A body that simply ended here would be a short 200 ("DID NOT RAISE").
        with pytest.raises(httpx.RemoteProtocolError):
            async for piece in response.aiter_raw():
                received += piece

    # Whatever arrived is the file's start: no filler, no bytes from elsewhere.
    assert len(received) < len(data)
    assert data.startswith(bytes(received))
    assert announced == str(len(data))

    service.sim.set_faults(fault_download_drop_rate=0.0)
    async with service.client() as http:
        again = await http.get(f"/f/{public_id}")
    assert again.content == data


async def test_downloads_survive_transient_drops(start_service: ServiceFactory) -> None:
    service = await start_service()
    data = payload(6 * CHUNK, seed=4)
    public_id = await put(service, "bumpy.bin", data)
    # 40 % of downloads drop halfway. The requests below read (most of) one
    # chunk each, one after another, so the seeded faults strike the same
    # downloads on every run (one of them twice in a row). A chunk gets 4
    # reads, so with other seeds some request may meet 4 drops in a row and
    # fail: 0.4**4 = 2.6 % per chunk.
    service.sim.set_faults(fault_download_drop_rate=0.4, seed=9)
    ranges = [(n * CHUNK + 97 * n, (n + 1) * CHUNK - 1) for n in range(6)]

    for first, last in ranges:
        assert await get(service, public_id, first, last) == data[first : last + 1]

    stats = service.sim.stats().values()
    dropped = sum(s.faults_injected for s in stats)
    assert dropped >= len(ranges) // 3  # 4 of the 10 downloads with this seed
    assert sum(s.downloads for s in stats) == len(ranges) + dropped
    service.sim.set_faults(fault_download_drop_rate=0.0)
    async with service.client() as http:
        whole = await http.get(f"/f/{public_id}")
    assert hashlib.sha256(whole.content).digest() == hashlib.sha256(data).digest()
