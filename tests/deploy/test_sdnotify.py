"""app/runtime/sdnotify.py in-process: the datagram protocol, the watchdog task and
the lifecycle the app's lifespan runs (the real service is tested under a
fake systemd in test_systemd.py)."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, SimpleNamespace
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from app.runtime.sdnotify import Notifier, describe_bots, systemd_notify
from app.store.services import Services
from app.telegram.dispatcher import BotStatus


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = tmp_path / "notify"
    try:
        sock.bind(str(path))
        sock.setblocking(False)
        yield sock, str(path)
    finally:
        sock.close()


def drain(sock: socket.socket) -> list[str]:
    """The messages already received (datagrams on a local socket arrive as
    they are sent)."""
    messages = []
    while True:
        try:
            messages.append(sock.recv(4096).decode())
        except BlockingIOError:
            return messages


async def receive_until(
    sock: socket.socket, done: Callable[[list[str]], bool], within: float = 5.0
) -> list[str]:
    """Messages as they arrive, until `done(messages)` holds; fail after `within` s."""
    loop = asyncio.get_running_loop()
    messages: list[str] = []
    try:
        async with asyncio.timeout(within):
            while not done(messages):
                messages.append((await loop.sock_recv(sock, 4096)).decode())
    except TimeoutError:
        raise AssertionError(f"no such messages within {within}s: {messages}") from None
    return messages


def pings(count: int) -> Callable[[list[str]], bool]:
    return lambda messages: messages.count("WATCHDOG=1") >= count


def test_disabled_without_notify_socket() -> None:
    notifier = Notifier.from_env({"WATCHDOG_USEC": "1000000"})
    assert not notifier.enabled
    assert notifier.watchdog_interval is None
    assert notifier.notify("READY=1") is False
    notifier.ready("x")
    notifier.stopping()
    notifier.watchdog()


async def test_no_op_tasks_return_at_once() -> None:
    notifier = Notifier.from_env({})
    async with asyncio.timeout(1):
        await notifier.run_watchdog()
        await notifier.run_status(lambda: "x", 0.01)


def test_messages(receiver: tuple[socket.socket, str]) -> None:
    sock, path = receiver
    notifier = Notifier.from_env({"NOTIFY_SOCKET": path})
    try:
        notifier.ready("ready: 1/1 bots usable")
        notifier.status("line one\nline two")
        notifier.watchdog()
        notifier.stopping("stopping now")
        notifier.stopping("still stopping")
    finally:
        notifier.close()
    assert drain(sock) == [
        "READY=1\nSTATUS=ready: 1/1 bots usable",
        "STATUS=line one line two",  # a newline would start a new assignment
        "WATCHDOG=1",
        "STOPPING=1\nSTATUS=stopping now",
        "STATUS=still stopping",  # STOPPING=1 once
    ]


def test_abstract_namespace_socket() -> None:
    name = f"teleuploader-test-{secrets.token_hex(6)}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind("\0" + name)
        sock.settimeout(2)
        notifier = Notifier.from_env({"NOTIFY_SOCKET": "@" + name})
        try:
            assert notifier.address == "\0" + name
            notifier.ready("ok")
        finally:
            notifier.close()
        assert sock.recv(4096) == b"READY=1\nSTATUS=ok"
    finally:
        sock.close()


def test_watchdog_settings() -> None:
    env = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "30000000"}
    notifier = Notifier.from_env(env)
    assert notifier.watchdog_interval == 15.0
    notifier.close()
    # WATCHDOG_PID names the process the watchdog is for.
    mine = Notifier.from_env({**env, "WATCHDOG_PID": str(os.getpid())})
    assert mine.watchdog_interval == 15.0
    mine.close()
    other = Notifier.from_env({**env, "WATCHDOG_PID": "1"}, pid=4242)
    assert other.watchdog_interval is None
    assert other.enabled  # READY/STATUS still go out
    other.close()
    with capture_logs() as logs:
        bad = Notifier.from_env({**env, "WATCHDOG_USEC": "soon"})
    assert bad.watchdog_interval is None
    assert logs[0]["event"] == "sd_notify_bad_watchdog_usec"
    bad.close()


def test_unsupported_socket_is_ignored() -> None:
    with capture_logs() as logs:
        notifier = Notifier.from_env({"NOTIFY_SOCKET": "vsock:2:1234"})
    assert not notifier.enabled
    assert [log["event"] for log in logs] == ["sd_notify_unsupported_socket"]


def test_send_errors_never_raise_and_warn_once(tmp_path: Path) -> None:
    notifier = Notifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "nobody-listens")})
    try:
        with capture_logs() as logs:
            assert notifier.notify("READY=1") is False
            notifier.watchdog()
            notifier.status("x")
            notifier.stopping()
    finally:
        notifier.close()
    assert [log["event"] for log in logs] == ["sd_notify_failed"]
    assert logs[0]["log_level"] == "warning"


async def test_watchdog_pings_come_from_the_event_loop(
    receiver: tuple[socket.socket, str],
) -> None:
    """A blocked loop sends no pings: that is how systemd notices a wedged service."""
    sock, path = receiver
    notifier = Notifier.from_env({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "40000"})
    task = asyncio.create_task(notifier.run_watchdog())  # a ping every 0.02 s
    try:
        assert set(await receive_until(sock, pings(3))) == {"WATCHDOG=1"}
        drain(sock)
        # The experiment, not a wait: block the loop for 15 ping intervals.
        time.sleep(0.3)  # noqa: ASYNC251
        assert drain(sock) == []
        # Free again, the loop pings again.
        assert await receive_until(sock, pings(1)) == ["WATCHDOG=1"]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        notifier.close()


# --- the lifecycle ---------------------------------------------------------------------------


def bot(bot_id: int, *, usable: bool = True, cooling: float = 0.0, queued: int = 0) -> BotStatus:
    return BotStatus(
        bot_id=bot_id,
        usable=usable,
        cooling_down_for=cooling,
        queued=queued,
        running=queued > 0,
        sends=0,
        bytes_sent=0,
        rate_limited=0,
        abandoned=0,
        errors={},
    )


def test_describe_bots() -> None:
    assert describe_bots([bot(1), bot(2)]) == (
        "2/2 bots usable; Telegram calls: 0 running, 0 queued"
    )
    assert describe_bots([bot(1, queued=3), bot(2, cooling=12), bot(3, usable=False)]) == (
        "2/3 bots usable (1 cooling down); Telegram calls: 1 running, 3 queued"
    )


@dataclass
class FakeDispatcher:
    bots: list[BotStatus]

    def status(self) -> list[BotStatus]:
        return self.bots


def fake_services(port: int, ready: asyncio.Event | None = None) -> Services:
    settings = SimpleNamespace(host="127.0.0.1", port=port)
    if ready is None:
        ready = asyncio.Event()
        ready.set()
    return cast(
        Services,
        SimpleNamespace(
            settings=settings, dispatcher=FakeDispatcher([bot(1)]), wait_ready=ready.wait
        ),
    )


async def test_lifecycle(
    receiver: tuple[socket.socket, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    sock, path = receiver

    async def on_connect(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.close()

    # Count the connections to the port that were refused: READY=1 waits
    # while the service tries.
    refused = 0
    refused_twice = asyncio.Event()
    open_connection = asyncio.open_connection

    async def counting_open_connection(*args: Any, **kwargs: Any) -> Any:
        nonlocal refused
        try:
            return await open_connection(*args, **kwargs)
        except OSError:
            refused += 1
            if refused == 2:
                refused_twice.set()
            raise

    monkeypatch.setattr(asyncio, "open_connection", counting_open_connection)

    # The port starts listening only after a while, as uvicorn binds it after
    # the lifespan has started: READY=1 must wait for it.
    port = _free_port()
    services = fake_services(port)
    notifier = Notifier.from_env({"NOTIFY_SOCKET": path, "WATCHDOG_USEC": "100000"})
    status = "STATUS=1/1 bots usable; Telegram calls: 0 running, 0 queued"
    async with systemd_notify(services, notifier, status_interval=0.05) as lifecycle:
        await asyncio.wait_for(refused_twice.wait(), 5)
        assert drain(sock) == []  # not listening yet: not ready
        server = await asyncio.start_server(on_connect, "127.0.0.1", port)
        try:
            messages = await receive_until(sock, lambda m: pings(2)(m) and status in m)
            assert messages[0] == "READY=1\nSTATUS=ready: 1/1 bots usable"
            lifecycle.stopping()
            assert drain(sock)[-1].startswith("STOPPING=1\nSTATUS=stopping: closing services")
            # Still fed while the services close.
            await receive_until(sock, pings(1))
        finally:
            server.close()
            await server.wait_closed()
    assert drain(sock)[-1] == "STATUS=stopped"
    assert not notifier.enabled
    # The tasks are gone.
    left = {task.get_name() for task in asyncio.all_tasks() if task is not asyncio.current_task()}
    assert "sd_notify" not in left, left


async def test_ready_waits_until_a_bot_passed_its_check(
    receiver: tuple[socket.socket, str],
) -> None:
    """READY=1 means the service can store files, not merely that it listens."""
    sock, path = receiver
    bot_passed = asyncio.Event()
    asked = asyncio.Event()

    async def wait_ready() -> None:
        asked.set()
        await bot_passed.wait()

    services = fake_services(0)
    services.wait_ready = wait_ready  # type: ignore[method-assign]
    notifier = Notifier.from_env({"NOTIFY_SOCKET": path})
    async with systemd_notify(services, notifier):
        await asyncio.wait_for(asked.wait(), 5)
        assert drain(sock) == []  # no bot yet: not ready
        bot_passed.set()
        (ready,) = await receive_until(sock, lambda m: len(m) == 1)
        assert ready.startswith("READY=1")


async def test_sigterm_sends_stopping_at_once(receiver: tuple[socket.socket, str]) -> None:
    """STOPPING=1 when the signal arrives (before uvicorn's HTTP drain), then the
    handler that was installed (uvicorn's) runs; it is put back afterwards."""
    sock, path = receiver
    seen: list[int] = []

    def previous(sig: int, _frame: FrameType | None) -> None:
        seen.append(sig)

    original = signal.signal(signal.SIGTERM, previous)
    try:
        notifier = Notifier.from_env({"NOTIFY_SOCKET": path})
        async with systemd_notify(fake_services(0), notifier) as _lifecycle:
            (ready,) = await receive_until(sock, lambda m: len(m) == 1)
            assert ready.startswith("READY=1")
            os.kill(os.getpid(), signal.SIGTERM)
            stopping = await receive_until(sock, lambda m: len(m) == 1)
            assert stopping == [
                "STOPPING=1\nSTATUS=stopping: draining requests; "
                "1/1 bots usable; Telegram calls: 0 running, 0 queued"
            ]
            assert seen == [signal.SIGTERM]  # then the handler that was there
            assert drain(sock) == []
        assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, original)


async def test_lifecycle_is_inert_without_systemd() -> None:
    before = signal.getsignal(signal.SIGTERM)
    notifier = Notifier.from_env({})
    async with systemd_notify(fake_services(0), notifier) as lifecycle:
        assert signal.getsignal(signal.SIGTERM) is before
        lifecycle.stopping()
    assert len(asyncio.all_tasks()) == 1  # only this test's


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: Any = sock.getsockname()[1]
        return int(port)
