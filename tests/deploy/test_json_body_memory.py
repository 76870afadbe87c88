"""The memory of the real `teleuploader serve` while twenty clients without a
key send it a large JSON body each, at once (issue 47: one 10 MB array of
empty objects took the process from 89 to 328 MiB, and three at once to
680). Every route that reads a JSON body stops at 4 KiB and answers 413
(app/http/api/body_limits.py), so the process's peak stays within its idle
memory plus a small allowance, far inside its budget.

The peak is the kernel's (VmHWM), reset through /proc/<pid>/clear_refs once
the service is warm. SQLite only: the subject is the process.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from tests.deploy.conftest import ServiceStarter

MiB = 1024 * 1024
CLIENTS = 20
BODY = b"[" + b"{}," * (MiB // 3) + b"{}]"  # 1 MiB of empty objects
#: What 20 refused requests may add: their connections' read buffers (the
#: server stops reading one past 64 KiB), tasks and answers. Parsing one such
#: body took tens of MiB.
ALLOWANCE = 16 * MiB
ROUTES = ("/api/session", "/api/admin/scrub")


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in bytes."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            values[name] = int(rest.split()[0]) * 1024
    return values


async def _post(url: str, path: str, *, chunked: bool) -> bytes:
    """POST BODY to `path` (declared by Content-Length, or chunked) on a raw
    connection, sending as far as the server reads; the head of its answer,
    or b"" if the connection was reset first: the server closes once it has
    answered, and the bytes still arriving make the kernel reset the
    connection, which may drop the answer before it is read."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    framing = b"Transfer-Encoding: chunked" if chunked else b"Content-Length: %d" % len(BODY)
    head = b"POST %s HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n%s\r\n\r\n"

    async def send() -> None:
        writer.write(head % (path.encode(), framing))
        for start in range(0, len(BODY), 64 * 1024):
            piece = BODY[start : start + 64 * 1024]
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            await writer.drain()
        if chunked:
            writer.write(b"0\r\n\r\n")
            await writer.drain()

    sending = asyncio.create_task(send())
    try:
        async with asyncio.timeout(30):
            return await reader.readuntil(b"\r\n\r\n")
    except (ConnectionError, asyncio.IncompleteReadError):
        return b""
    finally:
        sending.cancel()
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            await sending
        writer.close()


async def _flood(url: str) -> list[bytes]:
    return await asyncio.gather(
        *(_post(url, ROUTES[n % len(ROUTES)], chunked=n % 4 >= 2) for n in range(CLIENTS))
    )


def test_twenty_large_json_bodies_at_once_leave_the_process_within_its_budget(
    start_service: ServiceStarter, migrated_db: Path
) -> None:
    service = start_service(migrated_db)
    pid = service.proc.pid
    # Warm: each route, each framing, refused once (code loaded, buffers made).
    warm = asyncio.run(_flood(service.url))
    idle = _status(pid)["VmRSS"]
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
    answers = asyncio.run(_flood(service.url))
    after = _status(pid)
    grown, peak = after["VmRSS"] - idle, after["VmHWM"] - idle
    assert peak <= ALLOWANCE, (
        f"the peak grew by {peak / MiB:.1f} MiB over idle ({idle / MiB:.1f} MiB), "
        f"now {grown / MiB:.1f} MiB over"
    )
    # Nothing but 413 (tests/http/api/test_body_limits.py reads each one).
    answered = [answer.split(b"\r\n", 1)[0] for answer in warm + answers if answer]
    assert answered, "every connection was reset before its answer"
    assert all(status.startswith(b"HTTP/1.1 413 ") for status in answered), answered
