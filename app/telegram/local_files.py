"""A local Bot API server's files, read from the disk this service shares with it.

With `--local`, telegram-bot-api serves no files over HTTP: any path not
under /bot is a 404 (HttpConnection.cpp). Its getFile downloads the file into
its working directory and answers the file's **absolute** path there
(Client.cpp, json_store_file), under a directory named after the bot's token
(Client::start_up: `dir_` is `--dir` plus the token, its ':' written '~'
where the file system refuses colons). The bot reads the file itself
(the maintainers: telegram-bot-api issues #283, #345, #540).

So a local path holds the bot's token. Nothing above the client ever sees
one: `relative` keeps the part after the bot's directory
(`documents/file_7.bin`, the shape of a cloud path), which is what the
locator caches, the database shares between instances and logs may name;
`open_at` turns it back into a path on this machine. Where the service
sees the server's `--dir` at another path (a container's volume),
TELEGRAM_LOCAL_PATH_MAP=SERVER_DIR:LOCAL_DIR says so.

Reads are bounded: a Range is a seek, and the bytes come in `READ_PIECE`
pieces, each read in a worker thread so the event loop never waits on the
disk; the reader's download budget counts them as it counts a download's
(block by block, app/store/copy_fetch.py).
"""

from __future__ import annotations

import asyncio
import os
import posixpath
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from app.config.settings import BotToken, Settings
from app.telegram.errors import FilesUnreachable, PermanentError, TransientError

#: What one read of a local file hands on. Each read is a hop to a worker
#: thread: reading a 200 MiB file cost 2.0-2.2 CPU-s per GiB in 64 KiB pieces,
#: 1.0-1.3 in 256 KiB ones, 0.35 in 1 MiB ones (one run, side by side, on
#: this project's 2-CPU machines). 256 KiB: half the CPU of httpx's 64 KiB
#: reads, while 32 reads at once (DOWNLOAD_CONNECTIONS) hold 8 MiB.
READ_PIECE = 256 * 1024

_SETUP = "deploy/README.md, A local Bot API server"


def bot_dir_names(token: BotToken) -> tuple[str, str]:
    """The names the server may give a bot's directory: the token as it
    is, or with '~' for ':' (a file system without colons)."""
    return token.value, token.value.replace(":", "~")


class LocalFiles:
    """Where a local server's files are on this machine, and reading them."""

    def __init__(self, path_map: tuple[str, str] | None = None) -> None:
        self._map = path_map
        # The server's --dir, learned from the first getFile answer (or
        # taken from the map), and whether it writes '~' for ':'.
        self._server_dir: str | None = path_map[0] if path_map is not None else None
        self._tilde: bool | None = None

    # --- getFile's answers ------------------------------------------------------

    def relative(self, token: BotToken, path: str) -> str:
        """The part of getFile's absolute `path` after the bot's directory:
        no token in it. FilesUnreachable if the path is not in the bot's
        directory (the error never quotes the path: it may hold the token)."""
        if not path.startswith("/"):
            raise FilesUnreachable(
                "getFile answered a relative path: the Bot API server at TELEGRAM_API_BASE "
                "does not run with --local; set TELEGRAM_LOCAL_SERVER=false, or start it "
                f"with --local ({_SETUP})",
                bot_id=token.bot_id,
            )
        colon, tilde = bot_dir_names(token)
        for name, is_tilde in ((colon, False), (tilde, True)):
            index = path.find(f"/{name}/")
            if index < 0:
                continue
            rest = path[index + len(name) + 2 :]
            parts = rest.split("/")
            if not rest or ".." in parts or "" in parts:
                break
            self._server_dir = path[:index] or "/"
            self._tilde = is_tilde
            return rest
        raise FilesUnreachable(
            "getFile answered a path outside the bot's directory of the local Bot API server",
            bot_id=token.bot_id,
        )

    def local_path(self, token: BotToken, relative: str) -> str:
        """Where the file `relative` (to the bot's directory) is on this machine."""
        if self._server_dir is None:
            # Another instance's getFile found the path; this one has made
            # none yet, so it does not know the server's --dir.
            raise TransientError(
                "the local Bot API server's directory is not known here yet (no getFile "
                "answered on this instance): set TELEGRAM_LOCAL_PATH_MAP to say it",
                bot_id=token.bot_id,
            )
        colon, tilde = bot_dir_names(token)
        name = tilde if self._tilde else colon
        server_path = posixpath.join(self._server_dir, name, relative)
        if self._map is None:
            return server_path
        server_dir, local_dir = self._map
        inside = server_dir == "/" or server_path.startswith(server_dir + "/")
        if not inside:
            raise FilesUnreachable(
                "getFile answered a path outside TELEGRAM_LOCAL_PATH_MAP's SERVER_DIR: set it "
                f"to the server's --dir ({_SETUP})",
                bot_id=token.bot_id,
            )
        rest = server_path[len(server_dir) :].lstrip("/")
        return posixpath.join(local_dir, rest)

    # --- reading ----------------------------------------------------------------

    @asynccontextmanager
    async def open_at(
        self, token: BotToken, relative: str, offset: int, end: int | None = None
    ) -> AsyncIterator[tuple[int, AsyncIterator[bytes]]]:
        """The file's bytes from `offset` (to `end`, exclusive, if given):
        (`offset`, the stream), as a download that honours Range gives them.
        A file that is not there answers as a path the file server no longer
        has: a 404 (ask getFile again)."""
        path = self.local_path(token, relative)
        try:
            fd = await asyncio.to_thread(os.open, path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise PermanentError(
                "Not Found: the local Bot API server's file is not there (removed by its "
                "storage clean-up, or its directory is not the one this service sees)",
                status=404,
                bot_id=token.bot_id,
            ) from None
        except PermissionError:
            raise FilesUnreachable(
                "the local Bot API server's files cannot be read by this service's user "
                f"(permission denied): {_SETUP}",
                bot_id=token.bot_id,
            ) from None
        except OSError as exc:
            raise TransientError(
                f"a local file cannot be opened: {exc.strerror}", bot_id=token.bot_id
            ) from None
        file = _OpenFile(fd, token.bot_id)
        try:
            yield offset, file.pieces(offset, end)
        finally:
            file.close()


class _OpenFile:
    """An open file read in pieces by worker threads. A read cut by a
    cancellation goes on in its thread: the descriptor is closed only after
    it, so that its number is not reused under it."""

    def __init__(self, fd: int, bot_id: int) -> None:
        self._fd = fd
        self._bot_id = bot_id
        self._reading: asyncio.Future[bytes] | None = None

    async def pieces(self, offset: int, end: int | None) -> AsyncIterator[bytes]:
        loop = asyncio.get_running_loop()
        position = offset
        while end is None or position < end:
            size = READ_PIECE if end is None else min(READ_PIECE, end - position)
            self._reading = loop.run_in_executor(None, os.pread, self._fd, size, position)
            try:
                data = await asyncio.shield(self._reading)
            except OSError as exc:
                raise TransientError(
                    f"a local file read failed: {exc.strerror}", bot_id=self._bot_id
                ) from None
            if not data:
                return
            position += len(data)
            yield data

    def close(self) -> None:
        reading = self._reading
        if reading is None or reading.done():
            os.close(self._fd)
            return

        def close_after(read: asyncio.Future[bytes]) -> None:
            if not read.cancelled():
                read.exception()  # its error is nobody's now: seen, not logged
            os.close(self._fd)

        reading.add_done_callback(close_after)


def local_files_for(settings: Settings) -> LocalFiles | None:
    """The local server's files as the settings describe them; None: the cloud."""
    if not settings.telegram_local_server:
        return None
    return LocalFiles(settings.telegram_local_path_map)
