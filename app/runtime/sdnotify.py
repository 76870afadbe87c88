"""systemd's notification protocol (sd_notify), without libsystemd.

The protocol is one datagram per message on the AF_UNIX socket named by
`$NOTIFY_SOCKET` (a leading `@` is Linux's abstract namespace), holding
newline-separated `KEY=value` assignments:

* `READY=1` once the service works (Type=notify units are "activating" until then);
* `STATUS=...` a line `systemctl status` shows;
* `STOPPING=1` when shutdown begins;
* `WATCHDOG=1` at least every `$WATCHDOG_USEC` microseconds once ready
  (WatchdogSec=), or systemd kills and restarts the service.

`WATCHDOG=1` is sent by an asyncio task (`Notifier.run_watchdog`), every half of
`WATCHDOG_USEC`: a blocked event loop stops the pings, which is the point.

Without `$NOTIFY_SOCKET` (not started by systemd, tests, a terminal) every
method is a no-op. A failing send never raises into the service: it is logged
once as a warning.

`systemd_notify(services)` is what the app's lifespan wraps around the running
service: READY=1 (once a bot passed getMe and the HTTP port accepts
connections), watchdog and STATUS
tasks, STOPPING=1 as soon as SIGTERM/SIGINT arrives (before the HTTP drain),
and the tasks stopped when the block ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any

import structlog

if TYPE_CHECKING:
    from app.store.services import Services
    from app.telegram.dispatcher import BotStatus

log = structlog.get_logger("app.ops.sdnotify")

STATUS_INTERVAL = 5.0  # seconds between STATUS= updates
LISTEN_WAIT = 15.0  # how long READY=1 waits for the HTTP port to accept connections

SignalHandler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None


def _socket_address(value: str) -> str | None:
    """The AF_UNIX address of `$NOTIFY_SOCKET`, or None if it is not one we can use."""
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None  # e.g. systemd >= 253's "vsock:..." (VMs); not for a service on a host


class Notifier:
    """Sends sd_notify messages; does nothing when `address` is None."""

    def __init__(self, address: str | None, *, watchdog_usec: int | None = None) -> None:
        self.address = address
        self.watchdog_usec = watchdog_usec if watchdog_usec and watchdog_usec > 0 else None
        self._socket: socket.socket | None = None
        self._warned = False
        self._stopping_sent = False
        if address is not None:
            # Made now, not on first use: `stopping()` may run in a signal handler.
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
            sock.setblocking(False)
            self._socket = sock

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, pid: int | None = None
    ) -> Notifier:
        """From `NOTIFY_SOCKET`, `WATCHDOG_USEC` and `WATCHDOG_PID` (the watchdog is
        ours only if `WATCHDOG_PID` is unset or is our pid)."""
        env = os.environ if environ is None else environ
        raw = env.get("NOTIFY_SOCKET", "")
        address = _socket_address(raw) if raw else None
        if raw and address is None:
            log.warning("sd_notify_unsupported_socket", notify_socket=raw[:64])
        watchdog_usec: int | None = None
        usec_text = env.get("WATCHDOG_USEC", "")
        if usec_text:
            try:
                watchdog_usec = int(usec_text)
            except ValueError:
                log.warning("sd_notify_bad_watchdog_usec", watchdog_usec=usec_text[:32])
        pid_text = env.get("WATCHDOG_PID", "")
        if watchdog_usec is not None and pid_text:
            own = os.getpid() if pid is None else pid
            if pid_text.strip() != str(own):
                watchdog_usec = None  # the watchdog is meant for another process
        return cls(address, watchdog_usec=watchdog_usec)

    @property
    def enabled(self) -> bool:
        return self._socket is not None

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between two WATCHDOG=1 pings: half of `WATCHDOG_USEC`."""
        if not self.enabled or self.watchdog_usec is None:
            return None
        return self.watchdog_usec / 2 / 1_000_000

    def notify(self, *assignments: str) -> bool:
        """Send one message of `KEY=value` lines; True if it was sent."""
        if self._socket is None or self.address is None:
            return False
        payload = "\n".join(line.replace("\n", " ") for line in assignments).encode()
        try:
            self._socket.sendto(payload, self.address)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning("sd_notify_failed", error=f"{type(exc).__name__}: {exc}")
            return False
        return True

    def ready(self, status: str) -> None:
        self.notify("READY=1", f"STATUS={status}")

    def status(self, text: str) -> None:
        self.notify(f"STATUS={text}")

    def stopping(self, status: str = "stopping") -> None:
        """STOPPING=1, once: later calls only update the status line."""
        if self._stopping_sent:
            self.status(status)
            return
        self._stopping_sent = True
        self.notify("STOPPING=1", f"STATUS={status}")

    def watchdog(self) -> None:
        self.notify("WATCHDOG=1")

    async def run_watchdog(self) -> None:
        """Ping the watchdog from this event loop until cancelled (returns at
        once when there is no watchdog)."""
        interval = self.watchdog_interval
        if interval is None:
            return
        while True:
            self.watchdog()
            await asyncio.sleep(interval)

    async def run_status(self, describe: Callable[[], str], interval: float) -> None:
        """Send `STATUS=describe()` every `interval` seconds until cancelled."""
        if not self.enabled:
            return
        while True:
            await asyncio.sleep(interval)
            try:
                text = describe()
            except Exception as exc:  # a status line is never worth a crash
                text = f"status unavailable ({type(exc).__name__})"
            self.status(text)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None


# --- the service's lifecycle ----------------------------------------------------------


def describe_bots(statuses: Sequence[BotStatus]) -> str:
    """A STATUS= line: what the bot pool is doing."""
    usable = [s for s in statuses if s.usable]
    cooling = sum(1 for s in usable if s.cooling_down_for > 0)
    running = sum(1 for s in statuses if s.running)
    queued = sum(s.queued for s in statuses)
    probing = sum(1 for s in statuses if s.probing)
    text = f"{len(usable)}/{len(statuses)} bots usable"
    if cooling:
        text += f" ({cooling} cooling down)"
    if probing:
        text += f" ({probing} being checked)"
    return f"{text}; Telegram calls: {running} running, {queued} queued"


async def wait_listening(host: str, port: int, within: float = LISTEN_WAIT) -> bool:
    """Until a TCP connection to host:port succeeds (True) or `within` passes."""
    target = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        try:
            _reader, writer = await asyncio.open_connection(target, port)
        except OSError:
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(0.02)
            continue
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True


class _SignalHook:
    """Sends STOPPING=1 the moment SIGTERM/SIGINT arrives, then runs the handler
    that was there (uvicorn's, which starts the graceful shutdown)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self, notifier: Notifier, describe: Callable[[], str]) -> None:
        self.notifier = notifier
        self.describe = describe
        self.previous: dict[int, SignalHandler] = {}

    def install(self) -> None:
        # Python signal handlers can only be set from the main thread.
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in self.SIGNALS:
            self.previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, handler in self.previous.items():
            if signal.getsignal(sig) == self._handle:
                signal.signal(sig, handler)
        self.previous.clear()

    def _handle(self, sig: int, frame: FrameType | None) -> None:
        try:
            self.notifier.stopping(f"stopping: draining requests; {self.describe()}")
        except Exception:  # the shutdown below matters more than the status text
            self.notifier.stopping("stopping: draining requests")
        previous = self.previous.get(sig)
        if callable(previous):
            previous(sig, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(sig, signal.SIG_DFL)
            signal.raise_signal(sig)


class Lifecycle:
    """What the lifespan holds while the service runs."""

    def __init__(self, notifier: Notifier, describe: Callable[[], str]) -> None:
        self.notifier = notifier
        self.describe = describe

    def stopping(self) -> None:
        """Shutdown begins (STOPPING=1 unless a signal already sent it). Never
        raises: the services must be closed after it whatever happens."""
        try:
            text = f"stopping: closing services; {self.describe()}"
        except Exception:
            text = "stopping: closing services"
        self.notifier.stopping(text)


@contextlib.asynccontextmanager
async def systemd_notify(
    services: Services,
    notifier: Notifier | None = None,
    *,
    status_interval: float = STATUS_INTERVAL,
) -> AsyncIterator[Lifecycle]:
    """Tell systemd about the running service; enter it once `start_services`
    has succeeded (database reachable, schema current).

    READY=1 is sent once a bot has passed its getMe check
    (`Services.wait_ready`) and the HTTP port accepts connections (the
    lifespan starts before uvicorn binds it); then the watchdog and STATUS
    tasks start. Until then systemd's start timeout applies.
    Call `stopping()` on the yielded object before closing the services; the
    tasks keep running (so the watchdog keeps being fed through the drain)
    until the block ends.
    """
    notifier = Notifier.from_env() if notifier is None else notifier
    dispatcher = services.dispatcher

    def describe() -> str:
        return describe_bots(dispatcher.status())

    lifecycle = Lifecycle(notifier, describe)
    if not notifier.enabled:
        yield lifecycle
        return

    settings = services.settings

    async def announce() -> None:
        # Ready means able to store files: a bot passed its getMe check.
        await services.wait_ready()
        if settings.port and not await wait_listening(settings.host, settings.port):
            log.warning("sd_notify_port_not_listening", host=settings.host, port=settings.port)
        statuses = dispatcher.status()
        usable = sum(1 for s in statuses if s.usable)
        notifier.ready(f"ready: {usable}/{len(statuses)} bots usable")
        log.info("sd_notify_ready", usable_bots=usable, configured_bots=len(statuses))
        async with asyncio.TaskGroup() as group:
            group.create_task(notifier.run_watchdog())
            group.create_task(notifier.run_status(describe, status_interval))

    hook = _SignalHook(notifier, describe)
    hook.install()
    task = asyncio.create_task(announce(), name="sd_notify")
    try:
        yield lifecycle
    finally:
        hook.uninstall()
        task.cancel()
        await asyncio.wait([task])
        if not task.cancelled() and task.exception() is not None:
            log.warning("sd_notify_task_failed", error=repr(task.exception()))
        notifier.stopping("stopped")
        notifier.close()
