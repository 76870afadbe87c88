"""Downloads under the process-wide budget, through real HTTP: clients that
stop reading hold no more than the budget and are cut off after the stall
timeout (and so are those left waiting for a connection that long: a 503 with
Retry-After when no byte of theirs had gone out), and Telegram's downloads end
with them."""

from __future__ import annotations

import asyncio
import re
import socket
from dataclasses import dataclass
from typing import Any

import pytest

from app.store.download_budget import DownloadBudget
from app.store.reader import READ_BLOCK
from tests.running_service import Service, ServiceFactory, eventually, parse_metrics, payload

KiB = 1024
BUFFER = 256 * KiB
CONNECTIONS = 2
STALL = 0.5
READERS = 6
# Chunks larger than the budget lets a reader buffer, so stalled readers keep
# their Telegram downloads open; 6 MiB in all, more than a socket's buffers hold.
CHUNK_SIZE = 1024 * KiB
SIZE = 6 * CHUNK_SIZE


@dataclass
class StalledClient:
    """A client that sent its GET, read the response head, and then reads nothing."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    head: bytes
    content_length: int

    @property
    def status_line(self) -> bytes:
        return self.head.split(b"\r\n", 1)[0]

    @classmethod
    async def open(cls, service: Service, path: str) -> StalledClient:
        host, port = service.url.removeprefix("http://").split(":")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # A small receive window, so the service's writes block soon.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
        reader, writer = await asyncio.open_connection(sock=sock, limit=16 * KiB)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        match = re.search(rb"(?i)\r\ncontent-length: (\d+)", head)
        assert match is not None, head
        return cls(reader, writer, head, int(match.group(1)))

    async def read_rest(self) -> tuple[int, bool]:
        """Read until the connection ends: (body bytes received, ended cleanly)."""
        received = 0
        try:
            while data := await self.reader.read(64 * KiB):
                received += len(data)
        except ConnectionResetError:
            return received, False
        finally:
            self.writer.close()
        return received, True


async def metrics(service: Service) -> dict[str, float]:
    async with service.client() as http:
        return parse_metrics((await http.get("/metrics", headers=service.auth)).text)


def downloads_finished(seen: dict[str, float]) -> float:
    """GET /f/... requests the service has finished with (sent or cut off)."""
    return sum(
        value
        for name, value in seen.items()
        if name.startswith("teleuploader_http_requests_total{")
        and 'method="GET"' in name
        and 'route="/f/{public_id}"' in name
    )


def telegram_downloads(service: Service) -> int:
    return sum(stats.downloads_in_flight for stats in service.sim.stats().values())


@dataclass
class Peaks:
    """The most the budget and Telegram held at once, seen at every grant."""

    bytes: int = 0
    connections: int = 0
    telegram: int = 0


def watch_peaks(monkeypatch: pytest.MonkeyPatch, service: Service) -> Peaks:
    """Peaks recorded by the budget's every grant. Sampling /metrics instead
    missed them about once in six runs: opening the readers outlasts the
    stall timeout (the later ones wait that long for a connection), so all
    of them could be dropped before the first sample, which then saw 0
    connections in use, and bounds that held by not looking."""
    peaks = Peaks()
    grant = DownloadBudget._try_grant

    def granting(budget: DownloadBudget, *args: Any, **kwargs: Any) -> bool:
        granted = grant(budget, *args, **kwargs)
        if granted:
            held = budget.status()
            peaks.bytes = max(peaks.bytes, held.bytes_in_use)
            peaks.connections = max(peaks.connections, held.connections_in_use)
            peaks.telegram = max(peaks.telegram, telegram_downloads(service))
        return granted

    monkeypatch.setattr(DownloadBudget, "_try_grant", granting)
    return peaks


async def test_stalled_readers_hold_no_more_than_the_budget_and_are_cut_off(
    start_service: ServiceFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = await start_service(
        download_buffer_bytes=BUFFER,
        download_connections=CONNECTIONS,
        download_stall_seconds=STALL,
        chunk_size=CHUNK_SIZE,
        max_upload_size=SIZE,
    )
    data = payload(SIZE)
    async with service.client() as http:
        stored = await http.put("/api/files/big.bin", content=data, headers=service.auth)
    path = f"/f/{stored.json()['public_id']}"

    peaks = watch_peaks(monkeypatch, service)
    clients: list[StalledClient] = []
    try:
        for _ in range(READERS):
            clients.append(await StalledClient.open(service, path))
        await check_stalled_readers(service, clients, peaks)
    finally:
        for client in clients:  # or the service's shutdown waits for them
            client.writer.close()

    async with service.client() as http:
        again = await http.get(path)
    assert again.content == data


async def check_stalled_readers(
    service: Service, clients: list[StalledClient], peak: Peaks
) -> None:
    # The first readers find a connection free. The others wait for one until a
    # stalled reader is dropped; one whose wait passes the stall timeout first
    # (the machine is busy) is answered 503, to be retried, before any byte.
    assert [client.status_line for client in clients[:CONNECTIONS]] == [
        b"HTTP/1.1 200 OK"
    ] * CONNECTIONS
    refused = [client for client in clients if client.status_line != b"HTTP/1.1 200 OK"]
    for client in refused:
        assert client.status_line == b"HTTP/1.1 503 Service Unavailable", client.head
        assert re.search(rb"(?i)\r\nretry-after: \d+\r\n", client.head), client.head
    stalled = {"client": 0.0, "telegram": 0.0}

    async def all_dropped() -> bool:
        seen = await metrics(service)
        stalled["client"] = seen.get(
            'teleuploader_downloads_dropped_total{reason="client_stalled"}', 0
        )
        # Those still waiting for a connection when their wait passed the stall
        # timeout: they got no byte either.
        stalled["telegram"] = seen.get(
            'teleuploader_downloads_dropped_total{reason="telegram_stalled"}', 0
        )
        return stalled["client"] + stalled["telegram"] == READERS

    await eventually(all_dropped, within=60)

    assert stalled["client"] >= CONNECTIONS  # at least those that had a connection
    assert stalled["telegram"] >= len(refused)
    assert 0 < peak.bytes <= BUFFER + CONNECTIONS * READ_BLOCK
    assert 0 < peak.connections <= CONNECTIONS
    assert 0 < peak.telegram <= CONNECTIONS

    async def all_given_back() -> bool:
        seen = await metrics(service)
        return (
            seen['teleuploader_download_buffer_bytes{state="in_use"}'] == 0
            and seen['teleuploader_download_connections{state="in_use"}'] == 0
            and seen["teleuploader_downloads_active"] == 0
            and telegram_downloads(service) == 0
            # The service has let go of every connection (aborted it), though
            # no client has read another byte.
            and downloads_finished(seen) == READERS
        )

    await eventually(all_given_back)
    # Each client, reading again, gets what was under way and then the end of
    # the connection: never the whole body, so it cannot pass for complete.
    # A refused one gets its whole error.
    for client in clients:
        if client.status_line != b"HTTP/1.1 200 OK":
            assert b"Telegram" in await client.reader.readexactly(client.content_length)
            continue
        received, _ended = await client.read_rest()
        assert received < client.content_length == SIZE
